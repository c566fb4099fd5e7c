"""The `quality` stage: every rule pinned on boundary documents, scope (Chinese documents and English-only rules),
conservation, and the numba kernel against a pure-Python reference of the same definitions on random documents."""

from __future__ import annotations

import itertools
import random
import re
import typing
import unicodedata
from collections import Counter

import pandas as pd
import pyarrow as pa
import pytest

from gpupipe.kernels import repetition as R
from gpupipe.kernels.text_hash import arrow_buffers
from gpupipe.stages.base import RunContext
from gpupipe.stages.filters.quality import QualityConfig, QualityFilter, _rules, decide, quality_signals

FAMILIES = ("zh", "gopher_quality", "gopher_repetition", "c4", "fineweb", "seed002")


def _isolated(family: str, keep: str | None, fields: dict) -> dict:
    """A family config that switches off every optional threshold except `keep` and the ones given."""
    model = typing.get_type_hints(QualityConfig)[family]
    out = dict(fields)
    if keep is None:
        return out
    for name, f in model.model_fields.items():
        if name in fields or name == keep:
            continue
        if type(None) in typing.get_args(f.annotation):
            out[name] = None
        elif name in ("top_ngrams", "dup_ngrams"):
            out[name] = {}
        elif name == "no_garbled":
            out[name] = False
    return out


def config(family: str, keep: str | None = None, **fields) -> QualityConfig:
    """Only `family` enabled; with `keep`, only that one of its rules."""
    cfg = {f: {"enabled": f == family} for f in FAMILIES}
    cfg[family] = {"enabled": True, **_isolated(family, keep, fields)}
    return QualityConfig.model_validate(cfg)


def judge(text: str, family: str, keep: str | None = None, lang: str | None = "en", **fields):
    """(reason, signals) of one document under `family` (isolated to rule field `keep` when given)."""
    cfg = config(family, keep, **fields)
    df = pd.DataFrame({"text": [text]} | ({"lang": [lang]} if lang is not None else {}))
    sig = quality_signals(df, cfg)
    why, _ = decide(df.assign(**sig), cfg)
    return why[0], {k: v[0] for k, v in sig.items()}


def words(n: int, word: str = "word") -> str:
    return " ".join([word] * n)


# ----------------------------------------------------------------------------------------------------------------
# Words (the imitation of datatrove's spaCy English tokenizer)
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("Hello, world.", ["Hello", ",", "world", "."]),
    ("don't We're I'm DON'T", ["do", "n't", "We", "'re", "I", "'m", "DON'T"]),
    ("(R-Wash.) U.S. e.g. Inc., n.a.", ["(", "R", "-", "Wash.", ")", "U.S.", "e.g.", "Inc.", ",", "n.a", "."]),
    ("10-year well-known and/or 5% 10km $5", ["10", "-", "year", "well", "-", "known", "and/or", "5", "%", "10",
                                               "km", "$", "5"]),
    ("<SRD> end.The http://x.com/a-b. cannot", ["<", "SRD", ">", "end", ".", "The", "http://x.com/a-b", ".",
                                                 "can", "not"]),
    ("wait... 155,221 13.5", ["wait", "...", "155,221", "13.5"]),
    ("中文，English。", ["中", "文", "，", "English", "。"]),
])
def test_words_follow_spacy_rules(text, expected):
    assert R.tokens(text) == expected


def test_words_without_cjk_split_keep_runs_like_spacy():
    assert R.tokens("很好。,速度快", cjk_words=False) == ["很好。", ",", "速度快"]
    assert R.tokens("点评了.现在全部补上.", cjk_words=False) == ["点评了.现在全部补上", "."]  # a "URL", as spaCy


# ----------------------------------------------------------------------------------------------------------------
# gopher_quality
# ----------------------------------------------------------------------------------------------------------------

def lines(*parts: str) -> str:
    return "\n".join(parts)


@pytest.mark.parametrize("keep, ok, bad, fields, reason", [
    ("min_words", words(50), words(49), {}, "gopher_min_words"),
    ("max_words", words(60), words(61), {"max_words": 60}, "gopher_max_words"),
    ("min_mean_word_length", words(10, "abc"), words(9, "abc") + " ab", {}, "gopher_min_mean_word_length"),
    ("max_mean_word_length", words(10, "a" * 10), words(9, "a" * 10) + " " + "a" * 11, {},
     "gopher_max_mean_word_length"),
    ("max_symbol_word_ratio", words(90) + " #" * 10, words(89) + " #" * 11, {}, "gopher_hash_ratio"),
    ("max_bullet_lines_ratio", lines(*["- item here"] * 90, *["plain line"] * 10),
     lines(*["• item here"] * 91, *["plain line"] * 9), {}, "gopher_bullet_lines"),
    ("max_ellipsis_lines_ratio", lines(*["it goes on..."] * 30, *["plain line."] * 70),
     lines(*["it goes on…"] * 31, *["plain line."] * 69), {}, "gopher_ellipsis_lines"),
    ("min_alpha_words_ratio", words(80) + " 123" * 20, words(79) + " 123" * 21, {}, "gopher_alpha_words"),
    ("min_stop_words", "the and " + words(50), "the The AND " + words(50), {}, "gopher_stop_words"),
])
def test_gopher_quality_boundaries(keep, ok, bad, fields, reason):
    assert judge(ok, "gopher_quality", keep, **fields)[0] is None
    assert judge(bad, "gopher_quality", keep, **fields)[0] == reason


def test_gopher_ellipsis_ratio_counts_both_forms():
    ok = words(90) + " middle... of" * 5 + " middle… of" * 5   # 10 ellipses, 100 + 10 words: < 0.1
    why, sig = judge(ok, "gopher_quality", "max_symbol_word_ratio")
    assert why is None and sig["q_gopher_ellipsis_ratio"] == pytest.approx(10 / 120)
    bad = words(10) + " ..." * 2
    assert judge(bad, "gopher_quality", "max_symbol_word_ratio")[0] == "gopher_ellipsis_ratio"


def test_gopher_all_rules_on_a_real_paragraph():
    text = ("The committee said that it would have to meet again with the members of the board to decide. "
            "Analysts expect the decision to be announced next week, and they see no reason for delay. ") * 3
    assert judge(text, "gopher_quality")[0] is None


# ----------------------------------------------------------------------------------------------------------------
# gopher_repetition
# ----------------------------------------------------------------------------------------------------------------

def unique_lines(n: int, prefix: str = "line") -> list[str]:
    return [f"{prefix} number {i} is here" for i in range(n)]


def test_gopher_rep_dup_line_frac_boundary():
    ok = lines(*["same line"] * 4, *unique_lines(6))          # 10 lines, 3 repeats: 0.30
    bad = lines(*["same line"] * 32, *unique_lines(68))       # 100 lines, 31 repeats: 0.31
    why, sig = judge(ok, "gopher_repetition", "dup_line_frac")
    assert why is None and sig["q_gopher_rep_dup_line_frac"] == 0.3
    assert judge(bad, "gopher_repetition", "dup_line_frac")[0] == "gopher_rep_dup_line_frac"


def test_gopher_rep_dup_line_char_frac_boundary():
    a = "x" * 20
    ok = a + "\n" + a + "\n" + "y" * 58                       # 20 repeated chars of 100
    bad = a + "\n" + a + "\n" + "y" * 57                      # of 99
    why, sig = judge(ok, "gopher_repetition", "dup_line_char_frac")
    assert why is None and sig["q_gopher_rep_dup_line_char_frac"] == 0.2
    assert judge(bad, "gopher_repetition", "dup_line_char_frac")[0] == "gopher_rep_dup_line_char_frac"


def test_gopher_rep_paragraphs_boundary():
    ok = "\n\n".join(["same para"] * 4 + unique_lines(6))
    bad = "\n\n\n".join(["same para"] * 32 + unique_lines(68))   # 3 newlines still split paragraphs
    assert judge(ok, "gopher_repetition", "dup_para_frac")[0] is None
    assert judge(bad, "gopher_repetition", "dup_para_frac")[0] == "gopher_rep_dup_para_frac"
    a = "p" * 20
    ok = a + "\n\n" + a + "\n\n" + "q" * 56                    # 20 of 100 characters
    assert judge(ok, "gopher_repetition", "dup_para_char_frac")[1]["q_gopher_rep_dup_para_char_frac"] == 0.2
    assert judge(ok, "gopher_repetition", "dup_para_char_frac")[0] is None
    assert judge(ok[:-1], "gopher_repetition", "dup_para_char_frac")[0] == "gopher_rep_dup_para_char_frac"


def test_gopher_rep_top_ngram_boundary():
    # words: aa bb x0 aa bb x1 ... ; "aa bb" occurs 5 times, 5 * len("aa bb") = 25 characters
    text = " ".join(f"aa bb x{i}" for i in range(5)) + " " + "z" * 40
    why, sig = judge(text, "gopher_repetition", "top_ngrams", top_ngrams={2: 1.0})
    frac = sig["q_gopher_rep_top_2gram_frac"]
    assert frac == 25 / len(text)
    assert judge(text, "gopher_repetition", "top_ngrams", top_ngrams={2: frac})[0] is None
    assert judge(text, "gopher_repetition", "top_ngrams", top_ngrams={2: frac - 1e-9})[0] == "gopher_rep_top_2gram"


def test_gopher_rep_top_ngram_ties_take_the_first_seen():
    # "a b" and "cc dd" both occur twice: the first seen ("a b", 3 characters) wins, as Counter.most_common
    text = "a b cc dd a b cc dd " + "e" * 50
    sig = judge(text, "gopher_repetition", "top_ngrams", top_ngrams={2: 1.0})[1]
    assert sig["q_gopher_rep_top_2gram_frac"] == 2 * 3 / len(text)


def test_gopher_rep_dup_ngram_boundary():
    run = "one two three four five"                           # a 5-gram of 19 characters ("".join)
    text = run + " six " + run + " " + "w" * 60
    sig = judge(text, "gopher_repetition", "dup_ngrams", dup_ngrams={5: 1.0})[1]
    frac = sig["q_gopher_rep_dup_5gram_frac"]
    assert frac == 19 / len(text)
    assert judge(text, "gopher_repetition", "dup_ngrams", dup_ngrams={5: frac})[0] is None
    assert judge(text, "gopher_repetition", "dup_ngrams", dup_ngrams={5: frac - 1e-9})[0] == "gopher_rep_dup_5gram"


def test_gopher_rep_applies_to_chinese():
    text = lines(*["这是重复的一行文字"] * 5, "第一行不同", "第二行不同")   # 7 lines, 4 repeats
    assert judge(text, "gopher_repetition", "dup_line_frac", lang="zh")[0] == "gopher_rep_dup_line_frac"
    assert judge("", "gopher_repetition")[0] == "gopher_rep_empty"


# ----------------------------------------------------------------------------------------------------------------
# c4
# ----------------------------------------------------------------------------------------------------------------

SENT = "This is a complete sentence."


def test_c4_min_sentences_boundary():
    assert judge(lines(*[SENT] * 5), "c4")[0] is None
    assert judge(lines(*[SENT] * 4), "c4")[0] == "c4_min_sentences"
    assert judge(lines(SENT + " And a second one here!", *[SENT] * 3), "c4")[0] is None  # 2 + 3


@pytest.mark.parametrize("extra", [
    "The page needs javascript to work.",        # javascript line does not count
    "Read our privacy policy before you go.",    # policy line
    "Two words.",                                # fewer than 3 words
    "No final punctuation here",                 # no terminal mark
    "It goes on and on...",                      # ellipsis is no terminal mark
])
def test_c4_lines_that_do_not_count(extra):
    assert judge(lines(*[SENT] * 4, extra), "c4")[0] == "c4_min_sentences"


def test_c4_counts_lines_with_citations_and_quotes():
    assert judge(lines(*[SENT] * 4, "A cited line ends here.[12]"), "c4")[0] is None
    assert judge(lines(*[SENT] * 4, 'He said "this is it."'), "c4")[0] is None


def test_c4_lorem_ipsum_and_curly_brace():
    assert judge(lines(SENT, "Lorem ipsum dolor sit amet."), "c4", "filter_lorem_ipsum")[0] == "c4_lorem_ipsum"
    assert judge(lines(SENT, "lorem ipsum dolor"), "c4", "filter_lorem_ipsum")[0] is None  # line not counted
    assert judge(lines(SENT, "The set {a, b} is small."), "c4", "filter_curly_bracket")[0] == "c4_curly_brace"
    assert judge(lines(SENT, "a {b}"), "c4", "filter_curly_bracket")[0] is None
    assert judge(lines("Use {braces} in javascript code.", SENT), "c4", "filter_curly_bracket")[0] is None


# ----------------------------------------------------------------------------------------------------------------
# fineweb
# ----------------------------------------------------------------------------------------------------------------

def test_fineweb_line_punct_ratio_boundary():
    ok = lines(*[f"ends with a period {i}." for i in range(12)], *[f"no period {i}" for i in range(88)])
    bad = lines(*[f"ends with a period {i}." for i in range(11)], *[f"no period {i}" for i in range(89)])
    assert judge(ok, "fineweb", "line_punct_thr")[0] is None
    assert judge(bad, "fineweb", "line_punct_thr")[0] == "fineweb_line_punct_ratio"
    assert judge("no punctuation\nat all", "fineweb", "line_punct_thr", line_punct_exclude_zero=True)[0] is None


def test_fineweb_short_line_ratio_boundary():
    long = "a fairly long line that has more than thirty characters"
    ok = lines(*["short line"] * 67, *[long] * 33)
    bad = lines(*["short line"] * 68, *[long] * 32)
    assert judge(ok, "fineweb", "short_line_thr")[0] is None
    assert judge(bad, "fineweb", "short_line_thr")[0] == "fineweb_short_line_ratio"
    assert judge("x" * 30 + "\n" + "y" * 30, "fineweb", "short_line_thr")[0] == "fineweb_short_line_ratio"  # <= 30


def test_fineweb_char_dup_ratio_boundary():
    ok = lines("d" * 10, "d" * 10, "z" * 980)        # 10 repeated of 1000 characters (newlines excluded)
    bad = lines("d" * 10, "d" * 10, "z" * 979)
    why, sig = judge(ok, "fineweb", "char_duplicates_ratio")
    assert why is None and sig["q_fineweb_char_dup_ratio"] == 0.01
    assert judge(bad, "fineweb", "char_duplicates_ratio")[0] == "fineweb_char_dup_ratio"


def test_fineweb_list_ratio_and_empty():
    assert judge("a b c\nd e f\ng h i\nj", "fineweb", "new_line_ratio")[0] is None      # 3 / 10
    assert judge("a b\nc d\ne f\ng h\ni j", "fineweb", "new_line_ratio")[0] == "fineweb_list_ratio"  # 4 / 10
    assert judge(" \n\t\n", "fineweb")[0] == "fineweb_empty"


# ----------------------------------------------------------------------------------------------------------------
# seed002 (DOC_FILTERS)
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("keep, ok, bad, reason", [
    ("min_words", words(50), words(49), "seed002_min_words"),
    ("min_avg_word_length", words(10, "abc"), words(9, "abc") + " ab", "seed002_min_avg_word_length"),
    ("max_avg_word_length", words(10, "a" * 20), words(9, "a" * 20) + " " + "a" * 21, "seed002_max_avg_word_length"),
    ("max_special_char_ratio", "abcdefg!!!", "abcdef!!!!", "seed002_special_char_ratio"),
    ("max_digit_ratio", "aaaaa 11111", "aaaa 111111", "seed002_digit_ratio"),
    ("min_unique_word_ratio", words(9, "word") + " other", "Word " + words(10, "word"), "seed002_unique_word_ratio"),
    ("max_line_dup_ratio", lines(*["same"] * 4, *unique_lines(6)), lines(*["same"] * 32, *unique_lines(68)),
     "seed002_dup_line_ratio"),
    ("min_stop_word_ratio", "the and of that to with " + words(94), "the and of that to " + words(95),
     "seed002_stop_word_ratio"),
])
def test_seed002_boundaries(keep, ok, bad, reason):
    assert judge(ok, "seed002", keep)[0] is None
    assert judge(bad, "seed002", keep)[0] == reason


def test_seed002_stop_words_only_for_english():
    text = "le chat et le chien sont dans la maison " * 8
    assert judge(text, "seed002", "min_stop_word_ratio", lang="en")[0] == "seed002_stop_word_ratio"
    assert judge(text, "seed002", "min_stop_word_ratio", lang="fr")[0] is None


# ----------------------------------------------------------------------------------------------------------------
# zh (ZH_DOC_FILTERS)
# ----------------------------------------------------------------------------------------------------------------

HAN = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定"


def han(n: int, offset: int = 0) -> str:
    return "".join(HAN[(i + offset) % len(HAN)] for i in range(n))


def test_zh_char_count_boundaries():
    assert judge(han(100), "zh", "min_chars", lang="zh")[0] is None
    assert judge(han(50) + " \n " + han(49), "zh", "min_chars", lang="zh")[0] == "zh_min_chars"  # spaces don't count
    assert judge(han(120), "zh", "max_chars", lang="zh", max_chars=120)[0] is None
    assert judge(han(121), "zh", "max_chars", lang="zh", max_chars=120)[0] == "zh_max_chars"


def test_zh_ratios_boundaries():
    assert judge(han(30) + "a" * 70, "zh", "min_cn_char_ratio", lang="zh")[0] is None
    assert judge(han(29) + "a" * 71, "zh", "min_cn_char_ratio", lang="zh")[0] == "zh_cn_char_ratio"
    assert judge(han(85) + "，" * 15, "zh", "max_punctuation_ratio", lang="zh")[0] is None
    assert judge(han(84) + "。" * 16, "zh", "max_punctuation_ratio", lang="zh")[0] == "zh_punctuation_ratio"
    # the floor (off by default): a Chinese keyword list, unpunctuated, against prose that punctuates
    keywords = " ".join(["便宜手表", "手表批发", "名牌包包", "低价促销", "正品保证", "全国包邮"] * 5)
    assert judge(keywords, "zh", lang="zh")[0] is None
    assert judge(keywords, "zh", "min_punctuation_ratio", lang="zh", min_punctuation_ratio=0.01)[0] == \
        "zh_min_punctuation_ratio"
    assert judge(han(99) + "。", "zh", "min_punctuation_ratio", lang="zh", min_punctuation_ratio=0.01)[0] is None


def test_zh_garbled():
    clean = ("今天的天气很好，我们一起去公园散步。公园里有很多人在锻炼身体，孩子们在草地上玩耍。"
             "傍晚的时候，我们在湖边坐了一会儿，看着夕阳慢慢落下，心情非常愉快。") * 2
    assert judge(clean, "zh", lang="zh")[0] is None
    for broken in (clean.encode("utf-8").decode("gbk", errors="replace"),      # UTF-8 read as GBK
                   clean.encode("utf-8").decode("latin-1")[:300] + clean,       # part read as Latin-1
                   clean + "\ufffd" * 3,                                        # replacement characters
                   clean + "\ue000\ue001\ue002"):                               # private use
        assert judge(broken, "zh", "no_garbled", lang="zh")[0] == "zh_garbled", broken[:40]


# ----------------------------------------------------------------------------------------------------------------
# Scope: English-only rules leave Chinese documents alone; zh without a lang column
# ----------------------------------------------------------------------------------------------------------------

ZH_DOC = ("北京是中国的首都，也是全国的政治、文化和国际交往中心。这座城市有三千多年的建城史，"
          "拥有故宫、天坛和长城等许多世界文化遗产。每年都有大量游客来到这里参观游览，"
          "感受古老文明与现代生活的交融。近年来，北京在科技创新和环境保护方面也取得了显著进展。")


ZH_LIST = "\n".join(han(8, i) for i in range(20))    # short lines without punctuation: FineWeb would drop it


@pytest.mark.parametrize("family", ["gopher_quality", "c4", "fineweb", "seed002"])
def test_english_rules_skip_chinese_documents(family):
    for doc in (ZH_DOC, ZH_LIST):
        assert judge(doc, family, lang="zh")[0] is None
        assert judge(doc, family, lang=None)[0] is None          # no lang column: the CJK share decides
    # applied anyway, they would drop it (seed002: a long Chinese text has few distinct "words", i.e. characters)
    doc = {"fineweb": ZH_LIST, "seed002": ZH_DOC * 10}.get(family, ZH_DOC)
    assert judge(doc, family, lang="zh")[0] is None
    assert judge(doc, family, lang="zh", apply_to_cjk=True)[0] is not None


def test_chinese_document_passes_the_whole_stage():
    cfg = QualityConfig()
    for lang in ("zh", None):
        df = pd.DataFrame({"text": [ZH_DOC]} | ({"lang": [lang]} if lang else {}))
        sig = quality_signals(df, cfg)
        assert bool(sig["q_scope_zh"][0]) and bool(sig["q_scope_cjk"][0])
        assert decide(df.assign(**sig), cfg)[0][0] is None


def test_zh_rules_skip_english_and_apply_without_lang():
    assert judge(words(10), "zh", lang="en")[0] is None
    assert judge(han(20), "zh", lang=None)[0] == "zh_min_chars"


# ----------------------------------------------------------------------------------------------------------------
# The stage: conservation, reasons, flags
# ----------------------------------------------------------------------------------------------------------------

EN_DOC = """The committee said on Tuesday that it would have to meet again with the members of the board.
Analysts expect the final decision to be announced next week, and they see no reason for a delay.
Shares of the company rose two percent in early trading after the statement was published.
The chairman told reporters that the talks had been difficult but that progress was being made.
Several investors have asked for more details about the plan and its effect on the balance sheet.
A spokesman declined to comment on the size of the deal or on the names of the possible buyers.
Officials from both sides are expected to resume their discussions in London later this month.
"""


def test_stage_conserves_documents_and_reports_flags():
    texts = [EN_DOC, ZH_DOC, "", None, words(10), lines(*["dup line"] * 40), EN_DOC.replace(".", " {x}."),
             "#" * 500]
    df = pd.DataFrame({"id": [str(i) for i in range(len(texts))], "text": texts,
                       "lang": ["en", "zh", "en", None, "en", "en", "en", None]})
    stage = QualityFilter(QualityConfig(), RunContext())
    kept, rejects, stats = stage.run_partition(df)
    assert stats.docs_in == len(df) == stats.docs_out + sum(stats.removed.values())
    assert len(kept) == stats.docs_out and len(rejects) == sum(stats.removed.values())
    assert set(kept["id"]) == {"0", "1"}
    assert rejects.set_index("id")["reason"].to_dict()["6"] == "c4_curly_brace"
    for reason, n in stats.removed.items():
        assert stats.extra[f"flag_{reason}"] >= n
    assert all(k.startswith("flag_") for k in stats.extra)
    assert any(c.startswith("q_gopher_rep_") for c in kept.columns)


def test_stage_handles_empty_frames_and_no_lang_column():
    stage = QualityFilter(QualityConfig(), RunContext())
    kept, rejects, stats = stage.run_partition(pd.DataFrame({"id": [], "text": []}))
    assert stats.docs_in == 0 and len(kept) == 0
    kept, rejects, stats = stage.run_partition(pd.DataFrame({"id": ["a"], "text": [ZH_DOC]}))
    assert stats.docs_out == 1


def test_thresholds_retune_without_recomputing():
    cfg = QualityConfig()
    df = pd.DataFrame({"text": [words(60)], "lang": ["en"]})
    full = df.assign(**quality_signals(df, cfg))
    strict = QualityConfig.model_validate({"gopher_quality": {"min_words": 61}})
    assert "gopher_min_words" in set(decide(full, strict)[0]) - set(decide(full, cfg)[0])


# ----------------------------------------------------------------------------------------------------------------
# Pure-Python reference of the same definitions (strings, Counters, str methods; no hashing) vs the kernel
# ----------------------------------------------------------------------------------------------------------------

TABLE = R.char_table()
EXCEPTIONS = {w: 0 for w in R.WHOLE_WORDS} | R.SPLIT_WORDS
APOS = "'’"
DIGITS = "0123456789"
ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")


def bits(ch: str) -> int:
    return int(TABLE[ord(ch)])


def has(ch: str, bit: int) -> bool:
    return bits(ch) & bit != 0


def ref_contraction(w: str) -> int:
    n = len(w)
    if n > 3 and w[-2] in APOS and w[-3] == "n" and w[-1] == "t":
        k = 3
    elif n > 3 and w[-3] in APOS and w[-2:] in ("ll", "re", "ve"):
        k = 3
    elif n > 2 and w[-2] in APOS and w[-1] in "dm":
        k = 2
    else:
        return 0
    stem = w[:-k]
    ok = all(has(c, R.C_ALPHA) for c in stem) and not any(
        has(c, R.C_UPPER) and not has(c, R.C_LOWER) for c in stem[1:])
    return k if ok else 0


def ref_exception(w: str) -> int:
    if not w:
        return -1
    if len(w) == 2 and w[1] == "." and ord(w[0]) < 128 and has(w[0], R.C_ALPHA):
        return 0
    if w in EXCEPTIONS:
        return EXCEPTIONS[w]
    k = ref_contraction(w)
    return len(w) - k if k else -1


def ref_prefix_len(w: str) -> int:
    if w[0] == ".":
        run = len(w) - len(w.lstrip("."))
        return run if run >= 2 else 0
    if w[0] == "+":
        return 0 if len(w) > 1 and w[1] in DIGITS else 1
    return 1 if has(w[0], R.C_PREFIX) else 0


def ref_suffix_len(w: str) -> int:
    best, c = 0, w[-1]
    if c == ".":
        run = len(w) - len(w.rstrip("."))
        if run >= 2:
            best = run
        elif len(w) >= 2:
            p = w[-2]
            if has(p, R.C_ASCII_DIGIT | R.C_LOWER | R.C_QUOTE | R.C_SUFFIX) or p in "%²-+|":
                best = 1
            elif len(w) >= 3 and has(p, R.C_UPPER) and has(w[-3], R.C_UPPER):
                best = 1
            elif len(w) >= 3 and w[-3] == "°" and p in "FfCcKk":
                best = 1
    elif has(c, R.C_SUFFIX):
        best = 2 if c == "…" and len(w) >= 2 and w[-2] == "…" else 1
    if len(w) >= 2 and c in "sS" and w[-2] in APOS:
        best = max(best, 2)
    m = re.search(r"[0-9]([^0-9]{1,5})$", w)
    if m and m.group(1) in R.AFTER_DIGIT:
        best = max(best, len(m.group(1)))
    return best


def ref_is_url(w: str) -> bool:
    if "." not in w:
        return False
    i = 0
    if "://" in w:
        p = w.index("://")
        if p < 2 or not all(has(c, R.C_ALPHA | R.C_DIGIT) or c in "_+-." for c in w[:p]):
            return False
        i = p + 3

    def host(c):
        return c.isascii() and c.isalnum() or 0xA1 <= ord(c) <= 0xFFFF

    h = i
    while h < len(w) and (host(w[h]) or w[h] in "_-."):
        h += 1
    segs = w[i:h].split(".")
    if len(segs) < 2 or any(not s for s in segs):
        return False
    *labels, tld = segs
    if any(len(s) > 64 or not host(s[0]) or not host(s[-1]) for s in labels):
        return False
    if not 2 <= len(tld) <= 63 or not all(has(c, R.C_LOWER) and ord(c) >= 0x41 for c in tld):
        return False
    rest = w[h:]
    if rest == "" or rest[0] in "/?#":
        return True
    m = re.match(r":([0-9]{2,5})(?:[/?#]|$)", rest)
    return m is not None


def ref_infix_len(w: str, i: int) -> int:
    c = w[i]
    if not has(c, R.C_INFIX):
        return 0
    if c == "." and i + 1 < len(w) and w[i + 1] == ".":
        return len(w[i:]) - len(w[i:].lstrip("."))
    if c == "…" or has(c, R.C_ICON):
        return 1
    if i == 0 or i + 1 >= len(w):
        return 0
    p, nx = w[i - 1], w[i + 1]
    if has(p, R.C_ASCII_DIGIT) and c in "+-*^" and (has(nx, R.C_ASCII_DIGIT) or nx == "-"):
        return 1
    if c == "." and has(p, R.C_LOWER | R.C_QUOTE) and has(nx, R.C_UPPER | R.C_QUOTE):
        return 1
    if c == "," and has(p, R.C_SP_ALPHA) and has(nx, R.C_SP_ALPHA):
        return 1
    if has(p, R.C_SP_ALPHA | R.C_ASCII_DIGIT):
        for hy in ("---", "--", "-") if c == "-" else ("——", "—") if c == "—" else (c,) if c in "–~" else ():
            if w.startswith(hy, i) and i + len(hy) < len(w) and has(w[i + len(hy)], R.C_SP_ALPHA):
                return len(hy)
    if has(p, R.C_SP_ALPHA | R.C_ASCII_DIGIT) and c in ":<>=/" and has(nx, R.C_SP_ALPHA):
        return 1
    return 0


def ref_attach(w: str, k: int) -> list[str]:
    if k > 0:
        return [w[:k], w[k:]]
    if k == 0 or ref_is_url(w):
        return [w]
    out, start, i = [], 0, 0
    while i < len(w):
        m = ref_infix_len(w, i)
        if m == 0 or i == 0:
            i += m or 1
            continue
        if i != start:
            out.append(w[start:i])
        out.append(w[i:i + m])
        start = i = i + m
    return out + ([w[start:]] if start < len(w) else [])


def ref_tokens(text: str, cjk_words: bool = True) -> list[str]:
    out: list[str] = []
    for is_space, grp in itertools.groupby(text, key=str.isspace):
        if is_space:
            continue
        chunk = "".join(grp)
        if not cjk_words:
            out += ref_split_word(chunk)
            continue
        for is_cjk, run in itertools.groupby(chunk, key=lambda ch: has(ch, R.C_CJK)):
            run = "".join(run)
            out += list(run) if is_cjk else ref_split_word(run)
    return out


def ref_split_word(w: str) -> list[str]:
    """Prefixes, core, suffixes (spaCy's affix loop), then adjacent pairs that spell an exception merged."""
    pre, suf = [], []
    k = ref_exception(w)
    while k < 0 and w:
        p = ref_prefix_len(w)
        if 0 < p < len(w):
            k = ref_exception(w[p:])
            if k >= 0:
                pre.append(w[:p])
                w = w[p:]
                break
        s = ref_suffix_len(w[p:]) if p < len(w) else 0
        if 0 < s < len(w):
            k = ref_exception(w[:-s])
            if k >= 0:
                suf.append(w[-s:])
                w = w[:-s]
                break
        if p == 0 and s == 0:
            break
        if p:
            pre.append(w[:p])
            w = w[p:]
        if s:
            suf.append(w[-s:])
            w = w[:-s]
        k = ref_exception(w)
    toks = pre + (ref_attach(w, k) if w else []) + suf[::-1]
    out, i = [], 0
    while i < len(toks):
        if i + 1 < len(toks) and len(toks[i] + toks[i + 1]) <= 8 and ref_exception(toks[i] + toks[i + 1]) == 0:
            out.append(toks[i] + toks[i + 1])
            i += 2
        else:
            out.append(toks[i])
            i += 1
    return out


def find_duplicates(items: list[str]) -> tuple[int, int]:
    seen, dups, chars = set(), 0, 0
    for x in items:
        if x in seen:
            dups += 1
            chars += len(x)
        else:
            seen.add(x)
    return dups, chars


def ref_top(toks: list[str], cjk: list[bool], n: int) -> int:
    grams = [tuple(toks[i:i + n]) for i in range(len(toks) - n + 1)]
    if not grams:
        return -1
    counts = Counter(grams)
    gram, count = max(counts.items(), key=lambda kv: kv[1])   # first maximal in insertion order
    i = grams.index(gram)
    spaces = sum(1 for k in range(i, i + n - 1) if not (cjk[k] and cjk[k + 1]))
    return count * (sum(map(len, gram)) + spaces)


def ref_dup(toks: list[str], n: int) -> int:
    seen, rep, i = set(), 0, 0
    while i < len(toks) - n + 1:
        gram = "".join(toks[i:i + n])
        if gram in seen:
            rep += len(gram)
            i += n
        else:
            seen.add(gram)
            i += 1
    return rep


def ref_sentences(toks: list[str]) -> int:
    if not toks:
        return 0
    count, seen = 1, False
    for t in toks:
        end = len(t) == 1 and has(t, R.C_TERM)
        punct = all(unicodedata.category(c).startswith("P") for c in t)
        if seen and not punct and not end:
            count, seen = count + 1, False
        elif end:
            seen = True
    return count


def ref_c4(text: str, cjk_words: bool) -> dict[str, int]:
    out = dict(c4_sentences=0, c4_lorem_ipsum=0, c4_curly_brace=0, c4_kept_lines=0)
    policy = R.C4_PATTERNS[2:]
    for line in text.splitlines():
        line = line.strip()
        ws = line.split()
        if any(len(w) > 1000 for w in ws):
            continue
        cleaned = CITATION.sub("", line)
        if not cleaned.endswith((".", "?", "!", '"', "'")) or cleaned.endswith("..."):
            continue
        if len(ws) < 3:
            continue
        low = line.translate(ASCII_LOWER)   # the kernel lowercases ASCII (the patterns are ASCII)
        if "lorem ipsum" in low:
            out["c4_lorem_ipsum"] = 1
            break
        if "javascript" in low:
            continue
        if "{" in line:
            out["c4_curly_brace"] = 1
            break
        if any(p in low for p in policy):
            continue
        out["c4_sentences"] += ref_sentences(ref_tokens(line, cjk_words))
        out["c4_kept_lines"] += 1
    return out


def ref_counts(text: str, cjk_words: bool = True) -> tuple[dict[str, int], list[int], list[int]]:
    toks = ref_tokens(text, cjk_words)
    cjk = [cjk_words and len(t) == 1 and has(t, R.C_CJK) for t in toks]
    sym = [all(has(c, R.C_SYMBOL) for c in t) for t in toks]
    ws = [t for t, s in zip(toks, sym) if not s]
    ws_noncjk = [t for t, s, c in zip(toks, sym, cjk) if not s and not c]
    folded = [w.translate(ASCII_LOWER) for w in ws]
    c = dict(
        chars=len(text), nonspace_chars=sum(not ch.isspace() for ch in text), newlines=text.count("\n"),
        tokens=len(toks), words=len(ws), words_chars=sum(map(len, ws)),
        alpha_tokens=sum(any(ch.isalpha() for ch in t) for t in toks),
        gopher_stop_words=len(set(toks) & set(R.GOPHER_STOP_WORDS)),
        words_noncjk=len(ws_noncjk), words_noncjk_chars=sum(map(len, ws_noncjk)), unique_words=len(set(folded)),
        en_stop_words=sum(w in R.EN_STOP_WORDS for w in folded),
    )
    split = text.splitlines()
    c |= dict(lines=len(split), bullet_lines=sum(s.lstrip().startswith(("•", "-")) for s in split),
              ellipsis_lines=sum(s.rstrip().endswith(("...", "…")) for s in split))
    paras = re.split(r"\n{2,}", text.strip())
    reps = re.split("\n+", text)
    c |= dict(paragraphs=len(paras), rep_lines=len(reps))
    c["dup_paragraphs"], c["dup_paragraph_chars"] = find_duplicates(paras)
    c["dup_lines"], c["dup_line_chars"] = find_duplicates(reps)
    c |= ref_c4(text, cjk_words)
    fw = [s for s in text.split("\n") if s.strip() != ""]
    c |= dict(fw_lines=len(fw), fw_punct_lines=sum(has(s[-1], R.C_TERM) for s in fw),
              fw_short_lines=sum(len(s) <= 30 for s in fw), fw_dup_chars=find_duplicates(fw)[1])
    c |= dict(
        cjk_chars=sum(has(ch, R.C_CJK) for ch in text), han_chars=sum(has(ch, R.C_HAN) for ch in text),
        word_chars=sum(has(ch, R.C_WORDCHAR) for ch in text), alpha_chars=sum(ch.isalpha() for ch in text),
        digit_chars=sum(ch.isdigit() for ch in text),
        special_chars=sum(not ch.isspace() and not (ch.isalpha() or ch.isdigit()) for ch in text),
        punct_chars=sum(unicodedata.category(ch).startswith("P") for ch in text),
        bad_chars=sum(has(ch, R.C_BAD) for ch in text),
        latin1_chars=sum(0x80 <= ord(ch) <= 0xFF and not ch.isspace() for ch in text),
        rare_han_chars=sum(has(ch, R.C_HAN) and not has(ch, R.C_COMMON_HAN) for ch in text),
    )
    return c, [ref_top(toks, cjk, n) for n in (2, 3, 4)], [ref_dup(toks, n) for n in range(5, 11)]


PIECES = (
    "the be to of and that have with The And cat dog house running well-known U.S. e.g. Mr. Inc. Co. don't "
    "can't We're DON'T it's company's 10-year 5% $100 10km 3.5 1,234 and/or http://x.com/a-b www.test.org "
    "end.The a.b (paren) [bracket] \"quoted\" 'single' #tag ## ... … .... -- - — • * & C++ :) 's x.y. A. a. "
    "Wash. lorem ipsum javascript { } terms of use privacy policy cookies 123 4567 é Ça naïve ß Ω ＡＢＣ 你 好 中 国 "
    "。 ， ！ ？ 、 「 」 鍙 戝 \ufffd \ue000 Ã © °F. 1990s 5pm AB. lower.Upper 2-3 a,b R-Wash. im cannot ol' ¿qué? "
    "!! ?! ,, ;; :: (( )) $ £5 5£ +5 +a a+ ^_^ ::a a--b a---b a~b 3*4 x/y 10:30 a=b <br> (R.I.P.)"
).split(" ") + ["lorem ipsum", "Lorem Ipsum dolor", "uses cookies", "{x}"]
SEPARATORS = [" "] * 12 + ["  ", "\n", "\n\n", "\t", "\r\n", "\u3000", "\xa0", "\u2028", "\x0b", "", "", ""]


def random_doc(rng: random.Random) -> str:
    out: list[str] = []
    lines_: list[str] = []
    for _ in range(rng.randrange(0, 12)):
        if lines_ and rng.random() < 0.2:
            line = rng.choice(lines_)          # repeated lines and paragraphs
        else:
            n = rng.randrange(0, 25)
            parts = [rng.choice(PIECES) if rng.random() < 0.6 else f"w{rng.randrange(30)}" for _ in range(n)]
            line = "".join(p + rng.choice(SEPARATORS) for p in parts).rstrip("\n")
            line += rng.choice(["", ".", ".", "!", "...", ".[1]", " [edit]", "?", '."', "…"])
        lines_.append(line)
        out.append(line)
    return "".join(x + rng.choice(["\n", "\n", "\n\n", "\n\n\n", "\r\n", " \n"]) for x in out)


@pytest.mark.parametrize("cjk_words", [True, False])
def test_kernel_matches_pure_python_reference(cjk_words):
    rng = random.Random(1234 + cjk_words)
    texts = [random_doc(rng) for _ in range(200)] + ["", " ", "\n\n", "a", "中", "… …"]
    data, offsets = arrow_buffers(pa.array(texts, pa.large_string()))
    counts, top, dup = R.quality_counts(data, offsets, cjk_words=cjk_words)
    for d, text in enumerate(texts):
        assert R.tokens(text, cjk_words) == ref_tokens(text, cjk_words), repr(text)
        want, want_top, want_dup = ref_counts(text, cjk_words)
        got = {name: int(counts[d, k]) for k, name in enumerate(R.COUNTS)}
        assert got == want, (repr(text), {k: (got[k], want[k]) for k in got if got[k] != want[k]})
        assert top[d].tolist() == want_top and dup[d].tolist() == want_dup, repr(text)


def ref_flags(c: dict, top: list[int], dup: list[int], cfg: QualityConfig, lang: str) -> dict[str, bool]:
    """The rules of every family on reference counts, in plain Python (default thresholds, lang given)."""
    def r(a, b):
        return a / b if b else float("nan")

    cjk, zh, en = lang in cfg.cjk_langs, lang in cfg.zh_langs, lang == "en"
    q, g, c4, f, s, z = cfg.gopher_quality, cfg.gopher_repetition, cfg.c4, cfg.fineweb, cfg.seed002, cfg.zh
    out = {}
    if zh:
        ns = c["nonspace_chars"]
        out |= {"zh_min_chars": ns < z.min_chars, "zh_max_chars": ns > z.max_chars,
                "zh_garbled": r(c["bad_chars"], ns) > z.max_bad_char_ratio
                or r(c["latin1_chars"], ns) > z.max_latin1_ratio
                or (c["han_chars"] >= z.min_han_for_rare_check
                    and r(c["rare_han_chars"], c["han_chars"]) > z.max_rare_han_ratio),
                "zh_cn_char_ratio": r(c["han_chars"], ns) < z.min_cn_char_ratio,
                "zh_punctuation_ratio": r(c["punct_chars"], ns) > z.max_punctuation_ratio}
    if not cjk:
        mean = r(c["words_chars"], c["words"])
        out |= {"gopher_min_words": c["words"] < q.min_words, "gopher_max_words": c["words"] > q.max_words,
                "gopher_min_mean_word_length": mean < q.min_mean_word_length,
                "gopher_max_mean_word_length": mean > q.max_mean_word_length,
                "gopher_hash_ratio": r(c["hash"], c["tokens"]) > q.max_symbol_word_ratio,
                "gopher_ellipsis_ratio": r(c["ellipsis"], c["tokens"]) > q.max_symbol_word_ratio,
                "gopher_bullet_lines": r(c["bullet_lines"], c["lines"]) > q.max_bullet_lines_ratio,
                "gopher_ellipsis_lines": r(c["ellipsis_lines"], c["lines"]) > q.max_ellipsis_lines_ratio,
                "gopher_alpha_words": r(c["alpha_tokens"], c["tokens"]) < q.min_alpha_words_ratio,
                "gopher_stop_words": c["gopher_stop_words"] < q.min_stop_words}
    chars = c["chars"]
    out |= {"gopher_rep_empty": chars == 0,
            "gopher_rep_dup_para_frac": r(c["dup_paragraphs"], c["paragraphs"]) > g.dup_para_frac,
            "gopher_rep_dup_para_char_frac": r(c["dup_paragraph_chars"], chars) > g.dup_para_char_frac,
            "gopher_rep_dup_line_frac": r(c["dup_lines"], c["rep_lines"]) > g.dup_line_frac,
            "gopher_rep_dup_line_char_frac": r(c["dup_line_chars"], chars) > g.dup_line_char_frac}
    out |= {f"gopher_rep_top_{n}gram": t >= 0 and r(t, chars) > g.top_ngrams[n] for n, t in zip((2, 3, 4), top)}
    out |= {f"gopher_rep_dup_{n}gram": r(d, chars) > g.dup_ngrams[n] for n, d in zip(range(5, 11), dup)}
    if not cjk:
        out |= {"c4_lorem_ipsum": c["c4_lorem_ipsum"] == 1, "c4_curly_brace": c["c4_curly_brace"] == 1,
                "c4_min_sentences": c["c4_sentences"] < c4.min_num_sentences,
                "fineweb_empty": c["fw_lines"] == 0,
                "fineweb_line_punct_ratio": r(c["fw_punct_lines"], c["fw_lines"]) < f.line_punct_thr,
                "fineweb_short_line_ratio": r(c["fw_short_lines"], c["fw_lines"]) > f.short_line_thr,
                "fineweb_char_dup_ratio": r(c["fw_dup_chars"], chars - c["newlines"]) > f.char_duplicates_ratio,
                "fineweb_list_ratio": r(c["newlines"], c["tokens"]) > f.new_line_ratio,
                "seed002_min_words": c["words"] < s.min_words, "seed002_max_words": c["words"] > s.max_words,
                "seed002_min_avg_word_length": r(c["words_noncjk_chars"], c["words_noncjk"]) < s.min_avg_word_length,
                "seed002_max_avg_word_length": r(c["words_noncjk_chars"], c["words_noncjk"]) > s.max_avg_word_length,
                "seed002_special_char_ratio": r(c["special_chars"], c["nonspace_chars"]) > s.max_special_char_ratio,
                "seed002_digit_ratio": r(c["digit_chars"], c["nonspace_chars"]) > s.max_digit_ratio,
                "seed002_unique_word_ratio": r(c["unique_words"], c["words"]) < s.min_unique_word_ratio,
                "seed002_dup_line_ratio": r(c["dup_lines"], c["rep_lines"]) > s.max_line_dup_ratio,
                "seed002_stop_word_ratio": en and r(c["en_stop_words"], c["words"]) < s.min_stop_word_ratio}
    return out


def test_stage_decisions_match_reference_rules():
    rng = random.Random(99)
    texts = [random_doc(rng) for _ in range(200)]
    langs = [rng.choice(["en", "en", "zh", "fr"]) for _ in texts]
    # thresholds that every rule can reach on these short random documents
    cfg = QualityConfig.model_validate({
        "gopher_quality": {"min_words": 20, "min_stop_words": 1, "min_alpha_words_ratio": 0.6},
        "c4": {"min_num_sentences": 2}, "seed002": {"min_words": 15},
        "gopher_repetition": {"top_ngrams": {2: 0.1, 3: 0.1, 4: 0.1}, "dup_ngrams": {n: 0.05 for n in range(5, 11)}},
        "zh": {"min_chars": 30},
    })
    df = pd.DataFrame({"text": texts, "lang": langs})
    full = df.assign(**quality_signals(df, cfg))
    got = {name: m for name, m in _rules(full, cfg)}
    why, flags = decide(full, cfg)
    fired = Counter()
    for d, (text, lang) in enumerate(zip(texts, langs)):
        c, top, dup = ref_counts(text)
        c |= {"hash": text.count("#"), "ellipsis": text.count("...") + text.count("…")}
        want = ref_flags(c, top, dup, cfg, lang)
        for name in got:
            assert bool(got[name][d]) == bool(want.get(name, False)), (name, repr(text), lang)
            fired[name] += bool(want.get(name, False))
        first = next((name for name in got if want.get(name, False)), None)
        assert why[d] == first
    assert sum(1 for n in got if fired[n]) >= 0.7 * len(got), fired   # most rules were exercised
    assert flags == Counter({f"flag_{n}": int(m.sum()) for n, m in got.items()})
