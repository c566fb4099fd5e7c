"""Near dedup's whole chain in one code for numpy and CuPy: text buffers → MinHash band keys → band buckets and star
edges → exact Jaccard check of the candidate pairs → connected components. With device="gpu" every step runs where
the band keys are made (the text goes to the device once; the only host syncs are array sizes), and only the
(doc, cluster) pairs of documents on a kept edge come back; with device="cpu" the same steps run on numpy
arrays, through the numba twins of the kernels (signatures folded into band keys, shingle hashes, bucket tables, pair
merges, union-find; kernels/lsh_graph.py dispatches by the arrays' module). Both give the same clusters, value for
value (tests/test_kernels_near_dedup.py; the GPU row in profiling/gpu_check.sh).

  near_duplicate_clusters   the chain; `timer(step)` (a context manager factory) times each step
  ChainParams               its parameters: the LSH shape, the seed, the shingle lengths, the threshold

The keeper of each cluster is chosen by the caller (gpupipe/stages/dedup/fuzzy: priority columns, then doc_index) on the
cluster members alone. Only numpy and numba are imported here; CuPy where device="gpu".
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
from typing import Callable, NamedTuple

import numpy as np
from ._jit import njit

from ._cuda import cupy_module
from .strings import check_buffers
from .lsh_graph import _gather_segments, _xp, components, jaccard, star_edges_keys, to_host


class ChainParams(NamedTuple):
    bands: int
    rows: int
    seed: int = 0
    word_k: int = 5
    char_k: int = 3
    threshold: float = 0.8
    verify: bool = True    # cut candidate pairs whose true shingle-set Jaccard is below the threshold


def _no_timer(step: str):
    return contextlib.nullcontext()


def _rows_of(doc, wanted):
    """Positions in `doc` (distinct doc ids, any order) of the ids `wanted` (all present)."""
    xp = _xp(doc)
    if doc.shape[0] < 2 or bool((doc[1:] > doc[:-1]).all()):   # ascending, as doc_index usually is: no sort
        return xp.searchsorted(doc, wanted)
    order = xp.argsort(doc, kind="stable")
    return order[xp.searchsorted(doc[order], wanted)]


def near_duplicate_clusters(data, offsets, cjk, doc, params: ChainParams, device: str = "cpu",
                            timer: Callable[[str], contextlib.AbstractContextManager] = _no_timer,
                            overlap: bool = True):
    """(doc, cluster) int64 numpy arrays over the documents on a kept edge: cluster = the smallest doc id of its
    connected component. data/offsets: Arrow-style UTF-8 buffers (numpy, or CuPy for the GPU); cjk: 1 per document
    shingled by characters; doc: distinct int64 ids, one per document. Also returns the counts of candidate and
    kept edges, in a dict. On the GPU, `overlap` as in device_band_keys."""
    from . import minhash as mh

    if device == "gpu":
        xp = cupy_module()

        data, offsets, cjk, keys = device_band_keys(data, offsets, cjk, params, timer, overlap)
        doc = xp.asarray(doc, np.int64)
    else:
        xp = np
        doc = np.asarray(doc, np.int64)
        cjk = np.broadcast_to(np.asarray(cjk, np.uint8), (offsets.shape[0] - 1,))
        a, b = mh.minhash_permutations(params.bands * params.rows, params.seed)
        with timer("signatures"):   # folded into band keys as each signature is made
            keys = mh.minhash_cpu(data, offsets, cjk, a, b, params.word_k, params.char_k,
                                  bands=params.bands, rows=params.rows)
    with timer("edges"):
        u, v = star_edges_keys(keys, doc)
    counts = {"candidate_edges": int(u.shape[0])}
    if params.verify and u.shape[0]:
        with timer("jaccard"):
            u, v = verified_edges(data, offsets, cjk, doc, u, v, params, device)
    counts["verified_edges"] = int(u.shape[0])
    with timer("components"):
        nodes, cluster = components(u, v)
        if xp is not np:
            nodes, cluster = nodes.get(), cluster.get()
    return nodes, cluster, counts


def device_band_keys(data, offsets, cjk, params: ChainParams, timer=_no_timer, overlap: bool = True):
    """The GPU's first steps: (device data, device offsets, device cjk flags, (n, bands) band keys). Host buffers
    go to the device in batches of minhash.GPU_BATCH_BYTES through two pinned staging buffers on a copy stream,
    so that batch i+1's copy overlaps batch i's kernels on the compute stream (overlap=False: all copies first,
    then the kernels, then the fold, each timed alone: the per-step breakdown of profiling). Device buffers
    (cuDF's, in place) are read where they are. The whole text stays on the device for the Jaccard step; the
    signatures are folded into band keys on the device and only the keys are kept (8 bytes a band)."""
    cp = cupy_module()
    import cupyx

    from . import minhash as mh

    a, b = mh.minhash_permutations(params.bands * params.rows, params.seed)
    host_offsets = np.asarray(cp.asnumpy(offsets) if hasattr(offsets, "get") else offsets).astype(np.int64)
    n = host_offsets.shape[0] - 1
    flags = np.asarray(cp.asnumpy(cjk) if hasattr(cjk, "get") else cjk, np.uint8)
    check_buffers(data, host_offsets)             # on the host offsets: no device sync, device data or not
    copy_stream, compute = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    # Non-blocking streams do not wait for the legacy default stream: the caller's device buffers (cuDF's, or
    # arrays made on its current stream) are ordered before the compute stream's first read by an event.
    compute.wait_event(cp.cuda.get_current_stream().record())
    with compute:                                 # everything the kernels read is written on their stream
        d_cjk = cp.asarray(np.ascontiguousarray(np.broadcast_to(flags, (n,))))
        keys = cp.empty((n, params.bands), dtype=cp.uint64)
        if isinstance(data, np.ndarray):
            base = int(host_offsets[0])
            rel = host_offsets - base             # the device copy holds data[base:] only
            d_data = cp.empty(max(1, int(rel[-1])), dtype=cp.uint8)
        else:
            base, rel, d_data = 0, host_offsets, cp.asarray(data)
    batches = mh._gpu_batches(rel, mh.GPU_BATCH_BYTES) if n else []

    def signatures(d0, d1):
        return mh.minhash_gpu(d_data, rel[d0:d1 + 1], d_cjk[d0:d1], a, b, params.word_k, params.char_k)

    if not isinstance(data, np.ndarray) or not overlap:
        if isinstance(data, np.ndarray):
            with timer("copy in"):
                staging = cupyx.empty_pinned(max(1, max((int(rel[d1] - rel[d0]) for d0, d1 in batches),
                                                        default=1)), dtype=np.uint8)
                for d0, d1 in batches:
                    b0, b1 = int(rel[d0]), int(rel[d1])
                    staging[:b1 - b0] = data[base + b0:base + b1]
                    d_data[b0:b1].set(staging[:b1 - b0], stream=copy_stream)
                    copy_stream.synchronize()
        sigs = []
        with timer("signatures"), compute:
            for d0, d1 in batches:
                sigs.append(signatures(d0, d1))
            compute.synchronize()
        with timer("band fold"), compute:
            for (d0, d1), sig in zip(batches, sigs):
                keys[d0:d1] = mh.band_keys_array(sig, params.bands, params.rows)
            compute.synchronize()
        return d_data, cp.asarray(rel), d_cjk, keys
    most = max((int(rel[d1] - rel[d0]) for d0, d1 in batches), default=1)
    staging = [cupyx.empty_pinned(max(1, most), dtype=np.uint8) for _ in range(2)]
    free = [None, None]                           # per staging buffer: the event of its last copy
    with timer("copy in + signatures + band fold (overlapped)"):
        for i, (d0, d1) in enumerate(batches):
            b0, b1 = int(rel[d0]), int(rel[d1])
            buf = staging[i % 2]
            if free[i % 2] is not None:
                free[i % 2].synchronize()         # its previous copy is done: it may be overwritten
            _stage(buf, data[base + b0:base + b1])
            with copy_stream:
                d_data[b0:b1].set(buf[:b1 - b0], stream=copy_stream)
                free[i % 2] = copied = copy_stream.record()
            compute.wait_event(copied)
            with compute:
                keys[d0:d1] = mh.band_keys_array(signatures(d0, d1), params.bands, params.rows)
        compute.synchronize()
    return d_data, cp.asarray(rel), d_cjk, keys


STAGE_THREADS = min(8, os.cpu_count() or 1)
_STAGE_POOL: list = []


def _stage(dst, src) -> None:
    """dst[:len(src)] = src with up to STAGE_THREADS threads (numpy's copy releases the GIL), at least 8 MiB each:
    one core's memcpy into pinned memory is slower than the PCIe link the staged batch then crosses."""
    n = src.shape[0]
    parts = min(STAGE_THREADS, max(1, n >> 23))
    if parts == 1:
        dst[:n] = src
        return
    if not _STAGE_POOL:
        _STAGE_POOL.append(concurrent.futures.ThreadPoolExecutor(STAGE_THREADS, thread_name_prefix="gpupipe-stage"))
    cuts = np.linspace(0, n, parts + 1).astype(np.int64)

    def copy(i):
        dst[cuts[i]:cuts[i + 1]] = src[cuts[i]:cuts[i + 1]]

    list(_STAGE_POOL[0].map(copy, range(parts)))


GATHER_BYTES = 256 << 20   # candidate text gathered per round (on the GPU its index arrays cost 16 bytes a byte)


def candidate_sets(data, offsets, cjk, rows, params: ChainParams, device: str = "cpu"):
    """(flat, offsets) shingle sets (sorted, distinct) of the documents at `rows`, in that order: their bytes are
    gathered into buffers of their own, GATHER_BYTES at a time, and shingled by the kernel (or its numba twin)."""
    from . import minhash as mh

    xp = _xp(rows)
    offsets = offsets.astype(np.int64, copy=False)
    lens = offsets[rows + 1] - offsets[rows]
    ends = xp.cumsum(lens)
    cuts = [0, *np.searchsorted(to_host(ends), np.arange(GATHER_BYTES, int(ends[-1]) if len(rows) else 0,
                                                       GATHER_BYTES), side="right").tolist(), len(rows)]
    flats, counts = [], []
    for r0, r1 in zip(cuts[:-1], cuts[1:]):
        if r1 <= r0:
            continue
        part = rows[r0:r1]
        sub_offsets = xp.zeros(part.shape[0] + 1, np.int64)
        xp.cumsum(lens[r0:r1], out=sub_offsets[1:])
        if xp is np:
            sub_data = np.empty(int(sub_offsets[-1]), np.uint8)
            _gather_rows(data, offsets, part, sub_offsets, sub_data)
        else:
            sub_data, _ = _gather_segments(xp, data, offsets, part)
        shingle = mh.shingle_hashes_gpu if device == "gpu" else mh.shingle_hashes_cpu
        flat, set_offsets = shingle(sub_data, sub_offsets, cjk[part], params.word_k, params.char_k, distinct=True)
        flats.append(flat)
        counts.append(xp.diff(set_offsets))
    set_offsets = xp.zeros(rows.shape[0] + 1, np.int64)
    if counts:
        xp.cumsum(xp.concatenate(counts), out=set_offsets[1:])
    return (xp.concatenate(flats) if flats else xp.zeros(0, np.uint64)), set_offsets


@njit(cache=True, nogil=True)
def _gather_rows(data, offsets, rows, out_offsets, out):
    """The CPU twin of lsh_graph._gather_segments for bytes: row rows[i]'s bytes to out[out_offsets[i]:]."""
    for i in range(rows.shape[0]):
        s, e = offsets[rows[i]], offsets[rows[i] + 1]
        out[out_offsets[i]:out_offsets[i] + e - s] = data[s:e]


@njit(cache=True)
def _same_bytes(data, offsets, ia, ib, out):
    """out[e]: whether documents ia[e] and ib[e] are the same bytes."""
    for e in range(ia.shape[0]):
        a0, a1, b0, b1 = offsets[ia[e]], offsets[ia[e] + 1], offsets[ib[e]], offsets[ib[e] + 1]
        same = a1 - a0 == b1 - b0
        k = 0
        while same and k < a1 - a0:
            same = data[a0 + k] == data[b0 + k]
            k += 1
        out[e] = same


def same_bytes(data, offsets, ia, ib) -> np.ndarray:
    """Per pair of rows, whether the two documents are byte for byte the same (numpy buffers)."""
    out = np.zeros(len(ia), dtype=bool)
    if len(ia):
        _same_bytes(data, offsets, np.asarray(ia, np.int64), np.asarray(ib, np.int64), out)
    return out


def reaches_threshold(jac, threshold: float):
    """Near dedup's cut, made here only (this chain and the fuzzy_dedup station's verify): an edge stays where the
    Jaccard similarity of its documents' shingle sets reaches the threshold, jac >= threshold (numpy or CuPy), so
    a pair of identical texts (Jaccard 1) always stays."""
    return jac >= threshold


def verified_edges(data, offsets, cjk, doc, u, v, params: ChainParams, device: str = "cpu"):
    """The edges (u, v) whose documents' shingle sets have a Jaccard similarity >= the threshold; the shingle sets
    are made for the candidate documents only. On the CPU, pairs of identical texts (Jaccard 1 by definition; most
    candidate pairs when exact dedup has not run first) are found by a byte compare and need no sets; the GPU
    makes every candidate's set, which is cheaper there than a ragged compare. Same edges either way."""
    xp = _xp(u)
    check = xp.ones(u.shape[0], dtype=bool)
    if xp is np:
        check = ~same_bytes(data, offsets, _rows_of(doc, u), _rows_of(doc, v))
    cu, cv = u[check], v[check]
    cand = xp.unique(xp.concatenate([cu, cv]))
    flat, set_offsets = candidate_sets(data, offsets, cjk, _rows_of(doc, cand), params, device)
    keep = ~check
    jac = jaccard(flat, set_offsets, xp.searchsorted(cand, cu), xp.searchsorted(cand, cv))
    keep[check] = reaches_threshold(jac, params.threshold)
    return u[keep], v[keep]


__all__ = ["ChainParams", "near_duplicate_clusters", "device_band_keys", "reaches_threshold", "verified_edges",
           "candidate_sets", "same_bytes"]
