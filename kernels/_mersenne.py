"""Exact arithmetic modulo the Mersenne prime p = 2^61 - 1, as numba helpers.

Shared by the polynomial text hash and the MinHash permutations ``(a*h + b) mod p``. Only uint64
arithmetic is used (numba has no 128-bit integer), so a product is built from 32-bit limbs; the
CUDA twin in ``mersenne.cuh`` uses ``__umul64hi`` instead. Both are exact, hence bit-identical.

Every helper takes and returns values already reduced to [0, p). Constants are typed np.uint64 on
purpose: numba turns a uint64 mixed with a plain (int64) literal into float64.
"""

import numpy as np
from numba import njit

P61 = (1 << 61) - 1  # the prime, as a Python int (for references and host-side precomputation)

_P = np.uint64(P61)
_M32 = np.uint64(0xFFFFFFFF)
_M29 = np.uint64((1 << 29) - 1)
_S3 = np.uint64(3)
_S29 = np.uint64(29)
_S32 = np.uint64(32)
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


@njit(cache=True, inline="always")
def mulmod61(a, b):
    """(a * b) mod p for a, b < p, exact, with 32-bit limbs in uint64.

    a = ah*2^32 + al with ah < 2^29, al < 2^32 (same for b). Then
      a*b = ah*bh*2^64 + (ah*bl + al*bh)*2^32 + al*bl
    and mod p, 2^64 ≡ 2^3; the middle term m < 2^62 splits as m = mh*2^29 + ml, so
    m*2^32 = mh*2^61 + ml*2^32 ≡ mh + ml*2^32. Every partial sum stays below 2^63.
    """
    a = np.uint64(a)
    b = np.uint64(b)
    ah = a >> _S32
    al = a & _M32
    bh = b >> _S32
    bl = b & _M32
    hi = (ah * bh) << _S3            # < 2^61
    mid = ah * bl + al * bh          # < 2^62
    lo = al * bl                     # < 2^64
    s = hi + (mid >> _S29) + ((mid & _M29) << _S32) + (lo & _P) + (lo >> _S61)
    return reduce61(s)


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
