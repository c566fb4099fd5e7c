"""Exact arithmetic modulo the Mersenne prime p = 2^61 - 1, as numba helpers.

Shared by the polynomial text hash and the MinHash permutations ``(a*h + b) mod p``. Products use a
128-bit LLVM multiply (an intrinsic: numba has no 128-bit integer type); the CUDA twin in
``mersenne.cuh`` uses ``__umul64hi``. Both are exact, hence bit-identical.

Every helper takes and returns values already reduced to [0, p). Constants are typed np.uint64 on
purpose: numba turns a uint64 mixed with a plain (int64) literal into float64.
"""

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ._jit import njit

P61 = (1 << 61) - 1  # the prime, as a Python int (for references and host-side precomputation)

_P = np.uint64(P61)
_S3 = np.uint64(3)
_S61 = np.uint64(61)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)


@njit(cache=True, inline="always")
def reduce61(x):
    """x mod p for any uint64 x (one folding step: 2^61 ≡ 1, so hi bits wrap around as a sum)."""
    x = np.uint64(x)
    r = (x & _P) + (x >> _S61)  # < 2^61 + 8
    if r >= _P:
        r -= _P
    return r


@njit(cache=True, inline="always")
def addmod61(a, b):
    """(a + b) mod p for a, b < p."""
    s = np.uint64(a) + np.uint64(b)  # < 2^62, no overflow
    if s >= _P:
        s -= _P
    return s


@intrinsic
def _mul_wide(typingctx, a, b):
    """(hi, lo) 64-bit halves of the 128-bit product a*b of two uint64 (one MUL on x86-64)."""
    if a != types.uint64 or b != types.uint64:
        return None
    sig = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        wide = ir.IntType(128)
        prod = builder.mul(builder.zext(args[0], wide), builder.zext(args[1], wide))
        lo = builder.trunc(prod, ir.IntType(64))
        hi = builder.trunc(builder.lshr(prod, ir.Constant(wide, 64)), ir.IntType(64))
        return context.make_tuple(builder, signature.return_type, [hi, lo])

    return sig, codegen


@njit(cache=True, inline="always")
def mulmod61(a, b):
    """(a * b) mod p for a, b < p, exact.

    The product is < 2^122: hi < 2^58. Mod p, 2^64 ≡ 2^3 and 2^61 ≡ 1, so
    a*b ≡ hi*2^3 + (lo >> 61) + (lo & p), a sum below 2^63, then folded once more.
    """
    hi, lo = _mul_wide(np.uint64(a), np.uint64(b))
    return reduce61((hi << _S3) + (lo >> _S61) + (lo & _P))


@njit(cache=True)
def powmod61(base, exp):
    """base^exp mod p by square-and-multiply (exp >= 0)."""
    result = _ONE
    b = reduce61(np.uint64(base))
    e = np.uint64(exp)
    while e > _ZERO:
        if e & _ONE:
            result = mulmod61(result, b)
        b = mulmod61(b, b)
        e >>= _ONE
    return result


_FM1 = np.uint64(0xFF51AFD7ED558CCD)
_FM2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


@njit(cache=True, inline="always")
def fmix64(k):
    """MurmurHash3's 64-bit finalizer (a bijection on uint64); twin of fmix64 in mersenne.cuh."""
    k = np.uint64(k)
    k ^= k >> _S33
    k *= _FM1
    k ^= k >> _S33
    k *= _FM2
    k ^= k >> _S33
    return k


_SM1 = np.uint64(0xBF58476D1CE4E5B9)
_SM2 = np.uint64(0x94D049BB133111EB)
_S27 = np.uint64(27)
_S30 = np.uint64(30)
_S31 = np.uint64(31)


def splitmix64_array(h):
    """splitmix64 below over a uint64 array, numpy or CuPy (wrapping multiplication): the same values."""
    h = h.astype(np.uint64, copy=True) if hasattr(h, "astype") else np.asarray(h, dtype=np.uint64).copy()
    h ^= h >> _S30
    h *= _SM1
    h ^= h >> _S27
    h *= _SM2
    h ^= h >> _S31
    return h


@njit(cache=True, inline="always")
def splitmix64(h):
    """splitmix64's finaliser (a bijection on uint64): nearby inputs land far apart."""
    h = np.uint64(h)
    h ^= h >> _S30
    h *= _SM1
    h ^= h >> _S27
    h *= _SM2
    h ^= h >> _S31
    return h
