"""128-bit document hash over Arrow string buffers: CUDA kernel (CuPy) and bit-identical numba twin.

Used by exact dedup (hash of the normalized text; the first occurrence wins).

Definition. For a document of bytes b_0 .. b_{n-1} (its UTF-8 encoding, as Arrow stores it) and
p = 2^61 - 1, two polynomial hashes with fixed bases B_1, B_2:

    h_k = sum_i (b_i + 1) * B_k^(n-1-i)  mod p                       (Horner: h = h*B_k + b_i + 1)
    final_k = fmix64(h_k XOR (n * C_k mod 2^64))                     (fmix64: MurmurHash3 finalizer)

and the result row is (final_1, final_2) as uint64. Bytes count as b + 1 so that no byte value
weighs zero (otherwise leading NUL bytes would vanish from h); the length mix and fmix64 spread
the 61-bit residues over all 64 bits. The bases and length constants are fixed (below), never
random per run, so hashes are stable across processes, machines and backends.

Empty strings hash to (fmix64(0), fmix64(0)) = (0, 0): h = 0 and n = 0. Nulls are hashed as the
empty string (a null and "" collide on purpose: both are "no text").

Why polynomial: it is associative over concatenation, H(x || y) = H(x) * B^len(y) + H(y) mod p,
so on the GPU a warp of 32 lanes hashes one document in pieces and combines them exactly (see
text_hash.cu), while the CPU twin runs sequential Horner per document (eight bytes per modular
multiply, see _hash_docs_cpu). Mod-p arithmetic is exact, so the two agree bit for bit.

Two distinct strings of length <= n collide in one base with probability <= n/p over a random
base. With fixed public bases this is a dedup key, not a hash that resists a chosen collision.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np
from numba import prange

from ._jit import njit
from ._mersenne import P61, addmod61, fmix64, mulmod61, reduce61
from ._cuda import cupy_module, raw_module
# String columns as (data, offsets): Arrow/pandas on the host, cuDF on the device. Re-exported here
# because other kernels and stages import them from this module.
from .strings import (_null_slots_hold_bytes, _single_array, _to_arrow, arrow_buffers, check_buffers,  # noqa: F401
                      cudf_buffers, gpu_available, kernel_inputs, string_buffers)

# Bases: the fractional bits of the golden ratio and of sqrt(2) (SHA-512's first IV word), mod p,
# made odd. Length constants: splitmix64's multipliers. Changing any of these changes every hash.
B1 = (0x9E3779B97F4A7C15 % P61) | 1
B2 = (0x6A09E667F3BCC908 % P61) | 1
C1 = 0xBF58476D1CE4E5B9
C2 = 0x94D049BB133111EB

# Bytes per lane per tile in text_hash.cu: speed only, any value gives the same hashes. On an H200,
# 4 and 8 tie on 2 KB documents and 4 is ~9% faster on 200 B ones (profiling/bench_text_hash.py).
GPU_CHUNK = 4
_GPU_BLOCK = 256  # threads per block: 8 documents (warps) per block
_GPU_MAX_BLOCKS = 1 << 20  # the kernel loops over documents, so the grid can be capped

_B1, _B2 = np.uint64(B1), np.uint64(B2)
_C1, _C2 = np.uint64(C1), np.uint64(C2)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)


# --------------------------------------------------------------------------------------------
# CPU twin
# --------------------------------------------------------------------------------------------


def _digit_tables() -> np.ndarray:
    """T[k, j, v] = (v + 1) * B_k^(7 - j) mod p: byte v's term at place j < 7 of an 8-byte block."""
    tables = np.empty((2, 7, 256), dtype=np.uint64)
    for k, base in enumerate((B1, B2)):
        for j in range(7):
            weight = pow(base, 7 - j, P61)
            tables[k, j] = [(v + 1) * weight % P61 for v in range(256)]
    return tables


_TABLES = _digit_tables()
_B1_8, _B2_8 = np.uint64(pow(B1, 8, P61)), np.uint64(pow(B2, 8, P61))


@njit(parallel=True, cache=True)
def _hash_docs_cpu(data, offsets, tables, out):
    """Horner per document, in base B^8 for whole 8-byte blocks, then byte by byte for the tail.

    h <- h * B^8 + sum_j (b_j + 1) * B^(7-j) is the same polynomial as eight byte steps, but costs
    one modular multiply instead of eight: the other terms come from the digit tables, off the
    dependency chain (about 10x faster). No overflow: mulmod < p, seven table terms < 7p, the last
    byte term <= 256, so the sum is < 8p + 256 < 2^64 before one reduce61.
    """
    t1 = tables[0]
    t2 = tables[1]
    for d in prange(offsets.shape[0] - 1):
        start = offsets[d]
        end = offsets[d + 1]
        h1 = _ZERO
        h2 = _ZERO
        i = start
        while i + 8 <= end:
            last = np.uint64(data[i + 7]) + _ONE
            s1 = mulmod61(h1, _B1_8) + last
            s2 = mulmod61(h2, _B2_8) + last
            for j in range(7):
                v = data[i + j]
                s1 += t1[j, v]
                s2 += t2[j, v]
            h1 = reduce61(s1)
            h2 = reduce61(s2)
            i += 8
        for i in range(i, end):
            v = np.uint64(data[i]) + _ONE
            h1 = addmod61(mulmod61(h1, _B1), v)
            h2 = addmod61(mulmod61(h2, _B2), v)
        n = np.uint64(end - start)
        out[d, 0] = fmix64(h1 ^ (n * _C1))
        out[d, 1] = fmix64(h2 ^ (n * _C2))


def text_hash_cpu(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Hash documents given as Arrow buffers: ``data`` uint8 values, ``offsets`` int32/int64 (n+1).

    Offsets index ``data`` directly (a sliced Arrow array's offsets may start above 0). Returns an
    (n, 2) uint64 array. Runs in parallel over documents (numba threads).
    """
    data = np.ascontiguousarray(data)
    offsets = np.ascontiguousarray(offsets)
    check_buffers(data, offsets)
    out = np.empty((offsets.shape[0] - 1, 2), dtype=np.uint64)
    if out.shape[0]:
        _hash_docs_cpu(data, offsets, _TABLES, out)
    return out


# --------------------------------------------------------------------------------------------
# GPU (CuPy is imported only here, so the module imports on machines without it)
# --------------------------------------------------------------------------------------------


def _gpu_params(chunk: int) -> np.ndarray:
    """Per base: B, B^c, B^2c, B^4c, B^8c, B^16c, B^32c (c = chunk), C: text_hash.cu's layout."""
    rows = []
    for base, length_const in ((B1, C1), (B2, C2)):
        powers = [pow(base, chunk << r, P61) for r in range(6)]
        rows.append([base, *powers, length_const])
    return np.array(rows, dtype=np.uint64)


@functools.lru_cache(maxsize=None)
def _gpu_params_on_device(chunk: int, device_id: int):
    cp = cupy_module()

    return cp.asarray(_gpu_params(chunk), blocking=True)   # readable from any stream (see minhash's twin)


def text_hash_gpu(data, offsets, *, chunk: int = GPU_CHUNK):
    """GPU version of :func:`text_hash_cpu`: CuPy (or host) arrays in, CuPy (n, 2) uint64 out.

    One warp per document. ``chunk`` (bytes per lane per tile) only tunes speed; every value gives
    the same hashes. The kernel is compiled once per process and chunk (and cached on disk by CuPy).
    """
    cp = cupy_module()

    data = cp.ascontiguousarray(cp.asarray(data))
    offsets = cp.ascontiguousarray(cp.asarray(offsets))
    check_buffers(data, offsets)
    n_docs = offsets.shape[0] - 1
    out = cp.empty((n_docs, 2), dtype=cp.uint64)
    if n_docs == 0:
        return out
    name = "text_hash_i32" if offsets.dtype == cp.int32 else "text_hash_i64"
    kernel = raw_module("text_hash.cu", f"-DTH_CHUNK={chunk}").get_function(name)
    params = _gpu_params_on_device(chunk, cp.cuda.Device().id)
    docs_per_block = _GPU_BLOCK // 32
    blocks = min(-(-n_docs // docs_per_block), _GPU_MAX_BLOCKS)
    with _nvtx_range("gpupipe/kernel/text_hash"):
        kernel((blocks,), (_GPU_BLOCK,), (data, offsets, np.int64(n_docs), params, out))
    return out


def _nvtx_range(message: str):
    """An NVTX range for Nsight timelines through CuPy; nothing where CuPy has no NVTX."""
    try:
        from cupy.cuda import nvtx
        from cupyx.profiler import time_range

        if getattr(nvtx, "available", False):
            return time_range(message)
    except Exception:  # profiling must never break hashing
        pass
    return contextlib.nullcontext()




# --------------------------------------------------------------------------------------------
# The convenience entry point (string buffers: kernels/strings.py)
# --------------------------------------------------------------------------------------------


def text_hash(strings, device: str = "cpu") -> np.ndarray:
    """Hash a column of strings into an (n, 2) uint64 numpy array.

    ``strings``: a pyarrow (Chunked)Array, a pandas Series (pyarrow-backed or object), a sequence
    of str/bytes, or a cuDF Series. ``device``: "cpu", "gpu" or "auto" (the GPU when CuPy sees
    one; always for a cuDF Series, whose buffers the kernel reads in place on the device, with no
    host round trip). Host inputs are copied to the device for "gpu". All give the same hashes.
    """
    data, offsets, on_gpu = kernel_inputs(strings, device)
    if on_gpu:
        return text_hash_gpu(data, offsets).get()
    return text_hash_cpu(data, offsets)
