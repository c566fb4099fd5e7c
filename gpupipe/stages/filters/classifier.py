"""The `classifier` stage: a transformer sequence classifier scores every document (e.g. a
DeBERTa-v3 quality classifier kept at P ≥ 0.5, FineWeb-Edu's educational-value regressor kept at ≥ 3 on English).

  score: label       `column` = softmax probability of `label` (an index or a name of the model's id2label)
  score: regression  `column` = the raw output of a one-output model (FineWeb-Edu's 0-5 scale)
  score: argmax      `column` = probability of the most likely label, `column`_label = that label's name

Documents at or above `min_score` stay (null: annotate only, nothing removed); the others go as `low_<column>`.
With `apply_to`, only documents whose `lang` is listed are scored: the others keep a null score and pass.

The model (a local Hugging Face folder, or a hub id) loads once per worker (`setup`; under dask-cuda one per GPU
worker); a partition's documents are tokenized, truncated to `max_length` tokens (head, or head + tail), sorted
by length into batches and put back in input order (`gpupipe/models/encoder.py`), so scores depend neither on
`batch_size` / `batch_tokens` nor on document order or partitioning (fp32 on the CPU: to ~1e-6; bf16 on the GPU:
to bf16 rounding, ~1e-2 on probabilities). Train a model with `gpupipe train-classifier`.

Stats: `score_bin_*` (documents per tenth of [0, 1], or per unit for regression, scored ones), `docs_scored`,
`docs_unscored` (apply_to), `docs_truncated`, `model_tokens` (tokens fed to the model, special tokens included).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from gpupipe.config_base import KeyProblem, Strict
from gpupipe.models.ref import ModelRef, model_path
from gpupipe.stages.base import DEVICE, Applied, MapStage

log = logging.getLogger("gpupipe")
RESERVED = {"text", "id", "doc_index", "url", "lang", "lang_score", "reason", "source"}


class ClassifierConfig(Strict):
    # A local Hugging Face folder (config, weights, tokenizer) or hub id. null: the stage is skipped (documents
    # pass unscored, with a warning), so a shipped config can name the station before a model exists.
    model: ModelRef | None
    score: Literal["label", "regression", "argmax"] = "label"
    label: int | str = 1                          # for score: label, the label whose probability is the score
    column: str = Field("model_score", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    min_score: float | None = None                # keep at or above; None = annotate only
    max_length: int = Field(512, ge=4)            # tokens fed per document, special tokens included
    truncation: Literal["head", "head_tail"] = "head"   # head_tail: the first half and the last half of the budget
    batch_size: int = Field(64, ge=1)             # documents per batch …
    batch_tokens: int | None = Field(None, ge=1)  # … or at most this many padded tokens per batch
    apply_to: list[str] | None = None             # languages (`lang` column) to score; others pass unscored
    device: Literal["auto", "cpu", "gpu"] = "auto"        # auto: the run's device
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: fp32 on the CPU, bf16 on the GPU

    @model_validator(mode="after")
    def _check(self) -> "ClassifierConfig":
        if self.column in RESERVED or self.column.startswith("q_"):
            raise KeyProblem("column", f"column {self.column!r} is taken by another stage; name the score column "
                                       "(e.g. model_score, edu_score)")
        if self.score != "regression" and self.min_score is not None and not 0.0 <= self.min_score <= 1.0:
            raise KeyProblem("min_score", f"min_score {self.min_score} is a probability for score: {self.score}: "
                                          "it must lie in [0, 1]")
        return self


def score_bins(scores: np.ndarray, regression: bool) -> Counter:
    """Counts per tenth of [0, 1] (`score_bin_0.0` … `score_bin_0.9`), or per unit of a regression output
    (`score_bin_3` = [3, 4)); NaN (unscored) not counted."""
    s = np.asarray(scores, dtype=np.float64)
    s = s[~np.isnan(s)]
    if regression:
        units, counts = np.unique(np.floor(s).astype(np.int64), return_counts=True)
        return Counter({f"score_bin_{u}": int(c) for u, c in zip(units, counts)})
    bins = np.bincount(np.clip((s * 10).astype(np.int64), 0, 9), minlength=10)
    return Counter({f"score_bin_{i / 10:.1f}": int(c) for i, c in enumerate(bins)})


class Classifier(MapStage):
    name = "classifier"
    resources = DEVICE
    Config = ClassifierConfig

    def skipped(self) -> str | None:
        if self.config.model is None:
            return ("no model given (model: null): documents pass unscored; train one with `gpupipe "
                    "train-classifier` or make a demo one with `make tiny-model` (models/tiny-classifier)")
        return None

    def setup(self) -> None:
        c = self.config
        if c.model is None:   # skipped (the run says so, see skipped())
            self._encoder = None
            return
        from gpupipe.models.encoder import Encoder, label_index

        device = self.ctx.device if c.device == "auto" else c.device
        try:
            self._encoder = Encoder(model_path(c.model), head="classify", device=device, dtype=c.dtype,
                                    max_length=c.max_length, truncation=c.truncation)
        except OSError as e:
            raise OSError(f"classifier: cannot load model {model_path(c.model)!r} (a local folder with config, "
                          f"weights and tokenizer, or a hub id where the hub is reachable): {e}") from None
        cfg = self._encoder.config
        self._labels = {int(k): str(v) for k, v in (getattr(cfg, "id2label", None) or {}).items()}
        if c.score == "regression":
            if cfg.num_labels != 1:
                raise ValueError(f"classifier: score: regression needs a one-output model; {c.model} has "
                                 f"{cfg.num_labels} labels (use score: label or argmax)")
        elif cfg.num_labels < 2:
            raise ValueError(f"classifier: score: {c.score} needs a model with two labels or more; {c.model} has "
                             f"one output (use score: regression)")
        self._label = label_index(cfg, c.label) if c.score == "label" else None

    def _scored(self, df: pd.DataFrame) -> np.ndarray:
        if self.config.apply_to is None:
            return np.ones(len(df), dtype=bool)
        if "lang" not in df.columns:
            raise ValueError("classifier.apply_to needs a `lang` column: put langid before this stage")
        return df["lang"].isin(self.config.apply_to).to_numpy()

    def scores(self, texts: list) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, int]:
        """(score per text, argmax label per text or None, truncated per text, tokens fed)."""
        c = self.config
        logits, truncated, tokens = self._encoder.logits(texts, c.batch_size, c.batch_tokens)
        labels = None
        if c.score == "regression":
            score = logits[:, 0].astype(np.float64)
        else:
            z = logits.astype(np.float64)
            p = np.exp(z - z.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            if c.score == "label":
                score = p[:, self._label]
            else:
                top = p.argmax(axis=1)
                score = p[np.arange(len(p)), top]
                labels = np.array([self._labels.get(int(i), str(int(i))) for i in top], dtype=object)
        return score, labels, truncated, tokens

    def apply_partition(self, df: pd.DataFrame, info=None) -> Applied:
        c = self.config
        if self._encoder is None:   # model: null
            return Applied(df, None, Counter({"docs_scored": 0, "docs_unscored": len(df)}))
        scored = self._scored(df)
        where = np.flatnonzero(scored)
        score = np.full(len(df), math.nan)
        extra = Counter({"docs_scored": int(len(where)), "docs_unscored": int(len(df) - len(where))})
        labels = np.full(len(df), None, dtype=object)
        if len(where):
            texts = df["text"].to_numpy(dtype=object)[where].tolist()
            s, lab, truncated, tokens = self.scores(texts)
            score[where] = s
            if lab is not None:
                labels[where] = lab
            extra.update({"docs_truncated": int(truncated.sum()), "model_tokens": int(tokens)})
        extra.update(score_bins(score, c.score == "regression"))
        out = df.assign(**{c.column: score})
        if c.score == "argmax":
            out[f"{c.column}_label"] = pd.Series(labels, index=df.index, dtype=object)
        why = None
        if c.min_score is not None:
            with np.errstate(invalid="ignore"):  # NaN (unscored) is kept
                why = pd.Series(np.where(score < c.min_score, f"low_{c.column}", None), index=df.index,
                                dtype=object)
        return Applied(out, why, extra)


__all__ = ["Classifier", "ClassifierConfig", "score_bins"]
