"""Extraction quality and speed on the scrapinghub article-extraction benchmark (181 pages, hand-annotated bodies).

DATA_DIR holds `html/<sha256>.html.gz` and `ground-truth.json.gz` ({sha256: {"articleBody", "url", ...}}), as in
github.com/scrapinghub/article-extraction-benchmark. Scoring follows that benchmark's evaluate.py: 4-gram shingles
of `\\w+` tokens (multiset), per page TP/FP/FN normalised to sum 1, precision averaged over pages that predicted
something or should have (tp+fp > 0), recall over pages with tp+fn > 0, F1 of the two means; ± is 1.96 bootstrap
standard deviations over pages (1000 resamples), as the benchmark prints it.

Rows, each on the same pages in one process (pages/s is per core; the pipeline runs partitions in parallel):
  trafilatura defaults   trafilatura.extract(html), nothing else set: the baseline
  extract (default)      our Extract stage with its default config (trafilatura, seed 002 §1.2's options)
  extract (resiliparse)  our Extract stage with `extractor: resiliparse`

Usage:  python profiling/bench_extract.py DATA_DIR [--pages N] [--bootstrap 1000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from gpupipe.stages.base import RunContext
from gpupipe.stages.extract import Extract, ExtractConfig

_TOKEN_RE = re.compile(r"\w+", re.UNICODE | re.MULTILINE | re.IGNORECASE | re.DOTALL)  # the benchmark's own


def shingles(text: str | None, n: int = 4) -> Counter:
    tokens = _TOKEN_RE.findall(text or "")
    return Counter(tuple(tokens[i:i + n]) for i in range(max(1, len(tokens) - n + 1)) if tokens[i:i + n])


def tp_fp_fn(true: str, pred: str | None) -> tuple[float, float, float]:
    t, p = shingles(true), shingles(pred)
    tp, fp, fn = sum((t & p).values()), sum((p - t).values()), sum((t - p).values())
    s = tp + fp + fn
    return (tp / s, fp / s, fn / s) if s else (0.0, 0.0, 0.0)   # normalised: long pages do not weigh more


def metrics(counts: np.ndarray) -> tuple[float, float, float]:
    """F1, precision, recall from per-page (tp, fp, fn) rows, with the benchmark's edge cases."""
    tp, fp, fn = counts.T
    perfect = (fp == 0) & (fn == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        prec = np.where(perfect, 1.0, np.where(tp + fp == 0, 0.0, tp / (tp + fp)))
        rec = np.where(perfect, 1.0, np.where(tp + fn == 0, 0.0, tp / (tp + fn)))
    p, r = prec[tp + fp > 0].mean(), rec[tp + fn > 0].mean()
    return 2 * p * r / (p + r), p, r


def f1_interval(counts: np.ndarray, n_boot: int, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    f1s = [metrics(counts[rng.integers(0, len(counts), len(counts))])[0] for _ in range(n_boot)]
    return 1.96 * float(np.std(f1s, ddof=1)) if n_boot > 1 else 0.0


def load(data_dir: Path, limit: int | None) -> tuple[pd.DataFrame, dict]:
    with gzip.open(data_dir / "ground-truth.json.gz", "rt", encoding="utf-8") as fh:
        truth = json.load(fh)
    paths = sorted((data_dir / "html").glob("*.html.gz"))[:limit]
    rows = []
    for p in paths:
        key = p.name.split(".")[0]
        with gzip.open(p, "rt", encoding="utf-8") as fh:
            rows.append({"id": key, "url": truth[key].get("url"), "html": fh.read()})
    df = pd.DataFrame(rows)
    return df.assign(doc_index=range(len(df))), truth


def run_trafilatura_defaults(pages: pd.DataFrame) -> dict[str, str | None]:
    import trafilatura

    return {k: trafilatura.extract(h) for k, h in zip(pages["id"], pages["html"])}


def run_stage(pages: pd.DataFrame, **params) -> dict[str, str | None]:
    stage = Extract(ExtractConfig(**params), RunContext())
    stage.setup()
    kept, _, _ = stage.run_partition(pages)
    return dict(zip(kept["id"], kept["text"]))   # pages the stage dropped score as empty predictions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--pages", type=int, default=None, help="only the first N pages (sorted by name)")
    ap.add_argument("--bootstrap", type=int, default=1000)
    args = ap.parse_args()
    pages, truth = load(args.data_dir, args.pages)
    runs = {"trafilatura defaults": lambda: run_trafilatura_defaults(pages),
            "extract (default)": lambda: run_stage(pages),
            "extract (resiliparse)": lambda: run_stage(pages, extractor="resiliparse")}
    print(f"{len(pages)} pages from {args.data_dir}")
    print(f"{'extractor':<24}{'F1':>16}{'precision':>11}{'recall':>8}{'pages/s':>9}{'ΔF1':>8}")
    results = {}
    for name, fn in runs.items():
        t0 = time.perf_counter()
        preds = fn()
        seconds = time.perf_counter() - t0
        counts = np.array([tp_fp_fn(truth[k].get("articleBody", ""), preds.get(k)) for k in pages["id"]])
        f1, p, r = metrics(counts)
        results[name] = (f1, len(pages) / seconds)
        delta = f1 - results["trafilatura defaults"][0]
        print(f"{name:<24}{f1:>9.4f} ± {f1_interval(counts, args.bootstrap):.3f}{p:>11.4f}{r:>8.4f}"
              f"{len(pages) / seconds:>9.1f}{delta:>+8.4f}")
    (base, _), (ours, ours_speed), (alt, alt_speed) = results.values()
    verdict = "meets" if ours >= base else "DOES NOT meet"
    print(f"default extractor vs trafilatura defaults: F1 {ours - base:+.4f} ({verdict} the bar: at least as good)")
    print(f"resiliparse vs default: F1 loss {ours - alt:.4f} ({(ours - alt) / ours:.1%}), "
          f"{alt_speed / ours_speed:.1f}x the pages/s")


if __name__ == "__main__":
    main()
