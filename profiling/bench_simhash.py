"""SimHash dedup against MinHash + exact Jaccard on the real corpus: precision, recall, docs/s.

    python profiling/bench_simhash.py [--corpus ../shared/data/corpus/corpus.jsonl.gz] [--docs 20000] [--seed 0]

A seeded sample of the corpus (reservoir over the whole file) is deduplicated in memory by both methods, each by
the stage's own steps (`find_duplicates`: fuzzy_dedup's MinHash + LSH + exact Jaccard check at 0.8, the reference;
simhash_dedup's fingerprints, tables and exact Hamming check). A removal is a document and the keeper of its cluster
(both methods keep the first in input order). SimHash precision: the share of its removals whose keeper is in the
same MinHash + Jaccard cluster; recall: the share of MinHash's removals that SimHash puts with the same keeper's
cluster. Also the exact shingle Jaccard (5 words / 3 characters, fuzzy's) of each SimHash removal with its keeper.
docs/s: wall and CPU seconds of each method after a warm-up call on the same sample (numba compiles excluded).
Rows for Hamming 3 (the seed's) and a few other settings.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import time
from pathlib import Path

import numpy as np
import pandas as pd

from gpupipe.columns import text_array
from gpupipe.stages.dedup.fuzzy import FuzzyDedupConfig, find_duplicates as minhash_duplicates
from gpupipe.stages.dedup.fuzzy.signatures import cjk_mask
from gpupipe.stages.dedup.fuzzy.verify import shingle_sets, verify_edges
from gpupipe.stages.dedup.simhash import SimHashDedupConfig, find_duplicates as simhash_duplicates

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "corpus" / "corpus.jsonl.gz"


def sample(path: Path, n: int, seed: int) -> pd.DataFrame:
    """A reservoir sample of n records, in file order (doc_index = the record number)."""
    rng = random.Random(seed)
    kept: list[tuple[int, dict]] = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if len(kept) < n:
                kept.append((i, line))
            elif (j := rng.randrange(i + 1)) < n:
                kept[j] = (i, line)
    kept.sort()
    rows = [json.loads(line) for _, line in kept]
    return pd.DataFrame({"doc_index": np.array([i for i, _ in kept], np.int64), "text": [r["text"] for r in rows],
                         "lang": [r.get("lang") for r in rows], "source": [r.get("source") for r in rows]})


def timed(fn, *args):
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - w, time.process_time() - c


def removals(found: pd.DataFrame) -> pd.DataFrame:
    """(doc_index, keeper) of every removed document."""
    keeper = found[found["keep"]].set_index("cluster")["doc_index"]
    gone = found[~found["keep"]]
    return pd.DataFrame({"doc_index": gone["doc_index"].to_numpy(), "keeper": keeper.loc[gone["cluster"]].to_numpy()})


def together(pairs: pd.DataFrame, found: pd.DataFrame) -> np.ndarray:
    """Per (doc_index, keeper) pair, whether `found` puts both in one cluster."""
    cluster = found.set_index("doc_index")["cluster"]
    a = cluster.reindex(pairs["doc_index"]).to_numpy()
    b = cluster.reindex(pairs["keeper"]).to_numpy()
    return (a == b) & ~pd.isna(a)


def jaccards(df: pd.DataFrame, pairs: pd.DataFrame, cfg: FuzzyDedupConfig) -> np.ndarray:
    texts = text_array(df["text"])
    sets = shingle_sets(texts, cjk_mask(df, cfg.cjk_langs, texts), df["doc_index"].to_numpy(), cfg)
    edges = pd.DataFrame({"u": pairs["doc_index"].to_numpy(np.int64), "v": pairs["keeper"].to_numpy(np.int64)})
    return verify_edges(edges, sets, 0.0)["jaccard"].to_numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    df = sample(args.corpus, args.docs, args.seed)
    mb = sum(len(t.encode()) for t in df["text"]) / 1e6
    print(f"{len(df)} documents ({mb:.1f} MB; {(df['lang'] == 'zh').mean():.0%} zh) sampled from {args.corpus.name}")
    fcfg = FuzzyDedupConfig(threshold=0.8)
    minhash_duplicates(df, fcfg)          # warm-up: numba compiles (each kernel path the sample takes)
    simhash_duplicates(df, SimHashDedupConfig())
    ref, wall, cpu = timed(minhash_duplicates, df, fcfg)
    ref_pairs = removals(ref)
    print(f"minhash+jaccard 0.8 (12 x 10, verify): removed {len(ref_pairs):>5}  {len(df) / wall:>8.0f} docs/s wall, "
          f"{len(df) / cpu:>8.0f} docs/s CPU")
    settings = [("hamming 3 (seed), the defaults", SimHashDedupConfig()),
                ("hamming 3, 1 level of tables", SimHashDedupConfig(levels=1)),
                ("hamming 3, 5 words / 3 chars as fuzzy", SimHashDedupConfig(word_k=5, char_k=3)),
                ("hamming 3, token counts as weights", SimHashDedupConfig(weights="count")),
                ("hamming 6", SimHashDedupConfig(hamming=6)),
                ("hamming 10, 1 level", SimHashDedupConfig(hamming=10, levels=1))]
    for label, cfg in settings:
        found, wall, cpu = timed(simhash_duplicates, df, cfg)
        pairs = removals(found)
        precision = together(pairs, ref).mean() if len(pairs) else 1.0
        recall = together(ref_pairs, found).mean() if len(ref_pairs) else 1.0
        jac = jaccards(df, pairs, fcfg) if len(pairs) else np.ones(0)
        print(f"simhash {label:<44} removed {len(pairs):>5}  precision {precision:.3f}  recall {recall:.3f}  "
              f"exact Jaccard >= 0.8: {(jac >= 0.8).mean() if len(jac) else 1:.3f}  "
              f"{len(df) / wall:>8.0f} docs/s wall, {len(df) / cpu:>8.0f} docs/s CPU")


if __name__ == "__main__":
    main()
