"""The worker side of the engine: the per-process stage cache and the partition runner every map station and
every APPLY phase goes through (one read of a part, each stage of a fused chain in turn, parts, rejects, side
tables and stats written to the layout's places)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from gpupipe import retries
from gpupipe._numba_cache import compile_seconds
from gpupipe.backend import read_frame, write_frame
from gpupipe.nvtx_ranges import annotate
from gpupipe.run.rundir import StageDir
from gpupipe.stages.base import MapStage, RunContext, Stage, peak_rss_mb, reject_frame
from gpupipe.stages.phases import PhasedStage

# One instance per (stage, config) per worker process, so models load once per worker, not once per partition.
_WORKER_STAGES: dict[tuple[type, str, RunContext], Stage] = {}
_WORKER_STAGES_LOCK = threading.RLock()   # two tasks on two threads set a stage up once


def worker_stage(spec: tuple[type, str, RunContext]) -> Stage:
    cls, cfg_json, ctx = spec
    key = (cls, cfg_json, ctx)
    with _WORKER_STAGES_LOCK:
        if key not in _WORKER_STAGES:
            stage = cls(cls.Config.model_validate_json(cfg_json), ctx)
            if isinstance(stage, MapStage):
                stage.setup()
            _WORKER_STAGES[key] = stage
        return _WORKER_STAGES[key]


def clear_worker_stages() -> None:
    """Forget the cached stages (a pool worker starting another run's tasks)."""
    with _WORKER_STAGES_LOCK:
        _WORKER_STAGES.clear()


def fusable(stage: Stage) -> bool:
    """A map station (not phased): consecutive ones run as one task per partition (`map_chain_task`)."""
    return isinstance(stage, MapStage) and not isinstance(stage, PhasedStage)


def map_chain_task(specs: list, in_path: Path, dirs: list[StageDir], keep_parts: bool = False,
                   infos: list | None = None) -> list[dict]:
    """A fused chain of map stages on one part: one read, each stage in turn on what the previous kept, each
    stage's rejects (and its kept part when `keep_parts`) written to its own folder; the last stage's kept part
    always. Returns each stage's stats, with the columns its output has (the report's signal charts tell a stage's
    own columns by them when its parts are not kept). `infos`: per stage, what is handed to its `apply_partition`
    (an APPLY phase: the partition's share of the exchange); None for map stages."""
    name = Path(in_path).name
    stages = [worker_stage(spec) for spec in specs]
    results = []
    df = None
    elsewhere = bool(stages) and stages[0].ctx.driver_pid not in (0, os.getpid())
    for k, (stage, folder) in enumerate(zip(stages, dirs)):
        cpu0 = time.process_time()
        # the storage calls retried while this stage reads (k = 0), computes and writes: its own stats' retries
        with annotate(f"gpupipe/{stage.name}"), retries.counting() as retried:
            t0, c0 = time.perf_counter(), compile_seconds()
            if k == 0:
                df = read_frame(in_path, stage.frame_device())
            df, rejects, stats, side = stage.process_outputs(df, infos[k] if infos else None)
            moved = 0
            if keep_parts or k == len(stages) - 1:
                moved += write_frame(df, folder.part(name))
            if len(rejects):
                moved += write_frame(reject_frame(rejects), folder.rejects / name)
            for table_name, table in side.items():
                moved += write_frame(table, folder.side(table_name) / name)
            if moved:  # a GPU-native stage's output, brought to the host to be written
                stats.extra["host_transfer_bytes"] += moved
        retries.add_to(stats.extra, retried)
        stats.extra["peak_rss_mb_worker"] = peak_rss_mb()
        if elsewhere:   # a worker's CPU time; the driver counts its own (run/pipeline.py)
            stats.extra["cpu_s"] = round(time.process_time() - cpu0, 3)
        if compiled := compile_seconds() - c0:  # numba's first call of a kernel: part of the time, not throughput
            stats.extra["numba_compile_s"] = round(compiled, 3)
        d = stats.to_dict(stage.name, time.perf_counter() - t0)
        d["columns"] = list(df.columns)
        results.append(d)
    return results


def map_partition_task(spec, in_path: Path, folder: StageDir) -> dict[str, Any]:
    """One map stage on one part (parts kept)."""
    return map_chain_task([spec], in_path, [folder], keep_parts=True)[0]


__all__ = ["clear_worker_stages", "fusable", "map_chain_task", "map_partition_task", "worker_stage"]
