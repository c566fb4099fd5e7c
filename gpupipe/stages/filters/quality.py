"""Document-level rule filters as one stage, `quality`: Gopher quality, Gopher repetition, C4, FineWeb, the
user's spec's document rules (`seed002`: word count, mean word length, special-character, digit, distinct-word,
duplicate-line and English stop-word ratios) and its Chinese rules (`zh`: character count, Chinese-character and
punctuation shares, garbled text). Signals first (columns `q_<family>_<signal>`), decisions second (`reasons`), so
thresholds can be re-tuned on the columns without recomputing them.

Signals come from one numba pass over the text's Arrow buffers (gpupipe.kernels.repetition: words, lines,
paragraphs, n-grams, character classes) plus pyarrow substring counts ("#", "...", "…"). Nothing loops over
documents in Python.

Definitions follow datatrove's filters (GopherQualityFilter, GopherRepetitionFilter, C4QualityFilter,
FineWebQualityFilter, v0.10) with their default thresholds, rule for rule, including their quirks (e.g. the "top
n-gram" also counts an n-gram seen once, lines split on "\\n+" for repetition but on str.splitlines for bullets).
Words imitate datatrove's English tokenizer (spaCy's rules: punctuation marks are words of their own). Where we
differ on purpose:
  * Scope. English-centric families (gopher_quality, c4, fineweb, seed002) judge only non-CJK documents; CJK
    documents pass them (`apply_to_cjk: true` judges them too). A document is CJK when its `lang` is one of
    `cjk_langs` (zh, ja, ko), or, without a lang, when CJK characters are more than `cjk_fraction` (0.5) of its
    letters and digits. gopher_repetition judges every document; zh judges documents whose lang is in `zh_langs`
    (or, without a lang, CJK documents); seed002's stop-word rule judges only English (`lang` en, or non-CJK).
  * CJK words. A Han/kana/hangul character is one word (datatrove's English tokenizer would see a whole Chinese
    sentence as one word). In the top n-gram length no space is counted between two such words.
  * C4 only judges: it does not rewrite the text (datatrove's C4QualityFilter also removes the failing lines from
    kept documents). The keep/drop decision is the same: lines failing the line rules do not count sentences.
    Rewriting would invalidate the other families' signals computed from the same text in this stage.
  * Thresholds set to null disable a rule (datatrove disables with any falsy value, so 0 there means "off").
  * Sentence counting for C4 ignores citation removal inside a line ("[1]" mid-line); the terminal-punctuation
    check does strip citations from the line's end, as datatrove does.

Rule order (the first failing rule is the document's reason, so each dropped document has exactly one). zh comes
first so that a short or garbled Chinese document is reported as such, not by a repetition rule:
  zh:                zh_min_chars, zh_max_chars, zh_garbled, zh_cn_char_ratio, zh_punctuation_ratio,
                     zh_min_punctuation_ratio (off unless set)
  gopher_quality:    gopher_min_words, gopher_max_words, gopher_min_mean_word_length, gopher_max_mean_word_length,
                     gopher_hash_ratio, gopher_ellipsis_ratio, gopher_bullet_lines, gopher_ellipsis_lines,
                     gopher_alpha_words, gopher_stop_words, gopher_capitalized_words
  gopher_repetition: gopher_rep_empty, gopher_rep_dup_para_frac, gopher_rep_dup_para_char_frac,
                     gopher_rep_dup_line_frac, gopher_rep_dup_line_char_frac, gopher_rep_top_<n>gram (n = 2, 3, 4),
                     gopher_rep_dup_<n>gram (n = 5 .. 10)
  c4:                c4_lorem_ipsum, c4_curly_brace, c4_min_sentences
  fineweb:           fineweb_empty, fineweb_line_punct_ratio, fineweb_short_line_ratio, fineweb_char_dup_ratio,
                     fineweb_list_ratio
  seed002:           seed002_min_words, seed002_max_words, seed002_min_avg_word_length, seed002_max_avg_word_length,
                     seed002_special_char_ratio, seed002_digit_ratio, seed002_unique_word_ratio,
                     seed002_dup_line_ratio, seed002_stop_word_ratio
Columns: `q_scope_cjk_fraction`, `q_scope_cjk`, `q_scope_zh`, `q_scope_en` (which families judge the row), then
the signals of each enabled family, e.g. `q_gopher_word_count`, `q_gopher_rep_top_2gram_frac`, `q_c4_sentences`,
`q_fineweb_line_punct_ratio`, `q_seed002_unique_word_ratio`, `q_zh_rare_han_ratio` (NaN where a ratio is undefined;
NaN flags nothing).
Stats: `removed` counts each document under its first reason; `extra.flag_<reason>` counts every document that
rule flags (kept or dropped by an earlier rule), to show how rules overlap.

The code touches only pandas API that cuDF shares (column access, assign, str.len) plus Arrow buffers handed to
the kernel, so a cuDF frame can take the same path.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt

from gpupipe.columns import text_array
from gpupipe.config_base import Fraction, Strict, ordered
from gpupipe.stages.base import Applied, MapStage

# ----------------------------------------------------------------------------------------------------------------
# Config: one sub-config per family; null disables a rule
# ----------------------------------------------------------------------------------------------------------------


class GopherQualityConfig(Strict):
    """Gopher (Rae et al. 2021, table A1) as datatrove's GopherQualityFilter."""

    enabled: bool = True
    apply_to_cjk: bool = False
    min_words: NonNegativeInt | None = 50        # words with a non-punctuation character
    max_words: NonNegativeInt | None = 100_000
    min_mean_word_length: NonNegativeFloat | None = 3
    max_mean_word_length: NonNegativeFloat | None = 10
    max_symbol_word_ratio: NonNegativeFloat | None = 0.1  # "#" and "..."/"…" each, per word (punctuation
    #                                                       words included; a word may hold several: can exceed 1)
    max_bullet_lines_ratio: Fraction | None = 0.9   # lines starting with "•" or "-"
    max_ellipsis_lines_ratio: Fraction | None = 0.3  # lines ending with "..." or "…"
    min_alpha_words_ratio: Fraction | None = 0.8    # words with a letter
    min_stop_words: NonNegativeInt | None = 2    # distinct of the, be, to, of, and, that, have, with (case-sensitive)
    # Words (whitespace-separated tokens) starting with an uppercase letter, per word: seed 001 §2.3.3's Gopher table
    # ("首字母大写比例 < 40%": clickbait titles, lists). Not in the Gopher paper's table A1 nor in datatrove; on the
    # benchmark corpus's English news (Reuters, >= 50 words) the median is 0.20 and 1.7% exceed 0.4.
    max_capitalized_words_ratio: Fraction | None = 0.4

    _order = ordered(("min_words", "max_words"), ("min_mean_word_length", "max_mean_word_length"))


class GopherRepetitionConfig(Strict):
    """Gopher's repetition rules as datatrove's GopherRepetitionFilter (fractions of the text's characters)."""

    enabled: bool = True
    apply_to_cjk: bool = True
    dup_para_frac: Fraction | None = 0.3
    dup_para_char_frac: Fraction | None = 0.2
    dup_line_frac: Fraction | None = 0.3
    dup_line_char_frac: Fraction | None = 0.2
    top_ngrams: dict[PositiveInt, Fraction] = Field(default_factory=lambda: {2: 0.20, 3: 0.18, 4: 0.16})
    dup_ngrams: dict[PositiveInt, Fraction] = Field(
        default_factory=lambda: {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10})


class C4Config(Strict):
    """C4 (Raffel et al. 2020) as datatrove's C4QualityFilter; judges only (see the module docstring).
    FineWeb's own recipe runs it with filter_no_terminal_punct: false."""

    enabled: bool = True
    apply_to_cjk: bool = False
    filter_no_terminal_punct: bool = True   # a line must end with . ? ! " ' (not "...") to count
    remove_citations: bool = True           # "[12]", "[edit]", "[citation needed]" at the end do not hide it
    min_words_per_line: NonNegativeInt | None = 3
    max_word_length: PositiveInt | None = 1000  # a line with a longer word does not count
    filter_lorem_ipsum: bool = True         # a counted line with "lorem ipsum" drops the document
    filter_javascript: bool = True          # a line with "javascript" does not count
    filter_curly_bracket: bool = True       # a counted line with "{" drops the document
    filter_policy: bool = True              # lines with "terms of use", "privacy policy", cookies ... do not count
    min_num_sentences: NonNegativeInt | None = 5  # sentences in counted lines


class FineWebConfig(Strict):
    """FineWeb's own heuristics as datatrove's FineWebQualityFilter (lines = text.split("\\n"), blank ones out)."""

    enabled: bool = True
    apply_to_cjk: bool = False
    line_punct_thr: Fraction | None = 0.12      # drop when fewer lines end with sentence punctuation
    line_punct_exclude_zero: bool = False    # ... unless no line does (for texts without punctuation at all)
    short_line_thr: Fraction | None = 0.67      # drop when more lines are short
    short_line_length: NonNegativeInt = 30      # characters
    char_duplicates_ratio: Fraction | None = 0.01  # characters in repeated lines / characters without newlines
    new_line_ratio: NonNegativeFloat | None = 0.3  # newlines per word ("list_ratio"; can exceed 1)


class Seed002Config(Strict):
    """The user's spec's document rules (hence the name). Words are the same tokens (CJK-aware), without
    punctuation-only ones."""

    enabled: bool = True
    apply_to_cjk: bool = False
    min_words: NonNegativeInt | None = 50
    max_words: NonNegativeInt | None = 100_000
    min_avg_word_length: NonNegativeFloat | None = 3      # over non-CJK words
    max_avg_word_length: NonNegativeFloat | None = 20
    max_special_char_ratio: Fraction | None = 0.3  # neither letter, digit nor whitespace / non-whitespace characters
    max_digit_ratio: Fraction | None = 0.5         # digits / non-whitespace characters
    min_unique_word_ratio: Fraction | None = 0.1   # distinct words (ASCII case folded) / words
    max_line_dup_ratio: Fraction | None = 0.3      # Gopher's duplicate line fraction
    min_stop_word_ratio: Fraction | None = 0.06    # English function words / words; English documents only

    _order = ordered(("min_words", "max_words"), ("min_avg_word_length", "max_avg_word_length"))


class ZhConfig(Strict):
    """The user's spec's rules for Chinese documents. Characters exclude whitespace.

    Garbled text is any of: replacement characters (U+FFFD), private-use, unassigned or control characters above
    max_bad_char_ratio of the characters; Latin-1 letters (U+0080..U+00FF, what UTF-8/GBK read as Latin-1 looks
    like) above max_latin1_ratio; Han characters outside GB2312 and Big5 (the common simplified and traditional
    sets) above max_rare_han_ratio of the Han characters (what UTF-8 read as GBK looks like: 鍙戝竷 ...).
    """

    enabled: bool = True
    min_chars: NonNegativeInt | None = 100
    max_chars: NonNegativeInt | None = 200_000
    min_cn_char_ratio: Fraction | None = 0.3
    max_punctuation_ratio: Fraction | None = 0.15  # Unicode punctuation (P*) / characters
    # Not in the user's spec: Chinese prose punctuates its sentences (，。 are ~5-10% of its characters),
    # keyword-stuffed SEO pages ("便宜手表 手表批发 ...") do not. Off by default; configs/full.yaml sets 0.01.
    min_punctuation_ratio: Fraction | None = None
    no_garbled: bool = True
    max_bad_char_ratio: Fraction = 0.01
    max_latin1_ratio: Fraction = 0.1
    max_rare_han_ratio: Fraction = 0.2
    min_han_for_rare_check: NonNegativeInt = 20  # too few Han characters say nothing about rarity

    _order = ordered(("min_chars", "max_chars"))


class QualityConfig(Strict):
    lang_column: str = "lang"
    cjk_langs: list[str] = Field(default_factory=lambda: ["zh", "ja", "ko"])
    zh_langs: list[str] = Field(default_factory=lambda: ["zh"])
    cjk_fraction: Fraction = 0.5  # without a lang: CJK share of letters and digits above which a document is CJK
    cjk_words: bool = True        # a CJK character is a word (false: as datatrove's English tokenizer; comparisons)
    gopher_quality: GopherQualityConfig = Field(default_factory=GopherQualityConfig)
    gopher_repetition: GopherRepetitionConfig = Field(default_factory=GopherRepetitionConfig)
    c4: C4Config = Field(default_factory=C4Config)
    fineweb: FineWebConfig = Field(default_factory=FineWebConfig)
    seed002: Seed002Config = Field(default_factory=Seed002Config)
    zh: ZhConfig = Field(default_factory=ZhConfig)


# ----------------------------------------------------------------------------------------------------------------
# Signals
# ----------------------------------------------------------------------------------------------------------------


def _ratio(num, den) -> np.ndarray:
    """num / den as float64, NaN where den is 0 (an undefined ratio flags nothing)."""
    num = np.asarray(num, np.float64)
    den = np.asarray(den, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def _lang_match(langs: pa.Array, wanted: list[str]) -> np.ndarray:
    """lang equals one of `wanted` or starts with it and "-"/"_" (zh-Hans, zh_CN)."""
    low = pc.utf8_lower(langs)
    hit = pc.is_in(low, pa.array([w.lower() for w in wanted]))
    for w in wanted:
        for sep in ("-", "_"):
            hit = pc.or_(hit, pc.starts_with(low, w.lower() + sep))
    return hit.fill_null(False).to_numpy(zero_copy_only=False)


def _scope(df, counts: dict[str, np.ndarray], cfg: QualityConfig) -> dict[str, np.ndarray]:
    frac = _ratio(counts["cjk_chars"], counts["cjk_chars"] + counts["word_chars"])
    frac = np.nan_to_num(frac)
    by_chars = frac > cfg.cjk_fraction
    cjk, zh, en = by_chars.copy(), by_chars.copy(), ~by_chars
    if cfg.lang_column in df.columns:
        langs = text_array(df[cfg.lang_column])
        known = pc.not_equal(langs, "").to_numpy(zero_copy_only=False)
        cjk = np.where(known, _lang_match(langs, cfg.cjk_langs), cjk)
        zh = np.where(known, _lang_match(langs, cfg.zh_langs), zh)
        en = np.where(known, _lang_match(langs, ["en"]), en)
    return {"q_scope_cjk_fraction": frac, "q_scope_cjk": cjk, "q_scope_zh": zh, "q_scope_en": en}


def _family_signals(c: dict[str, np.ndarray], top: np.ndarray, dup: np.ndarray, symbols: dict[str, np.ndarray],
                    cfg: QualityConfig) -> dict[str, np.ndarray]:
    """The q_<family>_<signal> columns of the enabled families, from the kernel's counts."""
    out: dict[str, np.ndarray] = {}
    chars = c["chars"]
    if cfg.gopher_quality.enabled:
        out |= {
            "q_gopher_word_count": c["words"].astype(np.int64),
            "q_gopher_mean_word_length": _ratio(c["words_chars"], c["words"]),
            "q_gopher_hash_ratio": _ratio(symbols["hash"], c["tokens"]),
            "q_gopher_ellipsis_ratio": _ratio(symbols["ellipsis"], c["tokens"]),
            "q_gopher_bullet_lines_frac": _ratio(c["bullet_lines"], c["lines"]),
            "q_gopher_ellipsis_lines_frac": _ratio(c["ellipsis_lines"], c["lines"]),
            "q_gopher_alpha_words_frac": _ratio(c["alpha_tokens"], c["tokens"]),
            "q_gopher_stop_words": c["gopher_stop_words"].astype(np.int64),
            "q_gopher_capitalized_words_frac": symbols["capitalized_frac"],
        }
    g = cfg.gopher_repetition
    if g.enabled:
        out |= {
            "q_gopher_rep_dup_para_frac": _ratio(c["dup_paragraphs"], c["paragraphs"]),
            "q_gopher_rep_dup_para_char_frac": _ratio(c["dup_paragraph_chars"], chars),
            "q_gopher_rep_dup_line_frac": _ratio(c["dup_lines"], c["rep_lines"]),
            "q_gopher_rep_dup_line_char_frac": _ratio(c["dup_line_chars"], chars),
        }
        for q, n in enumerate(sorted(g.top_ngrams)):
            out[f"q_gopher_rep_top_{n}gram_frac"] = np.where(top[:, q] >= 0, _ratio(top[:, q], chars), np.nan)
        for q, n in enumerate(sorted(g.dup_ngrams)):
            out[f"q_gopher_rep_dup_{n}gram_frac"] = _ratio(dup[:, q], chars)
    if cfg.c4.enabled:
        out |= {
            "q_c4_sentences": c["c4_sentences"].astype(np.int64),
            "q_c4_kept_lines": c["c4_kept_lines"].astype(np.int64),
            "q_c4_lorem_ipsum": c["c4_lorem_ipsum"] > 0,
            "q_c4_curly_brace": c["c4_curly_brace"] > 0,
        }
    if cfg.fineweb.enabled:
        out |= {
            "q_fineweb_lines": c["fw_lines"].astype(np.int64),
            "q_fineweb_line_punct_ratio": _ratio(c["fw_punct_lines"], c["fw_lines"]),
            "q_fineweb_short_line_ratio": _ratio(c["fw_short_lines"], c["fw_lines"]),
            "q_fineweb_char_dup_ratio": _ratio(c["fw_dup_chars"], chars - c["newlines"]),
            "q_fineweb_list_ratio": _ratio(c["newlines"], c["tokens"]),
        }
    if cfg.seed002.enabled:
        out |= {
            "q_seed002_word_count": c["words"].astype(np.int64),
            "q_seed002_avg_word_length": _ratio(c["words_noncjk_chars"], c["words_noncjk"]),
            "q_seed002_special_char_ratio": _ratio(c["special_chars"], c["nonspace_chars"]),
            "q_seed002_digit_ratio": _ratio(c["digit_chars"], c["nonspace_chars"]),
            "q_seed002_unique_word_ratio": _ratio(c["unique_words"], c["words"]),
            "q_seed002_dup_line_ratio": _ratio(c["dup_lines"], c["rep_lines"]),
            "q_seed002_stop_word_ratio": _ratio(c["en_stop_words"], c["words"]),
        }
    if cfg.zh.enabled:
        out |= {
            "q_zh_chars": c["nonspace_chars"].astype(np.int64),
            "q_zh_cn_char_ratio": _ratio(c["han_chars"], c["nonspace_chars"]),
            "q_zh_punctuation_ratio": _ratio(c["punct_chars"], c["nonspace_chars"]),
            "q_zh_bad_char_ratio": _ratio(c["bad_chars"], c["nonspace_chars"]),
            "q_zh_latin1_ratio": _ratio(c["latin1_chars"], c["nonspace_chars"]),
            "q_zh_rare_han_ratio": np.where(c["han_chars"] >= cfg.zh.min_han_for_rare_check,
                                            _ratio(c["rare_han_chars"], c["han_chars"]), np.nan),
        }
    return out


def _parts(cfg: QualityConfig) -> int:
    """The kernel's work that the enabled families read."""
    from gpupipe.kernels.repetition import PART_FWLINES, PART_NGRAMS, PART_REPLINES, PART_SPLITLINES, PART_TOKENS

    need = {"gopher_quality": PART_TOKENS | PART_SPLITLINES,
            "gopher_repetition": PART_TOKENS | PART_REPLINES | PART_NGRAMS,
            "c4": PART_SPLITLINES,  # words only on the lines C4 counts, made on demand
            "fineweb": PART_FWLINES | PART_TOKENS,
            "seed002": PART_TOKENS | PART_REPLINES,
            "zh": 0}
    parts = 0
    for family, bits in need.items():
        if getattr(cfg, family).enabled:
            parts |= bits
    return parts


def quality_signals(df, cfg: QualityConfig) -> dict[str, np.ndarray]:
    """All signal columns (and the scope columns) of a frame's `text`, as numpy arrays."""
    from gpupipe.kernels.repetition import (C4_CITATIONS, C4_CURLY, C4_JAVASCRIPT, C4_LOREM, C4_POLICY,
                                            C4_TERMINAL, COUNTS, quality_counts)
    from gpupipe.kernels.symbol_counts import CAPITALIZED, ELLIPSIS, HASH, WORDS, symbol_counts
    from gpupipe.kernels.text_hash import arrow_buffers

    text = text_array(df["text"])
    data, offsets = arrow_buffers(text)
    c4 = cfg.c4
    c4_flags = sum(bit for bit, on in ((C4_TERMINAL, c4.filter_no_terminal_punct), (C4_CITATIONS, c4.remove_citations),
                                       (C4_LOREM, c4.filter_lorem_ipsum), (C4_JAVASCRIPT, c4.filter_javascript),
                                       (C4_CURLY, c4.filter_curly_bracket), (C4_POLICY, c4.filter_policy)) if on)
    g = cfg.gopher_repetition
    counts, top, dup = quality_counts(
        data, offsets, cjk_words=cfg.cjk_words, parts=_parts(cfg), top_ns=sorted(g.top_ngrams) or [2],
        dup_ns=sorted(g.dup_ngrams) or [5], short_line_length=cfg.fineweb.short_line_length,
        c4_min_words_per_line=-1 if c4.min_words_per_line is None else c4.min_words_per_line,
        c4_max_word_length=-1 if c4.max_word_length is None else c4.max_word_length, c4_flags=c4_flags)
    c = {name: counts[:, k] for k, name in enumerate(COUNTS)}

    symbols = {}
    if cfg.gopher_quality.enabled:
        sym = symbol_counts(data, offsets).astype(np.float64)
        # capitalised words: whitespace-separated words starting with an uppercase letter, of all such words
        symbols = {"hash": sym[:, HASH], "ellipsis": sym[:, ELLIPSIS],
                   "capitalized_frac": _ratio(sym[:, CAPITALIZED], sym[:, WORDS])}
    return _scope(df, c, cfg) | _family_signals(c, top, dup, symbols, cfg)


# ----------------------------------------------------------------------------------------------------------------
# Decisions
# ----------------------------------------------------------------------------------------------------------------


def _col(df, name: str) -> np.ndarray:
    return np.asarray(df[name].to_numpy(), dtype=np.float64)


def _below(df, name, thr):
    return None if thr is None else _col(df, name) < thr


def _above(df, name, thr):
    return None if thr is None else _col(df, name) > thr


def _rules(df, cfg: QualityConfig) -> list[tuple[str, np.ndarray | None]]:
    """(reason, flagged) for every rule of the enabled families, in the documented order."""
    cjk = df["q_scope_cjk"].to_numpy().astype(bool)
    rules: list[tuple[str, np.ndarray | None]] = []

    def family(scope: np.ndarray, items):
        rules.extend((name, None if m is None else (m & scope)) for name, m in items)

    z = cfg.zh
    if z.enabled:
        garbled = None
        if z.no_garbled:
            garbled = (_col(df, "q_zh_bad_char_ratio") > z.max_bad_char_ratio) \
                | (_col(df, "q_zh_latin1_ratio") > z.max_latin1_ratio) \
                | (_col(df, "q_zh_rare_han_ratio") > z.max_rare_han_ratio)
        family(df["q_scope_zh"].to_numpy().astype(bool), [
            ("zh_min_chars", _below(df, "q_zh_chars", z.min_chars)),
            ("zh_max_chars", _above(df, "q_zh_chars", z.max_chars)),
            ("zh_garbled", garbled),
            ("zh_cn_char_ratio", _below(df, "q_zh_cn_char_ratio", z.min_cn_char_ratio)),
            ("zh_punctuation_ratio", _above(df, "q_zh_punctuation_ratio", z.max_punctuation_ratio)),
            ("zh_min_punctuation_ratio", _below(df, "q_zh_punctuation_ratio", z.min_punctuation_ratio)),
        ])
    q = cfg.gopher_quality
    if q.enabled:
        family(~cjk | q.apply_to_cjk, [
            ("gopher_min_words", _below(df, "q_gopher_word_count", q.min_words)),
            ("gopher_max_words", _above(df, "q_gopher_word_count", q.max_words)),
            ("gopher_min_mean_word_length", _below(df, "q_gopher_mean_word_length", q.min_mean_word_length)),
            ("gopher_max_mean_word_length", _above(df, "q_gopher_mean_word_length", q.max_mean_word_length)),
            ("gopher_hash_ratio", _above(df, "q_gopher_hash_ratio", q.max_symbol_word_ratio)),
            ("gopher_ellipsis_ratio", _above(df, "q_gopher_ellipsis_ratio", q.max_symbol_word_ratio)),
            ("gopher_bullet_lines", _above(df, "q_gopher_bullet_lines_frac", q.max_bullet_lines_ratio)),
            ("gopher_ellipsis_lines", _above(df, "q_gopher_ellipsis_lines_frac", q.max_ellipsis_lines_ratio)),
            ("gopher_alpha_words", _below(df, "q_gopher_alpha_words_frac", q.min_alpha_words_ratio)),
            ("gopher_stop_words", _below(df, "q_gopher_stop_words", q.min_stop_words)),
            ("gopher_capitalized_words", _above(df, "q_gopher_capitalized_words_frac",
                                                q.max_capitalized_words_ratio)),
        ])
    g = cfg.gopher_repetition
    if g.enabled:
        family(~cjk | g.apply_to_cjk, [
            ("gopher_rep_empty", pc.binary_length(text_array(df["text"])).to_numpy(zero_copy_only=False) == 0),
            ("gopher_rep_dup_para_frac", _above(df, "q_gopher_rep_dup_para_frac", g.dup_para_frac)),
            ("gopher_rep_dup_para_char_frac", _above(df, "q_gopher_rep_dup_para_char_frac", g.dup_para_char_frac)),
            ("gopher_rep_dup_line_frac", _above(df, "q_gopher_rep_dup_line_frac", g.dup_line_frac)),
            ("gopher_rep_dup_line_char_frac", _above(df, "q_gopher_rep_dup_line_char_frac", g.dup_line_char_frac)),
            *[(f"gopher_rep_top_{n}gram", _above(df, f"q_gopher_rep_top_{n}gram_frac", t))
              for n, t in sorted(g.top_ngrams.items())],
            *[(f"gopher_rep_dup_{n}gram", _above(df, f"q_gopher_rep_dup_{n}gram_frac", t))
              for n, t in sorted(g.dup_ngrams.items())],
        ])
    c4 = cfg.c4
    if c4.enabled:
        family(~cjk | c4.apply_to_cjk, [
            ("c4_lorem_ipsum", df["q_c4_lorem_ipsum"].to_numpy().astype(bool)),
            ("c4_curly_brace", df["q_c4_curly_brace"].to_numpy().astype(bool)),
            ("c4_min_sentences", _below(df, "q_c4_sentences", c4.min_num_sentences)),
        ])
    f = cfg.fineweb
    if f.enabled:
        punct = _col(df, "q_fineweb_line_punct_ratio")
        low_punct = None if f.line_punct_thr is None else \
            (punct < f.line_punct_thr) & ~((punct == 0) & f.line_punct_exclude_zero)
        family(~cjk | f.apply_to_cjk, [
            ("fineweb_empty", _col(df, "q_fineweb_lines") == 0),
            ("fineweb_line_punct_ratio", low_punct),
            ("fineweb_short_line_ratio", _above(df, "q_fineweb_short_line_ratio", f.short_line_thr)),
            ("fineweb_char_dup_ratio", _above(df, "q_fineweb_char_dup_ratio", f.char_duplicates_ratio)),
            ("fineweb_list_ratio", _above(df, "q_fineweb_list_ratio", f.new_line_ratio)),
        ])
    s = cfg.seed002
    if s.enabled:
        en = df["q_scope_en"].to_numpy().astype(bool)
        family(~cjk | s.apply_to_cjk, [
            ("seed002_min_words", _below(df, "q_seed002_word_count", s.min_words)),
            ("seed002_max_words", _above(df, "q_seed002_word_count", s.max_words)),
            ("seed002_min_avg_word_length", _below(df, "q_seed002_avg_word_length", s.min_avg_word_length)),
            ("seed002_max_avg_word_length", _above(df, "q_seed002_avg_word_length", s.max_avg_word_length)),
            ("seed002_special_char_ratio", _above(df, "q_seed002_special_char_ratio", s.max_special_char_ratio)),
            ("seed002_digit_ratio", _above(df, "q_seed002_digit_ratio", s.max_digit_ratio)),
            ("seed002_unique_word_ratio", _below(df, "q_seed002_unique_word_ratio", s.min_unique_word_ratio)),
            ("seed002_dup_line_ratio", _above(df, "q_seed002_dup_line_ratio", s.max_line_dup_ratio)),
        ])
        stop = _below(df, "q_seed002_stop_word_ratio", s.min_stop_word_ratio)
        family(en & (~cjk | s.apply_to_cjk), [("seed002_stop_word_ratio", stop)])
    return [(name, m) for name, m in rules if m is not None]


def decide(df, cfg: QualityConfig) -> tuple[np.ndarray, Counter]:
    """Per row the first failing rule's reason (None: keep), and how many rows each rule flags."""
    rules = _rules(df, cfg)
    flags = Counter({f"flag_{name}": int(m.sum()) for name, m in rules})
    if not rules:
        return np.full(len(df), None, dtype=object), flags
    why = np.select([m for _, m in rules], [name for name, _ in rules], default=None)
    return why.astype(object), flags


class QualityFilter(MapStage):
    name = "quality"
    Config = QualityConfig

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        if len(df) == 0:
            return df
        return df.assign(**quality_signals(df, self.config))

    def apply_partition(self, df: pd.DataFrame, info=None) -> Applied:
        """Signals, then per row the first rule that fails, and per rule how many rows it flags (whether or not an
        earlier rule already removes them): the counts go to the stats, nothing stays on `self`."""
        df = self.transform(df)
        if len(df) == 0:
            return Applied(df)
        why, flags = decide(df, self.config)
        return Applied(df, pd.Series(why, index=df.index, dtype=object), extra=Counter(flags))
