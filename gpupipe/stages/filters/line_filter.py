"""Line filter (the user's spec's line rules: navigation, social-media and boilerplate regexes, short lines,
all-caps lines): removes boilerplate LINES from documents, vectorized with Arrow.

All lines of a partition are judged at once: texts are split on "\\n" into one list array, each rule runs on the
flattened line array with Arrow regex/length kernels, and the texts are rebuilt from the lines that remain
(ListArray + binary_join). No Python loop runs per line or per document.

Rules, in this order; a line goes to the first rule that hits it, so it is counted once:
  1. the regex rules of `patterns`, in their config order (default: nav_elements, social_media, boilerplate),
     searched anywhere in the line (anchor with ^ as nav_elements does);
  2. short_lines: fewer than `short_lines_min_words` words. Words are whitespace-separated tokens as in the spec's
     `line.split()`, except that each Han/kana character is one word (Chinese and Japanese have no spaces, so a
     12-character Chinese sentence is 12 words, not 1) and CJK punctuation is none;
  3. all_uppercase: at least `all_uppercase_min_chars` characters (the spec's len > 10), and every cased letter
     upper-case; a line without cased letters (digits, Chinese) is never "upper-case" (the spec's
     `line == line.upper()` would remove every long Chinese line).

Rules judge a line without its leading/trailing whitespace. Blank lines are paragraph breaks, not content: no rule
applies to them and they are not counted (`lines_in` = content lines). In a document that lost lines, runs of blank
lines left behind are folded to one and blank lines at its ends removed; other documents are untouched. A document
with no content line left is dropped (`empty_after_line_filter`) with its original text, so its reject shows what
the rules removed.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, field_validator

from gpupipe.config_base import Strict
from gpupipe.kernels.script_class import HAN_KANA, class_body
from gpupipe.stages.base import Applied, MapStage
from gpupipe.stages.filters.url_filter import check_re2

SEED_PATTERNS = {
    "nav_elements": r"^(Home|About|Contact|Menu|Navigation|Copyright|©)",
    "social_media": r"(Share on|Follow us|Tweet|Like us)",
    "boilerplate": r"(Cookie|Accept|Subscribe|Newsletter|Click here)",
}
BUILTIN_RULES = ("short_lines", "all_uppercase")

_CJK_CHAR = class_body(HAN_KANA)   # Han and kana, one word each; Korean is spaced (kernels/script_class.py)
# CJK symbols and punctuation (。「」、…), fullwidth ASCII punctuation (，！？：；（）), halfwidth forms (｡｢｣､)
_CJK_PUNCT = r"\x{3000}-\x{303F}\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF20}\x{FF3B}-\x{FF40}\x{FF5B}-\x{FF65}"
_HSPACE = r"\t\x{0B}\f\r\p{Z}\x{1C}-\x{1F}\x{85}"   # Python's str.isspace() characters but "\n"
_SPACE = _HSPACE + r"\n"                               # what Python's str.split() splits on
_WORD = rf"[{_CJK_CHAR}]|[^{_SPACE}{_CJK_CHAR}{_CJK_PUNCT}]+"
_WORD_CHAR = rf"[^{_SPACE}{_CJK_PUNCT}]"


def count_words(lines: pa.Array) -> pa.Array:
    """Words per line, CJK-aware (see the module docstring)."""
    return pc.count_substring_regex(lines, _WORD)


def fewer_words(lines: pa.Array, k: int) -> np.ndarray:
    """count_words(lines) < k, 4x faster: counting is the costliest kernel here, so a cheap search first settles
    the lines that plainly have k words (k word characters, each after a space: k distinct tokens) and only the
    rest (short lines, unspaced CJK) are counted."""
    out = np.zeros(len(lines), dtype=bool)
    rest = np.arange(len(lines))
    if k <= 16:  # keeps the search regex small
        sure = rf"{_WORD_CHAR}(?:.*[{_SPACE}]{_WORD_CHAR}){{{k - 1}}}"
        rest = np.flatnonzero(~pc.match_substring_regex(lines, sure).to_numpy(zero_copy_only=False))
    out[rest] = pc.less(count_words(lines.take(rest)), k).to_numpy(zero_copy_only=False)
    return out


class LineFilterConfig(Strict):
    patterns: dict[str, str] = Field(default_factory=lambda: dict(SEED_PATTERNS),
                                     description="rule name → regex; a line where it matches is removed")
    ignore_case: bool = Field(False, description="the seed's patterns are case-sensitive (Python's re default)")
    short_lines_min_words: int | None = Field(3, ge=1, description="remove lines with fewer words; null: off")
    all_uppercase_min_chars: int | None = Field(11, ge=1, description="remove all-upper-case lines at least this "
                                                                        "long; null: off")

    @field_validator("patterns")
    @classmethod
    def _names_and_regexes(cls, v: dict[str, str]) -> dict[str, str]:
        for name, pattern in v.items():
            if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or name in BUILTIN_RULES:
                raise ValueError(f"rule name {name!r}: snake_case, and not one of {BUILTIN_RULES}")
            check_re2(pattern)
        return v


Rule = Callable[[pa.Array], np.ndarray]  # stripped lines → remove? (bool per line)


def _np(mask: pa.Array) -> np.ndarray:
    return mask.to_numpy(zero_copy_only=False)


def build_rules(cfg: LineFilterConfig) -> list[tuple[str, Rule]]:
    """The rules in the order they apply (see the module docstring)."""
    rules: list[tuple[str, Rule]] = [
        (name, lambda s, p=pattern: _np(pc.match_substring_regex(s, p, ignore_case=cfg.ignore_case)))
        for name, pattern in cfg.patterns.items()]
    if cfg.short_lines_min_words is not None:
        rules.append(("short_lines", lambda s: fewer_words(s, cfg.short_lines_min_words)))
    if cfg.all_uppercase_min_chars is not None:
        rules.append(("all_uppercase", lambda s: _np(pc.and_(
            pc.utf8_is_upper(s), pc.greater_equal(pc.utf8_length(s), cfg.all_uppercase_min_chars)))))
    return rules


def judge_lines(stripped: pa.Array, rules: list[tuple[str, Rule]]) -> tuple[np.ndarray, np.ndarray, Counter]:
    """Per line: content? kept? and the lines each rule removed. A rule sees only the lines still in play."""
    content = pc.greater(pc.binary_length(stripped), 0).to_numpy(zero_copy_only=False)
    alive = content.copy()
    removed = Counter()
    for name, rule in rules:
        rows = np.flatnonzero(alive)
        if not len(rows):
            removed[f"lines_removed_{name}"] += 0
            continue
        hit = rule(stripped.take(rows))
        alive[rows[hit]] = False
        removed[f"lines_removed_{name}"] += int(hit.sum())
    return content, alive, removed


def _tidy(texts: pa.Array) -> pa.Array:
    """Blank lines left where lines went: runs folded to one, none at the ends."""
    blank = rf"[{_HSPACE}]*"
    texts = pc.replace_substring_regex(texts, rf"\n(?:{blank}\n){{2,}}", "\n\n")
    texts = pc.replace_substring_regex(texts, rf"^(?:{blank}\n)+", "")
    return pc.replace_substring_regex(texts, rf"(?:\n{blank})+$", "")


def filter_lines(texts: pa.Array, rules: list[tuple[str, Rule]]) -> tuple[pa.Array, np.ndarray, Counter]:
    """(new texts, content lines left per document, counters). Texts of documents left empty are not rebuilt."""
    n = len(texts)
    texts = pc.fill_null(texts, pa.scalar("", texts.type))
    lines = pc.split_pattern(texts, "\n")
    flat, parent = pc.list_flatten(lines), pc.list_parent_indices(lines).to_numpy()
    content, alive, counts = judge_lines(pc.utf8_trim_whitespace(flat), rules)
    keep = alive | ~content                                      # blank lines stay, as paragraph breaks
    left = np.bincount(parent[alive], minlength=n)
    lost = np.bincount(parent[content & ~alive], minlength=n)
    counts["lines_in"] = int(content.sum())
    counts["lines_out"] = int(alive.sum())
    changed = (lost > 0) & (left > 0)                            # only these are rebuilt
    if changed.any():
        take = keep & changed[parent]                            # lines stay grouped by document, in order
        per_doc = np.bincount(parent[take], minlength=n)[changed]
        offsets = np.concatenate([[0], np.cumsum(per_doc)]).astype(np.int32)
        rebuilt = pc.binary_join(pa.ListArray.from_arrays(offsets, flat.filter(pa.array(take))),
                                 pa.scalar("\n", flat.type))
        texts = pc.replace_with_mask(texts, pa.array(changed), _tidy(rebuilt))
    return texts, left, counts


class LineFilter(MapStage):
    name = "line_filter"
    Config = LineFilterConfig

    def setup(self) -> None:
        self._rules = build_rules(self.config)

    def apply_partition(self, df: pd.DataFrame, info=None) -> Applied:
        """Lines dropped; a document left empty goes as `empty_after_line_filter`; per-rule line counts."""
        if not hasattr(self, "_rules"):
            self.setup()
        arr = pa.array(df["text"], type=pa.large_string(), from_pandas=True)
        out, left, counts = filter_lines(arr, self._rules)
        empty = left == 0
        text = pd.Series(out.to_pandas().array, index=df.index)
        text = text.where(~empty, df["text"])               # a dropped document keeps its text for its reject
        df = df.assign(text=text.astype(df["text"].dtype))
        return Applied(df, pd.Series(np.where(empty, "empty_after_line_filter", None), index=df.index,
                                     dtype=object), extra=Counter(counts))
