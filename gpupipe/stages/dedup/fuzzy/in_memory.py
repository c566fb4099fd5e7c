"""Near dedup of one frame in memory (tests, benchmarks, `profiling/near_dedup_quality.py`): kernels/near_dedup.py's
chain (signatures → band keys → star edges → Jaccard check → components, all on the device for device="gpu"),
then one keeper per cluster by the priority columns."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupipe.columns import text_array
from gpupipe.kernels.near_dedup import ChainParams, near_duplicate_clusters
from gpupipe.kernels.strings import is_cudf, kernel_inputs
from gpupipe.stages.dedup.fuzzy.components import choose_keepers, priority_frame
from gpupipe.stages.dedup.fuzzy.config import FuzzyDedupConfig, lsh_shape
from gpupipe.stages.dedup.fuzzy.signatures import cjk_mask


def chain_params(cfg: FuzzyDedupConfig, seed: int) -> ChainParams:
    bands, rows = lsh_shape(cfg)
    return ChainParams(bands, rows, seed, cfg.word_k, cfg.char_k, cfg.threshold, cfg.verify)


def find_duplicates(df: pd.DataFrame, cfg: FuzzyDedupConfig, seed: int = 0, device: str = "cpu") -> pd.DataFrame:
    """In memory, for one frame: one row per document in a duplicate cluster (doc_index, cluster, keep)."""
    texts = text_array(df["text"])
    # a cuDF column is read in place on the device; anything else through its Arrow form (converted once)
    data, offsets, on_gpu = kernel_inputs(df["text"] if is_cudf(df["text"]) else texts, device)
    cjk = cjk_mask(df, cfg.cjk_langs, texts)
    doc = df["doc_index"].to_numpy(np.int64)
    nodes, cluster, _ = near_duplicate_clusters(data, offsets, cjk, doc, chain_params(cfg, seed),
                                                "gpu" if on_gpu else "cpu")
    members = pd.DataFrame({"doc_index": nodes, "cluster": cluster})
    pos = np.flatnonzero(np.isin(doc, nodes))
    members = members.merge(priority_frame(df.iloc[pos], cfg, texts.take(pos)), on="doc_index")
    return choose_keepers(members, cfg.priority)[["doc_index", "cluster", "keep"]]
