"""configs/multi_gpu.yaml: its dask-cuda settings map onto LocalCUDACluster, and the same config runs on the
CPU-equivalent cluster (a real distributed.LocalCluster) with --device cpu."""

import json

import pytest

from gpupipe.cli import main
from gpupipe.config import load_config
from gpupipe.run.executors import cuda_cluster_kwargs
from tests.helpers import ROOT


def test_multi_gpu_settings_map_to_local_cuda_cluster(synth_crawl):
    cfg = load_config(ROOT / "configs" / "multi_gpu.yaml", {"input.path": synth_crawl["warc"]})
    assert cfg.executor.kind == "dask" and cfg.device == "gpu"
    kwargs = cuda_cluster_kwargs(cfg.executor.gpu)
    assert kwargs["rmm_pool_size"] == "60GB" and kwargs["enable_cudf_spill"] is True
    assert kwargs["device_memory_limit"] == 0   # dask-cuda's task-output spilling off: cuDF's spilling does it
    assert cfg.executor.partitioning("gpu")[1] == 512 * 2**20   # partitions by bytes, not a document count
    assert kwargs["rmm_allocator_external_lib_list"] == ["cupy", "torch"]
    assert "CUDA_VISIBLE_DEVICES" not in kwargs  # every GPU by default


def test_multi_gpu_config_runs_on_the_cpu_equivalent_cluster(tmp_path, synth_crawl, capsys):
    out = tmp_path / "run"
    args = ["run", str(ROOT / "configs" / "multi_gpu.yaml"), "--input", synth_crawl["warc"], "--output", str(out),
            "--device", "cpu", "--workers", "2", "--partition-docs", "40"]
    assert main(args) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["executor"] == "dask" and stats["workers"] == 2 and stats["conservation_ok"]
    assert main(["verify", str(out / "shards")]) == 0


@pytest.mark.skipif(__import__("gpupipe.backend", fromlist=["x"]).gpu_status()[0], reason="has a GPU")
def test_multi_gpu_config_without_a_gpu_fails_clearly(tmp_path, synth_crawl, capsys):
    args = ["run", str(ROOT / "configs" / "multi_gpu.yaml"), "--input", synth_crawl["warc"],
            "--output", str(tmp_path / "run")]
    assert main(args) == 2
    assert "device 'gpu' was requested" in capsys.readouterr().err
