"""Run a stage's worker tasks two at a time on two threads, on the ONE cached worker instance, taking turns at
fixed points (ping-pong), and compare with the same stage run alone: state carried on the stage between its hooks
shows up as a different output.

The tasks paired up are every worker task the engine has: map stations' partitions (`map_partition_task`),
APPLY phases (`apply_task`) and every other worker phase (`phase_task`: read's files, the dedups' key and bucket
phases, mixture's partitions, ...). The turns switch before and after every call of the gated functions: a phase
function itself, reading and writing a part (in any gpupipe module that imported them), `text_bytes`, the
exchange's sends, receives, puts and gets, and what the caller adds.

Only one thread runs at a time (the other waits on a condition), so numba's threading layer never sees two
callers; no turn is given away while a thread builds and sets up the cached instance (it holds the cache's lock)."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpupipe import backend
from gpupipe.io import parts
from gpupipe.io.parts import read_part, write_part
from gpupipe.run.exchange import Exchange
from gpupipe.run.executors import LocalExecutor
from gpupipe.run.rundir import StageDir
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
        if i is None or getattr(self.local, "held", 0):
            return  # a call from outside the two threads, or while this one holds a lock the other may need
        with self.cv:
            if not self.done[1 - i]:
                self.turn = 1 - i
                self.switches += 1
                self.cv.notify_all()
                self._wait(i)

    def run_pair(self, fn, pair: list[tuple]) -> list:
        self.turn, self.done = 0, [False, len(pair) < 2]   # a task left over (odd count) runs alone
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

    def holding(self, f):
        """f with no turn given away inside it (the worker cache builds and sets up a stage under its lock)."""
        def wrapper(*a, **k):
            self.local.held = getattr(self.local, "held", 0) + 1
            try:
                return f(*a, **k)
            finally:
                self.local.held -= 1
        return wrapper


class InterleavingExecutor(LocalExecutor):
    """LocalExecutor, except that the tasks of `threaded` functions run two at a time, taking turns; a phase
    task's phase function switches turns before and after it. `pairs`: how many pairs of tasks ran."""

    def __init__(self, pp: PingPong, threaded=(phases.apply_task, tasks.map_partition_task, phases.phase_task)):
        super().__init__()
        self.pp, self.threaded, self.pairs = pp, threaded, 0

    def map(self, fn, *iterables, progress=lambda n: None, stateless=False, **placement) -> list:
        if fn not in self.threaded:
            return super().map(fn, *iterables, progress=progress)
        args = list(zip(*iterables))
        if fn is phases.phase_task:   # (phase fn, spec, index, item, ...): the phase function is gated too
            args = [(self.pp.gated(a[0]), *a[1:]) for a in args]
        out = []
        for k in range(0, len(args), 2):
            out += self.pp.run_pair(fn, args[k:k + 2])
            self.pairs += len(args[k:k + 2]) == 2
        progress(len(args))
        return out


def write_parts(folder: Path, frames: list[pd.DataFrame]) -> list[Path]:
    paths = []
    for p, df in enumerate(frames):
        paths.append(folder / f"part-{p:05d}.parquet")
        write_part(df.reset_index(drop=True), paths[-1])
    return paths


def read_frame_of(path: Path) -> pd.DataFrame:
    """A Parquet file as a frame; list columns (tokens) as Arrow-backed columns, since their pandas metadata does
    not read back (`read_part` fails on tokenize's and mixture's parts)."""
    table = pq.read_table(path)
    if not any(pa.types.is_list(t) or pa.types.is_large_list(t) for t in table.schema.types):
        return read_part(path)
    return table.to_pandas(ignore_metadata=True, types_mapper=lambda t: pd.ArrowDtype(t) if (
        pa.types.is_list(t) or pa.types.is_large_list(t)) else None)


def outputs(out: Path) -> dict[str, pd.DataFrame]:
    """The Parquet files a stage left under `out` (its parts, rejects, side tables, shards), by relative path."""
    return {p.relative_to(out).as_posix(): read_frame_of(p) for p in sorted(out.rglob("*.parquet"))
            if "_exchange" not in p.parts}


def other_files(out: Path) -> dict[str, bytes]:
    """Every other file a stage left under `out` (tokenizer, ledger, reports, .bin shards, manifest): its bytes."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.suffix != ".parquet" and "_exchange" not in p.parts}


def run_stage(stage, inputs: list[Path], out: Path, executor, prev: Path | None = None) -> dict:
    """The stage over `inputs` into `out` through the engine, `out` also its run directory (so that what a stage
    writes at the run's level, pack's shards, stays inside it); its stats without timings."""
    from tests.helpers import stage_dir

    tasks._WORKER_STAGES.clear()
    stats = phases.run_stage(stage, executor, list(inputs), StageDir(Path(out), Path(out)),
                             stage_dir(prev) if prev is not None else None)
    stats.task_seconds = []   # timings differ from run to run; the counts must not
    d = stats.to_dict(stage.name, 1.0)
    d["extra"] = {k: v for k, v in d["extra"].items() if not (k.startswith("peak_") or k.endswith(("_ms", "_s")))}
    return d


# Where every task reads and writes: each is gated in the module that defines it and in every gpupipe module that
# imported it by name.
GATED = [(backend, "read_frame"), (parts, "read_part"), (parts, "write_part"), (parts, "write_table"),
         (base, "text_bytes")]
EXCHANGE_CALLS = ("send", "receive_tables", "put", "get_table")


def _patch_everywhere(monkeypatch, module, attr: str, wrap) -> None:
    original = getattr(module, attr)
    monkeypatch.setattr(module, attr, wrap(original))
    for name, m in list(sys.modules.items()):
        if m is not module and name.split(".")[0] == "gpupipe" and getattr(m, attr, None) is original:
            monkeypatch.setattr(m, attr, wrap(original))


def check_interleaved(stage, inputs: list[Path], tmp: Path, monkeypatch, gate: list[tuple] = (),
                      prev: Path | None = None, paired: bool = True) -> dict:
    """The stage run alone and with its worker tasks interleaved on one shared instance: the same files (Parquet
    compared as frames, the others byte for byte) and stats. gate: (module, function name) pairs to switch turns
    at, besides the points above. prev: the previous stage's folder (what mixture and pack read besides their
    inputs). paired: False for a stage with no worker tasks at all (pack: one driver phase), which the check then
    asserts."""
    alone = run_stage(stage, inputs, tmp / "alone", LocalExecutor(), prev)
    pp = PingPong()
    for module, attr in [*GATED, *gate]:
        _patch_everywhere(monkeypatch, module, attr, pp.gated)
    for attr in EXCHANGE_CALLS:
        monkeypatch.setattr(Exchange, attr, pp.gated(getattr(Exchange, attr)))
    _patch_everywhere(monkeypatch, tasks, "worker_stage", pp.holding)
    executor = InterleavingExecutor(pp)
    together = run_stage(stage, inputs, tmp / "together", executor, prev)
    shared = [s for s in tasks._WORKER_STAGES.values() if s.name == stage.name]
    if paired:
        assert len(shared) == 1, "the tasks should have shared one cached worker instance"
        assert executor.pairs >= 1, "no two tasks ran together: give the stage more partitions"
        assert pp.switches >= 4 * executor.pairs, "the two threads did not take turns"
    else:
        assert not shared and executor.pairs == 0, "the stage has worker tasks: check them (paired=True)"
    a, b = outputs(tmp / "alone"), outputs(tmp / "together")
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], obj=name)
    other_a, other_b = other_files(tmp / "alone"), other_files(tmp / "together")
    assert sorted(other_a) == sorted(other_b), (sorted(other_a), sorted(other_b))
    for name in other_a:
        assert other_a[name] == other_b[name], f"{name} differs"
    assert together == alone, (together, alone)
    return {"alone": alone, "files": a, "other_files": other_a, "instance": shared[0] if shared else None,
            "pairs": executor.pairs}


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
