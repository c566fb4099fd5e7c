"""The stage contract: what a station declares (config, columns read and written, its partition hooks) and what
the engine (gpupipe/run/) hands it back (run context, stats). A station never executes and never names a path.

There are two ways to write a station, and only two:
- a map station (`MapStage`): `transform` computes columns, `reasons` says which rows go and why (or one
  `apply_partition` returning `Applied`); the engine runs it partition by partition, fused with its neighbours;
- a phased station (`stages/phases.py`, `PhasedStage`): it declares phases over partitions, buckets or items,
  and driver steps, when its decisions need more than one partition (dedup, tokenizer training, packing).
`Stage.__init_subclass__` refuses a class that overrides what the engine does (ENGINE_METHODS).

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
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from gpupipe.backend import frame_nbytes, frame_to_host, has_cudf, is_device_frame, string_buffers
from gpupipe.config_base import Strict

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
    # The process that runs the stages' driver side: a task elsewhere (a pool or Dask worker) reports the CPU
    # seconds it used (`extra.cpu_s`), the driver counts its own.
    driver_pid: int = 0


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


@dataclass(frozen=True)
class Resources:
    """What one task of a station needs, declared with the station; the engine places tasks by it (a Dask cluster
    whose workers advertise resources runs host tasks on CPU workers and device tasks on GPU workers)."""

    cpus: float = 1.0     # cores one task keeps busy
    # share of a GPU one task uses when the run's device is gpu; a station with gpus > 0 has a CPU twin (the same
    # integer arithmetic, run/kernels' parity tests) that runs where there is no GPU
    gpus: float = 0.0
    partition_memory: float = 4.0   # peak host memory of one task, in multiples of its partition's bytes

    @property
    def device(self) -> bool:
        return self.gpus > 0


HOST = Resources()
DEVICE = Resources(gpus=1.0)    # a station whose partition work is GPU kernels or a model on the GPU


# What the engine does with a stage: a station that overrides one of these is refused at class creation.
ENGINE_METHODS = frozenset({"execute", "run_partition", "partition_outputs", "process_outputs", "spec",
                            "frame_device"})


class Stage:
    """A pipeline station. Subclasses set `name` and `Config`, and are a MapStage or a PhasedStage."""

    name: ClassVar[str]
    Config: ClassVar[type[Strict]] = Strict
    # True: the partition code uses only operations pandas and cuDF both have, plus kernels on
    # backend.string_buffers, so on the GPU it runs on cuDF frames. False: host-only (see the module docstring).
    gpu_native: ClassVar[bool] = False
    resources: ClassVar[Resources] = HOST

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        engine = sorted(ENGINE_METHODS & set(vars(cls)))
        if engine and cls.__module__ != __name__:   # the contract's own classes (MapStage) define them
            raise TypeError(f"stage class {cls.__qualname__} overrides {', '.join(engine)}, which the engine "
                            f"(gpupipe/run/) does: declare transform/reasons, apply_partition or phases instead")

    def __init__(self, config: Strict, ctx: RunContext):
        self.config = config
        self.ctx = ctx

    @classmethod
    def inputs(cls) -> tuple[str, ...]:
        """The document columns this stage reads: the read stage or an earlier stage must make them (checked when
        a config is loaded, `stages.build_stage_configs`)."""
        return ("text",)

    @classmethod
    def outputs(cls) -> tuple[str, ...]:
        """The document columns this stage adds (or replaces) for later stages."""
        return ()

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
    # A stage whose output rows are not its input rows (one document split into chunks) gives its removed rows
    # here, each with a `reason`, and no `reasons`: `df` is then what it keeps.
    rejects: Any = None
    bytes_in: int | None = None   # when the bytes it read are not its text column's (extract: HTML, and text)


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

    def run_partition(self, df, info: Any = None) -> tuple[pd.DataFrame, pd.DataFrame, StageStats]:
        """One partition in this process, as the engine runs it but writing nothing: (kept, rejects, stats). For
        tests and benchmarks; the stage must be set up (`setup`) first."""
        return self.process_outputs(df, info)[:3]

    def partition_outputs(self, df: pd.DataFrame, info: Any = None
                          ) -> tuple[pd.DataFrame, pd.DataFrame, StageStats, dict[str, Any]]:
        """(kept, rejects, stats, side tables) of one partition: `apply_partition`, then the drop and its
        accounting. Side tables are written beside the part by `map_chain_task`."""
        # pandas and cuDF alike: boolean-Series row selection (.loc), assign, reset_index; counts go to the host
        counted = len(df) and self.text_column in df.columns   # extract: a part without html brings text
        stats = StageStats(docs_in=len(df), bytes_in=text_bytes(df[self.text_column]) if counted else 0)
        applied = self.apply_partition(df, info)
        df, why = applied.df, applied.reasons
        if applied.bytes_in is not None:
            stats.bytes_in = applied.bytes_in
        if applied.rejects is not None:
            kept, rejects = df, applied.rejects
            if len(rejects):
                stats.removed.update(host_series(rejects["reason"]).value_counts().to_dict())
        elif why is None:
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

    def process_outputs(self, df, info: Any = None):
        """`partition_outputs` on the frame kind this stage takes: (kept, rejects, stats, side). A device (cuDF)
        frame given to a host-only stage is converted to pandas once here, and the bytes moved are counted in
        `extra.host_transfer_bytes`."""
        moved = 0
        if is_device_frame(df) and not self.gpu_native:
            moved = frame_nbytes(df)
            df = frame_to_host(df)
        kept, rejects, stats, side = self.partition_outputs(df, info)
        if moved:
            stats.extra["host_transfer_bytes"] += moved
        return kept, rejects, stats, side


def reject_frame(rejects):
    """What is kept of the rows a stage removed (pandas or cuDF): ids, reason, a prefix of the text, and every
    signal and score (the report draws removed documents too)."""
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
    return out.reset_index(drop=True)


__all__ = ["DEVICE", "HOST", "Resources", "ENGINE_METHODS", "RunContext", "StageStats", "Stage", "MapStage", "Applied",
           "host_series", "peak_rss_mb", "reject_frame", "text_bytes"]
