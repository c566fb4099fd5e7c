"""SimHash fingerprints (Charikar 2002; seed 001 §2.4.5) and their Hamming-distance search: a CUDA kernel
(simhash.cu, CuPy) and a bit-identical numba twin for the fingerprints; numba for the search.

Definition (both twins follow it exactly, in integers)
------------------------------------------------------
Input: every document's 64-bit shingle hashes H (kernels/minhash.py, steps 1-5: units are words in word mode,
characters in character mode, shingles are windows of word_k / char_k units), flat, with int64 offsets (n + 1).
A repeated shingle is repeated in the input, so its weight is its count (the seed's w_i: "IDF or 1" per token
occurrence); the distinct sets (`shingle_hashes_*(distinct=True)`) give every shingle weight 1.

    v_j = sum_i (+1 if bit j of H_i is 1 else -1) = 2 c_j - m     (c_j: shingles with bit j set, m: shingles)
    bit j of the fingerprint = 1 iff v_j > 0, i.e. 2 c_j > m

A document without shingles gets 0. Both twins count c_j exactly (int64) and test 2 c_j > m.

Search: two fingerprints within Hamming distance k agree exactly on some *table key*. The bits are cut into k + 1
blocks (the pigeonhole: k differing bits leave one block whole); with `levels=2`, the bits outside each block are
cut again into k + 1 sub-blocks (the k differences left miss one of them). A table's key is its block's bits
(levels 1: k + 1 tables; 64 bits, k = 3: 4 tables of 16-bit keys) or its block's and one sub-block's bits
(levels 2: (k + 1)^2 tables; 4 x 4 = 16 tables of 16 + 12 = 28-bit keys, Manku, Jain and Das Sarma 2007's
permuted-block layout: the key bits are what a permutation would move to the front). Documents sharing a
(table, key) are candidates; `hamming_edges` keeps the pairs within distance k.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._cuda import cupy_module, raw_module
from ._jit import njit
from ._mersenne import splitmix64_array

BITS = 64
_GPU_MAX_BLOCKS = 1 << 20   # the kernel loops over documents, so the grid can be capped


# --------------------------------------------------------------------------------------------
# Fingerprints
# --------------------------------------------------------------------------------------------


@njit(parallel=True, cache=True)
def _fold_docs(flat, offsets, out):
    for d in prange(offsets.shape[0] - 1):
        s, e = offsets[d], offsets[d + 1]
        ones = np.zeros(BITS, dtype=np.int64)
        for i in range(s, e):
            h = flat[i]
            for j in range(BITS):
                ones[j] += np.int64((h >> np.uint64(j)) & np.uint64(1))
        sig = np.uint64(0)
        for j in range(BITS):
            if 2 * ones[j] > e - s:
                sig |= np.uint64(1) << np.uint64(j)
        out[d] = sig


def fingerprints_cpu(flat, offsets) -> np.ndarray:
    """uint64 fingerprint per document from its shingle hashes (flat uint64, offsets int64 of n + 1)."""
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    out = np.zeros(offsets.shape[0] - 1, dtype=np.uint64)
    if out.shape[0]:
        _fold_docs(np.ascontiguousarray(flat, dtype=np.uint64), offsets, out)
    return out


def fingerprints_gpu(flat, offsets):
    """GPU twin of fingerprints_cpu (simhash.cu, one block of 64 threads per document): CuPy in and out."""
    cp = cupy_module()

    flat = cp.ascontiguousarray(cp.asarray(flat, dtype=cp.uint64))
    offsets = cp.ascontiguousarray(cp.asarray(offsets, dtype=cp.int64))
    n = offsets.shape[0] - 1
    out = cp.zeros(n, dtype=cp.uint64)
    if n:
        raw_module("simhash.cu").get_function("simhash_fold")(
            (min(n, _GPU_MAX_BLOCKS),), (BITS,), (flat, offsets, np.int64(n), out))
    return out


def simhash(strings, cjk=False, word_k: int = 1, char_k: int = 2, distinct: bool = False,
            device: str = "cpu", counts: bool = False):
    """uint64 SimHash fingerprints of a column of strings (kernels.strings.kernel_inputs' kinds). cjk: a bool for
    all documents or one per document (character units); distinct: weight 1 per shingle instead of its count.
    device "cpu", "gpu" or "auto": the same fingerprints. counts: also each document's number of shingles (int64;
    0 for a document without tokens, whose fingerprint 0 means nothing)."""
    from .minhash import shingle_hashes_cpu, shingle_hashes_gpu
    from .strings import kernel_inputs

    data, offsets, on_gpu = kernel_inputs(strings, device)
    if on_gpu:
        flat, offs = shingle_hashes_gpu(data, offsets, cjk, word_k, char_k, distinct=distinct)
        fp, offs = fingerprints_gpu(flat, offs).get(), offs.get()
    else:
        flat, offs = shingle_hashes_cpu(data, offsets, cjk, word_k, char_k, distinct=distinct)
        fp = fingerprints_cpu(flat, offs)
    return (fp, np.diff(np.asarray(offs, np.int64))) if counts else fp


# --------------------------------------------------------------------------------------------
# Tables and the Hamming search
# --------------------------------------------------------------------------------------------


def table_masks(k: int, levels: int = 2) -> np.ndarray:
    """uint64 key mask of every table (module docstring): k + 1 blocks of the 64 bits, each once (levels 1) or
    with each of k + 1 sub-blocks of the other bits (levels 2). Bits are split as evenly as they go."""
    if k < 0 or levels not in (1, 2) or (k + 1) * levels > BITS:
        raise ValueError(f"no table layout for Hamming distance {k} with {levels} levels on {BITS} bits")
    masks = []
    for block in np.array_split(np.arange(BITS), k + 1):
        rest = np.setdiff1d(np.arange(BITS), block)
        for sub in (np.array_split(rest, k + 1) if levels == 2 else [np.array([], np.int64)]):
            masks.append(sum(1 << int(b) for b in (*block, *sub)))
    return np.array(masks, dtype=np.uint64)


def table_keys(fp: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(table, key) of every (document, table), table-major: rows t * n .. (t + 1) * n - 1 are table t's."""
    fp = np.asarray(fp, dtype=np.uint64)
    table = np.repeat(np.arange(len(masks), dtype=np.int64), len(fp))
    return table, (fp[None, :] & masks[:, None]).reshape(-1)


def route(table: np.ndarray, key: np.ndarray) -> np.ndarray:
    """A well-mixed uint64 per (table, key), to pick its bucket."""
    return splitmix64_array(key ^ splitmix64_array(table.astype(np.uint64) + np.uint64(1)))


@njit(cache=True, inline="always")
def popcount64(x):
    """Set bits of a uint64 (SWAR; CUDA's __popcll)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True)
def _bucket_edges(table, key, fp, doc, k, fill, u, v):
    """Rows sorted by (table, key, fp, doc). Per run of equal (table, key): each doc with its fingerprint's first
    doc (identical fingerprints: a star, never all pairs), and the first docs of distinct fingerprints pairwise
    when within distance k. Counts the edges (fill False) or writes them (fill True); returns their number."""
    n = table.shape[0]
    m = 0
    r0 = 0
    while r0 < n:
        r1 = r0 + 1
        while r1 < n and table[r1] == table[r0] and key[r1] == key[r0]:
            r1 += 1
        for i in range(r0, r1):             # identical fingerprints: an edge to the first doc of theirs
            if i > r0 and fp[i] == fp[i - 1]:
                continue
            j = i + 1
            while j < r1 and fp[j] == fp[i]:
                if fill:
                    u[m], v[m] = doc[i], doc[j]
                m += 1
                j += 1
            while j < r1:                   # distinct fingerprints: their first docs
                if fp[j] != fp[j - 1] and popcount64(fp[i] ^ fp[j]) <= k:
                    if fill:
                        u[m], v[m] = min(doc[i], doc[j]), max(doc[i], doc[j])
                    m += 1
                j += 1
        r0 = r1
    return m


def hamming_edges(table, key, fp, doc, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Candidate rows (table, key, fp, doc_index) of any order → edges (u < v) between documents within Hamming
    distance k that share a table key (repeats possible across tables; `unique_pairs` removes them)."""
    order = np.lexsort((doc, fp, key, table))
    cols = (np.asarray(table, np.int64)[order], np.asarray(key, np.uint64)[order],
            np.asarray(fp, np.uint64)[order], np.asarray(doc, np.int64)[order])
    empty = np.zeros(0, np.int64)
    m = _bucket_edges(*cols, np.int64(k), False, empty, empty)
    u, v = np.empty(m, np.int64), np.empty(m, np.int64)
    _bucket_edges(*cols, np.int64(k), True, u, v)
    return u, v


def hamming(a, b) -> np.ndarray:
    """Per pair, the Hamming distance of two uint64 arrays (numpy, for checks and benchmarks)."""
    x = np.bitwise_xor(np.asarray(a, np.uint64), np.asarray(b, np.uint64))
    return np.unpackbits(x.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1).astype(np.int64)


__all__ = ["BITS", "fingerprints_cpu", "fingerprints_gpu", "hamming", "hamming_edges", "popcount64", "route",
           "simhash", "table_keys", "table_masks"]
