"""Run a stage's per-partition tasks two at a time on two threads, on the ONE cached worker instance, taking turns
at fixed points (ping-pong), and compare with the same stage run alone: state carried on the stage between its
hooks shows up as a different output.

Only one thread runs at a time (the other waits on a condition), so numba's threading layer never sees two
callers; the turns switch before and after every call of the gated functions."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from gpupipe.io.parts import read_part, write_part
from gpupipe.run.executors import LocalExecutor
from gpupipe.run import phases, tasks
from gpupipe.stages import base
from gpupipe.stages.base import RunContext

WAIT_S = 120


class PingPong:
    def __init__(self):
        self.cv = threading.Condition()
        self.local = threading.local()
        self.turn, self.done, self.switches = 0, [False, False], 0

    def _wait(self, i: int) -> None:
        if not self.cv.wait_for(lambda: self.turn == i or self.done[1 - i], timeout=WAIT_S):
            raise TimeoutError("interleaving: the other thread never gave the turn back")

    def switch(self) -> None:
        i = getattr(self.local, "i", None)
        if i is None:
            return  # a call from outside the two threads
        with self.cv:
            if not self.done[1 - i]:
                self.turn = 1 - i
                self.switches += 1
                self.cv.notify_all()
                self._wait(i)

    def run_pair(self, fn, pair: list[tuple]) -> list:
        self.turn, self.done = 0, [False, False]
        out, errors = [None] * len(pair), []

        def body(i, args):
            self.local.i = i
            try:
                with self.cv:
                    self._wait(i)
                out[i] = fn(*args)
            except BaseException as e:  # re-raised in the caller
                errors.append(e)
            finally:
                with self.cv:
                    self.done[i] = True
                    self.turn = 1 - i
                    self.cv.notify_all()

        threads = [threading.Thread(target=body, args=(i, a)) for i, a in enumerate(pair)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return out

    def gated(self, f):
        def wrapper(*a, **k):
            self.switch()
            try:
                return f(*a, **k)
            finally:
                self.switch()
        return wrapper


class InterleavingExecutor(LocalExecutor):
    """LocalExecutor, except that the tasks of `threaded` functions run two at a time, taking turns."""

    def __init__(self, pp: PingPong, threaded=(phases.apply_task, tasks.map_partition_task)):
        super().__init__()
        self.pp, self.threaded = pp, threaded

    def map(self, fn, *iterables, progress=lambda n: None, stateless=False) -> list:
        if fn not in self.threaded:
            return super().map(fn, *iterables, progress=progress)
        args = list(zip(*iterables))
        out = []
        for k in range(0, len(args), 2):
            out += self.pp.run_pair(fn, args[k:k + 2])
        progress(len(args))
        return out


def write_parts(folder: Path, frames: list[pd.DataFrame]) -> list[Path]:
    paths = []
    for p, df in enumerate(frames):
        paths.append(folder / f"part-{p:05d}.parquet")
        write_part(df.reset_index(drop=True), paths[-1])
    return paths


def outputs(out: Path) -> dict[str, pd.DataFrame]:
    return {p.relative_to(out).as_posix(): read_part(p) for p in sorted(out.rglob("*.parquet"))
            if "_exchange" not in p.parts}


def run_stage(stage, inputs: list[Path], out: Path, executor) -> dict:
    from tests.helpers import run_stage as engine_run_stage

    tasks._WORKER_STAGES.clear()
    stats = engine_run_stage(stage, inputs, out, executor)
    stats.task_seconds = []   # timings differ from run to run; the counts must not
    d = stats.to_dict(stage.name, 1.0)
    d["extra"] = {k: v for k, v in d["extra"].items() if not (k.startswith("peak_") or k.endswith(("_ms", "_s")))}
    return d


def check_interleaved(stage, inputs: list[Path], tmp: Path, monkeypatch, gate: list[tuple] = ()) -> dict:
    """The stage run alone and with its partitions' tasks interleaved on one shared instance: the same files and
    stats. gate: (module, function name) pairs to switch turns at, besides the partition runner's own points."""
    alone = run_stage(stage, inputs, tmp / "alone", LocalExecutor())
    pp = PingPong()
    for module, attr in [(tasks, "read_frame"), (base, "text_bytes"), *gate]:
        monkeypatch.setattr(module, attr, pp.gated(getattr(module, attr)))
    together = run_stage(stage, inputs, tmp / "together", InterleavingExecutor(pp))
    shared = [s for s in tasks._WORKER_STAGES.values() if s.name == stage.name]
    assert len(shared) == 1, "the tasks should have shared one cached worker instance"
    assert pp.switches >= 4 * (len(inputs) // 2), "the two threads did not take turns"
    a, b = outputs(tmp / "alone"), outputs(tmp / "together")
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], obj=name)
    assert together == alone, (together, alone)
    return {"alone": alone, "files": a, "instance": shared[0]}


def assert_no_partition_state(stage, allowed=("config", "ctx")) -> None:
    """A worker's stage instance holds configuration, context and loaded resources only: no per-partition results
    on the instance, and no mutable containers on its classes (shared by every instance of the process)."""
    extra = set(vars(stage)) - set(allowed)
    assert not extra, f"{type(stage).__name__} instance carries {sorted(extra)}"
    for cls in type(stage).__mro__:
        if cls is base.MapStage:
            break
        for k, v in vars(cls).items():
            mutable = isinstance(v, (dict, list, set, Counter, np.ndarray, pd.DataFrame, pd.Series))
            assert k.startswith("__") or not mutable, f"{cls.__name__}.{k} is class-level state"


__all__ = ["PingPong", "InterleavingExecutor", "check_interleaved", "assert_no_partition_state", "write_parts",
           "RunContext"]
