"""Candidate edges: the documents of a (band, hash) bucket become a star of edges to its smallest `doc_index`
(linear in bucket size), sorted by (u, v), each pair once."""

from __future__ import annotations

import numpy as np
import pandas as pd
from numba import njit, prange

from gpupipe.stages.fuzzy.bands import _smallest_in_buckets, _table_size


@njit(cache=True)
def _star_edges(first, doc):
    """(u, v) = (first[g, i], doc[i]) wherever a row's doc is not the smallest of its bucket, in row order."""
    m = 0
    for g in range(first.shape[0]):
        for i in range(first.shape[1]):
            m += first[g, i] != doc[i]
    u = np.empty(m, np.int64)
    v = np.empty(m, np.int64)
    m = 0
    for g in range(first.shape[0]):
        for i in range(first.shape[1]):
            if first[g, i] != doc[i]:
                u[m], v[m] = first[g, i], doc[i]
                m += 1
    return u, v


@njit(parallel=True, cache=True)
def _star(band, hashes, doc):
    """(u, v) per row whose doc is not the smallest doc of its (band, hash) bucket: u = that smallest doc.
    Rows must come grouped by band (see star_edges); bands in parallel."""
    n = band.shape[0]
    cuts = [0]
    for i in range(1, n):
        if band[i] != band[i - 1]:
            cuts.append(i)
    cuts.append(n)
    first = np.empty(n, np.int64)
    for g in prange(len(cuts) - 1):
        start, end = cuts[g], cuts[g + 1]
        table = np.zeros((_table_size(end - start), 2), np.int64)
        _smallest_in_buckets(hashes[start:end], doc[start:end], table, first[start:end])
    return _star_edges(first.reshape(1, n), doc)


@njit(parallel=True, cache=True)
def _star_matrix(keys, doc, workers):
    """_star for an (n, bands) band-key matrix whose row i is doc[i] (what find_duplicates holds): no
    (band, hash, doc) rows to build, and one table per worker, cleared between its bands, instead of one per band
    (fresh memory costs page faults)."""
    n, bands = keys.shape
    first = np.empty((bands, n), np.int64)
    size = _table_size(n)
    for w in prange(workers):
        table = np.empty((size, 2), np.int64)
        for b in range(w, bands, workers):
            table[:] = 0
            _smallest_in_buckets(keys[:, b], doc, table, first[b])
    return _star_edges(first, doc)


def unique_edges(u: np.ndarray, v: np.ndarray) -> pd.DataFrame:
    """Edges sorted by (u, v) without repeats (a pair shares buckets in several bands)."""
    order = np.lexsort((v, u))
    u, v = u[order], v[order]
    new = np.ones(len(u), dtype=bool)
    new[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    return pd.DataFrame({"u": u[new], "v": v[new]})


def star_edges(keys: pd.DataFrame) -> pd.DataFrame:
    """Rows (band, hash, doc_index) → edges from every doc of a (band, hash) bucket to its smallest doc_index,
    sorted by (u, v), each pair once."""
    band = keys["band"].to_numpy(np.int64)
    order = np.argsort(band, kind="stable")
    u, v = _star(band[order], keys["hash"].to_numpy(np.uint64)[order], keys["doc_index"].to_numpy(np.int64)[order])
    return unique_edges(u, v)
