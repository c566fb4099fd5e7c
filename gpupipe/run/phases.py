"""The engine's side of phased stations (`stages/phases.py` declares, this runs): each phase's tasks through the
run's executor, driver phases in the driver, APPLY phases through the shared partition runner
(`run/tasks.map_chain_task`). Each task's peak RSS is kept for the stage's `peak_rss_mb_worker`, each phase's wall
time as `phase_<name>_s`."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from gpupipe import retries
from gpupipe._numba_cache import compile_seconds
from gpupipe.run.exchange import Exchange
from gpupipe.run.rundir import StageDir
from gpupipe.run.tasks import map_chain_task, map_partition_task, worker_stage
from gpupipe.stages.base import Stage, StageStats, peak_rss_mb
from gpupipe.stages.phases import APPLY, BUCKETS, DRIVER, PARTITIONS, Phase, PhasedStage, PhaseRun, Task


def run_stage(stage: Stage, executor, inputs: list[Path], folder: StageDir, prev: StageDir | None = None,
              progress: Callable[[int], None] = lambda n: None) -> StageStats:
    """One stage over its inputs: a phased station's phases, or a map station partition by partition."""
    if isinstance(stage, PhasedStage):
        return run_phases(stage, executor, inputs, folder, prev, progress)
    n = len(inputs)
    total = StageStats()
    for r in executor.map(map_partition_task, [stage.spec()] * n, inputs, [folder] * n, progress=progress,
                          label=stage.name, resources=stage.resources):
        total.merge(StageStats.from_dict(r))
    return total


def run_phases(stage: PhasedStage, executor, inputs: list[Path], folder: StageDir, prev: StageDir | None,
               progress: Callable[[int], None] = lambda n: None) -> StageStats:
    run = PhaseRun(stage, list(inputs), folder, prev, Exchange(folder.exchange), stage.State(), progress)
    run.exchange.reset()
    peaks: list[float] = []
    for phase in stage.phases():
        t0 = time.perf_counter()
        peaks += _run_phase(executor, run, phase)
        # wall seconds per phase (route-0, route-1, ... summed as `route`): where a global stage's time goes
        key = f"phase_{phase.name.split('-')[0] if phase.name[-1].isdigit() else phase.name}_s"
        run.extra[key] = round(run.extra.get(key, 0) + time.perf_counter() - t0, 4)
    run.exchange.remove()
    total = run.total
    total.extra.update(run.extra)
    peak = max([total.extra.get("peak_rss_mb_worker", 0.0), *peaks])
    if peak:
        total.extra["peak_rss_mb_worker"] = round(peak, 1)
    return total


def _items(phase: Phase, run: PhaseRun) -> list:
    if phase.over in (PARTITIONS, APPLY):
        return list(run.inputs)
    if phase.over == BUCKETS:
        return list(range(run.stage.ctx.shuffle_buckets))
    return list(phase.over(run))


def _run_phase(executor, run: PhaseRun, phase: Phase) -> list[float]:
    """One phase; returns the peak RSS its tasks saw."""
    c0 = compile_seconds()
    if phase.over == DRIVER:
        phase.fn(run.stage, run)
        _compiled(run, compile_seconds() - c0)
        return []
    items = _items(phase, run)
    n = len(items)
    arg = phase.arg(run) if phase.arg is not None else None
    spec = (phase.stage(run) if phase.stage is not None else run.stage).spec()
    # The hooks keep nothing on the stage (tests/helpers interleave check): a local executor may run them on threads.
    if phase.over == APPLY:
        out = executor.map(apply_task, [phase.fn] * n, [spec] * n, list(range(n)), items, [run.dir] * n,
                           [run.exchange] * n, [arg] * n, progress=run.progress, stateless=True,
                           label=f"{run.stage.name}:{phase.name}", resources=run.stage.resources)
        here = compile_seconds() - c0
        for r in out:
            if here:   # compiled in this process: counted once below, not per task
                r["extra"].pop("numba_compile_s", None)
            run.total.merge(StageStats.from_dict(r))
        _compiled(run, here)
        run.results[phase.name] = out
        return []
    out = executor.map(phase_task, [phase.fn] * n, [spec] * n, list(range(n)), items, [run.exchange] * n,
                       [run.dir] * n, [arg] * n, stateless=True, label=f"{run.stage.name}:{phase.name}",
                       resources=run.stage.resources,
                       **({"progress": run.progress} if phase.counts else {})) if n else []
    run.results[phase.name] = [t[0] for t in out]
    if phase.counts:
        for r, *_ in out:
            run.total.merge(StageStats.from_dict(r))
    if cpu := sum(t[3] for t in out):   # tasks in other processes: their CPU time
        run.extra["cpu_s"] = round(run.extra.get("cpu_s", 0) + cpu, 3)
    for t in out:   # the storage calls each task retried
        retries.add_to(run.extra, t[4])
    # Tasks that ran in this process (a local executor, maybe two at once on threads) compiled in this process's
    # count, which each task's own difference would count twice when they overlap; tasks on other processes
    # (Dask workers) report theirs.
    here = compile_seconds() - c0
    _compiled(run, here or sum(t[2] for t in out))
    return [t[1] for t in out]


def _compiled(run: PhaseRun, seconds: float) -> None:
    if seconds:  # numba's first calls of its kernels: part of the stage's time, not of its throughput
        run.extra["numba_compile_s"] = round(run.extra.get("numba_compile_s", 0) + seconds, 3)


def phase_task(fn: Callable, spec, index: int, item, exchange: Exchange, folder: StageDir,
               arg) -> tuple[Any, float, float, float, dict[str, int]]:
    """Worker side of a phase: its result, this process's peak RSS, the seconds numba spent compiling, the CPU
    seconds the task used when it ran outside the driver, and the retries it made (gpupipe/retries.py)."""
    c0, cpu0 = compile_seconds(), time.process_time()
    with retries.counting() as retried:
        stage = worker_stage(spec)
        out = fn(stage, Task(index, item, exchange, folder, arg))
    cpu = time.process_time() - cpu0 if stage.ctx.driver_pid not in (0, os.getpid()) else 0.0
    return out, peak_rss_mb(), compile_seconds() - c0, cpu, dict(retried)


def apply_task(fn: Callable | None, spec, index: int, in_path: Path, folder: StageDir, exchange: Exchange,
               arg) -> dict:
    """Worker side of an APPLY phase: this partition's share of the exchange (None without `fn`), then the shared
    partition runner with it as the stage's `info` (rejects, reasons, stats and parts as for any map stage)."""
    with retries.counting() as retried:
        info = fn(worker_stage(spec), Task(index, in_path, exchange, folder, arg)) if fn is not None else None
    out = map_chain_task([spec], in_path, [folder], keep_parts=True, infos=[info])[0]
    retries.add_to(out["extra"], retried)
    return out


__all__ = ["apply_task", "phase_task", "run_phases", "run_stage"]
