"""Global stages (dedup): map → exchange → map, through files, on any executor.

1. keys:   per partition, the stage computes key columns (hashes) per document; rows are routed to
           `buckets` files by key, so equal keys meet in one bucket.
2. reduce: per bucket, the stage decides which documents to remove (e.g. all but the first of a duplicate group),
           written back grouped by the partition they came from.
3. apply:  per partition, the removals are dropped through MapStage's usual accounting (rejects, reasons, stats).

No worker ever holds more than one partition or one bucket, and since every decision is made on keys and
`doc_index` (the global input order), results do not depend on the partitioning or the number of buckets.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpupipe.backend import read_frame
from gpupipe.io.parts import read_part, write_part
from gpupipe.nvtx_ranges import annotate
from gpupipe.stages.base import MapStage, StageJob, StageStats, map_partition_task, worker_stage

BUCKET_COLUMN = "_bucket"


class GlobalStage(MapStage):
    """Subclasses implement `keys` and `resolve`; `bucket_of` routes a key row to its bucket."""

    def keys(self, df: pd.DataFrame) -> pd.DataFrame:
        """Key columns per document, plus `doc_index` (kept from df) and `_bucket` (a uint64 used for routing).

        `df` is a cuDF frame when the stage is `gpu_native` and runs on the GPU; the keys returned are pandas (they
        are small, and the exchange between workers is through files on the host)."""
        raise NotImplementedError(f"{type(self).__name__} uses the key exchange and must define keys()")

    def resolve(self, keys: pd.DataFrame) -> tuple[pd.DataFrame, Counter]:
        """From all key rows of one bucket: rows to remove (`doc_index`, `part`, `reason`), and counters."""
        raise NotImplementedError(f"{type(self).__name__} uses the key exchange and must define resolve()")

    # -- phase 3 hooks: MapStage.run_partition asks `reasons`, which looks the partition's removals up.
    _removals: dict[int, str] = {}

    def reasons(self, df: pd.DataFrame) -> pd.Series | None:
        if not self._removals:
            return None  # nothing to remove in this partition: every row stays
        return df["doc_index"].map(self._removals)  # NaN (kept) where the partition has no removal

    def execute(self, job: StageJob) -> StageStats:
        n, b = len(job.inputs), job.ctx.shuffle_buckets
        work = job.out_dir / "_exchange"
        spec = self.spec()
        job.executor.map(keys_task, [spec] * n, list(range(n)), job.inputs, [work] * n, [b] * n)
        reduced = job.executor.map(reduce_task, [spec] * b, list(range(b)), [work] * b)
        total = StageStats()
        total.extra.update(sum((Counter(r) for r in reduced), Counter()))
        results = job.executor.map(apply_task, [spec] * n, list(range(n)), job.inputs, [job.out_dir] * n,
                                   [work] * n, progress=job.progress)
        for r in results:
            total.merge(StageStats.from_dict(r))
        shutil.rmtree(work, ignore_errors=True)
        return total


def keys_task(spec, part: int, in_path: Path, work: Path, buckets: int) -> None:
    stage = worker_stage(spec)
    with annotate(f"gpupipe/{stage.name}/keys"):
        keys = stage.keys(read_frame(in_path, stage.frame_device())).assign(part=np.int64(part))
        bucket = (keys.pop(BUCKET_COLUMN).to_numpy(np.uint64) % np.uint64(buckets)).astype(np.int64)
        for j, group in keys.groupby(bucket, sort=True):
            write_part(group.reset_index(drop=True), Path(work) / f"keys-b{j:05d}" / f"part-{part:06d}.parquet")


def reduce_task(spec, bucket: int, work: Path) -> dict[str, int]:
    stage = worker_stage(spec)
    folder = Path(work) / f"keys-b{bucket:05d}"
    files = sorted(folder.glob("part-*.parquet"))
    if not files:
        return {}
    with annotate(f"gpupipe/{stage.name}/reduce"):
        keys = pd.concat([read_part(f) for f in files], ignore_index=True)
        removals, counters = stage.resolve(keys)
        for part, group in removals.groupby("part", sort=True):
            write_part(group[["doc_index", "reason"]].reset_index(drop=True),
                       Path(work) / f"removals-p{int(part):06d}" / f"bucket-{bucket:05d}.parquet")
    return dict(counters)


def apply_task(spec, part: int, in_path: Path, out_dir: Path, work: Path) -> dict[str, Any]:
    stage = worker_stage(spec)
    files = sorted((Path(work) / f"removals-p{part:06d}").glob("bucket-*.parquet"))
    removals = pd.concat([read_part(f) for f in files], ignore_index=True) if files else None
    stage._removals = {} if removals is None else dict(zip(removals["doc_index"].tolist(), removals["reason"]))
    try:
        return map_partition_task(spec, in_path, out_dir)
    finally:
        stage._removals = {}
