"""Placement by declared resources on a real Dask cluster: one worker advertises a GPU (it runs the CPU twins
here), two advertise CPUs. Device stations' tasks (exact and fuzzy dedup: Resources(gpus=1)) must run on the GPU
worker only, every host station's (read, the extract…pii chain, tokenize) on the CPU workers only, and the
shards must be those of a local run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpupipe.cli import main
from gpupipe.stages import STAGES
from tests.helpers import write_config

pytestmark = pytest.mark.slow


def _cluster():
    from distributed import Nanny, Scheduler, SpecCluster

    def worker(resources):
        return {"cls": Nanny, "options": {"nthreads": 1, "resources": resources, "silence_logs": 30}}

    return SpecCluster(scheduler={"cls": Scheduler, "options": {"dashboard_address": None}},
                       workers={"cpu-0": worker({"CPU": 1}), "cpu-1": worker({"CPU": 1}),
                                "gpu-0": worker({"GPU": 1})})


def test_device_stations_run_on_the_gpu_worker_and_host_stations_on_cpu_workers(tmp_path, synth_crawl):
    from distributed import Client
    from distributed.diagnostics.plugin import WorkerPlugin

    class RecordTasks(WorkerPlugin):
        """Every task that starts executing on this worker, as a line "worker-name key" (a class of the test:
        pickled by value, so workers need not import the tests)."""
        name = "record-tasks"

        def __init__(self, path: str):
            self.path = path

        def setup(self, worker) -> None:
            self.worker = worker.name

        def transition(self, key, start, finish, **kwargs) -> None:
            if finish == "executing":
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(f"{self.worker} {key}\n")

    plugin = RecordTasks(str(tmp_path / "tasks.txt"))
    local = tmp_path / "local"
    cfg = write_config(tmp_path / "local.yaml", input={"path": synth_crawl["warc"]}, output=str(local),
                       executor={"kind": "local", "workers": 1, "partition_docs": 40})
    assert main(["run", str(cfg)]) == 0
    with _cluster() as cluster, Client(cluster) as client:
        client.register_plugin(plugin)
        out = tmp_path / "placed"
        cfg = write_config(tmp_path / "placed.yaml", input={"path": synth_crawl["warc"]}, output=str(out),
                           executor={"kind": "dask", "scheduler_address": cluster.scheduler_address,
                                     "partition_docs": 40})
        assert main(["run", str(cfg)]) == 0
    ran = [line.split(" ", 1) for line in (tmp_path / "tasks.txt").read_text().splitlines()]
    device = {n for n, cls in STAGES.items() if cls.resources.device}
    on_gpu = {key.split("-")[0].split(":")[0] for w, key in ran if w == "gpu-0"}
    on_cpu = {key.split("-")[0].split(":")[0] for w, key in ran if w != "gpu-0"}
    assert on_gpu == {"exact_dedup", "fuzzy_dedup"} <= device          # the default config's device stations
    assert on_cpu == {"read", "extract+normalize+langid+doc_filter+pii", "tokenize"}   # pack: the driver
    assert not on_gpu & on_cpu
    shards = {p.name: p.read_bytes() for p in sorted((out / "shards").iterdir()) if p.is_file()}
    assert shards == {p.name: p.read_bytes() for p in sorted((local / "shards").iterdir()) if p.is_file()}
    stats = json.loads((out / "stats.json").read_text())
    assert stats["conservation_ok"] and stats["output_docs"] > 0
