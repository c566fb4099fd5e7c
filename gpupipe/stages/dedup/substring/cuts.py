"""From raw removal ranges to cut texts: merged cuts on whole characters (optionally snapped to whitespace), the
texts after cutting, the per-partition step of the stage, and `substring_dedup` (one group, in memory)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpupipe.stages.base import Applied
from gpupipe.stages.dedup.substring.config import REASON, SNAP_REACH_BYTES, SubstringDedupConfig
from gpupipe.stages.dedup.substring.kernels import _WS, _final_cuts, _gather
from gpupipe.stages.dedup.substring.marks import duplicate_ranges
from gpupipe.columns import text_array
from gpupipe.stages.dedup.substring.text import buffers


def final_cuts(texts: pa.Array, rows, starts, ends, snap_to_whitespace: bool = False):
    """Raw ranges (any order, may overlap) → merged cuts on whole characters: (row, start, end) arrays."""
    data, offsets = buffers(texts)
    rows, starts, ends = (np.asarray(a, dtype=np.int64) for a in (rows, starts, ends))
    order = np.lexsort((starts, rows))
    return _final_cuts(data, offsets, rows[order], starts[order], ends[order],
                       SNAP_REACH_BYTES if snap_to_whitespace else 0, _WS)


def apply_cuts(texts: pa.Array, rows, starts, ends) -> tuple[np.ndarray, pa.Array]:
    """Final cuts (sorted by row, start) → (modified rows, their new texts)."""
    data, offsets = buffers(texts)
    out, out_off = _gather(data, offsets, rows, starts, ends, True)
    new = pa.Array.from_buffers(pa.large_string(), len(out_off) - 1, [None, pa.py_buffer(out_off), pa.py_buffer(out)])
    new.validate(full=True)  # cuts lie on character boundaries, so this is valid UTF-8
    return np.unique(rows), new


def substring_dedup(texts, cfg: SubstringDedupConfig | None = None) -> tuple[list[str], dict[str, int]]:
    """In memory, one group: the texts after cutting (dropping is the stage's job) and counters."""
    cfg = cfg or SubstringDedupConfig()
    arr = text_array(texts)
    seg, s, e = duplicate_ranges(arr, cfg.min_length, cfg.within_document)
    rows, cs, ce = final_cuts(arr, seg, s, e, cfg.snap_to_whitespace)
    out = arr.to_pylist()
    if len(rows):
        changed, new = apply_cuts(arr, rows, cs, ce)
        for r, t in zip(changed.tolist(), new.to_pylist()):
            out[r] = t
    return out, {"spans_cut": int(len(rows)), "bytes_cut": int((ce - cs).sum()),
                 "docs_modified": int(len(np.unique(rows)))}


def cut_partition(df: pd.DataFrame, ranges: pd.DataFrame | None, cfg: SubstringDedupConfig) -> Applied:
    """One partition: its raw removal ranges (doc_index, start, end) cut from its texts; a cut document left with
    fewer than `min_remaining_chars` non-blank characters goes (REASON). Everything is returned, nothing kept."""
    counts = Counter({"spans_cut": 0, "bytes_cut": 0, "docs_modified": 0})
    keep_all = pd.Series([None] * len(df), index=df.index, dtype=object)
    if ranges is None or ranges.empty or df.empty:
        return Applied(df, keep_all, counts)
    texts = text_array(df["text"])
    rows = pd.Index(df["doc_index"].to_numpy()).get_indexer(ranges["doc_index"].to_numpy())
    assert (rows >= 0).all(), "substring_dedup: removal ranges name documents this partition lacks"
    rows, s, e = final_cuts(texts, rows, ranges["start"].to_numpy(), ranges["end"].to_numpy(), cfg.snap_to_whitespace)
    if not len(rows):
        return Applied(df, keep_all, counts)
    changed, new = apply_cuts(texts, rows, s, e)
    modified = np.zeros(len(df), dtype=bool)
    modified[changed] = True
    counts.update({"spans_cut": len(rows), "bytes_cut": int((e - s).sum()), "docs_modified": len(changed)})
    text = df["text"].copy()
    text.iloc[changed] = new.to_pylist()
    df = df.assign(text=text)
    chars = pc.utf8_length(pc.utf8_trim_whitespace(text_array(df["text"]))).to_numpy(zero_copy_only=False)
    drop = modified & ((chars < cfg.min_remaining_chars) | (chars == 0))
    return Applied(df, pd.Series(np.where(drop, REASON, None), index=df.index, dtype=object), counts)
