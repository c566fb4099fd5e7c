"""Device choice: never crashes without a driver; `gpu` without one fails early and clearly."""

import importlib

import pytest

from gpupipe import backend
from gpupipe.cli import main

NO_GPU = not backend.gpu_status()[0]


def test_detection_never_raises():
    ok, why = backend.gpu_status()
    assert isinstance(ok, bool) and why


@pytest.mark.skipif(not NO_GPU, reason="this machine has a CUDA device")
def test_auto_picks_cpu_and_gpu_fails_clearly():
    assert backend.resolve_device("auto") == "cpu"
    assert backend.resolve_device("cpu") == "cpu"
    with pytest.raises(backend.DeviceError, match="device 'gpu' was requested but"):
        backend.resolve_device("gpu")
    assert backend.array_module("cpu").__name__ == "numpy"
    assert backend.frame_module("cpu").__name__ == "pandas"


@pytest.mark.skipif(not NO_GPU, reason="this machine has a CUDA device")
def test_cli_device_gpu_exits_before_work(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "hello world"}\n')
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"input: {{path: {src}}}\noutput: {tmp_path / 'run'}\nstages: [normalize: {{}}]\n")
    assert main(["run", str(cfg), "--device", "gpu"]) == 2
    assert "device 'gpu' was requested" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_gpu_modules_import_without_a_gpu():
    for mod in ("gpupipe.kernels", "gpupipe.kernels.text_hash", "gpupipe.kernels.strings", "gpupipe.kernels.minhash",
                "gpupipe.kernels.ngram_hash", "gpupipe.backend", "gpupipe.run.executors", "gpupipe.stages.dedup.exact"):
        importlib.import_module(mod)


@pytest.mark.skipif(not NO_GPU, reason="this machine has a CUDA device")
def test_frames_stay_pandas_without_a_gpu(tmp_path):
    import pandas as pd

    assert backend.frame_module("gpu").__name__ == "pandas"      # device gpu without cuDF + a device: pandas
    assert not backend.has_cudf()
    df = pd.DataFrame({"text": ["a", None]})
    backend.write_frame(df, tmp_path / "p.parquet")
    assert type(backend.read_frame(tmp_path / "p.parquet", "gpu")) is pd.DataFrame
    assert backend.frame_to_host(df) is df


@pytest.mark.gpu
def test_gpu_is_resolved_when_present():
    assert backend.resolve_device("auto") == "gpu"
    assert backend.array_module("gpu").__name__ == "cupy"
