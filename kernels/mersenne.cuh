// Exact arithmetic modulo the Mersenne prime p = 2^61 - 1 (CUDA device helpers).
//
// Twin of kernels/_mersenne.py: same results bit for bit, since both are exact. Here the 128-bit
// product comes from __umul64hi (high 64 bits) and a plain multiply (low 64 bits). All helpers take
// and return values in [0, p). Shared by the text hash and the MinHash permutations (a*h + b) mod p.
#pragma once

typedef unsigned long long u64;

#define MERSENNE61 0x1FFFFFFFFFFFFFFFull  // 2^61 - 1

// x mod p for any 64-bit x: 2^61 ≡ 1, so the bits above 61 fold back as a sum.
__device__ __forceinline__ u64 reduce61(u64 x) {
    u64 r = (x & MERSENNE61) + (x >> 61);  // < 2^61 + 8
    return r >= MERSENNE61 ? r - MERSENNE61 : r;
}

__device__ __forceinline__ u64 addmod61(u64 a, u64 b) {
    u64 s = a + b;  // < 2^62, no overflow
    return s >= MERSENNE61 ? s - MERSENNE61 : s;
}

// a*b = hi*2^64 + lo < 2^122. Write it as q*2^61 + (lo & p) with q = (hi << 3) | (lo >> 61) < 2^61;
// since 2^61 ≡ 1, a*b ≡ q + (lo & p) < 2^62, and one fold finishes.
__device__ __forceinline__ u64 mulmod61(u64 a, u64 b) {
    u64 lo = a * b;
    u64 hi = __umul64hi(a, b);
    u64 q = (hi << 3) | (lo >> 61);
    return reduce61(q + (lo & MERSENNE61));
}

__device__ __forceinline__ u64 powmod61(u64 base, u64 exp) {
    u64 result = 1, b = reduce61(base);
    while (exp) {
        if (exp & 1) result = mulmod61(result, b);
        b = mulmod61(b, b);
        exp >>= 1;
    }
    return result;
}

// MurmurHash3's 64-bit finalizer: a bijection that spreads every input bit over the output.
__device__ __forceinline__ u64 fmix64(u64 k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    k *= 0xC4CEB9FE1A85EC53ull;
    k ^= k >> 33;
    return k;
}
