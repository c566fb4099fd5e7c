"""The marking pass (both passes use it): suffix array, clipped LCP, and the duplicate window occurrences as byte
ranges per segment."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gpupipe.nvtx_ranges import annotate
from gpupipe.stages.dedup.substring.kernels import _cover, _join, _mark_duplicates, _permuted_lcp
from gpupipe.columns import text_array
from gpupipe.stages.dedup.substring.text import buffers


def suffix_array(text: np.ndarray) -> np.ndarray:
    """libdivsufsort: int32 positions up to 2 GiB of text, int64 beyond."""
    from pydivsufsort import divsufsort

    if len(text) == 0:
        return np.empty(0, dtype=np.int32)
    return divsufsort(np.ascontiguousarray(text, dtype=np.uint8))


def duplicate_ranges(texts: pa.Array, min_length: int, within_document: bool,
                     doc_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte ranges to cut, as (segment, start, end) relative to each segment, sorted and disjoint per segment.

    texts: segments in input order. doc_ids: the document of each segment (non-decreasing; several consecutive
    segments may be pieces of one document, as in the cross-group pass); default: every segment its own document.
    """
    data, offsets = buffers(text_array(texts))
    joined, seg_starts = _join(data, offsets)
    m = len(offsets) - 1
    if doc_ids is None:
        doc_lo, doc_hi = seg_starts[:-1], seg_starts[1:]
    else:
        new_doc = np.r_[True, doc_ids[1:] != doc_ids[:-1]] if m else np.zeros(0, bool)
        run = np.cumsum(new_doc) - 1
        first = np.flatnonzero(new_doc)
        last = np.r_[first[1:] - 1, m - 1].astype(np.int64)
        doc_lo, doc_hi = seg_starts[first][run], seg_starts[last + 1][run]
    with annotate("gpupipe/kernel/suffix_array"):
        sa = suffix_array(joined)
    with annotate("gpupipe/kernel/lcp"):
        plcp = _permuted_lcp(joined, sa)
    mark = _mark_duplicates(sa, plcp, seg_starts, doc_lo, doc_hi, min_length, within_document)
    del sa, plcp
    empty = np.empty(0, np.int64)
    k = _cover(mark, min_length, False, empty, empty)
    s, e = np.empty(k, np.int64), np.empty(k, np.int64)
    _cover(mark, min_length, True, s, e)
    seg = np.searchsorted(seg_starts, s, side="right") - 1
    return seg, s - seg_starts[seg], e - seg_starts[seg]
