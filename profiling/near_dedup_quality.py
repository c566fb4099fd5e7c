"""Near-dedup quality on the synthetic crawl's planted near duplicates: precision and recall of fuzzy_dedup.

    python profiling/near_dedup_quality.py [--docs 2000] [--seed 0] [--threshold 0.8]

The ground truth marks every page that is a small edit of an earlier one (`near_duplicate`, shingle Jaccard ~0.9).
Exact copies and spam are left out (exact_dedup removes them first in a pipeline). A removal is a true positive when the
removed page is a planted near duplicate.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from gpupipe.stages.dedup.fuzzy import FuzzyDedupConfig, find_duplicates, lsh_shape
from gpupipe.synth import write_synthetic_crawl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--num-perm", type=int, default=128)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        summary = write_synthetic_crawl(Path(tmp) / "crawl.warc.gz", docs=args.docs, seed=args.seed)
        truth = [json.loads(line) for line in open(summary["truth"], encoding="utf-8")]
    # Spam pages are left out too: they come from a few templates, so they are near copies of each other
    # without being planted as such (the document filters remove them before dedup in a pipeline).
    pages = [t for t in truth if t["kind"] in ("clean", "pii", "near_duplicate")]
    df = pd.DataFrame({"text": [t["main_text"] for t in pages], "lang": [t["lang"] for t in pages],
                       "doc_index": np.arange(len(pages), dtype=np.int64)})
    planted = {i for i, t in enumerate(pages) if t["kind"] == "near_duplicate"}

    print(f"{len(pages)} pages ({sum(len(t.encode()) for t in df['text']) / 1e6:.2f} MB), "
          f"{len(planted)} planted near duplicates")
    for verify in (True, False):
        for weights in ((0.2, 0.8), (0.5, 0.5)):
            cfg = FuzzyDedupConfig(threshold=args.threshold, num_perm=args.num_perm, verify=verify,
                                   fp_weight=weights[0], fn_weight=weights[1])
            t0 = time.perf_counter()
            res = find_duplicates(df, cfg, seed=args.seed)
            seconds = time.perf_counter() - t0
            removed = set(res.loc[~res["keep"], "doc_index"].tolist())
            tp = len(removed & planted)
            precision = tp / len(removed) if removed else 1.0
            recall = tp / len(planted) if planted else 1.0
            b, r = lsh_shape(cfg)
            print(f"threshold {args.threshold}  {b:>2} x {r:<2} verify={str(verify):<5}  removed {len(removed):>4}  "
                  f"precision {precision:.3f}  recall {recall:.3f}  ({seconds:.2f} s)")


if __name__ == "__main__":
    main()
