"""kernels/script_class.py: the CJK classes against Unicode's Script property (the regex module, RE2 in pyarrow),
each form (regexes for RE2 and Python, numpy mask, the numba twin) against the ranges, and the stations and
kernels that read them."""

import re
import unicodedata

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import regex

from gpupipe.kernels import script_class as sc

ALL = np.array([c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF])   # every code point a str can hold
TEXT = "".join(map(chr, ALL.tolist()))


def _python_mask(pattern: str, module=re) -> np.ndarray:
    m = np.zeros(0x110000, bool)
    for hit in module.finditer(pattern, TEXT):
        m[ALL[hit.start()]] = True
    return m


def _re2_mask(pattern: str) -> np.ndarray:
    m = np.zeros(0x110000, bool)
    m[ALL] = pc.match_substring_regex(pa.array(map(chr, ALL.tolist()), pa.string()), pattern).to_numpy(
        zero_copy_only=False)
    return m


@pytest.fixture(scope="module")
def assigned() -> np.ndarray:
    """Code points Python's Unicode database assigns."""
    return np.array([unicodedata.category(chr(c)) != "Cn" for c in range(0x110000)])


def _regex_knows_unicode_17() -> bool:
    """The regex module's tables are its own: an older release (a GPU machine's image) knows an older Unicode, and
    the classes, frozen at 17.0, then hold characters it calls unassigned. Probe: U+323B0, CJK Extension J's first
    character, Han since 17.0."""
    return regex.match(r"\p{Script=Han}", "\U000323B0") is not None


needs_regex_17 = pytest.mark.skipif(not _regex_knows_unicode_17(),
                                    reason=f"the regex module {regex.__version__} knows a Unicode older than 17.0")

SCRIPTS = {"HAN": r"\p{Script=Han}", "KANA": r"[\p{Script=Hiragana}\p{Script=Katakana}]",
           "HANGUL": r"\p{Script=Hangul}"}


@needs_regex_17
@pytest.mark.parametrize("name", SCRIPTS)
def test_classes_are_unicodes_script_property(name, assigned):
    """Frozen at Unicode 17.0: every character in is of the script (the regex module), and every character of the
    script that Python's Unicode database knows is in."""
    ours, theirs = sc.ranges_mask(sc.CLASSES[name]), _python_mask(SCRIPTS[name], regex)
    assert not (ours & ~theirs).any()
    if tuple(map(int, unicodedata.unidata_version.split("."))) <= (17, 0, 0):   # else the classes are older
        missing = np.flatnonzero(theirs & ~ours & assigned)
        assert not len(missing), [hex(c) for c in missing[:10]]


@needs_regex_17
@pytest.mark.parametrize("name, pattern", [("HAN", r"\p{Han}"), ("KANA", r"[\p{Hiragana}\p{Katakana}]"),
                                           ("HANGUL", r"\p{Hangul}")])
def test_re2_scripts_are_inside_and_the_rest_is_newer_unicode(name, pattern):
    """RE2's \\p{Han} (Arrow's build, an older Unicode) is inside the class; what the class adds is characters the
    newer Unicode assigned to the script (the regex module says so), never something else."""
    ours, re2 = sc.ranges_mask(sc.CLASSES[name]), _re2_mask(pattern)
    assert not (re2 & ~ours).any()
    assert not (ours & ~re2 & ~_python_mask(SCRIPTS[name], regex)).any()


def test_unions():
    assert sc.CJK == sc.union(sc.HAN, sc.KANA, sc.HANGUL) and sc.HAN_KANA == sc.union(sc.KANA, sc.HAN)
    m = sc.ranges_mask
    assert (m(sc.CJK) == (m(sc.HAN) | m(sc.KANA) | m(sc.HANGUL))).all()
    assert not (m(sc.HAN) & m(sc.KANA)).any() and not (m(sc.HAN_KANA) & m(sc.HANGUL)).any()
    assert sc.union(((5, 9), (1, 3)), ((4, 4), (20, 30), (25, 26))) == ((1, 9), (20, 30))
    for ch, inside in (("中", "HAN"), ("々", "HAN"), ("〇", "HAN"), ("あ", "KANA"), ("ｱ", "KANA"), ("한", "HANGUL"),
                       ("ᄀ", "HANGUL"), ("𠀀", "HAN"), ("𰀀", "HAN")):
        assert [n for n in ("HAN", "KANA", "HANGUL") if sc.in_class(ord(ch), sc.CLASSES[n])] == [inside], ch
    for ch in "aé。、「」ー・ㄅ，Ａ1 \U00040000":   # Common (and Bopomofo) characters are in none
        assert not sc.in_class(ord(ch), sc.CJK), ch


@pytest.mark.parametrize("name", sc.CLASSES)
def test_regex_forms_match_the_ranges(name):
    ranges = sc.CLASSES[name]
    want = sc.ranges_mask(ranges)
    assert (_re2_mask(sc.regex_class(ranges)) == want).all()
    assert (_python_mask(sc.regex_class(ranges, "python")) == want).all()
    assert (_python_mask(sc.regex_class(ranges, "python"), regex) == want).all()
    with pytest.raises(ValueError):
        sc.class_body(ranges, "pcre")


@numba.njit
def _twin_over(cps):
    out = np.empty(cps.shape[0], np.bool_)
    for i in range(cps.shape[0]):
        out[i] = sc.is_cjk(cps[i])
    return out


def test_numba_twin_matches_the_ranges():
    cps = np.arange(-3, 0x110000 + 3, dtype=np.int64)
    want = np.concatenate([np.zeros(3, bool), sc.ranges_mask(sc.CJK), np.zeros(3, bool)])
    assert (_twin_over(cps) == want).all()
    assert sc.is_cjk(0x4E00) and not sc.is_cjk(0x41)   # called from Python too


def test_former_copies_read_the_module():
    """The kernels' tables, the langid classes and the stations' regexes are the module's classes."""
    from gpupipe.kernels import repetition as R
    from gpupipe.stages.dedup.fuzzy import signatures
    from gpupipe.stages.filters import doc_filter, lang_script as ls, line_filter

    t = R.char_table()
    assert ((t & R.C_CJK) != 0).tolist() == sc.ranges_mask(sc.CJK).tolist()
    assert ((t & R.C_HAN) != 0).tolist() == sc.ranges_mask(sc.HAN).tolist()
    table = ls.script_table()
    assert np.isin(table, [ls.HAN, ls.HANS, ls.HANT]).tolist() == sc.ranges_mask(sc.HAN).tolist()
    assert (table == ls.KANA).tolist() == sc.ranges_mask(sc.KANA).tolist()
    assert (table == ls.HANGUL).tolist() == sc.ranges_mask(sc.HANGUL).tolist()
    assert signatures.CJK_SCRIPT == sc.regex_class(sc.CJK)
    assert doc_filter._CJK_CHAR == sc.regex_class(sc.CJK)
    assert line_filter._CJK_CHAR == sc.class_body(sc.HAN_KANA)


def test_line_filter_counts_han_and_kana_not_hangul_per_character():
    """Korean is written with spaces: its words stay words (HAN_KANA, not CJK)."""
    from gpupipe.stages.filters.line_filter import count_words

    lines = pa.array(["中文字", "かなカナ", "ｱｲｳ", "안녕 하세요", "한국어", "々〇", "中文 한국어"], pa.large_string())
    assert count_words(lines).to_pylist() == [3, 4, 3, 2, 1, 2, 3]


def test_decontam_script_counts_use_cjk():
    from gpupipe.kernels.ngram_hash import script_counts_cpu
    from gpupipe.kernels.strings import arrow_buffers

    texts = pa.array(["中文 abc", "한국어 ｱｲ", "ー・ㄅ", "𰀀\U00040000"], pa.large_string())
    counts = script_counts_cpu(*arrow_buffers(texts))
    assert counts[:, 0].tolist() == [2, 5, 0, 1]    # CJK letters
    assert counts[:, 1].tolist() == [3, 0, 3, 1]    # other letters
