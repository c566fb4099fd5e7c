"""Gopher's symbol counts of every document in one pass over Arrow string buffers (``data`` uint8, ``offsets``
int32/int64; see kernels/strings.py), counted as the Arrow compute calls they replace count them:

- ``hash``: ``#`` characters (``count_substring(text, "#")``);
- ``ellipsis``: ``...`` (non-overlapping, left to right: ``......`` is two) plus ``…``
  (``count_substring(text, "...") + count_substring(text, "…")``);
- ``capitalized``: words whose first character is an uppercase letter (Unicode category Lu), a word starting at
  the text's start or after whitespace (``match_substring_regex(text, r"^\\p{Lu}")`` +
  ``count_substring_regex(text, r"\\s\\p{Lu}")``);
- ``words``: runs of non-whitespace (``count_substring_regex(text, r"\\S+")``).

Whitespace is RE2's ``\\s``, ASCII ``[\\t\\n\\f\\r ]`` (no vertical tab, nothing beyond ASCII). Lu comes from
Python's unicodedata. One parallel pass over the documents (numba threads, no GIL): the four Arrow calls cost a
regex engine's pass each.
"""

from __future__ import annotations

import functools
import unicodedata

import numba
import numpy as np
from numba import prange

from ._jit import njit
from .minhash import _chunk_bounds, _utf8_len
from .script_share import _code_point

HASH, ELLIPSIS, CAPITALIZED, WORDS = range(4)
_LU_END = 0x1F000   # the last Lu code point is below this (U+1E921 in Unicode 15)


@functools.cache
def upper_table() -> np.ndarray:
    """uint8 per code point below _LU_END: 1 where its category is Lu."""
    return np.array([unicodedata.category(chr(c)) == "Lu" for c in range(_LU_END)], np.uint8)


@njit(cache=True, inline="always")
def _is_space(b):
    return b == 32 or b == 9 or b == 10 or b == 12 or b == 13


@njit(parallel=True, cache=True, nogil=True)
def _count_chunks(data, offsets, bounds, upper, counts):
    for c in prange(bounds.shape[0] - 1):
        for d in range(bounds[c], bounds[c + 1]):
            i, end = np.int64(offsets[d]), np.int64(offsets[d + 1])
            hashes = dots = ellipses = capitalized = words = 0
            after_space = True   # the text's start counts as a word start
            while i < end:
                b0 = data[i]
                if b0 < 0x80:
                    n, cp = 1, np.int64(b0)
                else:
                    n = _utf8_len(data, i, end)
                    if n == 0:   # malformed byte (Arrow strings are valid UTF-8): one non-space character
                        n, cp = 1, np.int64(-1)
                    else:
                        cp = _code_point(data, i, n)
                if cp == 46:     # '.': three in a row make an ellipsis, counting starts again after it
                    dots += 1
                    if dots == 3:
                        ellipses += 1
                        dots = 0
                else:
                    dots = 0
                if cp == 35:
                    hashes += 1
                elif cp == 0x2026:
                    ellipses += 1
                space = n == 1 and _is_space(b0)
                if not space and after_space:
                    words += 1
                    if 0 <= cp < upper.shape[0] and upper[cp] != 0:
                        capitalized += 1
                after_space = space
                i += n
            counts[d, HASH] = hashes
            counts[d, ELLIPSIS] = ellipses
            counts[d, CAPITALIZED] = capitalized
            counts[d, WORDS] = words


def symbol_counts(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """(n_docs, 4) int64: per document its HASH, ELLIPSIS, CAPITALIZED and WORDS counts (module docstring)."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    offsets = np.ascontiguousarray(offsets)
    n = len(offsets) - 1
    counts = np.zeros((max(n, 0), 4), np.int64)
    if n > 0:
        _count_chunks(data, offsets, _chunk_bounds(offsets, 16 * numba.get_num_threads()), upper_table(), counts)
    return counts


__all__ = ["symbol_counts", "HASH", "ELLIPSIS", "CAPITALIZED", "WORDS"]
