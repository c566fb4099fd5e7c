"""The code detector (gpupipe/stages/filters/code_detect.py) on real files: precision and recall of `code` on the
held-out half of the installed packages' code and prose (code_samples.py: source files vs .md/.rst, METADATA,
licences and docstrings, split by the sha256 of each text), per kind; documents per second; and, with --corpus,
the share of a web corpus's documents it calls code (its false-positive rate: the corpus has no code).

    python profiling/bench_code_detect.py [--corpus ../shared/data/corpus/corpus.jsonl.gz] [--fit] [--per-kind N]

--fit fits the model on the training half first and measures that one (and prints it as the MODEL to ship).
Exit 1 when precision or recall is under 0.95 (or, with --corpus, the false-positive rate over 0.5 %).
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections import Counter

import numpy as np

from gpupipe.stages.filters.code_detect import (MODEL, code_probability, features, fit, not_code, probability,
                                                text_counts)
from gpupipe.stages.filters.code_samples import labelled_samples

THRESHOLD = 0.5


def precision_recall(p: np.ndarray, y: np.ndarray, threshold: float = THRESHOLD) -> tuple[float, float]:
    called = p >= threshold
    tp = int((called & (y == 1)).sum())
    return tp / max(int(called.sum()), 1), tp / max(int((y == 1).sum()), 1)


def corpus_texts(path: str, limit: int | None) -> list[str]:
    out = []
    with (gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")) as f:
        for line in f:
            text = json.loads(line).get("text") or ""
            if len(text.strip()) >= 30:
                out.append(text)
            if limit and len(out) >= limit:
                break
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-kind", type=int, default=1500, help="code files and prose files read (each)")
    ap.add_argument("--fit", action="store_true", help="fit on the training half and measure that model")
    ap.add_argument("--corpus", help="a JSONL(.gz) web corpus with a `text` field: its false-positive rate")
    ap.add_argument("--corpus-limit", type=int, default=None)
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    samples = labelled_samples(per_kind=args.per_kind)
    print(f"samples: {len(samples)} ({Counter(s.label for s in samples)[1]} code, "
          f"{Counter(s.label for s in samples)[0]} prose) read in {time.perf_counter() - t0:.1f} s")
    y = np.array([s.label for s in samples])
    held = np.array([s.held_out for s in samples])
    counts = text_counts([s.text for s in samples])
    ruled_out = not_code(counts)
    x = features(counts)
    print(f"ruled out by their non-ASCII share: {int((ruled_out & (y == 1)).sum())} code, "
          f"{int((ruled_out & (y == 0)).sum())} prose")
    model = MODEL
    if args.fit or not MODEL:
        model = fit(x[~held & ~ruled_out], y[~held & ~ruled_out])
        print("MODEL = " + json.dumps(model))
    p = np.where(ruled_out, 0.0, probability(x, model))
    prec, rec = precision_recall(p[held], y[held])
    ptr, rtr = precision_recall(p[~held], y[~held])
    print(f"held-out: {held.sum()} samples ({(y[held] == 1).sum()} code, {(y[held] == 0).sum()} prose): "
          f"precision {prec:.4f} recall {rec:.4f}   (training half: precision {ptr:.4f} recall {rtr:.4f})")
    kinds = Counter(s.kind for s, h in zip(samples, held) if h)
    print(f"{'kind':<12}{'label':>7}{'held-out':>10}{'called code':>13}")
    for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        at = np.array([s.kind == kind for s in samples]) & held
        print(f"{kind:<12}{'code' if y[at][0] else 'prose':>7}{n:>10}{int((p[at] >= THRESHOLD).sum()):>13}")
    wrong = np.flatnonzero(held & ((p >= THRESHOLD) != (y == 1)))
    for i in wrong[:12]:
        s = samples[i]
        print(f"  miss p={p[i]:.3f} {'code' if s.label else 'prose'} {s.kind} {s.path[-70:]}")

    texts = [s.text for s in samples]
    code_probability(texts[:10], model)            # compiled before the clock
    t0 = time.perf_counter()
    code_probability(texts, model)
    dt = time.perf_counter() - t0
    mb = sum(min(len(t.encode()), 8192) for t in texts) / 1e6
    print(f"speed: {len(texts) / dt:,.0f} docs/s ({mb / dt:.1f} MB/s of the 8 KiB heads judged; "
          f"{len(texts)} docs in {dt:.3f} s)")

    ok = prec >= 0.95 and rec >= 0.95
    if args.corpus:
        docs = corpus_texts(args.corpus, args.corpus_limit)
        t0 = time.perf_counter()
        pc = code_probability(docs, model)
        dt = time.perf_counter() - t0
        fp = int((pc >= THRESHOLD).sum())
        print(f"corpus {args.corpus}: {fp} of {len(docs)} documents called code: false-positive rate "
              f"{100 * fp / max(len(docs), 1):.3f} % ({len(docs) / dt:,.0f} docs/s)")
        for i in np.argsort(-pc)[:min(fp, 8)]:
            print(f"  p={pc[i]:.3f} {docs[i][:100]!r}")
        ok = ok and fp <= 0.005 * len(docs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
