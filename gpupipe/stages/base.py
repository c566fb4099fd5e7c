"""What every stage shares: config class, run context, per-partition stats, and the map-over-partitions driver.

A stage maps documents (rows of a DataFrame) to documents. Map stages compute columns first (`transform`), then
say which rows to drop and why (`reasons`); this base class drops them, counts each reason, writes the rejects
and the stats, so a stage module holds only its own logic.

Frames on either side. A stage with `gpu_native = True` uses only operations that pandas and cuDF both have, plus
kernels on `backend.string_buffers`; with `device: gpu` and cuDF installed its partitions are decoded on the GPU as
cuDF frames and its kernels read the string columns in place. Every other stage is host-only (trafilatura,
fastText, tokenizers, KenLM, numba-only kernels, per-document Python): its partitions are read as pandas. Stages
exchange Parquet parts, so the part between two stages is where a frame crosses sides; a device frame handed to
a host-only stage in memory is converted once (`MapStage.process_partition`), and a GPU-native stage's output is
brought to the host once to be written. Both copies are counted in the stage's `extra.host_transfer_bytes`.
"""

from __future__ import annotations

import resource
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np
import pandas as pd

from gpupipe._numba_cache import compile_seconds
from gpupipe.backend import (frame_nbytes, frame_to_host, has_cudf, is_device_frame, read_frame, string_buffers,
                             write_frame)
from gpupipe.config_base import Strict
from gpupipe.io.parts import part_paths
from gpupipe.nvtx_ranges import annotate

REJECT_TEXT_CHARS = 1000  # rejects keep a prefix of the text: enough to audit, small enough to keep them all


@dataclass(frozen=True)
class RunContext:
    """What a stage needs to know about the run; small and picklable (it travels to Dask workers)."""

    device: str = "cpu"          # resolved: "cpu" or "gpu"
    seed: int = 0
    run_dir: str = ""
    results_hash: str = ""
    shuffle_buckets: int = 8
    # The content of the files the configs reference: part of every worker's stage cache key (_WORKER_STAGES), so
    # a long-lived worker never keeps a model or tokenizer that was replaced on disk since it loaded it.
    files_hash: str = ""


@dataclass
class StageStats:
    """Counts of one stage (or one partition of it); partitions merge by addition."""

    docs_in: int = 0
    docs_out: int = 0
    removed: Counter = field(default_factory=Counter)
    bytes_in: int = 0
    bytes_out: int = 0
    extra: Counter = field(default_factory=Counter)  # stage-specific numeric counters (summed; peak_* maxed)
    task_seconds: list = field(default_factory=list)  # wall time of each task merged in (partition, file)

    def merge(self, other: "StageStats") -> "StageStats":
        self.task_seconds += other.task_seconds
        self.docs_in += other.docs_in
        self.docs_out += other.docs_out
        self.removed.update(other.removed)
        self.bytes_in += other.bytes_in
        self.bytes_out += other.bytes_out
        for k, v in other.extra.items():  # counters add up; peaks (`peak_*`) take the largest
            self.extra[k] = max(self.extra.get(k, 0), v) if k.startswith("peak_") else self.extra.get(k, 0) + v
        return self

    def to_dict(self, name: str, seconds: float) -> dict[str, Any]:
        return {
            "name": name,
            "docs_in": self.docs_in,
            "docs_out": self.docs_out,
            "removed": dict(sorted(self.removed.items())),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "seconds": round(seconds, 3),
            "docs_per_second": round(self.docs_in / seconds, 1) if seconds > 0 else None,
            "extra": dict(sorted(self.extra.items())),
            **latency_fields(self.task_seconds),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StageStats":
        """One task's stats (a partition's, a file's), as its `to_dict` wrote them: its seconds are one task's."""
        return cls(d["docs_in"], d["docs_out"], Counter(d["removed"]), d["bytes_in"], d["bytes_out"],
                   Counter(d.get("extra", {})), [d["seconds"]])


def latency_fields(seconds: list[float]) -> dict[str, float]:
    """Per-task wall times as a stage's stats fields (the dashboards' latency per partition): p50 and p99, linear
    interpolation, seconds; nothing when the stage ran no task (resumed, or run in the driver)."""
    if not seconds:
        return {}
    p50, p99 = np.percentile(np.asarray(seconds, dtype=float), [50, 99])
    return {"partition_seconds_p50": round(float(p50), 4), "partition_seconds_p99": round(float(p99), 4)}


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, MiB (ru_maxrss is KiB on Linux)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def text_bytes(col) -> int:
    """UTF-8 bytes of a string column (pandas or cuDF; nulls count 0): the span of its offsets, no Python loop."""
    if len(col) == 0:
        return 0
    _, offsets = string_buffers(col)
    return int(offsets[-1]) - int(offsets[0])


def host_series(s):
    """A pandas Series from a pandas or cuDF one (small results only: counts, reasons)."""
    return s.to_pandas() if is_device_frame(s) else s


@dataclass
class StageJob:
    """One stage's execution: where its input parts are, where its output goes, what runs the partitions."""

    executor: Any
    in_dir: Path | None       # the previous stage's folder (None for the read stage)
    inputs: list[Path]        # its parts, in input order
    out_dir: Path
    ctx: RunContext
    progress: Callable[[int], None] = lambda n: None


class Stage:
    """A pipeline station. Subclasses set `name`, `Config`, and implement `execute` (or use MapStage)."""

    name: ClassVar[str]
    Config: ClassVar[type[Strict]] = Strict
    # True: the partition code uses only operations pandas and cuDF both have, plus kernels on
    # backend.string_buffers, so on the GPU it runs on cuDF frames. False: host-only (see the module docstring).
    gpu_native: ClassVar[bool] = False

    def __init__(self, config: Strict, ctx: RunContext):
        self.config = config
        self.ctx = ctx

    def execute(self, job: StageJob) -> StageStats:
        raise NotImplementedError(f"stage {self.name} must implement execute()")

    def skipped(self) -> str | None:
        """Why this stage, as configured, does nothing (every document passes untouched), or None. The run says
        so on the console, in stats.json (`skipped`) and in the report, rather than show it passing documents."""
        return None

    def spec(self) -> tuple[type, str, RunContext]:
        """A picklable description from which a worker rebuilds this stage: its class (pickled by reference, so no
        registry lookup), its config as JSON, the run's context."""
        return (type(self), self.config.model_dump_json(), self.ctx)

    def frame_device(self) -> str:
        """Where this stage's partitions are read: "gpu" (cuDF) for a GPU-native stage on device gpu with cuDF
        installed, else "cpu" (pandas; with CuPy only, kernels still run on the GPU and copy their buffers)."""
        return "gpu" if self.gpu_native and self.ctx.device == "gpu" and has_cudf() else "cpu"


@dataclass
class Applied:
    """What `MapStage.apply_partition` computed for one partition: the frame after the stage, per row why it goes
    (None as a whole: every row stays), counters for the stage's stats, and side tables the partition runner writes
    beside the part (folder name → frame, written as `out_dir/FOLDER/<part name>`)."""

    df: Any
    reasons: Any = None
    extra: Counter = field(default_factory=Counter)
    side: dict[str, Any] = field(default_factory=dict)


class MapStage(Stage):
    """A per-document stage: transform → reasons → drop, one partition at a time, in parallel."""

    text_column: ClassVar[str] = "text"   # whose bytes count as bytes_in

    def setup(self) -> None:
        """Load heavy resources once per worker process (models, compiled regexes)."""

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        return df

    def reasons(self, df: pd.DataFrame) -> pd.Series | None:
        """Per row: the reason to drop it, or None to keep it. None as a whole keeps every row."""
        return None

    def extra_stats(self, df_out: pd.DataFrame) -> Counter:
        return Counter()

    def apply_partition(self, df: pd.DataFrame, info: Any = None) -> "Applied":
        """One partition through the stage: by default `transform`, then `reasons`.

        A stage whose decisions come from outside the partition (a global stage: `info` is what its exchange
        decided for this partition, handed in by the phase runner) or that computes per-partition counters or side
        tables overrides this and returns them in `Applied`. Such a stage keeps nothing on `self`: a worker's cached
        instance (`worker_stage`) holds configuration and loaded resources only, and may run two partitions at
        once on two threads."""
        df = self.transform(df)
        return Applied(df, self.reasons(df))

    def run_partition(self, df: pd.DataFrame, info: Any = None) -> tuple[pd.DataFrame, pd.DataFrame, StageStats]:
        return self.partition_outputs(df, info)[:3]

    def partition_outputs(self, df: pd.DataFrame, info: Any = None
                          ) -> tuple[pd.DataFrame, pd.DataFrame, StageStats, dict[str, Any]]:
        """(kept, rejects, stats, side tables) of one partition: `apply_partition`, then the drop and its
        accounting. Side tables are written beside the part by `map_chain_task`."""
        # pandas and cuDF alike: boolean-Series row selection (.loc), assign, reset_index; counts go to the host
        stats = StageStats(docs_in=len(df), bytes_in=text_bytes(df[self.text_column]) if len(df) else 0)
        applied = self.apply_partition(df, info)
        df, why = applied.df, applied.reasons
        if why is None:
            kept, rejects = df, df.iloc[:0]
        else:
            drop = why.notna()
            kept, rejects = df.loc[~drop], df.loc[drop].assign(reason=why.loc[drop])
            stats.removed.update(host_series(rejects["reason"]).value_counts().to_dict())
        stats.docs_out = len(kept)
        stats.bytes_out = text_bytes(kept["text"]) if len(kept) else 0
        stats.extra.update(applied.extra)
        stats.extra.update(self.extra_stats(kept))
        return kept.reset_index(drop=True), rejects, stats, applied.side

    def process_partition(self, df, info: Any = None) -> tuple[pd.DataFrame, pd.DataFrame, StageStats]:
        """`run_partition` on the frame kind this stage takes: a device (cuDF) frame given to a host-only stage is
        converted to pandas once here, and the bytes moved are counted in `extra.host_transfer_bytes`."""
        return self.process_outputs(df, info)[:3]

    def process_outputs(self, df, info: Any = None):
        """`process_partition` with the side tables: (kept, rejects, stats, side)."""
        moved = 0
        if is_device_frame(df) and not self.gpu_native:
            moved = frame_nbytes(df)
            df = frame_to_host(df)
        if type(self).run_partition is not MapStage.run_partition:  # a stage that wraps run_partition
            kept, rejects, stats = self.run_partition(df) if info is None else self.run_partition(df, info)
            side: dict[str, Any] = {}
        else:
            kept, rejects, stats, side = self.partition_outputs(df, info)
        if moved:
            stats.extra["host_transfer_bytes"] += moved
        return kept, rejects, stats, side

    def execute(self, job: StageJob) -> StageStats:
        results = job.executor.map(map_partition_task, [self.spec()] * len(job.inputs), job.inputs,
                                   [job.out_dir] * len(job.inputs), progress=job.progress)
        total = StageStats()
        for r in results:
            total.merge(StageStats.from_dict(r))
        return total


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


def map_partition_task(spec, in_path: Path, out_dir: Path) -> dict[str, Any]:
    """Worker side of MapStage.execute: read a part, run the stage, write the part and its rejects."""
    return map_chain_task([spec], in_path, [out_dir], keep_parts=True)[0]


def fusable(stage: Stage) -> bool:
    """A per-document stage that runs partition by partition with nothing before or after (MapStage's own
    execute): consecutive such stages can run as one task per partition (`map_chain_task`)."""
    return isinstance(stage, MapStage) and type(stage).execute is MapStage.execute


def map_chain_task(specs: list, in_path: Path, out_dirs: list[Path], keep_parts: bool = False,
                   infos: list | None = None) -> list[dict]:
    """Worker side of a fused chain of map stages: one read of the part, each stage in turn on what the previous
    kept, each stage's rejects (and its kept part when `keep_parts`) written to its own folder; the last stage's
    kept part always. Returns each stage's stats, with the columns its output has (the report's signal charts tell
    a stage's own columns by them when its parts are not kept). `infos`: per stage, what is handed to its
    `apply_partition` (a global stage's apply phase: the partition's share of the exchange); None for map stages.
    Side tables a stage returns are written to `out_dir/FOLDER/<part name>`."""
    name = Path(in_path).name
    stages = [worker_stage(spec) for spec in specs]
    results = []
    df = None
    for k, (stage, out_dir) in enumerate(zip(stages, out_dirs)):
        with annotate(f"gpupipe/{stage.name}"):
            t0, c0 = time.perf_counter(), compile_seconds()
            if k == 0:
                df = read_frame(in_path, stage.frame_device())
            df, rejects, stats, side = stage.process_outputs(df, infos[k] if infos else None)
            moved = 0
            if keep_parts or k == len(stages) - 1:
                moved += write_frame(df, Path(out_dir) / name)
            if len(rejects):
                moved += write_rejects(rejects, Path(out_dir) / "rejects" / name)
            for folder, table in side.items():
                moved += write_frame(table, Path(out_dir) / folder / name)
            if moved:  # a GPU-native stage's output, brought to the host to be written
                stats.extra["host_transfer_bytes"] += moved
        stats.extra["peak_rss_mb_worker"] = peak_rss_mb()
        if compiled := compile_seconds() - c0:  # numba's first call of a kernel: part of the time, not throughput
            stats.extra["numba_compile_s"] = round(compiled, 3)
        d = stats.to_dict(stage.name, time.perf_counter() - t0)
        d["columns"] = list(df.columns)
        results.append(d)
    return results


def write_rejects(rejects: pd.DataFrame, path: Path) -> int:
    """Write what a stage removed (pandas or cuDF); returns the bytes a cuDF frame moved to the host."""
    cols = [c for c in ("id", "doc_index", "url", "reason", "text", "lang", "lang_score", "quality_score",
                        "perplexity") if c in rejects.columns]
    # Signals and scores (every numeric column: q_* quality signals, classifier scores, ...): the report draws
    # removed documents too. Numeric columns are a few bytes a document.
    def signal(c: str) -> bool:
        t = rejects[c].dtype
        return c.startswith("q_") or (pd.api.types.is_numeric_dtype(t) and not pd.api.types.is_bool_dtype(t))

    cols += [c for c in rejects.columns if c not in cols and signal(c)]
    out = rejects[cols].copy()
    if "text" in out.columns:
        out["text"] = out["text"].str.slice(0, REJECT_TEXT_CHARS)
    return write_frame(out.reset_index(drop=True), path)


__all__ = ["RunContext", "StageStats", "StageJob", "Stage", "MapStage", "Applied", "fusable", "map_chain_task",
           "map_partition_task", "part_paths",
           "host_series", "peak_rss_mb", "text_bytes", "worker_stage", "write_rejects"]
