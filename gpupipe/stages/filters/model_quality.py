"""Model-based quality: a fastText quality classifier (DCLM-style) and a KenLM perplexity filter (CCNet-style).

`quality_classifier` adds `quality_score` = P(high quality) from a binary fastText model and drops documents below
`min_score` (default 0.5: keep P(hq) >= 0.5; a score equal to min_score is kept). Users train that model on their
own examples with `gpupipe train-quality --positive GOOD --negative BAD --out MODEL.bin`
(`train_quality_classifier` below): DataComp-LM trains this kind of bigram fastText model (`__label__hq` vs the
rest) and filters on the `hq` probability.

`perplexity` adds `perplexity` from a user-supplied KenLM model (ARPA or KenLM binary) and drops documents outside
absolute bounds or outside percentile bounds of a reference sample (the user's spec keeps the 5th-95th percentile:
too low is boilerplate/repetition, too high is garbage). Scoring follows CCNet: each non-blank line is normalized
(`lm_normalize`), split on whitespace and scored with <s> … </s>; perplexity = 10^(-Σ log10 p / Σ (words + 1)).
The KenLM model must have been trained on text that went through the same `lm_normalize` (one line per sentence or
paragraph), or its vocabulary will not match. Whitespace words suit space-delimited languages; `apply_to` limits
the stage to those (by the `lang` column).

Both models are Python calls per document (fastText on a list per partition, KenLM per line); the partitions run in
parallel, and each worker loads a model once (`setup`).
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import math
import os
import random
import re
import sys
import tempfile
import unicodedata
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from gpupipe.config_base import FileRef, Fraction, Strict, ordered
from gpupipe.io import storage
from gpupipe.io.parts import atomic_output, atomic_write_text
from gpupipe.stages.base import Applied, MapStage

LABEL_PREFIX = "__label__"
HQ_LABEL, LQ_LABEL = "hq", "lq"
DEFAULT_MAX_CHARS = 20_000   # classify a prefix: enough to judge the style, bounded cost on huge documents
SCORE_BINS = 10


# ----------------------------------------------------------------------------- reading training / reference files

def read_texts(path: str | os.PathLike, text_field: str = "text") -> tuple[list[str], int]:
    """The documents of a training or reference file, and how many records were skipped (unreadable, no text).

    JSONL (.jsonl/.json/.ndjson, gzip or zstd) and Parquet give one document per record (`text_field`); any other
    file is plain text (gzip allowed), one document per non-blank line.
    """
    from gpupipe.io.readers import iter_records
    from gpupipe.io.records import detect_format

    try:
        fmt = detect_format(path)
    except ValueError:
        fmt = "text"
    if fmt in ("jsonl", "parquet"):
        texts, skipped = [], 0
        for item in iter_records(path, fmt, text_field=text_field):
            if isinstance(item, dict):
                texts.append(item["text"])
            else:
                skipped += 1
        return texts, skipped
    if fmt != "text":
        raise ValueError(f"{os.fspath(path)!r}: expected JSONL, Parquet or plain text (one document per line), "
                         f"got {fmt}")
    with _open_text(path) as f:
        return [line.rstrip("\r\n") for line in f if line.strip()], 0


def reference_languages(path: str | os.PathLike, text_field: str = "text") -> list[str | None]:
    """The `lang` of each document read_texts gives (None where a record has none, and for plain text)."""
    from gpupipe.io.readers import iter_records
    from gpupipe.io.records import detect_format

    try:
        fmt = detect_format(path)
    except ValueError:
        fmt = "text"
    if fmt not in ("jsonl", "parquet"):
        return [None] * len(read_texts(path, text_field)[0])
    return [item.get("lang") if isinstance(item.get("lang"), str) else None
            for item in iter_records(path, fmt, text_field=text_field) if isinstance(item, dict)]


BUCKET_MIN_DOCS = 10   # a language needs this many scored reference documents for cut points of its own


def bucket_cutoffs(model, texts: list[str], langs: list[str | None],
                   percentiles: tuple[float, float]) -> dict[str, tuple[float, float]]:
    """CCNet's cut points: the given percentiles of the reference's perplexities, per language (`lang` of the
    reference records, where a language has BUCKET_MIN_DOCS scored documents) and over all (`default`)."""
    pp = np.array([doc_perplexity(model, t) for t in texts], dtype=np.float64)
    lang = np.array([x if x is not None else "" for x in langs], dtype=object)
    scored = ~np.isnan(pp)
    if not scored.any():
        raise ValueError("the perplexity reference sample has no scorable document")

    def cuts(sel):
        return tuple(round(float(np.percentile(pp[sel], q)), 2) for q in percentiles)

    out = {"default": cuts(scored)}
    for code in sorted({x for x in lang if x}):
        sel = scored & (lang == code)
        if sel.sum() >= BUCKET_MIN_DOCS:
            out[code] = cuts(sel)
    return out


def _open_text(path):
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")


# ----------------------------------------------------------------------------- fastText quality classifier

# fastText splits words on ASCII whitespace and NUL, and its predict() refuses newlines; folding every separator
# (Unicode ones too) to one space makes a document one line with the same words.
_FASTTEXT_WS = r"[\s\v\x00\x{85}\p{Z}]+"


def fasttext_texts(texts: Iterable[str] | pd.Series, max_chars: int = DEFAULT_MAX_CHARS) -> list[str]:
    """Texts as the classifier sees them, in training and in filtering: a prefix of `max_chars`, lower-cased,
    every whitespace run (newlines included) one space. Column-wise Arrow kernels, no per-document Python."""
    arr = pa.array(list(texts) if not isinstance(texts, pd.Series) else texts, type=pa.large_string(),
                   from_pandas=True).fill_null("")
    arr = pc.utf8_lower(pc.utf8_slice_codeunits(arr, 0, max_chars))
    arr = pc.utf8_trim_whitespace(pc.replace_substring_regex(arr, _FASTTEXT_WS, " "))
    return arr.to_pylist()


FASTTEXT_MISSING = ("the quality_classifier stage and `gpupipe train-quality` need fastText, which the base install "
                    "leaves out: pip install 'gpupipe[fasttext]'")


def _import_fasttext():
    """fastText's Python binding (the `fasttext` extra: a wheel build of fastText); a clear error where it is missing."""
    try:
        import fasttext
    except ImportError as e:
        raise ImportError(f"{FASTTEXT_MISSING} ({e})") from None
    return fasttext


def load_fasttext(path: str, label: str):
    """A fastText classifier that knows `__label__<label>`; a clear error if not."""
    fasttext = _import_fasttext()

    if not os.path.exists(path):
        raise FileNotFoundError(f"quality classifier model not found: {path} (train one with `gpupipe train-quality`)")
    fasttext.FastText.eprint = lambda *a, **k: None  # silence the load-time warning on stderr
    model = fasttext.load_model(path)
    labels = model.get_labels()
    if LABEL_PREFIX + label not in labels:
        raise ValueError(f"{path}: the model has no label {LABEL_PREFIX + label} (its labels: {', '.join(labels)})")
    return model


def label_probabilities(model, texts: list[str], label: str) -> np.ndarray:
    """P(label) per text. All labels are asked for (k=-1), so the order fastText returns them in does not matter."""
    if not texts:
        return np.zeros(0)
    labels, probs = model.predict(texts, k=-1, threshold=0.0)  # a list: fasttext 0.9.3's str predict breaks on numpy 2
    target = LABEL_PREFIX + label
    p = np.array([next((float(q) for lab, q in zip(labs, qs) if lab == target), 0.0)
                  for labs, qs in zip(labels, probs)])
    return np.clip(p, 0.0, 1.0)  # fastText adds 1e-5 to every probability, so a sure "yes" reads 1.00001


def score_histogram(scores: np.ndarray, prefix: str = "score_bin") -> Counter:
    """Counts per tenth of [0, 1]: `score_bin_0.0` … `score_bin_0.9` (1.0 falls in the last bin)."""
    bins = np.clip((np.asarray(scores, dtype=np.float64) * SCORE_BINS).astype(np.int64), 0, SCORE_BINS - 1)
    counts = np.bincount(bins, minlength=SCORE_BINS)
    return Counter({f"{prefix}_{i / SCORE_BINS:.1f}": int(c) for i, c in enumerate(counts)})


class QualityClassifierConfig(Strict):
    model: FileRef                                # a fastText model from `gpupipe train-quality` (or DCLM's)
    min_score: Fraction = 0.5                     # keep P(hq) ≥ 0.5 (the user's spec)
    label: str = HQ_LABEL                         # the label whose probability is the score
    max_chars: int = Field(DEFAULT_MAX_CHARS, ge=1)


class QualityClassifier(MapStage):
    name = "quality_classifier"
    Config = QualityClassifierConfig

    @classmethod
    def outputs(cls) -> tuple[str, ...]:
        return ("quality_score",)

    def setup(self) -> None:
        self._model = load_fasttext(self.config.model, self.config.label)

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        texts = fasttext_texts(df["text"], self.config.max_chars)
        score = label_probabilities(self._model, texts, self.config.label)
        return df.assign(quality_score=np.round(score, 4))

    def reasons(self, df: pd.DataFrame) -> pd.Series:
        why = np.where(df["quality_score"].to_numpy() < self.config.min_score, "low_quality_score", None)
        return pd.Series(why, index=df.index, dtype=object)

    def apply_partition(self, df: pd.DataFrame, info=None) -> Applied:
        # The histogram covers every document (kept and removed), so it shows where the threshold cuts.
        df = self.transform(df)
        return Applied(df, self.reasons(df), score_histogram(df["quality_score"].to_numpy()))


# ----------------------------------------------------------------------------- training (gpupipe train-quality)

def _split(texts: list[str], fraction: float, rng: random.Random) -> tuple[list[str], list[str]]:
    """(train, valid), shuffled; per class, so both labels are in the validation set."""
    texts = list(texts)
    rng.shuffle(texts)
    n_valid = round(len(texts) * fraction)
    if fraction > 0 and len(texts) > 1:
        n_valid = min(max(n_valid, 1), len(texts) - 1)
    return texts[n_valid:], texts[:n_valid]


def binary_metrics(truth: np.ndarray, predicted: np.ndarray) -> dict[str, float | int]:
    """Precision, recall and F1 of the positive class (hq), plus accuracy."""
    tp = int(np.sum(truth & predicted))
    fp = int(np.sum(~truth & predicted))
    fn = int(np.sum(truth & ~predicted))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    accuracy = float(np.mean(truth == predicted)) if len(truth) else 0.0
    return {"docs": int(len(truth)), "precision": round(precision, 4), "recall": round(recall, 4),
            "f1": round(f1, 4), "accuracy": round(accuracy, 4)}


M_PERTURB = -6  # glibc mallopt parameter


@contextmanager
def zero_filled_allocations():
    """Make malloc hand out zero-filled memory for the duration (glibc's M_PERTURB; a no-op elsewhere).

    fastText 0.9.3 allocates its input matrix without zeroing it (aligned buffers) and randomizes only a tenth of
    it per training thread, so with thread=1 the other nine tenths are whatever the heap held before: training
    then fails at random with "Encountered NaN" or gives a different model each run. Zero-filled memory restores
    fastText 0.9.2's behaviour (the rest of the matrix starts at zero) and makes training deterministic again.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        yield
        return
    mallopt(M_PERTURB, 0xFF)  # allocated bytes become ~0xFF = 0x00
    try:
        yield
    finally:
        mallopt(M_PERTURB, 0)


def _class_texts(path: str, text_field: str, max_chars: int) -> tuple[list[str], dict[str, int]]:
    raw, skipped = read_texts(path, text_field)
    texts = [t for t in fasttext_texts(raw, max_chars) if t]
    return texts, {"records": len(raw) + skipped, "used": len(texts), "skipped": skipped + len(raw) - len(texts)}


def train_quality_classifier(positive: str, negative: str, out: str, *, text_field: str = "text", epochs: int = 5,
                             lr: float = 0.1, word_ngrams: int = 2, dim: int = 64, bucket: int = 2_000_000,
                             valid_fraction: float = 0.1, seed: int = 0, threads: int = 1,
                             max_chars: int = DEFAULT_MAX_CHARS) -> dict[str, Any]:
    """Train a binary fastText classifier (__label__hq = positive, __label__lq = negative), save it to `out` and its
    description (parameters, counts, validation metrics) to `out + ".json"`; returns that description.

    Deterministic for a seed with threads=1: fastText's multithreaded SGD (Hogwild) depends on thread timing.
    """
    fasttext = _import_fasttext()

    if not 0.0 <= valid_fraction < 1.0:
        raise ValueError(f"valid fraction must be in [0, 1), got {valid_fraction}")
    for what, value in (("epochs", epochs), ("word ngrams", word_ngrams), ("dim", dim), ("threads", threads),
                        ("max chars", max_chars)):
        if value < 1:
            raise ValueError(f"{what} must be at least 1, got {value}")
    pos, pos_counts = _class_texts(positive, text_field, max_chars)
    neg, neg_counts = _class_texts(negative, text_field, max_chars)
    for what, texts, path in (("positive", pos, positive), ("negative", neg, negative)):
        if not texts:
            raise ValueError(f"no {what} documents in {path}")

    rng = random.Random(seed)
    pos_train, pos_valid = _split(pos, valid_fraction, rng)
    neg_train, neg_valid = _split(neg, valid_fraction, rng)
    train = [f"{LABEL_PREFIX}{HQ_LABEL} {t}" for t in pos_train] + [f"{LABEL_PREFIX}{LQ_LABEL} {t}" for t in neg_train]
    rng.shuffle(train)  # SGD sees the classes interleaved, in an order fixed by the seed

    params = {"epoch": epochs, "lr": lr, "wordNgrams": word_ngrams, "dim": dim, "bucket": bucket, "thread": threads,
              "seed": seed, "minCount": 1, "loss": "softmax"}
    with tempfile.TemporaryDirectory(prefix="gpupipe-train-quality-") as tmp:
        train_file = os.path.join(tmp, "train.txt")
        Path(train_file).write_text("\n".join(train) + "\n", encoding="utf-8")
        try:
            with zero_filled_allocations():
                model = fasttext.train_supervised(input=train_file, verbose=0, **params)
        except RuntimeError as e:  # fastText's "Encountered NaN.": the weights diverged
            raise ValueError(f"fastText training failed ({e}); try a lower --lr") from None

    valid_texts = pos_valid + neg_valid
    truth = np.array([True] * len(pos_valid) + [False] * len(neg_valid), dtype=bool)
    predicted = label_probabilities(model, valid_texts, HQ_LABEL) >= 0.5
    metrics = binary_metrics(truth, predicted) if len(valid_texts) else None

    out = Path(out)
    with atomic_output(out) as tmp_out:  # never a half model under the real name
        model.save_model(str(tmp_out))
    info = {
        "model": str(out),
        "sha256": storage.sha256(str(out)),
        "labels": {"positive": LABEL_PREFIX + HQ_LABEL, "negative": LABEL_PREFIX + LQ_LABEL},
        "inputs": {"positive": os.fspath(positive), "negative": os.fspath(negative), "text_field": text_field},
        "normalization": {"lower_case": True, "whitespace_folded": True, "max_chars": max_chars},
        "params": {**params, "valid_fraction": valid_fraction},
        "counts": {"positive": pos_counts, "negative": neg_counts, "train": len(train), "valid": len(valid_texts)},
        "validation": metrics,
    }
    atomic_write_text(f"{out}.json", json.dumps(info, indent=2) + "\n")
    return info


def cmd_train_quality(args: argparse.Namespace) -> int:
    from gpupipe.io.records import ReaderError

    try:
        info = train_quality_classifier(
            args.positive, args.negative, args.out, text_field=args.text_field, epochs=args.epochs, lr=args.lr,
            word_ngrams=args.word_ngrams, dim=args.dim, bucket=args.bucket, valid_fraction=args.valid_fraction,
            seed=args.seed, threads=args.threads, max_chars=args.max_chars)
    except (OSError, ValueError, ImportError, ReaderError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    c = info["counts"]
    print(f"trained on {c['train']} documents ({c['positive']['used']} positive, {c['negative']['used']} negative "
          f"in all; {c['positive']['skipped'] + c['negative']['skipped']} skipped)")
    v = info["validation"]
    if v:
        print(f"validation ({v['docs']} held-out documents): {classification_scores(v)}")
    print(f"wrote {info['model']} and {info['model']}.json")
    return 0


def classification_scores(v: dict) -> str:
    """A classifier's held-out scores as the training commands print them (train-quality, train-classifier)."""
    return f"precision {v['precision']:.4f}  recall {v['recall']:.4f}  F1 {v['f1']:.4f}  accuracy {v['accuracy']:.4f}"


def add_train_quality_parser(subparsers) -> argparse.ArgumentParser:
    """Add `gpupipe train-quality` to the CLI's subparsers."""
    t = subparsers.add_parser("train-quality", help="train a fastText quality classifier (DCLM-style)", description=(
        "Train a binary fastText classifier on high-quality (--positive) vs low-quality (--negative) documents for "
        "the quality_classifier stage. Files are JSONL(.gz/.zst) or plain text with one document per line. Texts "
        "are lower-cased and whitespace-folded, labelled __label__hq / __label__lq, shuffled by --seed; a "
        "--valid-fraction of each class is held out and scored. Writes MODEL.bin and MODEL.bin.json."))
    t.add_argument("--positive", required=True, help="high-quality documents")
    t.add_argument("--negative", required=True, help="low-quality documents")
    t.add_argument("--out", required=True, help="model file to write (e.g. quality.bin)")
    t.add_argument("--text-field", dest="text_field", default="text", help="JSONL text field (default text)")
    t.add_argument("--epochs", type=int, default=5, help="training epochs (default 5)")
    t.add_argument("--lr", type=float, default=0.1, help="learning rate (default 0.1)")
    t.add_argument("--word-ngrams", dest="word_ngrams", type=int, default=2, help="word n-gram order (default 2)")
    t.add_argument("--dim", type=int, default=64, help="embedding size (default 64)")
    t.add_argument("--bucket", type=int, default=2_000_000, help=(
        "hash buckets for word n-grams (default 2000000, fastText's); the model takes about "
        "(vocabulary + bucket) x dim x 4 bytes, so lower it for small experiments"))
    t.add_argument("--valid-fraction", dest="valid_fraction", type=float, default=0.1,
                   help="fraction of each class held out for validation (default 0.1)")
    t.add_argument("--seed", type=int, default=0, help="shuffle/split/training seed (default 0)")
    t.add_argument("--threads", type=int, default=1, help=(
        "training threads (default 1: fastText's multithreaded training is not deterministic)"))
    t.add_argument("--max-chars", dest="max_chars", type=int, default=DEFAULT_MAX_CHARS,
                   help=f"characters of each document used (default {DEFAULT_MAX_CHARS}, as the stage's max_chars)")
    t.set_defaults(fn=cmd_train_quality)
    return t


# ----------------------------------------------------------------------------- KenLM perplexity

# CCNet's normalization (cc_net/text_normalizer.py, normalize() with its defaults): lower-case, accents stripped,
# every digit 0, CJK/typographic punctuation folded to ASCII (the same table), control characters out. The LM
# then sees fewer distinct words (one "0000" for every year), as it did in training. One departure: control
# characters become spaces, where CCNet deletes them and so glues tab-separated words together.
_PUNCT_FOLD = str.maketrans({
    **dict.fromkeys("，、", ","), **dict.fromkeys("。", "."), **dict.fromkeys("„”“«»」「《》", '"'),
    **dict.fromkeys("´’", "'"), **dict.fromkeys("∶：", ":"), **dict.fromkeys("–━►", "-"),
    "？": "?", "！": "!", "（": "(", "）": ")", "；": ";", "—": " - ", "．": ". ", "～": "~", "…": "...",
    "〈": "<", "〉": ">", "【": "[", "】": "]", "％": "%",
})
_DIGIT = re.compile(r"\d")
_NON_PRINTING = re.compile("[\x00-\x1f\x7f-\x9f]")


def _strip_accents(line: str) -> str:
    if line.isascii():
        return line
    return "".join(c for c in unicodedata.normalize("NFD", line) if unicodedata.category(c) != "Mn")


def lm_normalize(line: str) -> str:
    """One line as the KenLM model sees it: CCNet-normalized, words separated by single spaces.

    Prepare the LM's training text with this function too (one sentence or paragraph per line).
    """
    line = _strip_accents(line.strip().lower())
    line = _DIGIT.sub("0", line).translate(_PUNCT_FOLD)
    return " ".join(_NON_PRINTING.sub(" ", line).split())


def doc_perplexity(model, text: str) -> float:
    """CCNet's document perplexity: every non-blank line scored as a sentence (<s> … </s>), log10 probabilities
    summed, divided by the scored tokens (words + one </s> per line). Blank lines are paragraph breaks, not
    sentences: counting them would make perplexity depend on layout. NaN when nothing is left to score."""
    log10_sum, tokens = 0.0, 0
    for raw in text.split("\n"):
        line = lm_normalize(raw)
        if line:
            log10_sum += model.score(line, bos=True, eos=True)
            tokens += line.count(" ") + 2
    return 10.0 ** (-log10_sum / tokens) if tokens else math.nan


def load_kenlm(path: str):
    try:
        import kenlm
    except ImportError:
        raise RuntimeError("the perplexity stage needs KenLM's Python module, which the base install leaves out: "
                           "pip install 'gpupipe[quality]' (or: pip install kenlm; PyPI has no kenlm wheel, so it "
                           "builds from source and needs a C++ compiler and cmake)") from None
    if not os.path.exists(path):
        raise FileNotFoundError(f"KenLM model not found: {path}")
    return kenlm.Model(path)


def perplexity_cutoffs(model, texts: list[str], low: float | None, high: float | None) -> tuple[float, float]:
    """(min, max) perplexity at the `low` / `high` percentiles of `texts` (linear interpolation; -inf / inf for a
    bound not asked for)."""
    pp = np.array([doc_perplexity(model, t) for t in texts])
    pp = pp[~np.isnan(pp)]
    if not len(pp):
        raise ValueError("the perplexity reference sample has no scorable document")
    lo = float(np.percentile(pp, low)) if low is not None else -math.inf
    hi = float(np.percentile(pp, high)) if high is not None else math.inf
    return lo, hi


class PerplexityConfig(Strict):
    model: FileRef                                      # KenLM model: ARPA (.arpa) or KenLM binary
    # Absolute bounds (known cutoffs) …
    min_perplexity: float | None = Field(None, ge=0.0)
    max_perplexity: float | None = Field(None, ge=0.0)
    # … or percentile bounds (e.g. [5, 95]: the middle 90%) of a reference sample's distribution. Percentiles need the
    # whole distribution, which a per-partition stage does not see; a sample of the corpus (JSONL or plain text,
    # a few thousand documents) stands in for it, and each worker derives the same cutoffs from it at setup.
    low_percentile: float | None = Field(None, ge=0.0, le=100.0)
    high_percentile: float | None = Field(None, ge=0.0, le=100.0)
    reference: FileRef | None = None
    reference_text_field: str = "text"
    apply_to: list[str] | None = None                  # languages (`lang` column) to score; others pass unscored
    # CCNet's head / middle / tail buckets (seed 001: "按 PPL 分到 head / middle / tail 三个 bucket"), in the column
    # `perplexity_bucket`: head below the first cut point, middle below the second, tail from it; `all` (CCNet's
    # word) where a document is unscored or its language has no cut points. The cut points are `bucket_cutoffs`
    # (absolute perplexities per `lang`, `default` for the rest: CCNet's cutoff.csv holds them per language) or,
    # when those are not given, the `bucket_percentiles` of the `reference` sample (CCNet's PerplexityBucket: 30, 60),
    # per language where the reference records carry `lang` (BUCKET_MIN_DOCS of a language), and over all.
    bucket_cutoffs: dict[str, tuple[float, float]] | None = None
    bucket_percentiles: tuple[float, float] | None = (30.0, 60.0)
    keep_buckets: list[Literal["head", "middle", "tail"]] | None = None   # e.g. [head, middle]: the others go

    _order = ordered(("min_perplexity", "max_perplexity"), ("low_percentile", "high_percentile"))

    @model_validator(mode="after")
    def _buckets(self) -> "PerplexityConfig":
        for lang, (head, tail) in (self.bucket_cutoffs or {}).items():
            if not 0 <= head <= tail:
                raise ValueError(f"bucket_cutoffs.{lang}: [head, tail] cut points must be 0 <= head <= tail, "
                                 f"got [{head}, {tail}]")
        if self.bucket_percentiles is not None:
            a, b = self.bucket_percentiles
            if not 0 <= a <= b <= 100:
                raise ValueError(f"bucket_percentiles must be 0 <= head <= tail <= 100, got [{a}, {b}]")
        if self.keep_buckets is not None and not self.buckets_from():
            raise ValueError("keep_buckets needs cut points: bucket_cutoffs, or a `reference` sample with "
                             "bucket_percentiles")
        return self

    def buckets_from(self) -> str | None:
        """Where the bucket cut points come from: "cutoffs", "reference" or None (every document `all`)."""
        if self.bucket_cutoffs:
            return "cutoffs"
        return "reference" if self.reference and self.bucket_percentiles is not None else None

    @model_validator(mode="after")
    def _one_way_per_bound(self) -> "PerplexityConfig":
        if self.min_perplexity is not None and self.low_percentile is not None:
            raise ValueError("give either min_perplexity or low_percentile, not both")
        if self.max_perplexity is not None and self.high_percentile is not None:
            raise ValueError("give either max_perplexity or high_percentile, not both")
        percentiles = self.low_percentile is not None or self.high_percentile is not None
        if percentiles and not self.reference:
            raise ValueError("low_percentile / high_percentile need `reference`: a sample file whose perplexity "
                             "distribution sets the cutoffs")
        if self.reference and not percentiles and self.buckets_from() != "reference":
            raise ValueError("`reference` is only used with low_percentile / high_percentile or bucket_percentiles")
        return self


class PerplexityFilter(MapStage):
    name = "perplexity"
    Config = PerplexityConfig

    @classmethod
    def outputs(cls) -> tuple[str, ...]:
        return ("perplexity", "perplexity_bucket")

    def setup(self) -> None:
        c = self.config
        self._model = load_kenlm(c.model)
        self.min_perplexity = c.min_perplexity if c.min_perplexity is not None else -math.inf
        self.max_perplexity = c.max_perplexity if c.max_perplexity is not None else math.inf
        self.bucket_cuts: dict[str, tuple[float, float]] = dict(c.bucket_cutoffs or {})
        if c.reference:
            texts, _ = read_texts(c.reference, c.reference_text_field)
            if c.low_percentile is not None or c.high_percentile is not None:
                lo, hi = perplexity_cutoffs(self._model, texts, c.low_percentile, c.high_percentile)
                # Rounded like the column, so a document at the cutoff compares equal to it.
                self.min_perplexity = round(lo, 2) if c.low_percentile is not None else self.min_perplexity
                self.max_perplexity = round(hi, 2) if c.high_percentile is not None else self.max_perplexity
            if c.buckets_from() == "reference":
                langs = reference_languages(c.reference, c.reference_text_field)
                self.bucket_cuts = bucket_cutoffs(self._model, texts, langs, c.bucket_percentiles)

    def _buckets(self, df: pd.DataFrame, pp: np.ndarray) -> list[str]:
        """CCNet's get_bucket: head below the first cut point, middle below the second, else tail; `all` where
        unscored or without cut points for the document's language."""
        langs = df["lang"].tolist() if "lang" in df.columns else [None] * len(df)
        default = self.bucket_cuts.get("default")
        out = []
        for lang, p in zip(langs, pp):
            cuts = self.bucket_cuts.get(lang, default) if isinstance(lang, str) else default
            if cuts is None or math.isnan(p):
                out.append("all")
            else:
                out.append("head" if p < cuts[0] else "middle" if p < cuts[1] else "tail")
        return out

    def _scored(self, df: pd.DataFrame) -> np.ndarray:
        if self.config.apply_to is None:
            return np.ones(len(df), dtype=bool)
        if "lang" not in df.columns:
            raise ValueError("perplexity.apply_to needs a `lang` column: put langid before this stage")
        return df["lang"].isin(self.config.apply_to).to_numpy()

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        scored = self._scored(df)
        pp = np.array([doc_perplexity(self._model, t) if s else math.nan for t, s in zip(df["text"], scored)],
                      dtype=np.float64)
        pp = np.round(pp, 2)
        return df.assign(perplexity=pp, perplexity_bucket=self._buckets(df, pp))

    def reasons(self, df: pd.DataFrame) -> pd.Series:
        pp = df["perplexity"].to_numpy()
        keep = self.config.keep_buckets
        bucket = df["perplexity_bucket"].to_numpy(dtype=object)
        dropped = np.isin(bucket, [b for b in ("head", "middle", "tail") if keep is not None and b not in keep])
        with np.errstate(invalid="ignore"):  # NaN (unscored) is neither too high nor too low: kept
            why = np.select([pp > self.max_perplexity, pp < self.min_perplexity, dropped],
                            ["perplexity_too_high", "perplexity_too_low",
                             np.char.add("perplexity_", bucket.astype(str))], default=None)
        return pd.Series(why, index=df.index, dtype=object)

    def apply_partition(self, df: pd.DataFrame, info=None) -> Applied:
        df = self.transform(df)
        extra = perplexity_histogram(df["perplexity"].to_numpy())
        extra.update({f"perplexity_bucket_{b}": n for b, n in Counter(df["perplexity_bucket"]).items()})
        return Applied(df, self.reasons(df), extra)


def perplexity_histogram(pp: np.ndarray) -> Counter:
    """Counts per decade of perplexity (`perplexity_bin_1e2` = [100, 1000)), and the unscored documents."""
    pp = np.asarray(pp, dtype=np.float64)
    scored = pp[~np.isnan(pp)]
    decades = np.floor(np.log10(np.maximum(scored, 1.0))).astype(np.int64)
    out = Counter({f"perplexity_bin_1e{d}": int(n) for d, n in zip(*np.unique(decades, return_counts=True))})
    out["perplexity_unscored"] = int(len(pp) - len(scored))
    return out


__all__ = ["QualityClassifier", "QualityClassifierConfig", "PerplexityFilter", "PerplexityConfig",
           "train_quality_classifier", "add_train_quality_parser", "cmd_train_quality", "fasttext_texts",
           "lm_normalize", "doc_perplexity", "perplexity_cutoffs", "read_texts"]
