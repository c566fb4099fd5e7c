"""A first document filter: word count and mean word length (Gopher's first two rules), CJK-aware.

Signals are columns (`q_word_count`, `q_mean_word_length`, `q_cjk_fraction`) computed with Arrow regex kernels, so
thresholds can be re-tuned without recomputing. A CJK character counts as one word (Chinese has no spaces); mean
word length is judged on non-CJK words only and skipped for mostly-CJK documents.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pydantic import Field

from gpupipe.config_base import Fraction, Strict, ordered
from gpupipe.kernels.script_class import CJK, class_body
from gpupipe.stages.base import MapStage

_CJK = class_body(CJK)   # Han, kana and Hangul (kernels/script_class.py)
_WORD = rf"[^\s\p{{P}}\p{{S}}\p{{Z}}\p{{Cc}}{_CJK}]+"      # a run of letters/digits outside CJK scripts
_WORD_CHAR = rf"[^\s\p{{P}}\p{{S}}\p{{Z}}\p{{Cc}}{_CJK}]"
_CJK_CHAR = rf"[{_CJK}]"


def word_signals(texts: pd.Series) -> pd.DataFrame:
    arr = pa.array(texts, type=pa.large_string(), from_pandas=True).fill_null("")
    words = pc.count_substring_regex(arr, _WORD).to_numpy(zero_copy_only=False).astype(np.int64)
    letters = pc.count_substring_regex(arr, _WORD_CHAR).to_numpy(zero_copy_only=False).astype(np.int64)
    cjk = pc.count_substring_regex(arr, _CJK_CHAR).to_numpy(zero_copy_only=False).astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_len = np.where(words > 0, letters / np.maximum(words, 1), 0.0)
        cjk_frac = np.where(cjk + letters > 0, cjk / np.maximum(cjk + letters, 1), 0.0)
    return pd.DataFrame({"q_word_count": words + cjk, "q_mean_word_length": np.round(mean_len, 4),
                         "q_cjk_fraction": np.round(cjk_frac, 4)}, index=texts.index)


class DocFilterConfig(Strict):
    min_words: int = Field(50, ge=0)
    max_words: int = Field(100_000, ge=0)
    min_mean_word_length: float = Field(3.0, ge=0)
    max_mean_word_length: float = Field(10.0, ge=0)
    cjk_fraction_skip_mean: Fraction = 0.5   # above this CJK share, mean word length says nothing

    _order = ordered(("min_words", "max_words"), ("min_mean_word_length", "max_mean_word_length"))


class DocFilter(MapStage):
    name = "doc_filter"
    Config = DocFilterConfig

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        return pd.concat([df, word_signals(df["text"])], axis=1)

    def reasons(self, df: pd.DataFrame) -> pd.Series:
        c = self.config
        n, mean, cjk = df["q_word_count"], df["q_mean_word_length"], df["q_cjk_fraction"]
        judged = cjk <= c.cjk_fraction_skip_mean
        why = np.select(
            [n < c.min_words, n > c.max_words,
             judged & ((mean < c.min_mean_word_length) | (mean > c.max_mean_word_length))],
            ["too_few_words", "too_many_words", "mean_word_length"], default=None)
        return pd.Series(why, index=df.index, dtype=object)
