"""The CUDA kernels of kernels/*.cu as the stand-in runs them: each reads and writes exactly the arguments the
kernel's C signature names, with the CPU twins' own arithmetic (kernels/minhash.py, ngram_hash.py, text_hash.py,
_mersenne.py), so a chain launched through them computes what the device would, value for value.

A kernel is declared by its C parameters (name, kind): "in"/"out"/"inout" pointers (a stand-in ndarray of that
dtype; the launcher checks stream ordering of each), or a scalar of that numpy type (CuPy passes numpy scalars as
the C type; a Python int or a wrong width would be a bug on the device, so it raises here).
"""

from __future__ import annotations

import numpy as np

from gpupipe.kernels import minhash as mh
from gpupipe.kernels import ngram_hash as ng
from gpupipe.kernels import text_hash as th
from gpupipe.kernels._jit import njit
from gpupipe.kernels._mersenne import P61, addmod61, fmix64, mulmod61, reduce61

_P = np.uint64(P61)
MH_CHUNK = 1024    # minhash.cu's MH_CHUNK


# --------------------------------------------------------------------------------------------
# minhash.cu
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def _mh_units(data, offsets, n_docs, base, cjk, sep_table, char_units, units, n_units):
    for d in range(n_docs):
        s, e = np.int64(offsets[d]), np.int64(offsets[d + 1])
        n_units[d] = mh._doc_units(data, s, e, cjk[d] != 0, sep_table, char_units, units[s - base:])


@njit(cache=True)
def _window(units, first, kk, bs):
    acc = np.uint64(0)
    for r in range(kk):
        acc = addmod61(mulmod61(acc, bs), units[first + r])
    return fmix64(acc ^ np.uint64(kk))


@njit(cache=True)
def _mh_shingles(offsets, n_docs, base, cjk, units, n_units, word_k, char_k, bs, out_offsets, out):
    for d in range(n_docs):
        u = units[np.int64(offsets[d]) - base:]
        m = n_units[d]
        k = char_k if cjk[d] else word_k
        kk = min(m, k)
        n_sh = 0 if m == 0 else m - kk + 1
        for i in range(n_sh):
            out[out_offsets[d] + i] = _window(u, i, kk, bs)


@njit(cache=True)
def _mh_signatures(offsets, n_docs, base, cjk, units, n_units, a, b, num_perm, word_k, char_k, bs, out):
    for d in range(n_docs):
        u = units[np.int64(offsets[d]) - base:]
        m = n_units[d]
        k = char_k if cjk[d] else word_k
        kk = min(m, k)
        n_sh = 0 if m == 0 else m - kk + 1
        for j in range(num_perm):
            lowest = _P
            for i in range(n_sh):
                h = reduce61(_window(u, i, kk, bs))
                lowest = min(lowest, addmod61(mulmod61(a[j], h), b[j]))
            out[d * num_perm + j] = lowest


@njit(cache=True)
def _mh_progression(offsets, base, cjk, units, n_units, chunk_doc, chunk_first, n_chunks, a0, b0, da, db,
                    num_perm, word_k, char_k, bs, out):
    """Returns a document whose shingles no chunk covers, or -1 (the host's plan must cover every shingle)."""
    covered = np.zeros(offsets.shape[0] - 1, np.int64)
    for c in range(n_chunks):
        doc, first = chunk_doc[c], chunk_first[c]
        covered[doc] = max(covered[doc], first + MH_CHUNK)
        u = units[np.int64(offsets[doc]) - base:]
        m = n_units[doc]
        k = char_k if cjk[doc] else word_k
        kk = min(m, k)
        n_sh = 0 if m == 0 else m - kk + 1
        count = min(n_sh - first, MH_CHUNK)
        for i in range(count):
            h = reduce61(_window(u, first + i, kk, bs))
            v = addmod61(mulmod61(a0, h), b0)
            w = addmod61(mulmod61(da, h), db)
            for j in range(num_perm):     # atomicMin
                if v < out[doc * num_perm + j]:
                    out[doc * num_perm + j] = v
                v = addmod61(v, w)
    for d in range(covered.shape[0]):
        m = n_units[d]
        k = char_k if cjk[d] else word_k
        if m > 0 and covered[d] < m - min(m, k) + 1:
            return d
    return -1


def _bs(params):
    if not (params[:4] == mh._gpu_params()[:4]).all():
        raise ValueError("minhash params are not minhash._gpu_params()")
    return np.uint64(params[1])


def minhash_units(data, offsets, n_docs, base, cjk, params, units, n_units):
    _bs(params)
    _mh_units(data, offsets, n_docs, base, cjk, mh._SEP_TABLE, mh._CHAR_UNITS, units, n_units)


def minhash_shingles(offsets, n_docs, base, cjk, units, n_units, word_k, char_k, params, out_offsets, out):
    _mh_shingles(offsets, n_docs, base, cjk, units, n_units, np.int64(word_k), np.int64(char_k), _bs(params),
                 out_offsets, out)


def minhash_signatures(offsets, n_docs, base, cjk, units, n_units, a, b, num_perm, word_k, char_k, params, out):
    _mh_signatures(offsets, n_docs, base, cjk, units, n_units, a, b, np.int64(num_perm), np.int64(word_k),
                   np.int64(char_k), _bs(params), out.reshape(-1))


def minhash_progression(offsets, base, cjk, units, n_units, chunk_doc, chunk_first, n_chunks, a0, b0, da, db,
                        num_perm, word_k, char_k, params, out):
    if (chunk_first % MH_CHUNK).any():
        raise ValueError("chunk_first must be multiples of MH_CHUNK")
    missed = _mh_progression(offsets, base, cjk, units, n_units, chunk_doc, chunk_first, n_chunks, a0, b0, da, db,
                             np.int64(num_perm), np.int64(word_k), np.int64(char_k), _bs(params), out.reshape(-1))
    if missed >= 0:
        raise AssertionError(f"minhash_progression: the work items miss shingles of batch document {missed}")


# --------------------------------------------------------------------------------------------
# ngram_hash.cu
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def _ng_units(data, offsets, n_docs, base, cjk, sep_table, units, ustart, uend, n_units):
    for d in range(n_docs):
        s, e = np.int64(offsets[d]), np.int64(offsets[d + 1])
        st = np.empty(e - s, np.int64)
        en = np.empty(e - s, np.int64)
        m = ng._doc_units(data, s, e, cjk[d] != 0, sep_table, units[s - base:], st, en)
        ustart[s - base:s - base + m] = st[:m]
        uend[s - base:s - base + m] = en[:m]
        n_units[d] = m


@njit(cache=True)
def _ng_hits(offsets, docs, base, cjk, units, ustart, uend, n_units, lengths, hashes, directory, shift, filt,
             fshift, fill, hit_offsets, counts, pos, hs, he):
    for j in range(docs.shape[0]):
        d = docs[j]
        o = np.int64(offsets[d]) - base
        char_mode = cjk[d] != 0
        k1 = lengths[2] if char_mode else lengths[0]
        k2 = lengths[3] if char_mode else lengths[1]
        got = ng._doc_hits(units[o:], ustart[o:], uend[o:], n_units[d], k1, k2, hashes, directory, shift, filt,
                           fshift, fill, pos, hs, he, hit_offsets[d] if fill else 0)
        if not fill:
            counts[d] = got


def ngram_units(data, offsets, n_docs, base, cjk, params, units, ustart, uend, n_units):
    _bs(params)
    _ng_units(data, offsets, n_docs, base, cjk, mh._SEP_TABLE, units, ustart, uend, n_units)


def _ng_common(hashes, n_hashes, directory, shift, filt, fshift):
    if n_hashes != hashes.shape[0]:
        raise ValueError("n_hashes is not the table's length")
    return np.uint64(shift), np.uint64(fshift)


def ngram_count(offsets, n_docs, base, cjk, units, n_units, wn, wmin, cn, cmin, hashes, n_hashes, directory, shift,
                filt, fshift, params, counts):
    _bs(params)
    sh, fsh = _ng_common(hashes, n_hashes, directory, shift, filt, fshift)
    none = np.empty(0, np.int64)
    _ng_hits(offsets, np.arange(n_docs, dtype=np.int64), base, cjk, units, none.astype(np.int32),
             none.astype(np.int32), n_units, np.array([wn, wmin, cn, cmin], np.int64), hashes, directory, sh, filt,
             fsh, False, none, counts, none, none, none)


def ngram_fill(offsets, hit_docs, n_hit_docs, base, cjk, units, ustart, uend, n_units, wn, wmin, cn, cmin, hashes,
               n_hashes, directory, shift, filt, fshift, params, hit_offsets, pos, hs, he):
    _bs(params)
    sh, fsh = _ng_common(hashes, n_hashes, directory, shift, filt, fshift)
    _ng_hits(offsets, hit_docs[:n_hit_docs], base, cjk, units, ustart, uend, n_units,
             np.array([wn, wmin, cn, cmin], np.int64), hashes, directory, sh, filt, fsh, True, hit_offsets,
             np.empty(0, np.int64), pos, hs, he)


# --------------------------------------------------------------------------------------------
# text_hash.cu
# --------------------------------------------------------------------------------------------


def text_hash(data, offsets, n_docs, params, out):
    if params.shape != (2, 8):
        raise ValueError("text_hash params are not text_hash._gpu_params(chunk)")
    out[:n_docs] = th.text_hash_cpu(data, offsets[:n_docs + 1])


# --------------------------------------------------------------------------------------------
# Declarations: kernel name -> (C parameters, emulator). {O}: the offsets' type by suffix.
# --------------------------------------------------------------------------------------------

u8, i32, i64, u64 = np.uint8, np.int32, np.int64, np.uint64


def _p(kind, dtype):
    return kind, np.dtype(dtype)


def _text_span(args):
    """The units kernels read only their batch's bytes of `data`: [offsets[0], offsets[n]) (argument 0), while
    the next batch's bytes may still be arriving on the copy stream."""
    offsets, n = args[1], int(args[2])
    return {0: (int(offsets[0]), int(offsets[n]))}


def _declare(offset_type):
    O = offset_type
    return {
        "minhash_units": ([_p("in", u8), _p("in", O), _p("s", i64), _p("s", i64), _p("in", u8), _p("in", u64),
                           _p("out", u64), _p("out", i64)], minhash_units, _text_span),
        "minhash_signatures": ([_p("in", O), _p("s", i64), _p("s", i64), _p("in", u8), _p("in", u64), _p("in", i64),
                                _p("in", u64), _p("in", u64), _p("s", i32), _p("s", i32), _p("s", i32),
                                _p("in", u64), _p("out", u64)], minhash_signatures),
        "minhash_shingles": ([_p("in", O), _p("s", i64), _p("s", i64), _p("in", u8), _p("in", u64), _p("in", i64),
                              _p("s", i32), _p("s", i32), _p("in", u64), _p("in", i64), _p("out", u64)],
                             minhash_shingles),
        "minhash_progression": ([_p("in", O), _p("s", i64), _p("in", u8), _p("in", u64), _p("in", i64),
                                 _p("in", i64), _p("in", i64), _p("s", i64), _p("s", u64), _p("s", u64),
                                 _p("s", u64), _p("s", u64), _p("s", i32), _p("s", i32), _p("s", i32),
                                 _p("in", u64), _p("inout", u64)], minhash_progression),
        "ngram_units": ([_p("in", u8), _p("in", O), _p("s", i64), _p("s", i64), _p("in", u8), _p("in", u64),
                         _p("out", u64), _p("out", i32), _p("out", i32), _p("out", i64)], ngram_units, _text_span),
        "ngram_count": ([_p("in", O), _p("s", i64), _p("s", i64), _p("in", u8), _p("in", u64), _p("in", i64),
                         _p("s", i32), _p("s", i32), _p("s", i32), _p("s", i32), _p("in", u64), _p("s", i64),
                         _p("in", i64), _p("s", i32), _p("in", u64), _p("s", i32), _p("in", u64), _p("out", i64)],
                        ngram_count),
        "ngram_fill": ([_p("in", O), _p("in", i64), _p("s", i64), _p("s", i64), _p("in", u8), _p("in", u64),
                        _p("in", i32), _p("in", i32), _p("in", i64), _p("s", i32), _p("s", i32), _p("s", i32),
                        _p("s", i32), _p("in", u64), _p("s", i64), _p("in", i64), _p("s", i32), _p("in", u64),
                        _p("s", i32), _p("in", u64), _p("in", i64), _p("out", i64), _p("out", i64), _p("out", i64)],
                       ngram_fill),
        "text_hash": ([_p("in", u8), _p("in", O), _p("s", i64), _p("in", u64), _p("out", u64)], text_hash),
    }


KERNELS = {f"{name}_{suffix}": spec if len(spec) == 3 else (*spec, None)
           for suffix, off in (("i32", i32), ("i64", i64)) for name, spec in _declare(off).items()}
