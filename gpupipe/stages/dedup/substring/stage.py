"""The `substring_dedup` stage: its phases, declared (`stages/phases.py` runs them; files go through the
stage's `Exchange`).

  plan    driver: partition groups of <= group_bytes of text; with more than one group, the anchor buckets
  group   per group: pass 1 (suffix array) → removal ranges sent to their partitions (`ranges-group`); the
          group's winnowing anchors sent to buckets by hash (`anchors`)
  select  per bucket: hashes anchored in >= 2 groups → requests sent to the groups holding them (`requests`), in
          local batches of <= group_bytes of region text
  pack    driver: local batches packed into pass-2 batches
  region  per group: the text around its requested anchors, sent to its batch (`regions`)
  cross   per batch: pass 2 over the regions → removal ranges sent to their partitions (`ranges-cross`)
  apply   per partition: its ranges cut (`cuts.cut_partition`), too-short documents dropped
  totals  driver: the stage's counters
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpupipe.nvtx_ranges import annotate
from gpupipe.stages.base import Applied
from gpupipe.stages.phases import APPLY, DRIVER, Phase, PhasedStage, PhaseRun, Task
from gpupipe.stages.dedup.substring.anchors import anchor_k, merge_regions, pack_batches, winnow_anchors
from gpupipe.stages.dedup.substring.config import REASON, SubstringDedupConfig
from gpupipe.stages.dedup.substring.cuts import cut_partition
from gpupipe.stages.dedup.substring.groups import partition_groups, read_group
from gpupipe.stages.dedup.substring.marks import duplicate_ranges
from gpupipe.stages.dedup.substring.text import slices

RANGES = ("ranges-group", "ranges-cross")   # removal ranges from pass 1 and pass 2, sent to their partitions


@dataclass(slots=True)
class SubstringState:
    """What `plan` and `pack` decide: the partition groups, the anchor buckets (0: one group, no cross-group pass)
    and the batch of each group's regions."""
    groups: list = field(default_factory=list)   # (parts, partition numbers) per group
    buckets: int = 0
    batch_of: Any = None


class SubstringDedup(PhasedStage):
    name = "substring_dedup"
    Config = SubstringDedupConfig
    State = SubstringState

    def phases(self) -> list[Phase]:
        groups = lambda run: run.state.groups  # noqa: E731
        return [Phase("plan", plan, over=DRIVER),
                Phase("group", group, over=groups, arg=lambda run: run.state.buckets),
                Phase("select", select, over=lambda run: range(run.state.buckets)),
                Phase("pack", pack, over=DRIVER),
                Phase("region", region, over=groups, arg=lambda run: run.state.batch_of),
                Phase("cross", cross, over=lambda run: run.exchange.destinations("regions")),
                Phase("apply", ranges_of, over=APPLY),
                Phase("totals", totals, over=DRIVER)]

    def apply_partition(self, df: pd.DataFrame, info: pd.DataFrame | None = None) -> Applied:
        """Cut this partition's removal ranges (`info`: doc_index, start, end, from `ranges_of`)."""
        return cut_partition(df, info, self.config)


def plan(stage: SubstringDedup, run: PhaseRun) -> None:
    inputs = run.inputs
    groups = partition_groups(inputs, stage.config.group_bytes)
    run.state.groups = [([inputs[i] for i in grp], grp) for grp in groups]
    run.state.buckets = max(stage.ctx.shuffle_buckets, len(groups)) if len(groups) > 1 else 0


def _send_ranges(exchange, name: str, producer: int, doc_index, part, start, end) -> None:
    exchange.send(name, producer, pd.DataFrame({"doc_index": doc_index, "start": start, "end": end}), part)


def group(stage: SubstringDedup, task: Task) -> dict[str, int]:
    """Pass 1 over one group; with buckets > 0 also sends the group's winnowing anchors, routed by hash."""
    cfg, g, buckets = stage.config, task.index, task.arg
    paths, parts = task.item
    with annotate("gpupipe/substring_dedup/group"):
        t = read_group(paths, parts)
        doc, part = t["doc_index"].to_numpy(), t["part"].to_numpy()
        seg, s, e = duplicate_ranges(t["text"].combine_chunks(), cfg.min_length, cfg.within_document)
        _send_ranges(task.exchange, RANGES[0], g, doc[seg], part[seg], s, e)
        anchors = 0
        if buckets:
            rows, offs, hashes = winnow_anchors(t["text"].combine_chunks(), cfg.min_length)
            anchors = len(rows)
            a = pd.DataFrame({"hash": hashes, "doc_index": doc[rows], "part": part[rows], "offset": offs,
                              "group": np.int64(g)})
            task.exchange.send("anchors", g, a, (hashes % np.uint64(buckets)).astype(np.int64))
    return {"text_bytes": int(pc.sum(pc.binary_length(t["text"])).as_py() or 0), "anchors": anchors}


def select(stage: SubstringDedup, task: Task) -> dict:
    """Anchors of one bucket → the cross-group candidates, as requests to the groups holding them, in local
    batches of <= group_bytes of region text (whole hashes: all occurrences of a hash stay together)."""
    cfg, b = stage.config, task.index
    a = task.exchange.receive("anchors", b)
    if a is None:
        return {"batch_bytes": [], "cross_group_anchors": 0}
    groups_per_hash = a.groupby("hash")["group"].nunique()
    a = a[a["hash"].isin(groups_per_hash.index[groups_per_hash >= 2])]
    if a.empty:
        return {"batch_bytes": [], "cross_group_anchors": 0}
    per_hash = a.groupby("hash").size().sort_index() * (2 * cfg.min_length - anchor_k(cfg.min_length))
    before = per_hash.cumsum() - per_hash
    batch = pd.Series(np.unique(before.to_numpy() // cfg.group_bytes, return_inverse=True)[1], index=per_hash.index)
    a = a.assign(batch=a["hash"].map(batch).astype(np.int64))
    task.exchange.send("requests", b, a[["doc_index", "offset", "batch"]].reset_index(drop=True),
                       a["group"].to_numpy(np.int64))
    return {"batch_bytes": per_hash.groupby(batch).sum().tolist(), "cross_group_anchors": len(a)}


def pack(stage: SubstringDedup, run: PhaseRun) -> None:
    run.state.batch_of = pack_batches(run.results["select"], stage.config.group_bytes)


def region(stage: SubstringDedup, task: Task) -> int:
    """Sends the text around this group's requested anchors to their pass-2 batches; returns the region bytes."""
    cfg, g, batch_of = stage.config, task.index, task.arg
    req = task.exchange.receive("requests", g, producer_column="bucket")
    if req is None:
        return 0
    req["batch"] = [batch_of[(b, k)] for b, k in zip(req["bucket"].tolist(), req["batch"].tolist())]
    t = read_group(*task.item)
    texts = t["text"].combine_chunks()
    lengths = pc.binary_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
    row_of = pd.Index(t["doc_index"].to_numpy())
    total, tables, dest = 0, [], []
    for batch, r in req.groupby("batch", sort=True):
        rows = row_of.get_indexer(r["doc_index"].to_numpy())
        off = r["offset"].to_numpy(np.int64)
        start = np.maximum(off - (cfg.min_length - anchor_k(cfg.min_length)), 0)
        end = np.minimum(off + cfg.min_length, lengths[rows])
        rows, start, end = merge_regions(rows, start, end)
        total += int((end - start).sum())
        tables.append(pa.table({"doc_index": t["doc_index"].take(rows), "part": t["part"].take(rows),
                                "start": pa.array(start), "data": slices(texts, rows, start, end)}))
        dest.append(np.full(len(rows), batch, np.int64))
    task.exchange.send("regions", g, pa.concat_tables(tables), np.concatenate(dest))
    return total


def cross(stage: SubstringDedup, task: Task) -> dict[str, int]:
    """Pass 2 over one batch of regions: the same marking, positions ordered by (doc_index, offset)."""
    cfg, batch = stage.config, task.item
    with annotate("gpupipe/substring_dedup/cross"):
        t = pa.concat_tables([t for _, t in task.exchange.receive_tables("regions", batch)])
        t = t.sort_by([("doc_index", "ascending"), ("start", "ascending")]).combine_chunks()
        doc = t["doc_index"].to_numpy()
        seg, s, e = duplicate_ranges(t["data"].combine_chunks(), cfg.min_length, cfg.within_document, doc_ids=doc)
        base = t["start"].to_numpy()[seg]
        _send_ranges(task.exchange, RANGES[1], batch, doc[seg], t["part"].to_numpy()[seg], base + s, base + e)
    return {"region_bytes": int(pc.sum(pc.binary_length(t["data"])).as_py() or 0)}


def ranges_of(stage: SubstringDedup, task: Task) -> pd.DataFrame | None:
    """The apply phase's share of one partition: its removal ranges from both passes (None: none)."""
    found = [r for r in (task.exchange.receive(name, task.index) for name in RANGES) if r is not None]
    return pd.concat(found, ignore_index=True) if found else None


def totals(stage: SubstringDedup, run: PhaseRun) -> None:
    extra = Counter({"groups": len(run.state.groups), "anchors": sum(r["anchors"] for r in run.results["group"])})
    if run.state.buckets:
        extra["cross_group_anchors"] = sum(r["cross_group_anchors"] for r in run.results["select"])
        extra.update({"cross_batches": len(run.results["cross"]),
                      "cross_region_bytes": sum(r["region_bytes"] for r in run.results["cross"])})
    extra["docs_dropped"] = run.total.removed.get(REASON, 0)
    run.extra.update(extra)


__all__ = ["SubstringDedup"]
