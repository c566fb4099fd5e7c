"""LSH band buckets: the (band, hash, doc_index) rows a partition sends for a group of bands, and the per-band
open-addressing table that finds each bucket's smallest document."""

from __future__ import annotations

import numpy as np
import pandas as pd
from numba import njit


def band_rows(bands: pd.DataFrame, group: list[int]) -> pd.DataFrame:
    """(band, hash, doc_index) rows of the bands in `group`, band by band, from a frame of `b{band}` columns."""
    doc = bands["doc_index"].to_numpy(np.int64)
    return pd.DataFrame({"band": np.repeat(np.asarray(group, np.int64), len(bands)),
                         "hash": np.concatenate([bands[f"b{b}"].to_numpy(np.uint64) for b in group])
                         if len(group) else np.array([], np.uint64),
                         "doc_index": np.tile(doc, len(group))})


@njit(cache=True)
def _table_size(rows):
    """Slots of a bucket table for `rows` rows: a power of two, at most half full."""
    size = 16
    while size < 2 * rows:
        size <<= 1
    return size


@njit(cache=True)
def _smallest_in_buckets(hashes, doc, table, first):
    """first[i] = the smallest doc among the rows whose hash equals hashes[i].

    table: (size, 2) int64 of zeros, size a power of two >= 2 * rows: open addressing with linear probing (band
    hashes are already mixed, so their low bits index it); a slot holds the hash and 1 + the smallest doc (0: free).
    O(rows); two passes (fill, then read each row's smallest doc back).
    """
    mask = np.uint64(table.shape[0] - 1)
    slot_of = np.empty(hashes.shape[0], np.int64)
    for i in range(hashes.shape[0]):
        h = np.int64(hashes[i])
        s = np.int64(hashes[i] & mask)
        while table[s, 1] != 0 and table[s, 0] != h:
            s = (s + 1) & np.int64(mask)
        if table[s, 1] == 0:
            table[s, 0], table[s, 1] = h, doc[i] + 1
        elif doc[i] + 1 < table[s, 1]:
            table[s, 1] = doc[i] + 1
        slot_of[i] = s
    for i in range(hashes.shape[0]):
        first[i] = table[slot_of[i], 1] - 1
