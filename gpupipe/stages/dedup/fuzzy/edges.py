"""Candidate edges: the documents of a (band, hash) bucket become a star of edges to its smallest `doc_index`
(linear in bucket size), sorted by (u, v), each pair once. The work is kernels/lsh_graph.py's (a numba hash table
per band on the CPU, device sorts on the GPU)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupipe.kernels.lsh_graph import on_device, star_edges_rows, to_host, unique_pairs


def unique_edges(u: np.ndarray, v: np.ndarray) -> pd.DataFrame:
    """Edges sorted by (u, v) without repeats (a pair shares buckets in several bands)."""
    u, v = unique_pairs(np.asarray(u, np.int64), np.asarray(v, np.int64))
    return pd.DataFrame({"u": u, "v": v})


def star_edges(keys: pd.DataFrame, device: str = "cpu") -> pd.DataFrame:
    """Rows (band, hash, doc_index) → edges from every doc of a (band, hash) bucket to its smallest doc_index,
    sorted by (u, v), each pair once (device "gpu": by device sorts)."""
    u, v = star_edges_rows(*on_device(device, keys["band"].to_numpy(np.int64), keys["hash"].to_numpy(np.uint64),
                                      keys["doc_index"].to_numpy(np.int64)))
    return pd.DataFrame({"u": to_host(u), "v": to_host(v)})
