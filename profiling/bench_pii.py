"""Throughput of the `pii` stage on a JSONL corpus (one {"text": ...} object a line, .gz or plain).

Side by side:
  stage      PiiRedactor.transform: Arrow (RE2) prefilter, then Python `re` + validation on candidates only
  reference  redact_text on every document in a Python loop (no prefilter): what the prefilter saves
Also: the share of documents the prefilter passes to Python, per type, and the redaction counts.

Usage:  python profiling/bench_pii.py CORPUS.jsonl[.gz] [--docs 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections import Counter

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpupipe.stages.base import RunContext, text_bytes
from gpupipe.stages.text.pii import PII_TYPES, PiiConfig, PiiRedactor, redact_text


def read_texts(path: str, limit: int) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    texts = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if len(texts) >= limit:
                break
            text = json.loads(line).get("text")
            if text:
                texts.append(text)
    return texts


def best_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus")
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    texts = read_texts(args.corpus, args.docs)
    df = pd.DataFrame({"id": [str(i) for i in range(len(texts))], "text": texts})
    mb = text_bytes(df["text"]) / 1e6
    print(f"{len(texts)} docs, {mb:.1f} MB of UTF-8 text")

    stage = PiiRedactor(PiiConfig(), RunContext())
    stage.setup()
    arr = pa.array(texts, type=pa.large_string())
    for t in PII_TYPES:
        share = pc.sum(pc.match_substring_regex(arr, t.prefilter)).as_py() / max(len(texts), 1)
        print(f"  prefilter {t.name:<12} passes {share:6.1%} of docs")

    t_stage = best_time(lambda: stage.transform(df), args.repeat)
    t_ref = best_time(lambda: [redact_text(t) for t in texts], 1)
    out = stage.transform(df)
    counts = Counter({t.name: int(out[f"pii_{t.name}"].sum()) for t in PII_TYPES})
    print(f"  stage      {t_stage:7.2f} s  {mb / t_stage:8.1f} MB/s  {len(texts) / t_stage:10.0f} docs/s")
    print(f"  reference  {t_ref:7.2f} s  {mb / t_ref:8.1f} MB/s  {len(texts) / t_ref:10.0f} docs/s  (Python re on all)")
    print(f"  redacted: {dict(counts)}; docs with PII: {int((out.filter(like='pii_').sum(axis=1) > 0).sum())}")


if __name__ == "__main__":
    main()
