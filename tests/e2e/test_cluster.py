"""A real multi-process Dask cluster: `dask scheduler` and `dask worker` started separately (as on several nodes, here
all on 127.0.0.1, each worker with its own --local-directory), the pipeline run against `executor.scheduler_address`.
Its shards are byte-identical to `kind: local`, also when a worker is killed (kill -9) in the middle of a stage:
the scheduler gives that worker's tasks to the other one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpupipe.cli import main
from gpupipe.config import load_config
from gpupipe.run.pipeline import run_pipeline

pytestmark = pytest.mark.slow
START_TIMEOUT = 180   # seconds: a loaded CI machine imports dask and gpupipe slowly


def shard_bytes(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run / "shards").iterdir()) if p.is_file()}


def _wait_for(cond, what: str, timeout: float, procs=()) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"{what}: a cluster process exited with {dead[0].returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(0.1)


@contextmanager
def dask_cluster(tmp: Path, workers: int):
    """(scheduler address, {worker pid: Popen}): `dask scheduler` and `workers` × `dask worker --no-nanny` (the
    worker is the process itself, so kill -9 kills it), logs in tmp/logs. Every process is stopped at the end."""
    logs = tmp / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    sched_file = tmp / "scheduler.json"
    dask = [sys.executable, "-m", "dask"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs: list[subprocess.Popen] = []

    def start(args: list[str], log: str) -> subprocess.Popen:
        with open(logs / log, "wb") as fh:
            procs.append(subprocess.Popen(dask + args, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True))
        return procs[-1]

    try:
        start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
               "--scheduler-file", str(sched_file)], "scheduler.log")
        _wait_for(lambda: sched_file.is_file() and sched_file.stat().st_size > 0, "scheduler start",
                  START_TIMEOUT, procs)
        address = json.loads(sched_file.read_text())["address"]
        workers_by_pid = {}
        for i in range(workers):
            local = tmp / f"worker-{i}"
            local.mkdir()
            p = start(["worker", address, "--no-nanny", "--nthreads", "1", "--host", "127.0.0.1",
                       "--no-dashboard", "--name", f"w{i}", "--local-directory", str(local)], f"worker-{i}.log")
            workers_by_pid[p.pid] = p
        from distributed import Client

        with Client(address, timeout=START_TIMEOUT) as c:
            c.wait_for_workers(workers, timeout=START_TIMEOUT)
        yield address, workers_by_pid
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _config(config_file, out: Path, executor: dict):
    # small partitions: many tasks per stage, so the two workers share every stage and a kill lands mid-stage
    return load_config(config_file(output=str(out), executor={"partition_docs": 10, **executor}))


@pytest.fixture(scope="module")
def local_shards(tmp_path_factory, synth_crawl):
    from tests.helpers import write_config

    tmp = tmp_path_factory.mktemp("local")
    cfg = write_config(tmp / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp / "run"),
                       executor={"kind": "local", "partition_docs": 10})
    run_pipeline(load_config(cfg))
    return shard_bytes(tmp / "run")


def test_separately_started_scheduler_and_two_workers_give_local_bytes(tmp_path, config_file, local_shards):
    with dask_cluster(tmp_path / "cluster", workers=2) as (address, _):
        out = tmp_path / "run"
        cfg = config_file(output=str(out), executor={"kind": "local", "partition_docs": 10})
        assert main(["run", str(cfg), "--scheduler-address", address]) == 0   # sets kind dask and the address
        stats = json.loads((out / "stats.json").read_text())
        from distributed import Client

        with Client(address) as c:   # both workers took part: each has its own local directory in use
            assert len(c.scheduler_info()["workers"]) == 2
    assert stats["conservation_ok"] and stats["executor"] == "dask"
    assert shard_bytes(out) == local_shards


def test_worker_killed_mid_stage_still_gives_local_bytes(tmp_path, config_file, local_shards):
    from distributed import Client
    from distributed.diagnostics.plugin import WorkerPlugin

    class KillOnFirstChainTask(WorkerPlugin):
        """On the chosen worker only: kill -9 its own process the moment it starts a task of the first map chain
        (extract … pii). The state that matters, seen where it happens: no polling, no race with a fast chain."""
        name = "kill-on-first-chain-task"

        def __init__(self, address: str):
            self.address = address

        def setup(self, worker) -> None:
            self.mine = worker.address == self.address

        def transition(self, key, start, finish, **kwargs) -> None:
            if self.mine and finish == "executing" and str(key).startswith("extract+"):   # the chain's label
                os.kill(os.getpid(), signal.SIGKILL)

    with dask_cluster(tmp_path / "cluster", workers=2) as (address, workers):
        with Client(address) as c:
            pids = c.run(os.getpid)
            victim = sorted(pids)[0]
            c.register_plugin(KillOnFirstChainTask(victim))
        out = tmp_path / "run"
        stats = run_pipeline(_config(config_file, out, {"kind": "dask", "scheduler_address": address}))
        assert workers[pids[victim]].wait(timeout=600) == -signal.SIGKILL
        with Client(address) as c:
            assert list(c.scheduler_info()["workers"]) == [a for a in pids if a != victim]   # the other finished
    assert stats["conservation_ok"]
    assert shard_bytes(out) == local_shards
