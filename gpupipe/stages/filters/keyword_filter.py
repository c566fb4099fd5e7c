"""`nsfw_filter`: the keyword half of seed 001's NSFW step ("NSFW / 暴力：URL 黑名单 + 关键词过滤"), beside the URL
blacklist of `url_filter`.

The keyword list is `gpupipe/data/nsfw_keywords.txt` (shipped; en + zh, short and unambiguous: see its header), or a
file of your own (`words_file`, same format: one term per line, `#` comments), plus `extra_words`. Latin-script terms
match as whole words (RE2's ASCII word boundaries), case-insensitively; terms in other scripts (Chinese has no
spaces) match anywhere. The stage writes `nsfw_hits` (occurrences in the text) and `nsfw_ratio` (hits per word, words
counted as `doc_filter` counts them: a CJK character is a word).

A document goes (`nsfw_keywords`) when it has at least `min_hits` occurrences AND they are at least `min_ratio` of its
words. The seed names the filter and no threshold; these defaults are gpupipe's: 3 hits (one or two mentions are how
ordinary text, news or a policy page, names such things) and 1 per 200 words (0.005: a long article that mentions a
term a few times stays; a spam page built from the terms goes). `min_hits: 1, min_ratio: 0` is C4's rule (any hit).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from gpupipe.config_base import FileRef, Fraction, Strict
from gpupipe.data import path as data_path
from gpupipe.stages.base import Applied, MapStage
from gpupipe.stages.filters.doc_filter import word_signals

DEFAULT_WORDS_FILE = "nsfw_keywords.txt"
REASON = "nsfw_keywords"


def read_keywords(path: str | Path) -> list[str]:
    """The terms of a keyword file: one per line, `#` to the end of a line is a comment, blank lines skipped."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        term = line.split("#", 1)[0].strip()
        if term:
            out.append(term)
    return out


def keyword_regex(terms: list[str]) -> str:
    """One RE2 pattern: Latin-script terms between ASCII word boundaries, the others as they are; longest first, so
    a term and a longer one that contains it count once."""
    terms = sorted({" ".join(t.split()).lower() for t in terms if t.strip()}, key=lambda t: (-len(t), t))
    alts = []
    for t in terms:
        body = r"\s+".join(re.escape(w) for w in t.split(" "))
        alts.append(rf"\b{body}\b" if re.fullmatch(r"[a-z0-9 .'\-]+", t) else body)
    return "|".join(alts)


class NsfwFilterConfig(Strict):
    words_file: FileRef | None = None       # None: the shipped gpupipe/data/nsfw_keywords.txt
    extra_words: list[str] = []             # added to the list (or to words_file's)
    min_hits: int = Field(3, ge=1)          # occurrences before a document can go ...
    min_ratio: Fraction = 0.005             # ... and their share of its words

    @model_validator(mode="after")
    def _has_terms(self) -> "NsfwFilterConfig":
        if any(not str(w).strip() for w in self.extra_words):
            raise ValueError("extra_words: an empty term would match nothing (or everything): remove it")
        return self


class NsfwFilter(MapStage):
    name = "nsfw_filter"
    Config = NsfwFilterConfig

    @classmethod
    def outputs(cls) -> tuple[str, ...]:
        return ("nsfw_hits", "nsfw_ratio")

    def setup(self) -> None:
        c = self.config
        terms = read_keywords(c.words_file or data_path(DEFAULT_WORDS_FILE)) + list(c.extra_words)
        if not terms:
            raise ValueError(f"nsfw_filter: the keyword list {c.words_file} has no term")
        self._pattern = keyword_regex(terms)

    def apply_partition(self, df: pd.DataFrame, info=None) -> Applied:
        arr = pa.array(df["text"], type=pa.large_string(), from_pandas=True).fill_null("")
        hits = pc.count_substring_regex(arr, self._pattern, ignore_case=True).to_numpy(zero_copy_only=False)
        hits = hits.astype(np.int64)
        words = word_signals(df["text"])["q_word_count"].to_numpy()
        ratio = np.round(hits / np.maximum(words, 1), 6)
        df = df.assign(nsfw_hits=hits, nsfw_ratio=ratio)
        gone = (hits >= self.config.min_hits) & (ratio >= self.config.min_ratio)
        why = pd.Series(np.where(gone, REASON, None), index=df.index, dtype=object)
        return Applied(df, why, Counter({"docs_with_nsfw_hits": int((hits > 0).sum()), "nsfw_hits": int(hits.sum())}))


__all__ = ["NsfwFilter", "NsfwFilterConfig", "keyword_regex", "read_keywords"]
