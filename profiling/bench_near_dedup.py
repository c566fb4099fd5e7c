"""Near dedup in memory on a real corpus: `find_duplicates` (kernels/near_dedup.py's chain and the keeper choice)
with the stage's defaults; prints the time (best of --repeat, numba compiled before timing), the documents removed
and a digest of their ids, so that two versions of the code can be compared on the same documents (what #16 asks:
the same documents kept, and the CPU path no slower).

Usage:  python profiling/bench_near_dedup.py CORPUS.jsonl[.gz] [--docs N] [--repeat 3] [--device cpu|gpu]
CORPUS lines are {"id", "lang", "text"}.
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np
import pandas as pd


def load(path: str, docs: int) -> pd.DataFrame:
    """The corpus as bench_minhash.py reads it (text, lang), with doc_index."""
    from bench_minhash import load_corpus   # this folder is on sys.path when a script here runs

    df = pd.DataFrame(load_corpus(path, docs), columns=["text", "lang"])
    df["doc_index"] = np.arange(len(df), dtype=np.int64)
    return df


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus")
    ap.add_argument("--docs", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    from gpupipe.stages.dedup.fuzzy import FuzzyDedupConfig, find_duplicates

    df = load(args.corpus, args.docs)
    cfg = FuzzyDedupConfig()
    find_duplicates(df.iloc[:200].reset_index(drop=True), cfg, device=args.device)   # compile (numba, NVRTC)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        res = find_duplicates(df, cfg, device=args.device)
        times.append(time.perf_counter() - t0)
    removed = np.sort(res.loc[~res["keep"], "doc_index"].to_numpy(np.int64))
    mb = df["text"].str.len().sum() / 1e6
    print(f"{len(df)} docs ({mb:.1f} M chars) | find_duplicates best {min(times):.3f} s "
          f"(all: {', '.join(f'{t:.3f}' for t in times)}) | clusters {res['cluster'].nunique()} | "
          f"removed {len(removed)} | ids sha256 {hashlib.sha256(removed.tobytes()).hexdigest()[:16]}")


if __name__ == "__main__":
    main()
