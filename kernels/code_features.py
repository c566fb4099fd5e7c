"""Per-document counts that tell source code from prose, over Arrow string buffers (``data`` uint8, ``offsets``
int32/int64; see kernels/strings.py), in one parallel pass over the first ``max_bytes`` bytes of each document.

Counted per document (columns of the result, named in ``COUNTS``):
- lines: non-blank and blank lines; lines indented (any leading space or tab) and deeply (4+ columns, a tab is
  4); lines that start with ``#``, with ``//`` or ``/*``, with a list bullet (``- ``, ``* ``, ``+ ``) or ``>>>``;
- the last non-space character of each non-blank line, by kind: ``; { }``, ``:``, ``) ]``, ``( [ ,``,
  ``. ? !``, a letter or digit, a quote, a non-ASCII character, anything else;
- characters (a non-ASCII character counts once, on its lead byte): non-space, ASCII letters, digits, non-ASCII,
  and the symbols ``{}``, ``[]``, ``()``, ``;``, ``=``, ``_``, ``<>``, other operators (``* & | \\ # $ @ % ^ ~ +
  - /``), quotes (``" ' ` ``), ``.``, ``,``; two-character operators (``== != <= >= -> => :: += -= && || << >>``);
- tokens (``[A-Za-z_][A-Za-z0-9_]*``): all, those in ``keywords`` (case-sensitive, as 64-bit FNV-1a hashes, sorted),
  those whose lowercase form is in ``stop_words`` (same hashing of the lowercased bytes), identifier-shaped ones
  (an ``_`` inside, a lowercase letter followed by an uppercase one, or a digit after a letter), tokens followed
  at once by ``(`` (calls) and by ``.`` and a letter (attribute access);
- lines again: prose lines (6+ tokens, 2+ of them stop words), lines without indentation, those of them that are
  prose lines, rules (3+ of one character of ``= - ^ ~ * # _ +`` alone: reST underlines, Markdown rules) and
  code-block openers (ending in ``::``, or starting with a code fence ``````` ``).

gpupipe/stages/filters/code_detect.py turns these counts into ratios and the ratios into a probability of code.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from ._jit import njit
from .minhash import _chunk_bounds

COUNTS = ("lines", "blank", "indented", "deep_indent", "hash_line", "slash_line", "bullet_line", "prompt_line",
          "end_semibrace", "end_colon", "end_close", "end_open", "end_period", "end_word", "end_quote",
          "end_nonascii", "end_other",
          "nonspace", "letters", "digits", "nonascii", "braces", "brackets", "parens", "semi", "eq", "underscore",
          "angle", "ops", "quotes", "period", "comma", "ops2",
          "tokens", "keywords", "stop_words", "ident_like", "calls", "attr",
          "prose_lines", "flat_lines", "flat_prose_lines", "rule_lines", "block_intro")
(LINES, BLANK, INDENTED, DEEP_INDENT, HASH_LINE, SLASH_LINE, BULLET_LINE, PROMPT_LINE,
 END_SEMIBRACE, END_COLON, END_CLOSE, END_OPEN, END_PERIOD, END_WORD, END_QUOTE, END_NONASCII, END_OTHER,
 NONSPACE, LETTERS, DIGITS, NONASCII, BRACES, BRACKETS, PARENS, SEMI, EQ, UNDERSCORE, ANGLE, OPS, QUOTES, PERIOD,
 COMMA, OPS2, TOKENS, KEYWORDS, STOP_WORDS, IDENT_LIKE, CALLS, ATTR,
 PROSE_LINES, FLAT_LINES, FLAT_PROSE_LINES, RULE_LINES, BLOCK_INTRO) = range(len(COUNTS))

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


def fnv1a(word: str, lower: bool = False) -> int:
    """The kernel's token hash (64-bit FNV-1a over the UTF-8 bytes; ``lower``: of the ASCII-lowercased bytes)."""
    h = FNV_OFFSET
    for b in (word.lower() if lower else word).encode("utf-8"):
        h = ((h ^ b) * FNV_PRIME) & _MASK
    return h


def hash_table(words, lower: bool = False) -> np.ndarray:
    """Sorted uint64 hashes of ``words``, the form the kernel looks tokens up in."""
    return np.unique(np.array([fnv1a(w, lower) for w in words], dtype=np.uint64))


@njit(cache=True, inline="always")
def _is_alpha(b):
    return (65 <= b <= 90) or (97 <= b <= 122)


@njit(cache=True, inline="always")
def _is_ident(b):
    return (65 <= b <= 90) or (97 <= b <= 122) or (48 <= b <= 57) or b == 95


@njit(cache=True, inline="always")
def _in_table(table, h):
    if table.shape[0] == 0:
        return False
    j = np.searchsorted(table, h)
    return j < table.shape[0] and table[j] == h


@njit(cache=True, inline="always")
def _end_kind(b):
    if b == 59 or b == 123 or b == 125:          # ; { }
        return END_SEMIBRACE
    if b == 58:                                   # :
        return END_COLON
    if b == 41 or b == 93:                        # ) ]
        return END_CLOSE
    if b == 40 or b == 91 or b == 44:             # ( [ ,
        return END_OPEN
    if b == 46 or b == 63 or b == 33:             # . ? !
        return END_PERIOD
    if _is_ident(b):
        return END_WORD
    if b == 34 or b == 39 or b == 96:             # " ' `
        return END_QUOTE
    if b >= 0x80:
        return END_NONASCII
    return END_OTHER


@njit(cache=True)
def _scan(data, start, end, keywords, stop_words, out):
    prime = np.uint64(FNV_PRIME)
    nonblank = False          # the current line has a non-space character
    lead = 0                  # its leading columns
    last = -1                 # its last non-space byte (a lead byte for non-ASCII)
    in_tok = False
    in_num = False            # inside a run of identifier bytes that began with a digit (0x1F, 3rd): no token
    h = np.uint64(FNV_OFFSET)
    hl = np.uint64(FNV_OFFSET)
    shaped = False
    prev = 0
    last2 = -1                # the non-space byte before `last` on the line
    first = -1                # the line's first non-space byte
    uniform = True            # every non-space byte of the line is `first`
    width = 0                 # the line's non-space bytes
    fence = False             # the line starts with ```
    line_tok = 0
    line_stop = 0
    i = start
    while i <= end:
        b = np.int64(data[i]) if i < end else 10          # the sample ends a line and a token
        if in_tok and not _is_ident(b):
            out[TOKENS] += 1
            line_tok += 1
            if _in_table(keywords, h):
                out[KEYWORDS] += 1
            if _in_table(stop_words, hl):
                out[STOP_WORDS] += 1
                line_stop += 1
            if shaped:
                out[IDENT_LIKE] += 1
            if b == 40:
                out[CALLS] += 1
            elif b == 46 and i + 1 < end and _is_alpha(np.int64(data[i + 1])):
                out[ATTR] += 1
            in_tok = False
        if b == 10:
            if nonblank:
                out[LINES] += 1
                if lead > 0:
                    out[INDENTED] += 1
                if lead >= 4:
                    out[DEEP_INDENT] += 1
                out[_end_kind(last)] += 1
                prose = line_tok >= 6 and line_stop >= 2
                if prose:
                    out[PROSE_LINES] += 1
                if lead == 0:
                    out[FLAT_LINES] += 1
                    if prose:
                        out[FLAT_PROSE_LINES] += 1
                if uniform and width >= 3 and (first == 61 or first == 45 or first == 94 or first == 126
                                               or first == 42 or first == 35 or first == 95 or first == 43):
                    out[RULE_LINES] += 1
                if fence or (last == 58 and last2 == 58):
                    out[BLOCK_INTRO] += 1
            elif i < end:
                out[BLANK] += 1
            nonblank, lead, last, prev, in_num = False, 0, -1, b, False
            last2, first, uniform, width, fence, line_tok, line_stop = -1, -1, True, 0, False, 0, 0
            i += 1
            continue
        if b == 32 or b == 9 or b == 13 or b == 11 or b == 12:
            if not nonblank:
                lead += 4 if b == 9 else (1 if b == 32 else 0)
            prev, in_num = b, False
            i += 1
            continue
        if 0x80 <= b < 0xC0:                              # a continuation byte: its character is counted
            i += 1
            continue
        nxt = np.int64(data[i + 1]) if i + 1 < end else 10
        if not nonblank:
            nonblank = True
            first = b
            fence = b == 96 and nxt == 96 and i + 2 < end and data[i + 2] == 96
            if b == 35:
                out[HASH_LINE] += 1
            elif b == 47 and (nxt == 47 or nxt == 42):
                out[SLASH_LINE] += 1
            elif (b == 45 or b == 42 or b == 43) and (nxt == 32 or nxt == 9):
                out[BULLET_LINE] += 1
            elif b == 62 and nxt == 62 and i + 2 < end and data[i + 2] == 62:
                out[PROMPT_LINE] += 1
        last2, last = last, b
        width += 1
        if b != first:
            uniform = False
        out[NONSPACE] += 1
        if b >= 0x80:
            out[NONASCII] += 1
        elif _is_alpha(b):
            out[LETTERS] += 1
        elif 48 <= b <= 57:
            out[DIGITS] += 1
        elif b == 123 or b == 125:
            out[BRACES] += 1
        elif b == 91 or b == 93:
            out[BRACKETS] += 1
        elif b == 40 or b == 41:
            out[PARENS] += 1
        elif b == 59:
            out[SEMI] += 1
        elif b == 61:
            out[EQ] += 1
        elif b == 95:
            out[UNDERSCORE] += 1
        elif b == 60 or b == 62:
            out[ANGLE] += 1
        elif b == 34 or b == 39 or b == 96:
            out[QUOTES] += 1
        elif b == 46:
            out[PERIOD] += 1
        elif b == 44:
            out[COMMA] += 1
        elif (b == 42 or b == 38 or b == 124 or b == 92 or b == 35 or b == 36 or b == 64 or b == 37 or b == 94
              or b == 126 or b == 43 or b == 45 or b == 47):
            out[OPS] += 1
        # two-character operators: == != <= >= -> => :: += -= && || << >>
        if ((nxt == 61 and (b == 61 or b == 33 or b == 60 or b == 62 or b == 43 or b == 45))
                or (nxt == 62 and (b == 45 or b == 61 or b == 62)) or (b == 58 and nxt == 58)
                or (b == 38 and nxt == 38) or (b == 124 and nxt == 124) or (b == 60 and nxt == 60)):
            out[OPS2] += 1
        if b < 0x80 and _is_ident(b):
            if not in_tok and not in_num:
                if 48 <= b <= 57:
                    in_num = True
                else:
                    in_tok, h, hl, shaped = True, np.uint64(FNV_OFFSET), np.uint64(FNV_OFFSET), False
            else:
                if b == 95 or (65 <= b <= 90 and 97 <= prev <= 122) or (48 <= b <= 57 and _is_alpha(prev)):
                    shaped = True
            if in_tok:
                h = (h ^ np.uint64(b)) * prime
                lb = b + 32 if 65 <= b <= 90 else b
                hl = (hl ^ np.uint64(lb)) * prime
        else:
            in_num = False
        prev = b
        i += 1


@njit(parallel=True, cache=True, nogil=True)
def _count_chunks(data, offsets, bounds, max_bytes, keywords, stop_words, out):
    for c in prange(bounds.shape[0] - 1):
        for d in range(bounds[c], bounds[c + 1]):
            start = np.int64(offsets[d])
            end = min(np.int64(offsets[d + 1]), start + max_bytes)
            _scan(data, start, end, keywords, stop_words, out[d])


def code_counts(data: np.ndarray, offsets: np.ndarray, keywords: np.ndarray, stop_words: np.ndarray,
                max_bytes: int = 8192) -> np.ndarray:
    """(n_docs, len(COUNTS)) int32: the counts above over each document's first ``max_bytes`` bytes
    (``keywords``, ``stop_words``: hash_table(...) of the words, the stop words hashed lowercase)."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    offsets = np.ascontiguousarray(offsets)
    n = len(offsets) - 1
    out = np.zeros((n, len(COUNTS)), np.int32)
    if n:
        _count_chunks(data, offsets, _chunk_bounds(offsets, 16 * numba.get_num_threads()), np.int64(max_bytes),
                      np.ascontiguousarray(keywords, np.uint64), np.ascontiguousarray(stop_words, np.uint64), out)
    return out


__all__ = ["COUNTS", "code_counts", "fnv1a", "hash_table"]
