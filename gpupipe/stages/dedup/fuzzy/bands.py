"""LSH band buckets: the (band, hash, doc_index) rows a partition sends for a group of bands (the buckets
themselves are found in kernels/lsh_graph.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def band_rows(bands: pd.DataFrame, group: list[int]) -> pd.DataFrame:
    """(band, hash, doc_index) rows of the bands in `group`, band by band, from a frame of `b{band}` columns."""
    doc = bands["doc_index"].to_numpy(np.int64)
    return pd.DataFrame({"band": np.repeat(np.asarray(group, np.int64), len(bands)),
                         "hash": np.concatenate([bands[f"b{b}"].to_numpy(np.uint64) for b in group])
                         if len(group) else np.array([], np.uint64),
                         "doc_index": np.tile(doc, len(group))})
