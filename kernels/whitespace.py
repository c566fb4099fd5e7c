"""The normalize station's line and space rules in one pass over Arrow string buffers (``data`` uint8, ``offsets``
int32/int64; see kernels/strings.py), equal to these Arrow calls in this order:

1. ``replace_substring_regex(r"\\r\\n?", "\\n")``: CR LF and a lone CR are line breaks;
2. ``replace_substring_regex(r"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x{9f}]", "")``: control characters (C0 but tab and
   line feed, DEL, C1) removed;
3. ``replace_substring_regex(r"[\\t\\p{Zs}\\x{2028}\\x{2029}]+", " ")``: a run of tabs, space separators and the line
   and paragraph separators is one space;
4. ``replace_substring_regex(r" ?\\n[ \\n]*", "\\n")``: a line break takes the space before it and the spaces and
   line breaks after it;
5. ``utf8_trim(" \\n")``.

As a state machine: removed characters are invisible, a space or line break is held until a visible character
follows (so none trails), and none is written before the first visible one. Four regex passes of RE2 become one
pass without the GIL, serial: the station runs it on slices in threads (columns.map_slices), which numba's
workqueue threading layer could not do with a parallel kernel.
"""

from __future__ import annotations

import numpy as np

from ._jit import njit
from .minhash import _utf8_len

KEEP, DROP, SPACE, NEWLINE, CR = range(5)


@njit(cache=True, inline="always")
def _kind(data, i, n):
    """What the rules make of the n-byte character at data[i]."""
    b0 = data[i]
    if n == 1:
        if b0 == 10:
            return NEWLINE
        if b0 == 13:
            return CR
        if b0 == 9 or b0 == 32:
            return SPACE
        if b0 < 32 or b0 == 127:
            return DROP
        return KEEP
    b1 = data[i + 1]
    if n == 2 and b0 == 0xC2:
        if 0x80 <= b1 <= 0x9F:                      # U+0080..U+009F: C1 controls
            return DROP
        if b1 == 0xA0:                              # U+00A0 no-break space
            return SPACE
        return KEEP
    if n == 3:
        b2 = data[i + 2]
        if b0 == 0xE1 and b1 == 0x9A and b2 == 0x80:   # U+1680 ogham space mark
            return SPACE
        if b0 == 0xE2 and b1 == 0x80 and (b2 <= 0x8A or b2 == 0xA8 or b2 == 0xA9 or b2 == 0xAF):
            return SPACE                            # U+2000..U+200A, U+2028, U+2029, U+202F
        if b0 == 0xE2 and b1 == 0x81 and b2 == 0x9F:   # U+205F medium mathematical space
            return SPACE
        if b0 == 0xE3 and b1 == 0x80 and b2 == 0x80:   # U+3000 ideographic space
            return SPACE
    return KEEP


@njit(cache=True, nogil=True)
def _clean(data, offsets, out, new_offsets):
    """Every document's output written after the previous one's (never longer than its input)."""
    w = 0
    for d in range(offsets.shape[0] - 1):
        i, end = np.int64(offsets[d]), np.int64(offsets[d + 1])
        w0 = w
        space = newline = skip = False  # held space, held line break, after a line break
        while i < end:
            n = _utf8_len(data, i, end)
            if n == 0:                 # a malformed byte (Arrow strings are valid UTF-8): kept as it is
                n = 1
                kind = KEEP
            else:
                kind = _kind(data, i, n)
            if kind == CR:
                if i + 1 < end and data[i + 1] == 10:
                    n = 2
                kind = NEWLINE
            if kind == KEEP:
                if w > w0:
                    if newline:
                        out[w] = 10
                        w += 1
                    elif space:
                        out[w] = 32
                        w += 1
                for k in range(n):
                    out[w + k] = data[i + k]
                w += n
                space = newline = skip = False
            elif kind == SPACE:
                if not skip:
                    space = True
            elif kind == NEWLINE:
                newline = skip = True
                space = False
            i += n
        new_offsets[d + 1] = w


def clean_whitespace(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(data, int64 offsets) of every document with the rules of the module docstring applied."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    offsets = np.ascontiguousarray(offsets)
    n = max(len(offsets) - 1, 0)
    out = np.empty(int(offsets[-1]) - int(offsets[0]) if n else 0, np.uint8)
    new_offsets = np.zeros(n + 1, np.int64)
    if n:
        _clean(data, offsets, out, new_offsets)
    return out[:new_offsets[-1]], new_offsets


__all__ = ["clean_whitespace"]
