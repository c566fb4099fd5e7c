"""Character classes of the CJK scripts, defined once: code-point ranges, the regexes and numpy masks built from
them, and the numba twin the kernels call. Every station, kernel and regex that asks "is this a CJK character?"
reads it here (installed as gpupipe.kernels.script_class).

A class is a tuple of inclusive (first, last) code-point ranges, sorted and disjoint.

  HAN       Unicode's Script=Han: the ideographs and their extensions (planes 0, 2, 3), the radicals, 々 U+3005,
            〇 U+3007, the Hangzhou numerals 〡..〩 and 〸..〻: a Han character (the zh "Chinese character" ratio, langid's
            Han class).
  KANA      Script=Hiragana + Script=Katakana (half-width katakana, the kana supplements and the squared and circled
            katakana included).
  HANGUL    Script=Hangul: syllables, jamo (modern, compatibility, half-width, extended) and the circled Hangul.
  CJK       HAN + KANA + HANGUL: a CJK character, which is a word of its own (quality's words, doc_filter's word
            count) and counts towards a document's CJK share (doc_filter, quality's scope, fuzzy dedup's
            shingling mode without a `lang`, decontamination's gram mode).
  HAN_KANA  HAN + KANA: the scripts written without spaces between words. line_filter counts one word per such
            character; Korean, written with spaces, keeps its space-separated words there (tests: "안녕 하세요" is
            2 words).
  CJK_TEXT  the CJK blocks whole, letters or not (U+2E80..U+9FFF: radicals, CJK punctuation, kana, bopomofo,
            compatibility jamo, enclosed and compatibility forms, ideographs; Hangul syllables; compatibility
            ideographs; half- and full-width forms U+FF00..U+FFEF): text written in a CJK script, punctuation
            included (the own extractor's length weight: such a character carries about a word).
  CJK_TEXT_CORE  CJK_TEXT without the radicals, bopomofo, compatibility jamo, kanbun, strokes, enclosed and
            compatibility forms (U+2E80..U+2FFF, U+3100..U+33FF) and the Yijing symbols (U+4DC0..U+4DFF): what a
            CJK page is almost all made of, and the rest what a wrong CJK codec makes of it (the charset check
            that a CJK decoding reads as CJK text; with CJK_TEXT, short GBK pages read as Big5 pass it on their
            stray bopomofo).
  SEED_HAN  U+4E00..U+9FA5, the seed's `\\u4e00-\\u9fa5` (chunk_markdown's special-character ratio quotes it).

The script classes are Unicode 17.0's Scripts.txt, frozen here: a newer regex module, RE2 build or Python does not
move them, and RE2's `\\p{Han}` (older Unicode in Arrow's build) and the regex module's `\\p{Script=Han}` give the
same answer wherever Unicode had assigned the character (tests/kernels/test_script_class.py checks both). Only the
characters of these scripts are in: not the Common ones written with them (ー U+30FC, ・ U+30FB, 「」、。 and the
rest of U+3000..U+303F but the Han and Hangul ones above, full-width Latin), nor Bopomofo.

Forms: `ranges_mask` (a bool array over the code points), `regex_class` / `class_body` (a regex character class
for RE2, i.e. pyarrow.compute, or Python's re / regex), `in_class` (one code point, Python) and `is_cjk` (the numba
twin for the kernels: one bit lookup; numba is imported only when a kernel asks for it). Every class lies in planes
0-3 (below U+40000).
"""

from __future__ import annotations

import numpy as np

Ranges = tuple[tuple[int, int], ...]

HAN: Ranges = (
    (0x2E80, 0x2E99), (0x2E9B, 0x2EF3), (0x2F00, 0x2FD5), (0x3005, 0x3005), (0x3007, 0x3007), (0x3021, 0x3029),
    (0x3038, 0x303B), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFA6D), (0xFA70, 0xFAD9), (0x16FE2, 0x16FE3),
    (0x16FF0, 0x16FF6), (0x20000, 0x2A6DF), (0x2A700, 0x2B81E), (0x2B820, 0x2CEAD), (0x2CEB0, 0x2EBE0),
    (0x2EBF0, 0x2EE5D), (0x2F800, 0x2FA1D), (0x30000, 0x3134A), (0x31350, 0x33479))
KANA: Ranges = (
    (0x3041, 0x3096), (0x309D, 0x309F), (0x30A1, 0x30FA), (0x30FD, 0x30FF), (0x31F0, 0x31FF), (0x32D0, 0x32FE),
    (0x3300, 0x3357), (0xFF66, 0xFF6F), (0xFF71, 0xFF9D), (0x1AFF0, 0x1AFF3), (0x1AFF5, 0x1AFFB),
    (0x1AFFD, 0x1AFFE), (0x1B000, 0x1B128), (0x1B132, 0x1B132), (0x1B150, 0x1B152), (0x1B155, 0x1B155),
    (0x1B164, 0x1B168), (0x1F200, 0x1F200))
HANGUL: Ranges = (
    (0x1100, 0x11FF), (0x302E, 0x302F), (0x3131, 0x318E), (0x3200, 0x321E), (0x3260, 0x327E), (0xA960, 0xA97C),
    (0xAC00, 0xD7A3), (0xD7B0, 0xD7C6), (0xD7CB, 0xD7FB), (0xFFA0, 0xFFBE), (0xFFC2, 0xFFC7), (0xFFCA, 0xFFCF),
    (0xFFD2, 0xFFD7), (0xFFDA, 0xFFDC))
CJK_TEXT: Ranges = ((0x2E80, 0x9FFF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF), (0xFF00, 0xFFEF))
CJK_TEXT_CORE: Ranges = ((0x3000, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF),
                         (0xFF00, 0xFFEF))
SEED_HAN: Ranges = ((0x4E00, 0x9FA5),)

PLANES = 0x40000   # every class lies below: planes 0-3


def union(*classes: Ranges) -> Ranges:
    """The ranges of the code points in any of `classes`, sorted, adjacent and overlapping ranges merged."""
    out: list[list[int]] = []
    for a, b in sorted(r for c in classes for r in c):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


CJK: Ranges = union(HAN, KANA, HANGUL)
HAN_KANA: Ranges = union(HAN, KANA)

CLASSES = {"HAN": HAN, "KANA": KANA, "HANGUL": HANGUL, "CJK": CJK, "HAN_KANA": HAN_KANA, "CJK_TEXT": CJK_TEXT,
           "CJK_TEXT_CORE": CJK_TEXT_CORE, "SEED_HAN": SEED_HAN}
for _name, _ranges in CLASSES.items():
    assert _ranges == union(_ranges) and _ranges[-1][1] < PLANES, f"{_name}: sorted disjoint ranges below U+40000"


def in_class(cp: int, ranges: Ranges) -> bool:
    """Whether code point `cp` is in the class (Python; a bisection would only pay off for long classes)."""
    return any(a <= cp <= b for a, b in ranges)


def ranges_mask(ranges: Ranges, size: int = 0x110000) -> np.ndarray:
    """bool per code point 0..size-1: True in the class."""
    m = np.zeros(size, dtype=bool)
    for a, b in ranges:
        m[a:min(b + 1, size)] = True
    return m


def _escape(cp: int, syntax: str) -> str:
    if syntax == "re2":
        return f"\\x{{{cp:04X}}}"
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def class_body(ranges: Ranges, syntax: str = "re2") -> str:
    """The inside of a regex character class matching the class: `syntax` "re2" (pyarrow.compute's regexes:
    \\x{HHHH}) or "python" (re and regex: \\uHHHH, \\UHHHHHHHH). To combine with other members, e.g.
    f"[^\\s{class_body(CJK)}]"."""
    if syntax not in ("re2", "python"):
        raise ValueError(f"syntax: 're2' or 'python', not {syntax!r}")
    return "".join(_escape(a, syntax) if a == b else f"{_escape(a, syntax)}-{_escape(b, syntax)}" for a, b in ranges)


def regex_class(ranges: Ranges, syntax: str = "re2") -> str:
    """A regex matching one character of the class: "[...]" (see class_body)."""
    return f"[{class_body(ranges, syntax)}]"


# The numba twin: one bit per code point of planes 0-3 (32 KiB), a constant of the compiled kernels.
_CJK_BITS = np.packbits(ranges_mask(CJK, PLANES), bitorder="little")


def _is_cjk(cp):
    """Whether code point `cp` (an integer) is in CJK: the numba twin of ranges_mask(CJK) and regex_class(CJK)."""
    return 0 <= cp < PLANES and (_CJK_BITS[cp >> 3] >> (cp & 7)) & 1 == 1


def __getattr__(name: str):
    """`is_cjk`, _is_cjk compiled by numba, made on first use: the regex users (the extractor, the charset check)
    import this module without importing numba."""
    if name == "is_cjk":
        from ._jit import njit

        global is_cjk
        is_cjk = njit(cache=True)(_is_cjk)
        return is_cjk
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Ranges", "HAN", "KANA", "HANGUL", "CJK", "HAN_KANA", "CJK_TEXT", "CJK_TEXT_CORE", "SEED_HAN", "CLASSES",
           "PLANES", "union", "in_class", "ranges_mask", "class_body", "regex_class", "is_cjk"]
