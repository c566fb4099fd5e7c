"""Key-exchange global stages (exact dedup, URL dedup): three declared phases.

1. keys:   per partition, the stage computes key columns (hashes) per document; rows are sent to `shuffle_buckets`
           buckets by key (one exchange file per partition), so equal keys meet in one bucket.
2. reduce: per bucket, the stage decides which documents to remove (e.g. all but the first of a duplicate group),
           sent on to the partitions they came from (one exchange file per bucket).
3. apply:  per partition, its removals are handed to `apply_partition` and dropped through the map stages' usual
           accounting (rejects, reasons, stats).

No worker ever holds more than one partition or one bucket, and since every decision is made on keys and
`doc_index` (the global input order), results do not depend on the partitioning or the number of buckets.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from gpupipe.backend import read_frame
from gpupipe.nvtx_ranges import annotate
from gpupipe.stages.base import Applied
from gpupipe.stages.phases import APPLY, BUCKETS, DRIVER, Phase, PhasedStage, PhaseRun, Task

BUCKET_COLUMN = "_bucket"
REMOVALS = "removals"   # the exchange every removal-based stage sends its decisions through, to the partitions


class GlobalStage(PhasedStage):
    """Subclasses implement `keys` and `resolve`; `keys` routes a key row to its bucket with `_bucket`."""

    def keys(self, df: pd.DataFrame) -> pd.DataFrame:
        """Key columns per document, plus `doc_index` (kept from df) and `_bucket` (a uint64 used for routing).

        `df` is a cuDF frame when the stage is `gpu_native` and runs on the GPU; the keys returned are pandas (they
        are small, and the exchange between workers is through files on the host)."""
        raise NotImplementedError(f"{type(self).__name__} uses the key exchange and must define keys()")

    def resolve(self, keys: pd.DataFrame) -> tuple[pd.DataFrame, Counter]:
        """From all key rows of one bucket: rows to remove (`doc_index`, `part`, `reason`), and counters."""
        raise NotImplementedError(f"{type(self).__name__} uses the key exchange and must define resolve()")

    def key_columns(self) -> list[str]:
        """The columns `keys` reads: the keys phase reads only these of a part (on the GPU the others would be
        decoded onto the device and held there for nothing)."""
        return ["doc_index", *self.inputs()]

    def phases(self) -> list[Phase]:
        return [Phase("keys", keys_phase), Phase("reduce", reduce_phase, over=BUCKETS),
                Phase("count", count_phase, over=DRIVER), Phase("apply", removals_of, over=APPLY)]

    def apply_partition(self, df: pd.DataFrame, info: dict[int, str] | None = None) -> Applied:
        """Drop the partition's removals (`info`: doc_index → reason, from `removals_of`)."""
        if not info:
            return Applied(df)  # nothing to remove in this partition: every row stays
        return Applied(df, df["doc_index"].map(info))  # NaN (kept) where the partition has no removal


def keys_phase(stage: GlobalStage, task: Task) -> None:
    with annotate(f"gpupipe/{stage.name}/keys"):
        df = read_frame(task.item, stage.frame_device(), columns=stage.key_columns())
        keys = stage.keys(df).assign(part=np.int64(task.index))
        bucket = keys.pop(BUCKET_COLUMN).to_numpy(np.uint64) % np.uint64(stage.ctx.shuffle_buckets)
        task.exchange.send("keys", task.index, keys, bucket.astype(np.int64))


def reduce_phase(stage: GlobalStage, task: Task) -> dict[str, int]:
    keys = task.exchange.receive("keys", task.index)
    if keys is None:
        return {}
    with annotate(f"gpupipe/{stage.name}/reduce"):
        removals, counters = stage.resolve(keys)
        send_removals(task.exchange, task.index, removals)
    return dict(counters)


def count_phase(stage: GlobalStage, run: PhaseRun) -> None:
    run.extra.update(sum((Counter(r) for r in run.results["reduce"]), Counter()))


def all_but_first(keys: pd.DataFrame, reason: str, groups: str) -> tuple[pd.DataFrame, Counter]:
    """resolve() of a stage whose key is a 128-bit hash (`h0`, `h1`): in each group of equal keys the document
    first in input order (smallest `doc_index`) stays and the others are removals with `reason`; the counter
    `groups` is the number of groups that lost documents."""
    keys = keys.sort_values(["h0", "h1", "doc_index"], kind="stable")
    dup = keys.duplicated(["h0", "h1"], keep="first")
    removals = keys.loc[dup, ["doc_index", "part"]].assign(reason=reason)
    return removals, Counter({groups: len(keys.loc[dup, ["h0", "h1"]].drop_duplicates())})


def send_removals(exchange, producer: int, removals: pd.DataFrame) -> None:
    """Removals (`doc_index`, `part`, `reason`) sent to the partitions they name."""
    exchange.send(REMOVALS, producer, removals[["doc_index", "reason"]].reset_index(drop=True),
                  removals["part"].to_numpy(np.int64))


def removals_of(stage, task: Task) -> dict[int, str]:
    """The apply phase's share of one partition: doc_index → reason, from every producer of removals."""
    r = task.exchange.receive(REMOVALS, task.index)
    return {} if r is None else dict(zip(r["doc_index"].tolist(), r["reason"]))


__all__ = ["BUCKET_COLUMN", "GlobalStage", "REMOVALS", "all_but_first", "keys_phase", "reduce_phase",
           "removals_of", "send_removals"]
