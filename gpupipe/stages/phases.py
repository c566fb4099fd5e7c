"""Global stages as declared phases: a stage lists its phases (`PhasedStage.phases`), `run_phases` executes them
with the job's executor, and the files between them go through the stage's `Exchange` (`stages/exchange.py`).

A phase maps a function over something, or runs once in the driver:

  PARTITIONS  one task per input part: fn(stage, task), task.item = the part's path
  BUCKETS     one task per exchange bucket (`RunContext.shuffle_buckets`): task.item = the bucket number
  a callable  run → the task items (groups of partitions, batches): one task per item
  DRIVER      fn(stage, run), once, in the driver: reads earlier results, plans, writes `run.state`/`run.extra`
  APPLY       one task per input part: fn(stage, task) returns what the exchange decided for that partition
              (its removals, its ranges), which is handed to the stage's `apply_partition(df, info)` through the
              shared partition runner (`base.map_chain_task`): rejects, reasons and stats as for any map stage.

Worker tasks get the cached stage instance (`base.worker_stage`), which holds configuration and loaded resources
only: everything a task computes is returned (to `run.results[phase]`) or written to the exchange, never kept on
the stage, so two tasks may share an instance on two threads. Each task's peak RSS is kept for the stage's
`peak_rss_mb_worker`.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gpupipe._numba_cache import compile_seconds
from gpupipe.stages.base import MapStage, Stage, StageJob, StageStats, map_chain_task, peak_rss_mb, worker_stage
from gpupipe.run.exchange import Exchange

PARTITIONS, BUCKETS, DRIVER, APPLY = "partitions", "buckets", "driver", "apply"


@dataclass(frozen=True)
class Phase:
    name: str
    fn: Callable                       # worker phases: a module-level function (tasks pickle it by reference)
    over: str | Callable = PARTITIONS  # PARTITIONS | BUCKETS | DRIVER | APPLY | callable(run) -> task items
    arg: Callable | None = None        # callable(run) -> one value handed to every task of the phase


@dataclass
class Task:
    """What one worker task of a phase gets."""
    index: int          # the partition, bucket or item number
    item: Any           # PARTITIONS/APPLY: the input part's path; BUCKETS: the bucket; else the item
    exchange: Exchange
    arg: Any = None


@dataclass
class PhaseRun:
    """The driver's side of one execution: results of each phase so far and what driver phases computed."""
    stage: Stage
    job: StageJob
    exchange: Exchange
    results: dict[str, list] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    extra: Counter = field(default_factory=Counter)
    total: StageStats = field(default_factory=StageStats)
    peaks: list[float] = field(default_factory=list)

    @property
    def partitions(self) -> int:
        return len(self.job.inputs)


class PhasedStage(MapStage):
    """A stage that runs as phases: subclasses implement `phases` (and `apply_partition` for the APPLY phase)."""

    def phases(self) -> list[Phase]:
        raise NotImplementedError(f"{type(self).__name__} must declare its phases")

    def execute(self, job: StageJob) -> StageStats:
        return run_phases(self, job)


def _items(phase: Phase, run: PhaseRun) -> list:
    if phase.over in (PARTITIONS, APPLY):
        return list(run.job.inputs)
    if phase.over == BUCKETS:
        return list(range(run.job.ctx.shuffle_buckets))
    return list(phase.over(run))


def run_phases(stage: PhasedStage, job: StageJob) -> StageStats:
    run = PhaseRun(stage, job, Exchange(job.out_dir))
    run.exchange.reset()
    spec = stage.spec()
    for phase in stage.phases():
        t0 = time.perf_counter()
        _run_phase(stage, run, phase, spec)
        # wall seconds per phase (route-0, route-1, ... summed as `route`): where a global stage's time goes
        key = f"phase_{phase.name.split('-')[0] if phase.name[-1].isdigit() else phase.name}_s"
        run.extra[key] = round(run.extra.get(key, 0) + time.perf_counter() - t0, 4)
    run.exchange.remove()
    total = run.total
    total.extra.update(run.extra)
    peak = max([total.extra.get("peak_rss_mb_worker", 0.0), *run.peaks])
    if peak:
        total.extra["peak_rss_mb_worker"] = round(peak, 1)
    return total


def _run_phase(stage: PhasedStage, run: PhaseRun, phase: Phase, spec) -> None:
    job = run.job
    c0 = compile_seconds()
    if phase.over == DRIVER:
        phase.fn(stage, run)
        _compiled(run, compile_seconds() - c0)
        return
    items = _items(phase, run)
    n = len(items)
    arg = phase.arg(run) if phase.arg is not None else None
    # The hooks keep nothing on the stage (tests/interleave.py): a local executor may run them on threads.
    if phase.over == APPLY:
        out = job.executor.map(apply_task, [phase.fn] * n, [spec] * n, list(range(n)), items,
                               [job.out_dir] * n, [run.exchange] * n, [arg] * n, progress=job.progress,
                               stateless=True)
        here = compile_seconds() - c0
        for r in out:
            if here:   # compiled in this process: counted once below, not per task
                r["extra"].pop("numba_compile_s", None)
            run.total.merge(StageStats.from_dict(r))
        _compiled(run, here)
        run.results[phase.name] = out
        return
    out = job.executor.map(phase_task, [phase.fn] * n, [spec] * n, list(range(n)), items,
                           [run.exchange] * n, [arg] * n, stateless=True) if n else []
    run.results[phase.name] = [r for r, _, _ in out]
    run.peaks += [p for _, p, _ in out]
    # Tasks that ran in this process (a local executor, maybe two at once on threads) compiled in this process's
    # count, which each task's own difference would count twice when they overlap; tasks on other processes
    # (Dask workers) report theirs.
    here = compile_seconds() - c0
    _compiled(run, here or sum(c for _, _, c in out))


def _compiled(run: PhaseRun, seconds: float) -> None:
    if seconds:  # numba's first calls of its kernels: part of the stage's time, not of its throughput
        run.extra["numba_compile_s"] = round(run.extra.get("numba_compile_s", 0) + seconds, 3)


def phase_task(fn: Callable, spec, index: int, item, exchange: Exchange, arg) -> tuple[Any, float, float]:
    """Worker side of a phase: its result, this process's peak RSS, and the seconds numba spent compiling."""
    c0 = compile_seconds()
    out = fn(worker_stage(spec), Task(index, item, exchange, arg))
    return out, peak_rss_mb(), compile_seconds() - c0


def apply_task(fn: Callable, spec, index: int, in_path: Path, out_dir: Path, exchange: Exchange, arg) -> dict:
    """Worker side of the APPLY phase: this partition's share of the exchange, then the shared partition runner
    with it as the stage's `info` (rejects, reasons, stats and parts as for any map stage)."""
    info = fn(worker_stage(spec), Task(index, in_path, exchange, arg))
    return map_chain_task([spec], in_path, [out_dir], keep_parts=True, infos=[info])[0]


__all__ = ["Phase", "PhaseRun", "PhasedStage", "Task", "run_phases", "PARTITIONS", "BUCKETS", "DRIVER", "APPLY"]
