"""The LSH graph of near dedup, one code for numpy and CuPy: the (band, hash, doc) rows of the band buckets → star
edges → (exact Jaccard check) → connected components. Array forms (what the GPU runs, where the band keys are:
device sorts and scatters, no host round trip):

  star_edges_array    documents sharing a (band, hash) bucket → an edge from the bucket's smallest doc to each
                      other member; each pair once, u < v, sorted by (u, v)
  distinct_sets_array flat shingle hashes + offsets → each document's set: sorted, each hash once (the numba
                      twin: minhash.shingle_hashes_cpu(distinct=True))
  jaccard_array       per edge, |A ∩ B| / |A ∪ B| of two documents' sets, by one sort of both sets tagged with the
                      edge: equal neighbours are the intersection
  components_array    edges → (doc, cluster) for every doc on an edge, cluster = the smallest doc of its component
                      (min-label propagation with pointer jumping: labels only fall, so it ends, in at most
                      about log2(diameter) rounds of jumps per propagation step)

On the CPU the numba twins below run instead (a hash table per band, one merge per pair, union-find: 7-35x faster
than sorts on two cores), and the array forms' numpy runs are what the tests hold them equal to. The dispatchers
pick by the module of their input arrays (CuPy: the array forms; numpy: the numba twins):

  star_edges_rows(band, hashes, doc), star_edges_keys(keys, doc), jaccard(flat, offsets, ia, ib), components(u, v)

Only numpy and numba are imported here.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from ._cuda import cupy_module
from ._jit import njit


def _xp(a):
    if type(a).__module__.split(".")[0] == "cupy":
        return cupy_module()
    return np


def on_device(device: str, *arrays):
    """The arrays on the device ("gpu": CuPy copies) or as they are ("cpu"): the dispatchers below then pick the
    array forms or the numba twins."""
    if device != "gpu":
        return arrays
    cupy = cupy_module()
    return tuple(cupy.asarray(a) for a in arrays)


def to_host(a):
    """A numpy array of `a`, wherever it is."""
    return a.get() if _xp(a) is not np else a


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


def _segment_ids(xp, offsets, total: int):
    """For each of `total` flat positions, the segment (row of `offsets`, n + 1 ascending) it lies in."""
    return xp.searchsorted(offsets[1:], xp.arange(total, dtype=np.int64), side="right")


def distinct_sets_array(flat, offsets):
    """(flat, offsets) of each segment sorted, each value once: every document's shingle set."""
    xp = _xp(flat)
    flat, offsets = xp.asarray(flat, np.uint64), xp.asarray(offsets, np.int64)
    seg = _segment_ids(xp, offsets, flat.shape[0])
    order = _stable_order(xp, seg, flat)
    seg, flat = seg[order], flat[order]
    keep = xp.ones(flat.shape[0], dtype=bool)
    keep[1:] = (seg[1:] != seg[:-1]) | (flat[1:] != flat[:-1])
    counts = xp.bincount(seg[keep], minlength=offsets.shape[0] - 1)
    out = xp.zeros(offsets.shape[0], np.int64)
    xp.cumsum(counts, out=out[1:])
    return flat[keep], out


def _gather_segments(xp, flat, offsets, rows):
    """The values of segments `rows` (repeats allowed) back to back, and the position in `rows` of each."""
    starts, lens = offsets[rows], offsets[rows + 1] - offsets[rows]
    ends = xp.cumsum(lens)
    total = int(ends[-1]) if ends.shape[0] else 0
    owner = xp.searchsorted(ends, xp.arange(total, dtype=np.int64), side="right")
    return flat[starts[owner] + xp.arange(total, dtype=np.int64) - (ends - lens)[owner]], owner


GRAPH_BYTES = 512 << 20   # device memory the array forms' temporaries may take at once (edges or bands per round)
_JACCARD_BYTES_PER_VALUE = 96   # gathered value: value, edge, order, sorted copies, flags (measured over the stand-in)
_STAR_BYTES_PER_ROW = 112       # (band, hash, doc) row: the rows, three stable argsorts' orders and gathers


def _cuts(ends, step: int) -> list[int]:
    """Cut points [0, ..., n] of a running total `ends` (cumsum of n sizes, numpy) into rounds of at most `step`
    each (an item larger than step goes alone)."""
    n = ends.shape[0]
    cuts = [0]
    while cuts[-1] < n:
        before = int(ends[cuts[-1] - 1]) if cuts[-1] else 0
        cuts.append(max(cuts[-1] + 1, int(np.searchsorted(ends, before + step, side="right"))))
    return cuts if n else [0, 0]


def jaccard_array(flat, offsets, ia, ib, *, max_bytes: int | None = None):
    """float64 per edge: the Jaccard similarity of sets ia[e] and ib[e] (segments of a distinct_sets_array
    result); 1.0 where both are empty, as fuzzy/verify._jaccard. Edges go in rounds whose gathered values take at
    most `max_bytes` (GRAPH_BYTES) of temporaries, so a hub shared by many edges cannot exhaust the device."""
    xp = _xp(flat)
    flat, offsets = xp.asarray(flat, np.uint64), xp.asarray(offsets, np.int64)
    ia, ib = xp.asarray(ia, np.int64), xp.asarray(ib, np.int64)
    if ia.shape[0] == 0:
        return xp.zeros(0, np.float64)
    step = max(1, (GRAPH_BYTES if max_bytes is None else max_bytes) // _JACCARD_BYTES_PER_VALUE)
    sizes = (offsets[ia + 1] - offsets[ia]) + (offsets[ib + 1] - offsets[ib])
    cuts = _cuts(np.cumsum(to_host(sizes)), step)   # one host copy of 8 bytes an edge
    if len(cuts) > 2:
        return xp.concatenate([_jaccard_round(xp, flat, offsets, ia[e0:e1], ib[e0:e1])
                               for e0, e1 in zip(cuts[:-1], cuts[1:])])
    return _jaccard_round(xp, flat, offsets, ia, ib)


def _jaccard_round(xp, flat, offsets, ia, ib):
    va, ea = _gather_segments(xp, flat, offsets, ia)
    vb, eb = _gather_segments(xp, flat, offsets, ib)
    edge, value = xp.concatenate([ea, eb]), xp.concatenate([va, vb])
    order = _stable_order(xp, edge, value)
    edge, value = edge[order], value[order]
    # each set holds a value once, so a value twice within one edge is in both sets
    both = (edge[1:] == edge[:-1]) & (value[1:] == value[:-1])
    inter = xp.bincount(edge[1:][both], minlength=ia.shape[0]).astype(np.int64)
    union = (offsets[ia + 1] - offsets[ia]) + (offsets[ib + 1] - offsets[ib]) - inter
    return (inter + (union == 0)) / xp.maximum(union, 1)   # two empty sets: 1 / 1 (no where() with scalars)


def _scatter_min(xp, a, index, values):
    if xp is np:
        np.minimum.at(a, index, values)
    else:
        import cupyx

        cupyx.scatter_min(a, index, values)


def components_array(u, v):
    """(doc, cluster) int64 arrays over the docs on an edge (doc ascending): cluster = the smallest doc of the
    connected component, as union-find gives it.

    FastSV-style (Zhang, Azad, Hu 2020): each round hooks the parents of both endpoints (stochastic hooking) and
    the endpoints themselves (aggressive hooking) onto the other side's grandparent, then jumps pointers until
    every node points at a root. Hooking roots merges whole trees per round, where hooking endpoints alone moved a
    label one hop per round along a long chain. Labels only fall and stay inside their component, so the smallest
    node of a component ends as everyone's root.
    """
    xp = _xp(u)
    u, v = xp.asarray(u, np.int64), xp.asarray(v, np.int64)
    nodes = xp.unique(xp.concatenate([u, v]))
    if nodes.shape[0] == 0:
        return nodes, nodes.copy()
    ui, vi = xp.searchsorted(nodes, u), xp.searchsorted(nodes, v)
    # labels are node positions (uint64: CUDA's atomicMin takes unsigned 64-bit), so the smallest doc wins
    label = xp.arange(nodes.shape[0], dtype=np.uint64)
    while True:
        pu, pv = label[ui], label[vi]
        gu, gv = label[pu.astype(np.int64)], label[pv.astype(np.int64)]
        new = label.copy()
        _scatter_min(xp, new, pu.astype(np.int64), gv)   # stochastic hooking: u's parent onto v's grandparent
        _scatter_min(xp, new, pv.astype(np.int64), gu)
        _scatter_min(xp, new, ui, gv)                     # aggressive hooking: the endpoints too
        _scatter_min(xp, new, vi, gu)
        while True:                          # shortcutting: every node to its label's label, until settled
            jumped = new[new.astype(np.int64)]
            if bool((jumped == new).all()):
                break
            new = jumped
        if bool((new == label).all()):
            return nodes, nodes[label.astype(np.int64)]
        label = new


# --------------------------------------------------------------------------------------------
# numba twins (the CPU path) and the dispatchers
# --------------------------------------------------------------------------------------------


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
    Rows must come grouped by band (see star_edges_rows); bands in parallel."""
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
    """_star for an (n, bands) band-key matrix whose row i is doc[i]: no (band, hash, doc) rows to build, and one
    table per worker, cleared between its bands, instead of one per band (fresh memory costs page faults)."""
    n, bands = keys.shape
    first = np.empty((bands, n), np.int64)
    size = _table_size(n)
    for w in prange(workers):
        table = np.empty((size, 2), np.int64)
        for b in range(w, bands, workers):
            table[:] = 0
            _smallest_in_buckets(keys[:, b], doc, table, first[b])
    return _star_edges(first, doc)


@njit(cache=True)
def _union_find(n, u, v):
    parent = np.arange(n)
    for e in range(u.shape[0]):
        a, b = u[e], v[e]
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a != b:
            if a < b:
                parent[b] = a
            else:
                parent[a] = b
    for i in range(n):  # flatten: every node points at its root (the smallest node of the component)
        r = i
        while parent[r] != r:
            r = parent[r]
        parent[i] = r
    return parent


@njit(cache=True)
def _jaccard(flat, offsets, ia, ib, out):
    # Sorted-unique shingle sets: merge-count the intersection of each pair.
    for e in range(ia.shape[0]):
        a0, a1 = offsets[ia[e]], offsets[ia[e] + 1]
        b0, b1 = offsets[ib[e]], offsets[ib[e] + 1]
        i, j, inter = a0, b0, 0
        while i < a1 and j < b1:
            if flat[i] == flat[j]:
                inter += 1
                i += 1
                j += 1
            elif flat[i] < flat[j]:
                i += 1
            else:
                j += 1
        union = (a1 - a0) + (b1 - b0) - inter
        out[e] = inter / union if union > 0 else 1.0


def unique_pairs(u, v):
    """Edges sorted by (u, v) without repeats (a pair shares buckets in several bands)."""
    xp = _xp(u)
    order = _stable_order(xp, u, v) if xp is not np else np.lexsort((v, u))
    u, v = u[order], v[order]
    new = xp.ones(u.shape[0], dtype=bool)
    new[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    return u[new], v[new]


def star_edges_rows(band, hashes, doc):
    """star_edges_array of (band, hash, doc) rows: the numba twin for numpy input."""
    if _xp(doc) is not np:
        return star_edges_array(band, hashes, doc)
    band = np.asarray(band, np.int64)
    order = np.argsort(band, kind="stable")
    return unique_pairs(*_star(band[order], np.asarray(hashes, np.uint64)[order], np.asarray(doc, np.int64)[order]))


def star_edges_keys(keys, doc):
    """The star edges of an (n, bands) band-key matrix whose row i is document doc[i] (u < v, sorted, each once)."""
    xp = _xp(keys)
    if xp is not np:
        return _star_edges_key_rounds(xp, keys, xp.asarray(doc, np.int64), GRAPH_BYTES)
    workers = max(1, min(keys.shape[1], numba.get_num_threads()))
    return unique_pairs(*_star_matrix(np.ascontiguousarray(keys, np.uint64), np.asarray(doc, np.int64), workers))


def _star_edges_key_rounds(xp, keys, doc, max_bytes: int):
    """star_edges_array over groups of bands, each group's (band, hash, doc) rows within max_bytes of temporaries;
    the groups' edges (each unique within its group) are merged once at the end."""
    n, bands = keys.shape
    per = max(1, min(bands, max_bytes // max(1, n * _STAR_BYTES_PER_ROW)))
    u = v = None
    for b0 in range(0, bands, per):
        b1 = min(bands, b0 + per)
        gu, gv = star_edges_array(xp.repeat(xp.arange(b0, b1, dtype=np.int64), n),
                                  xp.ascontiguousarray(keys[:, b0:b1].T).reshape(-1), xp.tile(doc, b1 - b0))
        # merged as we go: what is held is the distinct edges so far (the output) plus one group's
        u, v = (gu, gv) if u is None else unique_pairs(xp.concatenate([u, gu]), xp.concatenate([v, gv]))
    return u, v


def jaccard(flat, offsets, ia, ib):
    """jaccard_array: the numba twin for numpy input."""
    if _xp(flat) is not np:
        return jaccard_array(flat, offsets, ia, ib)
    out = np.empty(len(ia), np.float64)
    if len(ia):
        _jaccard(np.asarray(flat, np.uint64), np.asarray(offsets, np.int64), np.asarray(ia, np.int64),
                 np.asarray(ib, np.int64), out)
    return out


def components(u, v):
    """components_array: union-find (the numba twin) for numpy input."""
    if _xp(u) is not np:
        return components_array(u, v)
    u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
    nodes, inv = np.unique(np.concatenate([u, v]), return_inverse=True)
    if nodes.shape[0] == 0:
        return nodes, nodes.copy()
    root = _union_find(nodes.shape[0], inv[:u.shape[0]].astype(np.int64), inv[u.shape[0]:].astype(np.int64))
    return nodes, nodes[root]


__all__ = ["on_device", "to_host", "star_edges_array", "distinct_sets_array", "jaccard_array", "components_array",
           "star_edges_rows", "star_edges_keys", "jaccard", "components", "unique_pairs"]
