"""Language identification with fastText's lid.176 model (shipped as gpupipe/data/lid.176.ftz).

Adds `lang` (ISO code) and `lang_score` columns, then keeps documents whose language is in `keep` and whose score
reaches `min_score` (one threshold, or one per language with `default` for the rest: seed 002 §2.2 gives zh 0.65,
en 0.80, other 0.85).

Two levels:
- `document`: one prediction per document, on the whole text when it fits in `max_chars`, else on its head, middle
  and tail (a third each), so that a long document is not filed under the language of its first lines.
- `paragraph`: one prediction per paragraph (line); the document's language is the one with the most characters
  among confidently identified paragraphs, its score their character-weighted mean confidence, and `lang_mix`
  (a JSON object string, e.g. {"en":0.83,"zh":0.17}) gives every language's share of those characters.

Short documents (seed 001 §2.3.2: fastText is unreliable on short text) are not predicted: under `min_chars`
characters they get lang `und`, score 0 and the reason `lang_too_short` (or pass, with `keep_short`). Measured on
real English and Chinese text (lid.176.ftz, random chunks): at 20 characters 4% of English and 11% of Chinese
chunks are misidentified, at 30 characters 2.5% and 6%, at 50 characters 1% and 3%; 30 is the default floor, for
documents and for voting paragraphs alike.

Every prediction of a partition is one call of gpupipe.kernels.fasttext_model, a numba reimplementation of fastText's
supervised predict over the Arrow buffers, parallel over documents and without the GIL (fastText's binding holds it,
so language ID ran on one core); it gives fastText's labels and probabilities bit for bit (see
tests/test_fasttext_kernel.py). The head/middle/tail sample and the newline-to-space folding are done in the kernel
too, so no Python loop runs per document; the per-paragraph aggregation is a pandas groupby.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from gpupipe.config import FileRef, Fraction, KeyProblem, Strict, did_you_mean
from gpupipe.stages.base import MapStage

LABEL_PREFIX = "__label__"
UNDETERMINED = "und"   # ISO 639-2 for "undetermined": documents too short to identify


def default_model_path() -> str:
    """lid.176.ftz as gpupipe ships it (package data, gpupipe/data: CC BY-SA 3.0, see the NOTICE beside it)."""
    from gpupipe import data

    return data.path(data.LID_176_FILE)


class LangIdConfig(Strict):
    keep: list[str] | None = None                  # None keeps every language
    min_score: Fraction | dict[str, Fraction] = 0.65  # or per language, e.g. {zh: 0.65, en: 0.80, default: 0.85}
    model: FileRef | None = None                   # a supervised fastText model file; default lid.176.ftz (gpupipe/data)
    max_chars: int = Field(10_000, ge=3)           # characters predicted per document (per paragraph at that level)
    level: Literal["document", "paragraph"] = "document"
    min_chars: int = Field(30, ge=0)               # shorter documents: lang `und`, score 0 (0 = only empty ones)
    keep_short: bool = False                       # keep them (as `und`) rather than drop them as lang_too_short
    paragraph_min_chars: int = Field(30, ge=1)     # paragraph level: shorter paragraphs do not vote
    paragraph_min_score: Fraction = 0.5            # paragraph level: only paragraphs this confident vote

    @model_validator(mode="after")
    def _known_languages(self) -> "LangIdConfig":
        """`keep` and the per-language `min_score` keys must be languages the model predicts: a misspelt code
        would silently drop every document of that language."""
        if self.keep == []:
            raise KeyProblem("keep", "an empty list keeps no document; leave `keep` out (null) to keep every language")
        codes = (self.keep or []) + (list(self.min_score) if isinstance(self.min_score, dict) else [])
        if not codes:
            return self
        model = self.model or default_model_path()
        try:
            known = model_languages(model) | {UNDETERMINED}
        except ValueError as e:
            raise KeyProblem("model", f"not a fastText model: {model} ({e})") from None
        for key, values, allowed in (("keep", self.keep or [], known),
                                     ("min_score", self.min_score if isinstance(self.min_score, dict) else [],
                                      known | {"default"})):
            unknown = [c for c in values if c not in allowed]
            if unknown:
                listed = ", ".join(f"'{c}'" + did_you_mean(c, allowed, n=3, cutoff=0.5) for c in unknown)
                raise KeyProblem(key, f"language code(s) the model {os.path.basename(model)} does not know: {listed}")
        return self


def model_languages(path: str) -> frozenset[str]:
    """The language codes a fastText LID model predicts (its labels without __label__); cached per file version.
    Reading lid.176.ftz's labels (0.9 MB file) takes about 15 ms."""
    st = os.stat(path)
    return _model_labels(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _model_labels(path: str, mtime_ns: int, size: int) -> frozenset[str]:
    # imports numba, only when a config names languages
    from gpupipe.kernels.fasttext_model import read_labels

    return frozenset(label.removeprefix(LABEL_PREFIX) for label in read_labels(path))


def spread_sample(text: str, max_chars: int) -> str:
    """The text if it fits in max_chars, else its head, middle and tail, a third of max_chars each."""
    if len(text) <= max_chars:
        return text
    k = max_chars // 3
    mid = (len(text) - k) // 2
    return " ".join((text[:k], text[mid:mid + k], text[-k:]))


def aggregate_paragraphs(doc: np.ndarray, lang: np.ndarray, score: np.ndarray, chars: np.ndarray,
                         min_score: float) -> pd.DataFrame:
    """Per document (index: doc): `lang` with the most characters among confident paragraphs (among all of them
    when none is confident), `lang_score` its character-weighted mean confidence, `lang_mix` the shares as JSON."""
    p = pd.DataFrame({"doc": doc, "lang": lang, "chars": chars.astype(np.float64), "score": score})
    confident = p["score"] >= min_score
    p = p[confident | ~confident.groupby(p["doc"]).transform("any")]
    p = p.assign(wscore=p["score"] * p["chars"])
    g = p.groupby(["doc", "lang"], as_index=False)[["chars", "wscore"]].sum()
    g["share"] = g["chars"] / g.groupby("doc")["chars"].transform("sum")
    g = g.sort_values(["doc", "chars", "lang"], ascending=[True, False, True], kind="stable")
    mix = ('"' + g["lang"] + '":' + g["share"].round(3).astype(str)).groupby(g["doc"]).agg(",".join)
    best = g.drop_duplicates("doc").set_index("doc")
    return pd.DataFrame({"lang": best["lang"], "lang_score": best["wscore"] / best["chars"],
                         "lang_mix": "{" + mix + "}"})


class LangId(MapStage):
    name = "langid"
    Config = LangIdConfig

    def setup(self) -> None:
        from gpupipe.kernels.fasttext_model import FastTextModel

        self._model = FastTextModel(self.config.model or default_model_path())

    def _predict(self, texts: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
        """Top language and its probability for each text, in one kernel call: fastText's predict on
        spread_sample(text, max_chars).replace("\\n", " ")."""
        from gpupipe.kernels.strings import arrow_buffers

        ids, probs = self._model.predict_buffers(*arrow_buffers(texts), max_chars=self.config.max_chars,
                                                 newline_is_space=True)
        # fastText predicts nothing only for a line without any input row (impossible with </s> in the
        # vocabulary, as in lid.176): such a text is `und` with score 0 (ids -1 picks the last entry).
        names = np.array([label.removeprefix(LABEL_PREFIX) for label in self._model.get_labels()] + [UNDETERMINED],
                         dtype=object)
        return names[ids], probs.astype(np.float64)

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        arr = pa.array(df["text"], type=pa.large_string(), from_pandas=True).fill_null("")
        chars = pc.utf8_length(pc.utf8_trim_whitespace(arr)).to_numpy(zero_copy_only=False)
        short = chars < max(self.config.min_chars, 1)
        lang = np.full(len(df), UNDETERMINED, dtype=object)
        score = np.zeros(len(df), dtype=np.float64)
        if self.config.level == "paragraph":
            mix = np.full(len(df), "{}", dtype=object)
            self._paragraph_level(arr, chars, short, lang, score, mix)
            return df.assign(lang=lang, lang_score=np.round(score, 4), lang_mix=mix)
        todo = np.flatnonzero(~short)
        lang[todo], score[todo] = self._predict(arr.take(todo))
        return df.assign(lang=lang, lang_score=np.round(score, 4))

    def _paragraph_level(self, arr: pa.Array, chars: np.ndarray, short: np.ndarray,
                         lang: np.ndarray, score: np.ndarray, mix: np.ndarray) -> None:
        """Fills lang, score and mix in place for the documents that are not short."""
        cfg = self.config
        lines = pc.split_pattern(arr, "\n")
        parent = pc.list_parent_indices(lines).to_numpy()
        para = pc.utf8_trim_whitespace(pc.list_flatten(lines))
        para_chars = pc.utf8_length(para).to_numpy(zero_copy_only=False)
        votes = (para_chars >= cfg.paragraph_min_chars) & ~short[parent]
        # A document of short lines only (a list, a poem) is predicted whole, as one paragraph.
        whole = np.flatnonzero(~short & (np.bincount(parent[votes], minlength=len(arr)) == 0))
        # Paragraphs are cut to max_chars (their head), so the kernel's spread sample leaves them as they are.
        heads = pc.utf8_slice_codeunits(para.filter(votes), 0, cfg.max_chars)
        parts = [x.cast(pa.large_string()) for x in (heads, arr.take(whole))]
        texts = pa.chunked_array([c for x in parts for c in (x.chunks if isinstance(x, pa.ChunkedArray) else [x])],
                                 type=pa.large_string())
        plang, pscore = self._predict(texts)
        doc = np.concatenate([parent[votes], whole])
        weight = np.concatenate([para_chars[votes], chars[whole]])
        agg = aggregate_paragraphs(doc, plang, pscore, weight, cfg.paragraph_min_score)
        at = agg.index.to_numpy()
        lang[at], score[at], mix[at] = (agg["lang"].to_numpy(), agg["lang_score"].to_numpy(),
                                        agg["lang_mix"].to_numpy())

    def _thresholds(self, langs: pd.Series) -> np.ndarray:
        t = self.config.min_score
        if isinstance(t, float | int):
            return np.full(len(langs), float(t))
        return langs.map(t).fillna(t.get("default", 0.0)).to_numpy(dtype=np.float64)

    def reasons(self, df: pd.DataFrame) -> pd.Series:
        why = np.full(len(df), None, dtype=object)   # later rules override earlier ones
        why[df["lang_score"].to_numpy() < self._thresholds(df["lang"])] = "lang_low_score"
        if self.config.keep is not None:
            why[~df["lang"].isin(self.config.keep).to_numpy()] = "lang_not_kept"
        why[(df["lang"] == UNDETERMINED).to_numpy()] = None if self.config.keep_short else "lang_too_short"
        return pd.Series(why, index=df.index, dtype=object)

    def extra_stats(self, df_out: pd.DataFrame) -> Counter:
        return Counter({f"kept_lang_{k}": int(v) for k, v in df_out["lang"].value_counts().items()})
