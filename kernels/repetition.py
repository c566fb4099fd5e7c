"""Per-document counts for the quality rules (Gopher, Gopher repetition, C4, FineWeb, the seed002 family, zh), in one
numba pass over Arrow string buffers, parallel over documents.

Used by ``gpupipe.stages.filters.quality``, which turns these counts into ratios and decisions. What pyarrow can do in a
vectorized kernel (substring counts) the stage does with pyarrow; everything that needs a loop over the words or
lines of each document is here: tokens, lines, paragraphs, n-grams and their repeats.

Input: ``data`` uint8 (an Arrow value buffer, UTF-8), ``offsets`` int32/int64 (n + 1 entries). Text is decoded to
code points first (an invalid byte counts as U+FFFD), so every length is Python's ``len`` (code points).

Character classes come from one table per process (``char_table``), built from Python's ``unicodedata``:
whitespace = ``str.isspace``, letters = ``str.isalpha``, punctuation = category P*, and so on (see the C_* bits);
the CJK and Han characters are kernels/script_class.py's classes.

Words ("tokens") imitate the English word tokenizer that datatrove's filters use (spaCy's rule-based English
tokenizer, see datatrove.utils.word_tokenizers), because datatrove is the reference our decisions are checked
against, and there every punctuation mark is a word, which moves every per-word ratio. The rules: split on
whitespace; peel prefix/suffix punctuation one mark at a time (an ellipsis, "'s", a unit or currency after a digit,
a final "." after a digit, a lowercase letter, punctuation or two capitals); keep spaCy's exceptions whole
("Inc.", "Mr.", "e.g.", "a." ... "z.", emoticons) or split as listed ("do|n't", "we|'re", "can|not"), also when
the splitting produced them from two adjacent pieces ("R-Wash." -> "R" "-" "Wash."); keep URLs whole; split
inside a word at ellipses, symbols (So), "-" / "," / ":<>=/" after a letter or digit and before a letter, "."
between a lowercase and an uppercase letter, and arithmetic signs between digits. With ``cjk_words`` (our
default) every Han/kana/hangul character is a word of its own (Chinese has no spaces); without it, CJK runs stay
inside whitespace-separated words, as spaCy's English tokenizer sees them (only for comparisons with datatrove).
It is an imitation, not spaCy: on the benchmark corpus it gives spaCy's words on all but 3 of 19,127 English and
7 of 99,582 Chinese documents (differences: exceptions it does not list, e.g. some emoticons).

Hashing. Lines, paragraphs, words and n-grams are compared by a polynomial hash modulo p = 2^61 - 1 over code
points (Horner: h = h*B + cp + 1), mixed with the length through MurmurHash3's fmix64 into a 64-bit key of an
open-addressing table. Two different strings share a key with probability about 2^-61 (length/p for the
polynomial, 2^-63 for the mixed key): we accept that; a collision would count one element as a duplicate.
The polynomial is associative over concatenation, H(x||y) = H(x)*B^len(y) + H(y), so the hash of any run of
words ("".join, as datatrove's duplicated n-grams) comes from prefix hashes in O(1).

Work per document is O(characters + words) (tables sized to the document); the n-gram passes hash only windows
that can repeat (see _top_ngrams and _dup_ngrams). Parts of the pass that no enabled rule reads are skipped
(``parts``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import unicodedata
from pathlib import Path

import numba
import numpy as np
from numba import prange

from . import script_class
from ._jit import njit
from ._mersenne import P61, addmod61, fmix64, mulmod61
from .script_class import CJK, HAN, ranges_mask

# ----------------------------------------------------------------------------------------------------------------
# Character classes (one uint32 of bits per code point)
# ----------------------------------------------------------------------------------------------------------------

C_SPACE = 1 << 0        # str.isspace: separates words, stripped by strip()
C_ALPHA = 1 << 1        # str.isalpha
C_DIGIT = 1 << 2        # str.isdigit
C_LOWER = 1 << 3        # lowercase letter, or a letter without case (spaCy's ALPHA_LOWER includes uncased scripts)
C_UPPER = 1 << 4        # uppercase letter, or a letter without case
C_PUNCT = 1 << 5        # Unicode category P* (spaCy's is_punct; zh punctuation ratio)
C_SYMBOL = 1 << 6       # P*, ASCII symbols ($+<=>^`|~) or a control: a word of only these is "not a word" (Gopher)
C_CJK = 1 << 7          # Han, kana or hangul (script_class.CJK): one word per character
C_HAN = 1 << 8          # Han (script_class.HAN: the zh "Chinese character" ratio)
C_TERM = 1 << 9         # sentence-final punctuation (FineWeb line endings, sentence splitting)
C_PREFIX = 1 << 10      # split off the front of a word
C_SUFFIX = 1 << 11      # split off the end of a word
C_ICON = 1 << 12        # category So: split anywhere
C_BAD = 1 << 13         # U+FFFD, private use, unassigned, surrogates, controls other than whitespace (garbled)
C_COMMON_HAN = 1 << 14  # a Han character of GB2312 or Big5 (the common sets): others are rare, typical of mojibake
C_LINEBREAK = 1 << 15   # a str.splitlines boundary
C_QUOTE = 1 << 16       # quotes (for the "." suffix/infix rules)
C_SP_ALPHA = 1 << 17    # spaCy's ALPHA: letters plus its CJK blocks, which include CJK punctuation (U+3000..U+303F)
C_LATIN1 = 1 << 18      # U+0080..U+00FF: in a Chinese document, the signature of UTF-8/GBK read as Latin-1
C_ASCII_DIGIT = 1 << 19
C_WORDCHAR = 1 << 20    # a letter/digit/mark outside CJK scripts (not space, P, S, Z, C): the CJK share's other side
C_INFIX = 1 << 21       # may start an infix (. … + - * ^ , – — ~ : < > = / and So symbols): others skip the check

# Punctuation that the word splitter peels off words (spaCy's English punctuation, quotes, currency lists).
_AFFIX_PUNCT = "…,:;!?¿؟¡()[]{}<>_#*&。？！，、；：～·।،۔؛٪"
_QUOTES = "'\"”“`‘´’‚,„»«「」『』（）〔〕【】《》〈〉〈〉⟦⟧"
_CURRENCY = "$£€¥฿₽﷼₴" + "".join(map(chr, range(0x20A0, 0x20C0)))
_PREFIX_ONLY = "§%=—–+"     # "+" only when no digit follows (checked in the splitter)
_SUFFIX_ONLY = "—–"
# Sentence terminals: Unicode's Sentence_Terminal characters of the scripts we meet (Latin, CJK, full-width,
# Arabic, Devanagari, Armenian, Ethiopic, Myanmar, Mongolian, general punctuation).
_TERMINALS = ".!?。！？．｡﹒﹖﹗‼‽⁇⁈⁉⸮؟۔।॥։።፧፨။၊᠃᠉܀܁܂"
_LINEBREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_ASCII_SYMBOLS = "$+<=>^`|~"


def _common_han() -> list[int]:
    """Han characters of GB2312 (6,763: simplified) and Big5 (13,060: traditional), from Python's own codecs."""
    out: set[int] = set()
    for codec, rows, cols in (("gb2312", range(0xB0, 0xF8), range(0xA1, 0xFF)),
                              ("big5", range(0xA4, 0xFA), [*range(0x40, 0x7F), *range(0xA1, 0xFF)])):
        for r in rows:
            for c in cols:
                try:
                    ch = bytes((r, c)).decode(codec)
                except UnicodeDecodeError:
                    continue
                out.add(ord(ch))
    return sorted(out)


@functools.lru_cache(maxsize=1)
def char_table() -> np.ndarray:
    """The class bits of every code point (0x110000 uint32, ~4 MB).

    Building it takes about a second (a Python loop over every code point), so it is built once per install and
    kept beside numba's cache, named by what it depends on: this file's and script_class.py's sources, Python's
    version and its Unicode database version. A missing, unreadable or unwritable cache only means building it
    again."""
    sources = Path(__file__).read_bytes() + Path(script_class.__file__).read_bytes()
    key = hashlib.sha256(sources + f"{sys.version_info[:2]} {unicodedata.unidata_version}".encode()).hexdigest()[:16]
    path = Path(numba.config.CACHE_DIR or Path(__file__).parent / "__pycache__") / f"char_table-{key}.npy"
    try:
        t = np.load(path)
        if t.shape == (0x110000,) and t.dtype == np.uint32:
            return t
    except (OSError, ValueError):
        pass
    t = _build_char_table()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            np.save(f, t)
        os.replace(tmp, path)
        for old in path.parent.glob("char_table-*.npy"):  # tables of earlier sources
            if old != path:
                old.unlink(missing_ok=True)
    except OSError:
        pass
    return t


def _build_char_table() -> np.ndarray:
    n = 0x110000
    t = np.zeros(n, dtype=np.uint32)
    chars = [chr(i) for i in range(n)]
    cats = [unicodedata.category(c) for c in chars]
    for i, (c, cat) in enumerate(zip(chars, cats)):
        bits = 0
        if c.isspace():
            bits |= C_SPACE
        if c.isalpha():
            bits |= C_ALPHA
            if cat == "Ll":
                bits |= C_LOWER
            elif cat == "Lu":
                bits |= C_UPPER
            elif cat in ("Lo", "Lm"):
                bits |= C_LOWER | C_UPPER
        if c.isdigit():
            bits |= C_DIGIT
        k = cat[0]
        if k == "P":
            bits |= C_PUNCT | C_SYMBOL
        elif cat == "Cc":
            bits |= C_SYMBOL
            if not c.isspace():
                bits |= C_BAD
        elif cat in ("Co", "Cn", "Cs"):
            bits |= C_BAD
        elif cat == "So":
            bits |= C_ICON
        if k not in "PSZC" and not c.isspace():
            bits |= C_WORDCHAR
        t[i] = bits
    t[ranges_mask(CJK)] |= C_CJK
    t[ranges_mask(HAN)] |= C_HAN
    t[(t & C_ALPHA) != 0] |= C_SP_ALPHA
    for a, b in ((0x2E80, 0x2FFF), (0x3000, 0x303F), (0x31C0, 0x31EF), (0x3200, 0x33FF), (0xF900, 0xFAFF),
                 (0xFE30, 0xFE4F), (0x1F200, 0x1F2FF)):
        t[a:b + 1] |= C_SP_ALPHA | C_LOWER | C_UPPER
    for s, bit in ((_AFFIX_PUNCT, C_PREFIX | C_SUFFIX), (_QUOTES, C_PREFIX | C_SUFFIX | C_QUOTE),
                   (_CURRENCY, C_PREFIX), (_PREFIX_ONLY, C_PREFIX), (_SUFFIX_ONLY, C_SUFFIX),
                   (_TERMINALS, C_TERM), (_LINEBREAKS, C_LINEBREAK), (_ASCII_SYMBOLS, C_SYMBOL)):
        for ch in s:
            t[ord(ch)] |= bit
    icons = (t & C_ICON) != 0
    t[icons] |= C_PREFIX | C_SUFFIX | C_INFIX
    for ch in ".…+-*^,–—~:<>=/":
        t[ord(ch)] |= C_INFIX
    t[(t & C_CJK) != 0] &= ~np.uint32(C_WORDCHAR)
    t[0x80:0x100] |= C_LATIN1
    t[0x30:0x3A] |= C_ASCII_DIGIT
    t[0xFFFD] |= C_BAD
    t[np.array(_common_han())] |= C_COMMON_HAN
    return t


# ----------------------------------------------------------------------------------------------------------------
# String hashes (the Python twin builds the word lists the kernel looks up)
# ----------------------------------------------------------------------------------------------------------------

BASE = (0x510E527FADE682D1 % P61) | 1      # SHA-512's 5th IV word mod p, odd: the code point polynomial
TUPLE_BASE = (0x9B05688C2B3E6C1F % P61) | 1  # for n-grams as word tuples (SHA-512's 6th IV word)
_B = np.uint64(BASE)
_C = np.uint64(TUPLE_BASE)
_LEN_MIX = np.uint64(0x9E3779B97F4A7C15)


def py_hash(s: str, fold: bool = False) -> int:
    """The kernel's string residue: sum (cp + 1) * BASE^(len-1-i) mod p; `fold` maps ASCII A-Z to a-z first."""
    h = 0
    for ch in s:
        cp = ord(ch)
        if fold and 65 <= cp <= 90:
            cp += 32
        h = (h * BASE + cp + 1) % P61
    return h


def hash_set(words) -> np.ndarray:
    """Sorted residues of `words` (exact case), for binary search in the kernel."""
    return np.array(sorted({py_hash(w) for w in words}), dtype=np.uint64)


def _exception_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Residues of the exceptions (sorted), where each splits (0: kept whole), and a filter indexed by
    (length, first, last character; 127 for any non-ASCII) that is 1 where an exception may match."""
    words = {w: 0 for w in WHOLE_WORDS} | SPLIT_WORDS
    pairs = sorted((py_hash(w), k) for w, k in words.items())
    filt = np.zeros((9, 128, 128), np.uint8)
    for w in words:
        filt[len(w), min(ord(w[0]), 127), min(ord(w[-1]), 127)] = 1
    return (np.array([h for h, _ in pairs], np.uint64), np.array([k for _, k in pairs], np.int64), filt.ravel())


# spaCy's tokenizer exceptions that matter in practice: kept whole (abbreviations whose "." would be split
# otherwise, emoticons, ...) or split at a fixed place ("cannot" -> "can" "not"). Single letters with a "." ("a.")
# and contractions with an apostrophe ("do|n't", "we|'re") are rules in _exception below.
WHOLE_WORDS = (
    "Mr. Mrs. Ms. Dr. Prof. Rev. Gen. Gov. Sen. Rep. Adm. Jr. St. Mt. Messrs. Bros. Co. co. Corp. Inc. Ltd. "
    "vs. v.s. Ph.D. e.g. i.e. E.g. I.e. a.m. p.m. D.C. N.Y. N.C. N.D. N.H. N.J. N.M. S.C. "
    "Jan. Feb. Mar. Apr. Jun. Jul. Aug. Sep. Sept. Oct. Nov. Dec. Ak. Ala. Ariz. Ark. Calif. Colo. "
    "Conn. Del. Fla. Ga. Ia. Id. Ill. Ind. Kan. Kans. Ky. La. Mass. Md. Mich. Minn. Miss. Mo. Mont. Neb. Nebr. "
    "Nev. Okla. Ore. Pa. Tenn. Va. Wash. Wis. "
    ":) :-) :( :-( ): (: ;) ;-) :D :P :p :/ <3 =) (= :'( :| :] :[ =( ^_^ -_- XD xD "
    "and/or C++ '' 's 'S ’s ’S o'clock ma'am Ma'am 'em 'cause"
).split()
SPLIT_WORDS = {w: k for ws, k in (
    ("cannot gonna gotta", 3), ("im ive id", 1), ("dont cant wont hes isnt", 2),
    ("youre didnt wasnt arent hasnt", 3), ("whats theyre doesnt havent", 4), ("couldnt wouldnt", 5),
    ("shouldnt", 6)) for w0 in ws.split() for w in (w0, w0.title())}
# Units, currencies and "+" split off after a digit ("10km" -> "10" "km", "5%" -> "5" "%").
AFTER_DIGIT = (
    "km km² km³ m m² m³ dm dm² dm³ cm cm² cm³ mm mm² mm³ ha µm nm yd in ft kg g mg µg t lb oz m/s km/h kmh mph "
    "hPa Pa mbar mb MB kb KB gb GB tb TB T G M K % + $ £ € ¥ ฿ US$ C$ A$ ₽ ₴"
).split()
GOPHER_STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")  # case-sensitive, as datatrove
# English function words for the seed002 rules' stop word ratio (matched case-insensitively).
EN_STOP_WORDS = tuple(
    "a about above after again against all am an and any are as at be because been before being below between "
    "both but by can could did do does doing down during each few for from further had has have having he her "
    "here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not "
    "now of off on once only or other our ours ourselves out over own same she should so some such than that the "
    "their theirs them themselves then there these they this those through to too under until up very was we "
    "were what when where which while who whom why will with would you your yours yourself yourselves".split())

# C4's line patterns, matched on ASCII-lowercased lines: index 0 lorem ipsum, 1 javascript, 2.. policy phrases.
C4_PATTERNS = ("lorem ipsum", "javascript", "terms of use", "privacy policy", "cookie policy", "uses cookies",
               "use of cookies", "use cookies")

# Indices of the per-document counts (columns of `counts`).
COUNTS = (
    "chars", "nonspace_chars", "newlines",
    "tokens", "words", "words_chars", "alpha_tokens", "gopher_stop_words",
    "words_noncjk", "words_noncjk_chars", "unique_words", "en_stop_words",
    "lines", "bullet_lines", "ellipsis_lines",
    "paragraphs", "dup_paragraphs", "dup_paragraph_chars",
    "rep_lines", "dup_lines", "dup_line_chars",
    "c4_sentences", "c4_lorem_ipsum", "c4_curly_brace", "c4_kept_lines",
    "fw_lines", "fw_punct_lines", "fw_short_lines", "fw_dup_chars",
    "cjk_chars", "han_chars", "word_chars", "alpha_chars", "digit_chars", "special_chars", "punct_chars",
    "bad_chars", "latin1_chars", "rare_han_chars",
)
(K_CHARS, K_NONSPACE, K_NEWLINES, K_TOKENS, K_WORDS, K_WORDS_CHARS, K_ALPHA_TOKENS, K_GOPHER_STOP,
 K_WORDS_NONCJK, K_WORDS_NONCJK_CHARS, K_UNIQUE, K_EN_STOP, K_LINES, K_BULLET, K_ELLIPSIS_LINES,
 K_PARAS, K_DUP_PARAS, K_DUP_PARA_CHARS, K_REP_LINES, K_DUP_LINES, K_DUP_LINE_CHARS,
 K_C4_SENT, K_C4_LOREM, K_C4_CURLY, K_C4_KEPT, K_FW_LINES, K_FW_PUNCT, K_FW_SHORT, K_FW_DUP_CHARS,
 K_CJK, K_HAN, K_WORDCHARS, K_ALPHA, K_DIGIT, K_SPECIAL, K_PUNCT, K_BAD, K_LATIN1, K_RARE_HAN) = range(len(COUNTS))

# Bits of the C4 switches (params[P_C4_FLAGS]).
C4_TERMINAL, C4_CITATIONS, C4_LOREM, C4_JAVASCRIPT, C4_CURLY, C4_POLICY = (1 << i for i in range(6))
# Layout of the int64 params vector.
P_CJK_WORDS, P_PARTS, P_SHORT_LINE, P_C4_MIN_WORDS, P_C4_MAX_WORD, P_C4_FLAGS = range(6)
# Parts of the pass (params[P_PARTS]); the stage asks only for what its enabled families read.
PART_TOKENS, PART_SPLITLINES, PART_REPLINES, PART_FWLINES, PART_NGRAMS = (1 << i for i in range(5))
ALL_PARTS = 0b11111

# Token flags.
T_SYMBOL, T_ALPHA, T_CJK = 1, 2, 4


# ----------------------------------------------------------------------------------------------------------------
# numba helpers: decoding, hashing, an open-addressing multiset
# ----------------------------------------------------------------------------------------------------------------

@njit(cache=True)
def _decode(data, start, end, cps):
    """UTF-8 bytes -> code points; an invalid or cut sequence yields U+FFFD per byte. Returns the count."""
    n = 0
    i = start
    while i < end:
        b0 = np.int64(data[i])
        cp = 0xFFFD
        ln = 1
        if b0 < 0x80:
            cp = b0
        elif 0xC2 <= b0 < 0xE0 and i + 1 < end and (data[i + 1] & 0xC0) == 0x80:
            cp = ((b0 & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F)
            ln = 2
        elif 0xE0 <= b0 < 0xF0 and i + 2 < end and (data[i + 1] & 0xC0) == 0x80 and (data[i + 2] & 0xC0) == 0x80:
            cp = ((b0 & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) | (np.int64(data[i + 2]) & 0x3F)
            ln = 3
            if cp < 0x800:
                cp, ln = 0xFFFD, 1
        elif 0xF0 <= b0 < 0xF5 and i + 3 < end and (data[i + 1] & 0xC0) == 0x80 \
                and (data[i + 2] & 0xC0) == 0x80 and (data[i + 3] & 0xC0) == 0x80:
            cp = ((b0 & 0x07) << 18) | ((np.int64(data[i + 1]) & 0x3F) << 12) \
                | ((np.int64(data[i + 2]) & 0x3F) << 6) | (np.int64(data[i + 3]) & 0x3F)
            ln = 4
            if cp < 0x10000 or cp > 0x10FFFF:
                cp, ln = 0xFFFD, 1
        cps[n] = cp
        n += 1
        i += ln
    return n


@njit(cache=True)
def _horner(cps, s, e, fold):
    h = np.uint64(0)
    for i in range(s, e):
        c = np.int64(cps[i])
        if fold and 65 <= c <= 90:
            c += 32
        h = addmod61(mulmod61(h, _B), np.uint64(c + 1))
    return h


@njit(cache=True)
def _key(h, length):
    """A 64-bit table key from a residue and a length (never 0: 0 marks an empty slot)."""
    k = fmix64(h ^ (np.uint64(length) * _LEN_MIX))
    return k | np.uint64(1)


@njit(cache=True)
def _table_size(n):
    """uint64 words of a table for n keys: a power of two of slots, at least 2n + 2, two words per slot."""
    cap = 16
    while cap < 2 * n + 2:
        cap *= 2
    return 2 * cap


@njit(cache=True)
def _table(ws, n):
    """An empty open-addressing table for n keys in the workspace `ws`, one cache line per probe: slot j holds
    tab[2j] = key (0: empty) and tab[2j+1] = count << 32 | first position."""
    tab = ws[:_table_size(n)]
    tab[:] = 0
    return tab


_SHIFT = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)
_COUNT1 = np.uint64(1) << _SHIFT


@njit(cache=True)
def _add(tab, key, pos):
    """Insert `key` (first seen at `pos`); returns (its count after the insert, its slot)."""
    mask = (tab.shape[0] >> 1) - 1
    j = np.int64(key & np.uint64(mask))
    while True:
        k = tab[2 * j]
        if k == key:
            tab[2 * j + 1] += _COUNT1
            return np.int64(tab[2 * j + 1] >> _SHIFT), j
        if k == 0:
            tab[2 * j] = key
            tab[2 * j + 1] = _COUNT1 | np.uint64(pos)
            return np.int64(1), j
        j = (j + 1) & mask


@njit(cache=True)
def _count_at(tab, j):
    return np.int64(tab[2 * j + 1] >> _SHIFT)


@njit(cache=True)
def _first_at(tab, j):
    return np.int64(tab[2 * j + 1] & _LOW32)


@njit(cache=True)
def _contains(tab, key):
    mask = (tab.shape[0] >> 1) - 1
    j = np.int64(key & np.uint64(mask))
    while True:
        k = tab[2 * j]
        if k == key:
            return True
        if k == 0:
            return False
        j = (j + 1) & mask


@njit(cache=True)
def _in_sorted(arr, h):
    if arr.shape[0] == 0:
        return False
    j = np.searchsorted(arr, h)
    return j < arr.shape[0] and arr[j] == h


# ----------------------------------------------------------------------------------------------------------------
# The word splitter (an imitation of spaCy's English tokenizer; see the module docstring)
# ----------------------------------------------------------------------------------------------------------------

@njit(cache=True)
def _lower(c):
    return c + 32 if 65 <= c <= 90 else c


@njit(cache=True)
def _is_apos(c):
    return c == 0x27 or c == 0x2019


@njit(cache=True)
def _contraction(cps, cls, s, e):
    """Length of a lowercase contraction ending [s, e) after a lowercase or Title-case stem of letters ("do|n't",
    "We|'re", "I|'m"), else 0. spaCy lists these per word; "DON'T" stays whole there, and here."""
    n = e - s
    k = 0
    if n > 3 and _is_apos(cps[e - 2]) and cps[e - 3] == 110 and cps[e - 1] == 116:
        k = 3  # n't
    elif n > 3 and _is_apos(cps[e - 3]) and ((cps[e - 2] == 108 and cps[e - 1] == 108)
                                             or (cps[e - 2] == 114 and cps[e - 1] == 101)
                                             or (cps[e - 2] == 118 and cps[e - 1] == 101)):
        k = 3  # 'll 're 've
    elif n > 2 and _is_apos(cps[e - 2]) and (cps[e - 1] == 100 or cps[e - 1] == 109):
        k = 2  # 'd 'm
    if k == 0:
        return 0
    for i in range(s, e - k):
        if not (cls[i] & C_ALPHA) or (i > s and (cls[i] & C_UPPER) and not (cls[i] & C_LOWER)):
            return 0
    return k


@njit(cache=True)
def _exception_lookup(cps, s, e, exc_h, exc_k):
    h = _horner(cps, s, e, False)
    j = np.searchsorted(exc_h, h)
    return exc_k[j] if (j < exc_h.shape[0] and exc_h[j] == h) else -1


@njit(cache=True)
def _exception(cps, cls, s, e, exc):
    """If spaCy keeps [s, e) as an exception: where it splits it (0: whole); -1 if it is no exception.
    `exc` = (sorted residues, split places, a filter on (length, first, last character) that skips most hashing).
    Called for every word, so the cheap tests are inlined and the rare ones are calls."""
    n = e - s
    if n <= 0:
        return -1
    last = cps[e - 1]
    if n == 2 and last == 46 and cps[s] < 128 and (cls[s] & C_ALPHA):
        return 0  # "a." ... "Z."
    if n <= 8 and exc[2][(n * 128 + min(cps[s], 127)) * 128 + min(last, 127)]:
        k = _exception_lookup(cps, s, e, exc[0], exc[1])
        if k >= 0:
            return k
    if n > 2 and (_is_apos(cps[e - 2]) or _is_apos(cps[e - 3])):
        k = _contraction(cps, cls, s, e)
        if k > 0:
            return n - k
    return -1


@njit(cache=True)
def _prefix_len(cps, cls, s, e):
    c = cps[s]
    if c == 46:  # ".." or more: one ellipsis token
        j = s
        while j < e and cps[j] == 46:
            j += 1
        return j - s if j - s >= 2 else 0
    if c == 43:  # "+" unless a digit follows
        return 0 if (s + 1 < e and (cls[s + 1] & C_ASCII_DIGIT)) else 1
    return 1 if (cls[s] & C_PREFIX) else 0


@njit(cache=True)
def _suffix_len(cps, cls, s, e, after_digit):
    """spaCy takes the suffix match that starts leftmost; each candidate ends at e."""
    best = 0
    c = cps[e - 1]
    if c == 46:
        j = e
        while j > s and cps[j - 1] == 46:
            j -= 1
        if e - j >= 2:
            best = e - j
        elif e - s >= 2:
            p = cps[e - 2]
            pc = cls[e - 2]
            if (pc & (C_ASCII_DIGIT | C_LOWER | C_QUOTE | C_SUFFIX)) or p == 37 or p == 178 or p == 45 or p == 43 \
                    or p == 124:
                best = 1
            elif e - s >= 3 and (pc & C_UPPER) and (cls[e - 3] & C_UPPER):
                best = 1
            elif e - s >= 3 and cps[e - 3] == 0xB0 and (p == 70 or p == 102 or p == 67 or p == 99 or p == 75
                                                         or p == 107):
                best = 1
    elif cls[e - 1] & C_SUFFIX:
        best = 1
        if c == 0x2026 and e - s >= 2 and cps[e - 2] == 0x2026:
            best = 2
    if e - s >= 2 and (c == 115 or c == 83) and _is_apos(cps[e - 2]):
        best = max(best, 2)  # 's
    # a unit / currency / "+" right after an ASCII digit
    j = e - 1
    while j >= s and not (cls[j] & C_ASCII_DIGIT) and e - j <= 5:
        j -= 1
    if j >= s and (cls[j] & C_ASCII_DIGIT) and j + 1 < e:
        if _in_sorted(after_digit, _horner(cps, j + 1, e, False)):
            best = max(best, e - j - 1)
    return best


@njit(cache=True)
def _hyphen_len(cps, i, e):
    """A hyphen infix at i: "-", "--", "---", "–", "—", "——", "~" (then a letter must follow)."""
    c = cps[i]
    if c == 45:
        j = i
        while j < e and cps[j] == 45 and j - i < 3:
            j += 1
        return j - i
    if c == 0x2014:
        return 2 if (i + 1 < e and cps[i + 1] == 0x2014) else 1
    if c == 0x2013 or c == 126:
        return 1
    return 0


@njit(cache=True)
def _infix_len(cps, cls, s, i, e):
    """Length of an infix match starting at i inside [s, e), 0 if none (spaCy's infix alternatives, in order)."""
    c = cps[i]
    if c == 46 and i + 1 < e and cps[i + 1] == 46:
        j = i
        while j < e and cps[j] == 46:
            j += 1
        return j - i
    if c == 0x2026 or (cls[i] & C_ICON):
        return 1
    if i == s or i + 1 >= e:
        return 0
    pc, nc = cls[i - 1], cls[i + 1]
    if (pc & C_ASCII_DIGIT) and (c == 43 or c == 45 or c == 42 or c == 94) \
            and ((nc & C_ASCII_DIGIT) or cps[i + 1] == 45):
        return 1
    if c == 46 and (pc & (C_LOWER | C_QUOTE)) and (nc & (C_UPPER | C_QUOTE)):
        return 1
    if c == 44 and (pc & C_SP_ALPHA) and (nc & C_SP_ALPHA):
        return 1
    if pc & (C_SP_ALPHA | C_ASCII_DIGIT):
        h = _hyphen_len(cps, i, e)
        while h > 0:
            if i + h < e and (cls[i + h] & C_SP_ALPHA):
                return h
            h -= 1 if c == 45 else h
    if (pc & (C_SP_ALPHA | C_ASCII_DIGIT)) and (c == 58 or c == 60 or c == 62 or c == 61 or c == 47) \
            and (nc & C_SP_ALPHA):
        return 1
    return 0


@njit(cache=True)
def _host_char(c):
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122) or (0xA1 <= c <= 0xFFFF)


@njit(cache=True)
def _is_url(cps, cls, s, e):
    """spaCy's URL pattern, without IP addresses and user names: [scheme://](label.)+tld[:port][/?#path].

    A label is host characters (ASCII letters and digits, anything from U+00A1 to U+FFFF) with "_" "-" inside;
    the tld is 2 to 63 lowercase (or caseless) letters. CJK text with a "." in it matches too, as in spaCy.
    """
    dot = False
    for p in range(s, e):
        if cps[p] == 46:
            dot = True
            break
    if not dot:  # every URL has a dot in its host
        return False
    i = s
    for p in range(s, e - 2):
        if cps[p] == 58 and cps[p + 1] == 47 and cps[p + 2] == 47:
            if p - s < 2:
                return False
            for q in range(s, p):  # the scheme: [\w+\-.]{2,}
                if not ((cls[q] & (C_ALPHA | C_DIGIT)) or cps[q] == 95 or cps[q] == 43 or cps[q] == 45
                        or cps[q] == 46):
                    return False
            i = p + 3
            break
    h = i
    while h < e and (_host_char(cps[h]) or cps[h] == 95 or cps[h] == 45 or cps[h] == 46):
        h += 1
    # labels and the tld
    dots = 0
    seg = i
    for k in range(i, h + 1):
        if k == h or cps[k] == 46:
            n = k - seg
            if n == 0:
                return False
            if k == h:  # the tld
                if n < 2 or n > 63:
                    return False
                for q in range(seg, k):
                    if not (cls[q] & C_LOWER) or cps[q] < 0x41:
                        return False
            elif n > 64 or not _host_char(cps[seg]) or not _host_char(cps[k - 1]):
                return False
            else:
                dots += 1
            seg = k + 1
    if dots == 0:
        return False
    if h == e or cps[h] == 47 or cps[h] == 63 or cps[h] == 35:
        return True
    if cps[h] == 58:
        d = h + 1
        while d < e and (cls[d] & C_ASCII_DIGIT) and d - h <= 6:
            d += 1
        return 2 <= d - h - 1 <= 5 and (d == e or cps[d] == 47 or cps[d] == 63 or cps[d] == 35)
    return False


@njit(cache=True)
def _emit(tok_s, tok_e, nt, s, e):
    tok_s[nt] = s
    tok_e[nt] = e
    return nt + 1


@njit(cache=True)
def _attach(cps, cls, s, e, k, tok_s, tok_e, nt):
    """Emit the core [s, e) left after affixes: an exception as listed (k: where it splits, 0 whole, -1 none),
    a URL whole, else split at infixes."""
    if k > 0:
        nt = _emit(tok_s, tok_e, nt, s, s + k)
        return _emit(tok_s, tok_e, nt, s + k, e)
    if k == 0 or _is_url(cps, cls, s, e):
        return _emit(tok_s, tok_e, nt, s, e)
    start = s
    i = s
    while i < e:
        m = _infix_len(cps, cls, s, i, e) if (cls[i] & C_INFIX) else 0
        if m == 0 or i == s:  # spaCy ignores an infix at the very start
            i += m if m > 0 else 1
            continue
        if i != start:
            nt = _emit(tok_s, tok_e, nt, start, i)
        nt = _emit(tok_s, tok_e, nt, i, i + m)
        start = i + m
        i += m
    if start < e:
        nt = _emit(tok_s, tok_e, nt, start, e)
    return nt


@njit(cache=True)
def _merge_exceptions(cps, cls, exc, tok_s, tok_e, nt0, nt):
    """spaCy re-merges two adjacent tokens that spell an exception: "R-Wash." -> "R" "-" "Wash." (not "Wash" ".")."""
    w = nt0
    k = nt0
    while k < nt:
        if k + 1 < nt and tok_e[k + 1] - tok_s[k] <= 8 \
                and _exception(cps, cls, tok_s[k], tok_e[k + 1], exc) == 0:
            tok_s[w], tok_e[w] = tok_s[k], tok_e[k + 1]
            k += 2
        else:
            tok_s[w], tok_e[w] = tok_s[k], tok_e[k]
            k += 1
        w += 1
    return w


@njit(cache=True)
def _split_word(cps, cls, s, e, exc, after_digit, tok_s, tok_e, nt, stk_s, stk_e):
    """Tokens of one whitespace-free chunk [s, e): prefixes, the core, suffixes (spaCy's affix loop: one prefix
    and one suffix per round, stopping at an exception)."""
    nt0 = nt
    ns = 0
    k = _exception(cps, cls, s, e, exc)
    while k < 0 and s < e:
        pre = _prefix_len(cps, cls, s, e)
        if pre > 0 and s + pre < e:
            k = _exception(cps, cls, s + pre, e, exc)
            if k >= 0:
                nt = _emit(tok_s, tok_e, nt, s, s + pre)
                s += pre
                break
        suf = _suffix_len(cps, cls, s + pre, e, after_digit) if s + pre < e else 0
        if suf > 0 and s < e - suf:
            k = _exception(cps, cls, s, e - suf, exc)
            if k >= 0:
                stk_s[ns], stk_e[ns] = e - suf, e
                ns += 1
                e -= suf
                break
        if pre == 0 and suf == 0:
            break
        if pre > 0:
            nt = _emit(tok_s, tok_e, nt, s, s + pre)
            s += pre
        if suf > 0:
            stk_s[ns], stk_e[ns] = e - suf, e
            ns += 1
            e -= suf
        k = _exception(cps, cls, s, e, exc)
    if s < e:
        nt = _attach(cps, cls, s, e, k, tok_s, tok_e, nt)
    for q in range(ns - 1, -1, -1):
        nt = _emit(tok_s, tok_e, nt, stk_s[q], stk_e[q])
    if nt - nt0 > 1:
        nt = _merge_exceptions(cps, cls, exc, tok_s, tok_e, nt0, nt)
    return nt


@njit(cache=True)
def _tokenize(cps, cls, lo, n, cjk_words, exc, after_digit, tok_s, tok_e, stk_s, stk_e):
    """The tokens of cps[lo:n], in order, as code point spans. Returns their count."""
    nt = 0
    i = lo
    while i < n:
        if cls[i] & C_SPACE:
            i += 1
            continue
        j = i
        while j < n and not (cls[j] & C_SPACE):
            j += 1
        if cjk_words:
            k = i
            while k < j:
                if cls[k] & C_CJK:
                    nt = _emit(tok_s, tok_e, nt, k, k + 1)
                    k += 1
                else:
                    m = k
                    while m < j and not (cls[m] & C_CJK):
                        m += 1
                    nt = _split_word(cps, cls, k, m, exc, after_digit, tok_s, tok_e, nt, stk_s, stk_e)
                    k = m
        else:
            nt = _split_word(cps, cls, i, j, exc, after_digit, tok_s, tok_e, nt, stk_s, stk_e)
        i = j
    return nt


# ----------------------------------------------------------------------------------------------------------------
# Per-document passes
# ----------------------------------------------------------------------------------------------------------------

@njit(cache=True)
def _char_counts(cls, n, out):
    for i in range(n):
        c = cls[i]
        if not (c & C_SPACE):
            out[K_NONSPACE] += 1
            if not (c & (C_ALPHA | C_DIGIT)):
                out[K_SPECIAL] += 1
        if c & C_CJK:
            out[K_CJK] += 1
        if c & C_HAN:
            out[K_HAN] += 1
            if not (c & C_COMMON_HAN):
                out[K_RARE_HAN] += 1
        if c & C_WORDCHAR:
            out[K_WORDCHARS] += 1
        if c & C_ALPHA:
            out[K_ALPHA] += 1
        if c & C_DIGIT:
            out[K_DIGIT] += 1
        if c & C_PUNCT:
            out[K_PUNCT] += 1
        if c & C_BAD:
            out[K_BAD] += 1
        if (c & C_LATIN1) and not (c & C_SPACE):
            out[K_LATIN1] += 1


@njit(cache=True)
def _token_stats(cps, cls, tok_s, tok_e, nt, cjk_words, gopher_stop, en_stop, tok_h, tok_len, tok_flags, ws, out):
    """Per token: hash, length, flags; per document: word counts, stop words, distinct words."""
    tab = _table(ws, nt)
    stop_mask = 0
    for t in range(nt):
        s, e = tok_s[t], tok_e[t]
        flags = T_SYMBOL
        upper = False
        for i in range(s, e):
            c = cls[i]
            if 65 <= cps[i] <= 90:
                upper = True
            if not (c & C_SYMBOL):
                flags &= ~T_SYMBOL
            if c & C_ALPHA:
                flags |= T_ALPHA
        if cjk_words and e - s == 1 and (cls[s] & C_CJK):
            flags |= T_CJK
        h = _horner(cps, s, e, False)
        tok_h[t] = h
        tok_len[t] = e - s
        tok_flags[t] = flags
        if flags & T_ALPHA:
            out[K_ALPHA_TOKENS] += 1
        if e - s <= 4:
            for k in range(gopher_stop.shape[0]):
                if gopher_stop[k] == h:
                    stop_mask |= 1 << k
        if not (flags & T_SYMBOL):
            out[K_WORDS] += 1
            out[K_WORDS_CHARS] += e - s
            if not (flags & T_CJK):
                out[K_WORDS_NONCJK] += 1
                out[K_WORDS_NONCJK_CHARS] += e - s
            hf = _horner(cps, s, e, True) if upper else h
            if _add(tab, _key(hf, e - s), t)[0] == 1:
                out[K_UNIQUE] += 1
            if _in_sorted(en_stop, hf):
                out[K_EN_STOP] += 1
    out[K_TOKENS] = nt
    g = 0
    while stop_mask:
        g += stop_mask & 1
        stop_mask >>= 1
    out[K_GOPHER_STOP] = g


@njit(cache=True)
def _count_dups(cps, starts, ends, m, ws, out, k_dups, k_chars):
    """datatrove's find_duplicates: an element seen before is a duplicate; its characters count."""
    tab = _table(ws, m)
    for q in range(m):
        s, e = starts[q], ends[q]
        if _add(tab, _key(_horner(cps, s, e, False), e - s), q)[0] > 1:
            out[k_dups] += 1
            out[k_chars] += e - s


@njit(cache=True)
def _repetition(cps, cls, n, ps, pe, ws, out):
    """Gopher's duplicate paragraphs (text.strip() split on 2+ newlines) and lines (split on 1+ newlines)."""
    a, b = 0, n
    while a < b and (cls[a] & C_SPACE):
        a += 1
    while b > a and (cls[b - 1] & C_SPACE):
        b -= 1
    m = 0
    s = a
    i = a
    while i < b:
        if cps[i] == 10:
            j = i
            while j < b and cps[j] == 10:
                j += 1
            if j - i >= 2:
                ps[m], pe[m] = s, i
                m += 1
                s = j
            i = j
        else:
            i += 1
    ps[m], pe[m] = s, b
    m += 1
    out[K_PARAS] = m
    _count_dups(cps, ps, pe, m, ws, out, K_DUP_PARAS, K_DUP_PARA_CHARS)
    m = 0
    s = 0
    i = 0
    while i < n:
        if cps[i] == 10:
            ps[m], pe[m] = s, i
            m += 1
            while i < n and cps[i] == 10:
                i += 1
            s = i
        else:
            i += 1
    ps[m], pe[m] = s, n
    m += 1
    out[K_REP_LINES] = m
    _count_dups(cps, ps, pe, m, ws, out, K_DUP_LINES, K_DUP_LINE_CHARS)


@njit(cache=True)
def _fineweb_lines(cps, cls, n, short_len, ps, pe, ws, out):
    """FineWeb: text.split("\\n") without blank lines; line endings as they are (no rstrip)."""
    m = 0
    s = 0
    for i in range(n + 1):
        if i == n or cps[i] == 10:
            if i < n:
                out[K_NEWLINES] += 1
            blank = True
            for k in range(s, i):
                if not (cls[k] & C_SPACE):
                    blank = False
                    break
            if not blank:
                ps[m], pe[m] = s, i
                m += 1
                if cls[i - 1] & C_TERM:
                    out[K_FW_PUNCT] += 1
                if i - s <= short_len:
                    out[K_FW_SHORT] += 1
            s = i + 1
    out[K_FW_LINES] = m
    tab = _table(ws, m)
    for q in range(m):
        if _add(tab, _key(_horner(cps, ps[q], pe[q], False), pe[q] - ps[q]), q)[0] > 1:
            out[K_FW_DUP_CHARS] += pe[q] - ps[q]


@njit(cache=True)
def _contains_at(cps, s, e, pat, ps_, pe_):
    """Does the ASCII-lowercased line [s, e) contain pattern pat[ps_:pe_]?"""
    m = pe_ - ps_
    for i in range(s, e - m + 1):
        ok = True
        for k in range(m):
            if _lower(cps[i + k]) != pat[ps_ + k]:
                ok = False
                break
        if ok:
            return True
    return False


_CITE_EDIT = np.array([ord(c) for c in "[edit]"], np.int32)
_CITE_NEEDED = np.array([ord(c) for c in "[citation needed]"], np.int32)


@njit(cache=True)
def _ends_with(cps, s, e, word):
    m = word.shape[0]
    if e - s < m:
        return False
    for k in range(m):
        if cps[e - m + k] != word[k]:
            return False
    return True


@njit(cache=True)
def _trailing_citations(cps, cls, s, e):
    """End of the line once citations ("[12]", "[]", "[edit]", "[citation needed]") are removed from its end."""
    while e > s and cps[e - 1] == 93:  # "]"
        j = e - 2
        while j >= s and (cls[j] & C_DIGIT):
            j -= 1
        if j >= s and cps[j] == 91:
            e = j
            continue
        if _ends_with(cps, s, e, _CITE_EDIT):
            e -= _CITE_EDIT.shape[0]
        elif _ends_with(cps, s, e, _CITE_NEEDED):
            e -= _CITE_NEEDED.shape[0]
        else:
            break
    return e


@njit(cache=True)
def _sentences(cls, tok_s, tok_e, t0, t1):
    """spaCy's sentencizer on one line's tokens: a sentence starts at the first token after a sentence-final one
    (a single terminal mark) that is neither punctuation-only (P*) nor sentence-final itself."""
    if t1 <= t0:
        return 0
    count = 1
    seen = False
    for t in range(t0, t1):
        s, e = tok_s[t], tok_e[t]
        end = e - s == 1 and (cls[s] & C_TERM) != 0
        punct = True
        for i in range(s, e):
            if not (cls[i] & C_PUNCT):
                punct = False
                break
        if seen and not punct and not end:
            count += 1
            seen = False
        elif end:
            seen = True
    return count


@njit(cache=True)
def _lines_c4_gopher(cps, cls, n, tok_s, tok_e, nt, params, pat, pat_off, exc, after_digit, stk_s, stk_e, out):
    """str.splitlines() lines: Gopher's bullet / ellipsis lines, and C4's line filter and sentence count.

    Sentences are counted on the document's tokens (nt >= 0) or, when the pass made none (nt < 0, C4 without a
    word-based family), on a tokenization of just the lines C4 counts, in tok_s/tok_e (tokens never cross lines)."""
    min_words = params[P_C4_MIN_WORDS]
    max_word = params[P_C4_MAX_WORD]
    flags = params[P_C4_FLAGS]
    c4_done = False
    t = 0
    i = 0
    while i < n:
        j = i
        while j < n and not (cls[j] & C_LINEBREAK):
            j += 1
        nxt = j + 1
        if j < n and cps[j] == 13 and j + 1 < n and cps[j + 1] == 10:
            nxt = j + 2
        out[K_LINES] += 1
        a, b = i, j
        while a < b and (cls[a] & C_SPACE):
            a += 1
        while b > a and (cls[b - 1] & C_SPACE):
            b -= 1
        if b > a and (cps[a] == 0x2022 or cps[a] == 45):
            out[K_BULLET] += 1
        if b > a and (cps[b - 1] == 0x2026 or (b - a >= 3 and cps[b - 1] == 46 and cps[b - 2] == 46
                                               and cps[b - 3] == 46)):
            out[K_ELLIPSIS_LINES] += 1
        if not c4_done:
            status = _c4_line(cps, cls, a, b, min_words, max_word, flags, pat, pat_off, out)
            c4_done = status == 2
            if status == 1:
                if nt >= 0:
                    while t < nt and tok_s[t] < a:
                        t += 1
                    t0 = t
                    while t < nt and tok_s[t] < b:
                        t += 1
                    out[K_C4_SENT] += _sentences(cls, tok_s, tok_e, t0, t)
                else:
                    m = _tokenize(cps, cls, a, b, params[P_CJK_WORDS] != 0, exc, after_digit, tok_s, tok_e,
                                  stk_s, stk_e)
                    out[K_C4_SENT] += _sentences(cls, tok_s, tok_e, 0, m)
        i = nxt


@njit(cache=True)
def _c4_line(cps, cls, a, b, min_words, max_word, flags, pat, pat_off, out):
    """datatrove's C4QualityFilter on one stripped line [a, b): 0 the line does not count, 1 it counts (its
    sentences are added by the caller), 2 it drops the document (lorem ipsum, curly bracket)."""
    words = 0
    longest = 0
    i = a
    while i < b:
        if cls[i] & C_SPACE:
            i += 1
            continue
        j = i
        while j < b and not (cls[j] & C_SPACE):
            j += 1
        words += 1
        longest = max(longest, j - i)
        i = j
    if max_word >= 0 and longest > max_word:
        return 0
    e = _trailing_citations(cps, cls, a, b) if (flags & C4_CITATIONS) else b
    if flags & C4_TERMINAL:
        if e <= a:
            return 0
        c = cps[e - 1]
        if not (c == 46 or c == 63 or c == 33 or c == 34 or c == 39):
            return 0
        if e - a >= 3 and cps[e - 1] == 46 and cps[e - 2] == 46 and cps[e - 3] == 46:
            return 0
    if words < min_words:
        return 0
    if (flags & C4_LOREM) and _contains_at(cps, a, b, pat, pat_off[0], pat_off[1]):
        out[K_C4_LOREM] = 1
        return 2
    if (flags & C4_JAVASCRIPT) and _contains_at(cps, a, b, pat, pat_off[1], pat_off[2]):
        return 0
    if flags & C4_CURLY:
        for k in range(a, b):
            if cps[k] == 123:
                out[K_C4_CURLY] = 1
                return 2
    if flags & C4_POLICY:
        for q in range(2, pat_off.shape[0] - 1):
            if _contains_at(cps, a, b, pat, pat_off[q], pat_off[q + 1]):
                return 0
    out[K_C4_KEPT] += 1
    return 1


@njit(cache=True)
def _top_ngrams(tok_h, tok_len, tok_flags, nt, cum, top_ns, top_out, gaps, pt, slots, multi, ws):
    """datatrove's find_top_duplicate for each n: the most frequent n-gram (ties: the one seen first) times its
    length as " ".join(words); no space is counted between two CJK-character words (the text has none).

    n-grams are word tuples (a prefix hash over word keys). Only an n-gram whose (n-1)-gram prefix repeats can
    repeat, so after the smallest n only those windows are counted; when none repeats the answer is the first
    window (count 1)."""
    gaps[0] = 0
    pt[0] = 0
    for t in range(nt):
        gap = 1
        if t + 1 < nt and (tok_flags[t] & T_CJK) and (tok_flags[t + 1] & T_CJK):
            gap = 0
        gaps[t + 1] = gaps[t] + gap
        pt[t + 1] = addmod61(mulmod61(pt[t], _C), _key(tok_h[t], tok_len[t]) % np.uint64(P61))
    tab = _table(ws, nt)
    multi[:nt] = True
    prev = -1
    for q in range(top_ns.shape[0]):
        n = top_ns[q]
        if nt < n:
            top_out[q] = -1
            continue
        if prev < 0 or n <= prev:
            multi[:] = True
        tab[:] = 0
        cn = np.uint64(1)
        for _ in range(n):
            cn = mulmod61(cn, _C)
        best_c, best_i = 1, 0
        for i in range(nt - n + 1):
            slots[i] = -1
            if not multi[i]:
                continue
            h = (pt[i + n] + np.uint64(P61) - mulmod61(pt[i], cn)) % np.uint64(P61)
            c, j = _add(tab, _key(h, n), i)
            slots[i] = j
            f = _first_at(tab, j)
            if c > best_c or (c == best_c and f < best_i):
                best_c, best_i = c, f
        top_out[q] = best_c * (cum[best_i + n] - cum[best_i] + gaps[best_i + n - 1] - gaps[best_i])
        for i in range(nt):
            multi[i] = i <= nt - n and slots[i] >= 0 and _count_at(tab, slots[i]) >= 2
        prev = n


@njit(cache=True)
def _sub_hash(pre, pw_len, a, b):
    """Residue of the substring [a, b) from prefix residues: pre[b] - pre[a] * B^(b-a) mod p."""
    return (pre[b] + np.uint64(P61) - mulmod61(pre[a], pw_len)) % np.uint64(P61)


@njit(cache=True)
def _dup_ngrams(cps, cls, n_cp, nt, cum, dup_ns, dup_out, pre, pw, slots, multi, ws):
    """datatrove's find_all_duplicate for each n: walk the words; an n-gram ("".join of its words) seen before adds
    its characters and jumps n words ahead (the windows jumped over are not recorded); else it is recorded.

    Words cover every non-space character in order, so an n-gram is the substring [cum[i], cum[i+n]) of the text
    without whitespace, hashed from prefix residues. Two equal n-grams start with the same Q = min(n) characters,
    so only windows whose first Q characters occur at another word start are looked up at all (the others can
    neither repeat nor be repeated); the walk is otherwise unchanged, hence exact."""
    dup_out[:] = 0
    qn = dup_ns.min()
    last = nt - qn  # windows start at 0 .. nt - n <= last
    if last < 0:
        return
    pre[0] = 0  # prefix residues of the text without whitespace
    m = 0
    for i in range(n_cp):
        if not (cls[i] & C_SPACE):
            pre[m + 1] = addmod61(mulmod61(pre[m], _B), np.uint64(cps[i] + 1))
            m += 1
    bq = np.uint64(1)
    for _ in range(qn):
        bq = mulmod61(bq, _B)
    tab = _table(ws, last + 1)
    for i in range(last + 1):
        slots[i] = _add(tab, _key(_sub_hash(pre, bq, cum[i], cum[i] + qn), qn), i)[1]
    any_multi = False
    for i in range(last + 1):
        multi[i] = _count_at(tab, slots[i]) >= 2
        any_multi |= multi[i]
    if not any_multi:
        return
    pw[0] = 1
    for k in range(m):
        pw[k + 1] = mulmod61(pw[k], _B)
    for q in range(dup_ns.shape[0]):
        n = dup_ns[q]
        tab[:] = 0
        rep = 0
        i = 0
        while i <= nt - n:
            if not multi[i]:
                i += 1
                continue
            L = cum[i + n] - cum[i]
            key = _key(_sub_hash(pre, pw[L], cum[i], cum[i + n]), L)
            if _contains(tab, key):
                rep += L
                i += n
            else:
                _add(tab, key, i)
                i += 1
        dup_out[q] = rep


@njit(cache=True)
def _workspace(cap):
    """Scratch arrays for documents of up to `cap` code points, reused from one document to the next within a
    thread (allocating them per document keeps the threads waiting on the allocator)."""
    i32 = np.empty(cap, np.int32)
    u32 = np.empty(cap, np.uint32)
    i64 = np.empty((7, cap + 1), np.int64)     # token bounds, stack / piece bounds, token lengths, flags, slots
    u64 = np.empty((3, cap + 1), np.uint64)    # token hashes, prefix residues, powers
    multi = np.empty(cap + 1, np.bool_)
    tab = np.empty(_table_size(cap + 1), np.uint64)
    return i32, u32, i64, u64, multi, tab


@njit(cache=True)
def _ngrams(cps, cls, n_cp, tok_h, tok_len, tok_flags, nt, top_ns, dup_ns, top_out, dup_out, ws):
    _, _, i64, u64, multi, tab = ws
    cum, gaps, slots = i64[2], i64[3], i64[6]  # the stack / piece bounds are free by now
    cum[0] = 0
    for t in range(nt):
        cum[t + 1] = cum[t] + tok_len[t]
    _top_ngrams(tok_h, tok_len, tok_flags, nt, cum, top_ns, top_out, gaps, u64[1], slots, multi, tab)
    _dup_ngrams(cps, cls, n_cp, nt, cum, dup_ns, dup_out, u64[1], u64[2], slots, multi, tab)


@njit(cache=True)
def _doc(data, start, end, table, params, exc, after_digit, gopher_stop, en_stop, pat, pat_off,
         top_ns, dup_ns, out, top_out, dup_out, ws):
    """Every count of one document (bytes data[start:end]) into out / top_out / dup_out; `ws` is big enough."""
    cps, cls, i64, u64, _, tab = ws
    tok_s, tok_e, stk_s, stk_e, tok_len, tok_flags = i64[0], i64[1], i64[2], i64[3], i64[4], i64[5]
    parts = params[P_PARTS]
    n = _decode(data, start, end, cps)
    for i in range(n):
        cls[i] = table[cps[i]]
    out[K_CHARS] = n
    _char_counts(cls, n, out)
    cjk_words = params[P_CJK_WORDS] != 0
    nt = -1
    if parts & PART_TOKENS:
        nt = _tokenize(cps, cls, 0, n, cjk_words, exc, after_digit, tok_s, tok_e, stk_s, stk_e)
        _token_stats(cps, cls, tok_s, tok_e, nt, cjk_words, gopher_stop, en_stop, u64[0], tok_len, tok_flags,
                     tab, out)
    if parts & PART_SPLITLINES:
        _lines_c4_gopher(cps, cls, n, tok_s, tok_e, nt, params, pat, pat_off, exc, after_digit, stk_s, stk_e, out)
    # stk_* are free again: reuse them as piece bounds
    if parts & PART_REPLINES:
        _repetition(cps, cls, n, stk_s, stk_e, tab, out)
    if parts & PART_FWLINES:
        _fineweb_lines(cps, cls, n, params[P_SHORT_LINE], stk_s, stk_e, tab, out)
    if nt >= 0 and parts & PART_NGRAMS:  # last: it reuses the stack / piece bounds
        _ngrams(cps, cls, n, u64[0], tok_len, tok_flags, nt, top_ns, dup_ns, top_out, dup_out, ws)


@njit(cache=True, parallel=True)
def _all_docs(data, offsets, order, n_slots, table, params, exc, after_digit, gopher_stop, en_stop, pat, pat_off,
              top_ns, dup_ns, out, top_out, dup_out):
    """Documents in `order` (largest first) dealt round-robin to n_slots threads, each with its own workspace,
    sized by its first (largest) document."""
    for slot in prange(n_slots):
        ws = _workspace(0)
        cap = 0
        for k in range(slot, order.shape[0], n_slots):
            d = order[k]
            size = offsets[d + 1] - offsets[d]
            if size > cap:
                cap = max(size, 2 * cap)
                ws = _workspace(cap)
            _doc(data, offsets[d], offsets[d + 1], table, params, exc, after_digit, gopher_stop, en_stop, pat,
                 pat_off, top_ns, dup_ns, out[d], top_out[d], dup_out[d], ws)


@functools.lru_cache(maxsize=1)
def _word_lists():
    pats = [np.array([ord(c) for c in p], np.int32) for p in C4_PATTERNS]
    pat_off = np.cumsum([0] + [len(p) for p in pats]).astype(np.int64)
    return (_exception_table(), hash_set(AFTER_DIGIT),
            np.array([py_hash(w) for w in GOPHER_STOP_WORDS], np.uint64),
            np.array(sorted({py_hash(w, fold=True) for w in EN_STOP_WORDS}), np.uint64),
            np.concatenate(pats), pat_off)


def quality_counts(data: np.ndarray, offsets: np.ndarray, *, cjk_words: bool = True, parts: int = ALL_PARTS,
                   top_ns=(2, 3, 4), dup_ns=(5, 6, 7, 8, 9, 10), short_line_length: int = 30,
                   c4_min_words_per_line: int = 3, c4_max_word_length: int = 1000,
                   c4_flags: int = 0b111111) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counts of every document of Arrow buffers (data uint8, offsets n+1).

    `parts` (PART_* bits) selects the work: words and their counts, splitlines lines (Gopher bullets, C4),
    repetition lines and paragraphs, FineWeb lines, n-grams (needs words). Counts of parts not asked stay 0;
    character counts are always made.

    Returns (counts, top, dup): counts float64 (n, len(COUNTS)) in COUNTS order; top (n, len(top_ns)) the
    characters of the top n-gram (-1 when the document has fewer than n words); dup (n, len(dup_ns)) the
    characters in duplicated n-grams. Documents run in parallel over numba's threads, largest first; each thread
    keeps one scratch workspace of about 150 bytes per byte of its largest document.
    """
    offsets = np.ascontiguousarray(offsets).astype(np.int64, copy=False)
    n_docs = offsets.shape[0] - 1
    top_ns = np.asarray(top_ns, np.int64)
    dup_ns = np.asarray(dup_ns, np.int64)
    out = np.zeros((n_docs, len(COUNTS)), np.int64)
    top = np.zeros((n_docs, top_ns.shape[0]), np.int64)
    dup = np.zeros((n_docs, dup_ns.shape[0]), np.int64)
    if n_docs == 0:
        return out.astype(np.float64), top, dup
    params = np.array([int(cjk_words), parts, short_line_length, c4_min_words_per_line, c4_max_word_length,
                       c4_flags], np.int64)
    order = np.argsort(-np.diff(offsets), kind="stable")  # big documents first: threads end together
    slots = max(1, min(numba.get_num_threads(), n_docs))
    _all_docs(np.ascontiguousarray(data), offsets, order, slots, char_table(), params, *_word_lists(),
              top_ns, dup_ns, out, top, dup)
    return out.astype(np.float64), top, dup


@njit(cache=True)
def _tokens_one(cps, table, cjk_words, exc, after_digit):
    n = cps.shape[0]
    cls = np.empty(n, np.uint32)
    for i in range(n):
        cls[i] = table[cps[i]]
    tok_s = np.empty(n + 1, np.int64)
    tok_e = np.empty(n + 1, np.int64)
    stk_s = np.empty(n + 1, np.int64)
    stk_e = np.empty(n + 1, np.int64)
    nt = _tokenize(cps, cls, 0, n, cjk_words, exc, after_digit, tok_s, tok_e, stk_s, stk_e)
    return tok_s[:nt].copy(), tok_e[:nt].copy()


def tokens(text: str, cjk_words: bool = True) -> list[str]:
    """The kernel's words of one text (for inspection and tests; the stage never calls this per document)."""
    cps = np.array([ord(c) for c in text], np.int32)
    s, e = _tokens_one(cps, char_table(), cjk_words, *_word_lists()[:2])
    return [text[a:b] for a, b in zip(s, e)]
