// UTF-8 decoding and the separator rule shared by the MinHash and n-gram kernels (the definition is in
// kernels/minhash.py, step 1-2; the numba twins implement the same rules in _utf8_len / _is_separator).
#pragma once
#include "mersenne.cuh"

// Length of the well-formed UTF-8 sequence at data[i] (Unicode Table 3-7), 0 if there is none.
__device__ __forceinline__ int utf8_len(const unsigned char* __restrict__ data, long long i,
                                        long long end) {
    const unsigned b0 = data[i];
    if (b0 < 0x80u) return 1;
    if (b0 < 0xC2u || b0 > 0xF4u) return 0;
    int n;
    unsigned lo = 0x80u, hi = 0xBFu;
    if (b0 < 0xE0u) {
        n = 2;
    } else if (b0 < 0xF0u) {
        n = 3;
        if (b0 == 0xE0u) lo = 0xA0u;  // no overlongs
        if (b0 == 0xEDu) hi = 0x9Fu;  // no surrogates
    } else {
        n = 4;
        if (b0 == 0xF0u) lo = 0x90u;  // no overlongs
        if (b0 == 0xF4u) hi = 0x8Fu;  // nothing above U+10FFFF
    }
    if (i + n > end) return 0;
    const unsigned b1 = data[i + 1];
    if (b1 < lo || b1 > hi) return 0;
    for (int r = 2; r < n; ++r)
        if ((data[i + r] & 0xC0u) != 0x80u) return 0;
    return n;
}

// Whether the code point of n bytes at data[i] is a separator (every non-ASCII one has 3 bytes).
__device__ __forceinline__ bool is_separator(const unsigned char* __restrict__ data, long long i,
                                             int n, u64 sep_lo, u64 sep_hi) {
    const unsigned b0 = data[i];
    if (n == 1) return ((b0 < 64u ? sep_lo >> b0 : sep_hi >> (b0 - 64u)) & 1ull) != 0;
    if (n != 3) return false;
    const unsigned cp = ((b0 & 0x0Fu) << 12) | ((data[i + 1] & 0x3Fu) << 6) | (data[i + 2] & 0x3Fu);
    return (cp >= 0x2000u && cp <= 0x206Fu) || (cp >= 0x3000u && cp <= 0x303Fu) ||
           (cp >= 0xFF00u && cp <= 0xFF0Fu) || (cp >= 0xFF1Au && cp <= 0xFF20u) ||
           (cp >= 0xFF3Bu && cp <= 0xFF40u) || (cp >= 0xFF5Bu && cp <= 0xFF65u);
}

// Byte i of the document [s, e): is it in a non-separator code point, and does one start there?
__device__ __forceinline__ void classify(const unsigned char* __restrict__ data, long long s,
                                         long long e, long long i, u64 sep_lo, u64 sep_hi,
                                         bool& member, bool& cp_start) {
    member = false;
    cp_start = false;
    if (i >= e) return;
    long long j = i;  // the first byte of i's code point
    int n = 0;
    for (int d = 1; d <= 3 && i - d >= s; ++d) {
        const int len = utf8_len(data, i - d, e);
        if (len > d) {  // at most one sequence can cover i: a lead byte is not a continuation
            j = i - d;
            n = len;
            break;
        }
    }
    if (j == i) n = utf8_len(data, i, e);
    member = !(n > 0 && is_separator(data, j, n, sep_lo, sep_hi));
    cp_start = j == i;
}
