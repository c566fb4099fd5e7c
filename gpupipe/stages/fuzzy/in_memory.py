"""Near dedup of one frame in memory (tests, benchmarks, `profiling/near_dedup_quality.py`): the same pieces as the
stage's phases, without the exchange. It also compares candidate texts byte for byte first (identical texts have
Jaccard 1 and need no shingle sets), which the stage does not: texts of two partitions would need another
exchange, and exact dedup runs before near dedup in every shipped config."""

from __future__ import annotations

import numba
import numpy as np
import pandas as pd

from gpupipe.stages.fuzzy.components import choose_keepers, connected_components, priority_frame
from gpupipe.stages.fuzzy.config import FuzzyDedupConfig
from gpupipe.stages.fuzzy.edges import _star_matrix, unique_edges
from gpupipe.columns import text_array
from gpupipe.stages.fuzzy.signatures import cjk_mask, lsh_band_hashes
from gpupipe.stages.fuzzy.verify import identical_texts, shingle_sets, verify_edges


def find_duplicates(df: pd.DataFrame, cfg: FuzzyDedupConfig, seed: int = 0, device: str = "cpu") -> pd.DataFrame:
    """In memory, for one frame: one row per document in a duplicate cluster (doc_index, cluster, keep)."""
    texts = text_array(df["text"])
    cjk = cjk_mask(df, cfg.cjk_langs, texts)
    doc = df["doc_index"].to_numpy(np.int64)
    bh = lsh_band_hashes(texts, cjk, cfg, seed, device)
    u, v = _star_matrix(bh, doc, max(1, min(bh.shape[1], numba.get_num_threads())))
    edges = unique_edges(u, v)
    if cfg.verify and len(edges):
        same = identical_texts(edges, texts, doc)
        pos = np.flatnonzero(np.isin(doc, np.union1d(edges["u"][~same], edges["v"][~same])))
        edges = verify_edges(edges, shingle_sets(texts.take(pos), cjk[pos], doc[pos], cfg), cfg.threshold, same)
    members = connected_components(edges, device)
    pos = np.flatnonzero(np.isin(doc, members["doc_index"].to_numpy()))
    members = members.merge(priority_frame(df.iloc[pos], cfg, texts.take(pos)), on="doc_index")
    return choose_keepers(members, cfg.priority)[["doc_index", "cluster", "keep"]]
