"""The cross-group pass: winnowing anchors, and the planning that packs candidate anchors into batches and their
regions into merged, non-overlapping spans."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from gpupipe.stages.dedup.substring.config import ANCHOR_K_MAX
from gpupipe.stages.dedup.substring.kernels import _winnow
from gpupipe.columns import text_array
from gpupipe.stages.dedup.substring.text import buffers


def anchor_k(min_length: int) -> int:
    """Gram length of the anchors. Longer grams are shared by fewer unrelated documents (on news text, 64-byte
    grams make 3x fewer cross-group candidates than 16-byte ones), shorter ones leave more grams per window."""
    return min(ANCHOR_K_MAX, min_length // 2)


def winnow_anchors(texts: pa.Array, min_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, offset, hash) of every anchor: each L-byte window of a text owns the anchor of its minimal k-gram."""
    k = anchor_k(min_length)
    data, offsets = buffers(text_array(texts))
    e64, eu = np.empty(0, np.int64), np.empty(0, np.uint64)
    n = _winnow(data, offsets, min_length, k, False, e64, e64, eu)
    rows, offs, hashes = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.uint64)
    _winnow(data, offsets, min_length, k, True, rows, offs, hashes)
    return rows, offs, hashes


def pack_batches(selected: list[dict[str, Any]], budget: int) -> dict[tuple[int, int], int]:
    """(bucket, local batch) → pass-2 batch: consecutive local batches share one while it stays within budget, so
    a document's regions from several buckets merge (fewer bytes) and few batches remain."""
    out, batch, used = {}, 0, 0
    for b, sel in enumerate(selected):
        for local, size in enumerate(sel["batch_bytes"]):
            if used and used + size > budget:
                batch, used = batch + 1, 0
            out[(b, local)] = batch
            used += size
    return out


def merge_regions(rows, start, end):
    """Overlapping or touching regions of a document become one: no text position may appear twice in pass 2."""
    if len(rows) == 0:
        return rows, start, end
    order = np.lexsort((start, rows))
    rows, start, end = rows[order], start[order], end[order]
    reach = pd.Series(end).groupby(rows).cummax().to_numpy()   # furthest end so far within the document
    new = np.r_[True, (rows[1:] != rows[:-1]) | (start[1:] > reach[:-1])]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(rows) - 1]
    return rows[first], start[first], reach[last]
