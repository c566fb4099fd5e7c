"""Per-document counts of characters by script class, over Arrow string buffers (``data`` uint8, ``offsets``
int32/int64; see kernels/strings.py).

The classes are the caller's: ``table`` maps every code point (0..0x10FFFF) to a class number, and the kernel
counts, per document, how many code points fall in each class (gpupipe/stages/filters/lang_script.py builds the table from
Unicode's Script property and OpenCC's character lists). Class 0 is "no class" and is not counted, nor are bytes
that are not well-formed UTF-8. ASCII letters must all be in one class (``ascii_class``; the other ASCII
characters in class 0): they are summed in a register and added once per document, the hot path of Latin text.
One parallel pass over the documents (numba threads, no GIL).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from ._jit import njit
from .minhash import _chunk_bounds, _utf8_len


@njit(cache=True, inline="always")
def _code_point(data, i, n):
    """The code point of the well-formed n-byte UTF-8 sequence at data[i]."""
    b0 = np.int64(data[i])
    if n == 1:
        return b0
    if n == 2:
        return ((b0 & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F)
    if n == 3:
        return ((b0 & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) | (np.int64(data[i + 2]) & 0x3F)
    return (((b0 & 0x07) << 18) | ((np.int64(data[i + 1]) & 0x3F) << 12) | ((np.int64(data[i + 2]) & 0x3F) << 6)
            | (np.int64(data[i + 3]) & 0x3F))


@njit(parallel=True, cache=True, nogil=True)
def _count_chunks(data, offsets, bounds, table, ascii_class, counts):
    for c in prange(bounds.shape[0] - 1):
        for d in range(bounds[c], bounds[c + 1]):
            i, end = np.int64(offsets[d]), np.int64(offsets[d + 1])
            ascii_letters = 0
            while i < end:
                b0 = data[i]
                if b0 < 0x80:
                    ascii_letters += table[b0] != 0
                    i += 1
                    continue
                n = _utf8_len(data, i, end)
                if n == 0:           # malformed byte: skipped
                    i += 1
                    continue
                cls = table[_code_point(data, i, n)]
                if cls != 0:
                    counts[d, cls] += 1
                i += n
            counts[d, ascii_class] += ascii_letters


def script_counts(data: np.ndarray, offsets: np.ndarray, table: np.ndarray, n_classes: int) -> np.ndarray:
    """(n_docs, n_classes) int32: per document, its code points per class of ``table`` (uint8, 0x110000 entries;
    column 0 stays 0)."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    offsets = np.ascontiguousarray(offsets)
    if table.shape != (0x110000,) or table.dtype != np.uint8 or int(table.max()) >= n_classes:
        raise ValueError("table must be uint8 with one class below n_classes for each of the 0x110000 code points")
    ascii_classes = np.unique(table[:128])
    if len(ascii_classes) > 2 or ascii_classes[0] != 0:
        raise ValueError(f"the ASCII characters must be in class 0 and at most one other, not {ascii_classes}")
    n = len(offsets) - 1
    counts = np.zeros((n, n_classes), np.int32)
    if n:
        _count_chunks(data, offsets, _chunk_bounds(offsets, 16 * numba.get_num_threads()), table,
                      np.int64(ascii_classes[-1]), counts)
    return counts


__all__ = ["script_counts"]
