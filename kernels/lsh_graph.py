"""The LSH graph of near dedup in array operations, one code for numpy and CuPy: the (band, hash, doc) rows of the
band buckets → star edges → connected components. On the GPU it runs where the band keys are (device sorts and
scatters, no host round trip); on the CPU its numpy form is the twin the tests hold equal to the numba path that
the fuzzy_dedup stage runs there (gpupipe/stages/fuzzy/edges.py, components.py), value for value:

  star_edges_array    documents sharing a (band, hash) bucket → an edge from the bucket's smallest doc to each
                      other member; each pair once, u < v, sorted by (u, v)
  components_array    edges → (doc, cluster) for every doc on an edge, cluster = the smallest doc of its component
                      (min-label propagation with pointer jumping: labels only fall, so it ends, in at most
                      about log2(diameter) rounds of jumps per propagation step)

The module of the input arrays decides where it runs (CuPy arrays: the GPU). Only numpy is imported here.
"""

from __future__ import annotations

import numpy as np


def _xp(a):
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def _stable_order(xp, *keys):
    """Indices sorting by keys[0], then keys[1], ... (stable argsorts from the last key to the first)."""
    order = xp.arange(keys[0].shape[0])
    for k in reversed(keys):
        order = order[xp.argsort(k[order], kind="stable")]
    return order


def star_edges_array(band, hashes, doc):
    """(u, v) int64 arrays: for every (band, hash) bucket with two docs or more, an edge from its smallest doc to
    each other doc; over all bands, each pair once, u < v, sorted by (u, v)."""
    xp = _xp(doc)
    band, hashes, doc = xp.asarray(band, np.int64), xp.asarray(hashes, np.uint64), xp.asarray(doc, np.int64)
    if doc.shape[0] == 0:
        return xp.zeros(0, np.int64), xp.zeros(0, np.int64)
    order = _stable_order(xp, band, hashes, doc)
    b, h, d = band[order], hashes[order], doc[order]
    first = xp.ones(d.shape[0], dtype=bool)
    first[1:] = (b[1:] != b[:-1]) | (h[1:] != h[:-1])
    group = xp.cumsum(first) - 1
    smallest = d[xp.flatnonzero(first)][group]
    member = ~first & (d != smallest)        # a doc listed twice in one bucket is no edge to itself
    u, v = smallest[member], d[member]
    if u.shape[0] == 0:
        return u, v
    order = _stable_order(xp, u, v)
    u, v = u[order], v[order]
    keep = xp.ones(u.shape[0], dtype=bool)
    keep[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    return u[keep], v[keep]


def _scatter_min(xp, a, index, values):
    if xp is np:
        np.minimum.at(a, index, values)
    else:
        import cupyx

        cupyx.scatter_min(a, index, values)


def components_array(u, v):
    """(doc, cluster) int64 arrays over the docs on an edge (doc ascending): cluster = the smallest doc of the
    connected component, as union-find gives it."""
    xp = _xp(u)
    u, v = xp.asarray(u, np.int64), xp.asarray(v, np.int64)
    nodes = xp.unique(xp.concatenate([u, v]))
    if nodes.shape[0] == 0:
        return nodes, nodes.copy()
    ui, vi = xp.searchsorted(nodes, u), xp.searchsorted(nodes, v)
    # labels are node positions (uint64: CUDA's atomicMin takes unsigned 64-bit), so the smallest doc wins
    label = xp.arange(nodes.shape[0], dtype=np.uint64)
    while True:
        m = xp.minimum(label[ui], label[vi])
        new = label.copy()
        _scatter_min(xp, new, ui, m)
        _scatter_min(xp, new, vi, m)
        while True:                          # pointer jumping: every node to its label's label, until settled
            jumped = new[new.astype(np.int64)]
            if bool((jumped == new).all()):
                break
            new = jumped
        if bool((new == label).all()):
            return nodes, nodes[label.astype(np.int64)]
        label = new


__all__ = ["star_edges_array", "components_array"]
