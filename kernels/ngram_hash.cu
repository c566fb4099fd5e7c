// N-gram hashes of Arrow string buffers looked up in a sorted table: three kernels per batch.
//
// The definition lives in kernels/ngram_hash.py (its numba twin decodes each document left to
// right and rolls the window sums). Here, one warp per document in every kernel:
//   ngram_units_*  unit hashes u (minhash's units: separators split, ASCII folds, Horner with base
//                  BU) and each unit's byte span [start, end) relative to the document, into a
//                  scratch at the document's own byte range (at most one unit per byte), and the
//                  unit count. Same segmented-scan scheme as minhash.cu's units kernel (see there),
//                  plus the span writes: the lane that starts a unit writes its start, the lane
//                  holding its last byte its end.
//   ngram_count_*  lane l takes windows l, l+32, ...: S = sum_r u_{i+r} BS^(k-1-r) evaluated directly
//                  (the min_n-window is a prefix of the n-window, so one pass of k multiply-adds
//                  gives both), H = fmix64(S ^ k), looked up; per-document hit counts.
//   ngram_fill_*   only documents with hits: 32 windows per step, ballots give each lane its
//                  output slots, so hits come out in the CPU's order (by window, n before min_n).
//
// Lookup: the table's hashes are sorted and unique. A bit filter on the top bits (h >> fshift; a few
// hundred KB, L2-resident) turns most misses away with one read; dir[t] is the first position whose
// top bits (h >> shift) are >= t, so a binary search over [dir[t], dir[t+1]) finds the lower bound.
//
// params (built by ngram_hash._gpu_params): [0] BU, [1] BS, [2..3] ASCII separator bitmask
// (bit c of word c/64), [4..36] BU^0 .. BU^32.
#include "mersenne.cuh"

#define NG_FULL 0xffffffffu
#define NG_POW 4  // index of BU^0 in params

#include "utf8_units.cuh"

template <typename OffT>
__device__ __forceinline__ void units_warps(const unsigned char* __restrict__ data,
                                            const OffT* __restrict__ offsets, long long n_docs,
                                            long long base, const unsigned char* __restrict__ cjk,
                                            const u64* __restrict__ params, u64* __restrict__ units,
                                            int* __restrict__ ustart, int* __restrict__ uend,
                                            long long* __restrict__ n_units) {
    __shared__ u64 pw[33];
    for (int t = threadIdx.x; t < 33; t += blockDim.x) pw[t] = params[NG_POW + t];
    __syncthreads();

    const int lane = threadIdx.x & 31;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long n_warps = ((long long)gridDim.x * blockDim.x) >> 5;
    const u64 sep_lo = params[2], sep_hi = params[3];
    const unsigned le_mask = 0xffffffffu >> (31 - lane);  // lanes 0..lane

    // `doc` and the tile loop are warp-uniform, so whole warps stay converged for the shuffles.
    for (long long doc = warp; doc < n_docs; doc += n_warps) {
        const long long s = (long long)offsets[doc], e = (long long)offsets[doc + 1];
        u64* out = units + (s - base);
        int* ost = ustart + (s - base);
        int* oen = uend + (s - base);
        const bool char_mode = cjk[doc] != 0;
        long long count = 0;  // units started before this tile
        u64 carry_h = 0;      // hash so far of the unit open at the end of the last tile
        bool carry_m = false; // whether the last tile's final byte was a member

        for (long long t0 = s; t0 < e; t0 += 32) {
            const long long i = t0 + lane;
            bool m, cp_start;
            classify(data, s, e, i, sep_lo, sep_hi, m, cp_start);
            bool prev_m = __shfl_up_sync(NG_FULL, (int)m, 1) != 0;
            if (lane == 0) prev_m = carry_m;
            const bool start = m && (char_mode ? cp_start : !prev_m);
            // The carried unit ends at this tile's start unless lane 0 continues it.
            if (lane == 0 && carry_m && !(m && !start)) {
                out[count - 1] = carry_h;
                oen[count - 1] = (int)(t0 - s);
            }

            unsigned c = m ? data[i] : 0u;
            if (c - 'A' < 26u) c += 32u;  // ASCII-only case folding
            u64 h = m ? (u64)c + 1 : 0;
            int len = m ? 1 : 0;
            bool head = !m || start;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const u64 h_o = __shfl_up_sync(NG_FULL, h, d);
                const int len_o = __shfl_up_sync(NG_FULL, len, d);
                const bool head_o = __shfl_up_sync(NG_FULL, (int)head, d) != 0;
                if (lane >= d && !head) {
                    h = addmod61(mulmod61(h_o, pw[len]), h);
                    len += len_o;
                    head = head_o;
                }
            }
            if (m && !head) h = addmod61(mulmod61(carry_h, pw[len]), h);  // began in a past tile

            const unsigned starts = __ballot_sync(NG_FULL, start);
            const long long idx = count + __popc(starts & le_mask) - 1;
            if (start) ost[idx] = (int)(i - s);
            const bool next_m = __shfl_down_sync(NG_FULL, (int)m, 1) != 0;
            const bool next_start = __shfl_down_sync(NG_FULL, (int)start, 1) != 0;
            if (lane < 31 && m && (!next_m || next_start)) {
                out[idx] = h;
                oen[idx] = (int)(i + 1 - s);
            }

            carry_m = __shfl_sync(NG_FULL, (int)m, 31) != 0;
            carry_h = __shfl_sync(NG_FULL, h, 31);
            count += __popc(starts);
        }
        if (lane == 0) {
            if (carry_m) {  // lane 31 of the last tile was a member: that tile ends at e
                out[count - 1] = carry_h;
                oen[count - 1] = (int)(e - s);
            }
            n_units[doc] = count;
        }
    }
}

// The lookup table: sorted unique hashes, bucket directory, bit filter (see ngram_hash.NgramTable).
struct Table {
    const u64* hashes;
    long long n_hashes;
    const long long* dir;
    int shift;
    const u64* filter;
    int fshift;
};

// Position of h in the sorted table, or -1: the filter, then binary search inside h's bucket.
__device__ __forceinline__ long long table_find(const Table& tb, u64 h) {
    const u64 b = h >> tb.fshift;
    if (((tb.filter[b >> 6] >> (b & 63)) & 1ull) == 0) return -1;  // most misses end here
    const long long t = (long long)(h >> tb.shift);
    long long lo = tb.dir[t], hi = tb.dir[t + 1];
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (tb.hashes[mid] < h) lo = mid + 1;
        else hi = mid;
    }
    return (lo < tb.n_hashes && tb.hashes[lo] == h) ? lo : -1;
}

// Window i of a document's units u[0..m): table positions of its k1-gram (p1) and, when k2 < k1,
// its k2-gram (p2); -1 for a miss or a window that does not fit. Needs i + k2 <= m.
__device__ __forceinline__ void window_hits(const u64* __restrict__ u, long long m, long long i,
                                            int k1, int k2, const Table& tb, u64 bs, long long& p1,
                                            long long& p2) {
    u64 acc = 0;
    for (int r = 0; r < k2; ++r) acc = addmod61(mulmod61(acc, bs), u[i + r]);
    p2 = k2 < k1 ? table_find(tb, fmix64(acc ^ (u64)k2)) : -1;
    p1 = -1;
    if (i + k1 <= m) {
        for (int r = k2; r < k1; ++r) acc = addmod61(mulmod61(acc, bs), u[i + r]);
        p1 = table_find(tb, fmix64(acc ^ (u64)k1));
    }
}

template <typename OffT>
__device__ __forceinline__ void count_warps(
    const OffT* __restrict__ offsets, long long n_docs, long long base,
    const unsigned char* __restrict__ cjk, const u64* __restrict__ units,
    const long long* __restrict__ n_units, int wn, int wmin, int cn, int cmin, const Table tb,
    const u64* __restrict__ params, long long* __restrict__ counts) {
    const int lane = threadIdx.x & 31;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long n_warps = ((long long)gridDim.x * blockDim.x) >> 5;
    const u64 bs = params[1];
    for (long long doc = warp; doc < n_docs; doc += n_warps) {
        const u64* u = units + ((long long)offsets[doc] - base);
        const long long m = n_units[doc];
        const int k1 = cjk[doc] ? cn : wn, k2 = cjk[doc] ? cmin : wmin;
        const long long n_win = m >= k2 ? m - k2 + 1 : 0;
        long long c = 0;
        for (long long i = lane; i < n_win; i += 32) {
            long long p1, p2;
            window_hits(u, m, i, k1, k2, tb, bs, p1, p2);
            c += (p1 >= 0) + (p2 >= 0);
        }
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) c += __shfl_down_sync(NG_FULL, c, d);
        if (lane == 0) counts[doc] = c;
    }
}

template <typename OffT>
__device__ __forceinline__ void fill_warps(
    const OffT* __restrict__ offsets, const long long* __restrict__ hit_docs, long long n_hit_docs,
    long long base, const unsigned char* __restrict__ cjk, const u64* __restrict__ units,
    const int* __restrict__ ustart, const int* __restrict__ uend,
    const long long* __restrict__ n_units, int wn, int wmin, int cn, int cmin, const Table tb,
    const u64* __restrict__ params, const long long* __restrict__ hit_offsets,
    long long* __restrict__ pos, long long* __restrict__ hs, long long* __restrict__ he) {
    const int lane = threadIdx.x & 31;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long n_warps = ((long long)gridDim.x * blockDim.x) >> 5;
    const u64 bs = params[1];
    const unsigned lt_mask = (1u << lane) - 1u;  // lanes below this one
    for (long long h = warp; h < n_hit_docs; h += n_warps) {
        const long long doc = hit_docs[h];
        const long long rel = (long long)offsets[doc] - base;
        const u64* u = units + rel;
        const int* st = ustart + rel;
        const int* en = uend + rel;
        const long long m = n_units[doc];
        const int k1 = cjk[doc] ? cn : wn, k2 = cjk[doc] ? cmin : wmin;
        const long long n_win = m >= k2 ? m - k2 + 1 : 0;
        long long o = hit_offsets[doc];  // warp-uniform: the next free slot of this document
        for (long long t0 = 0; t0 < n_win; t0 += 32) {
            const long long i = t0 + lane;
            long long p1 = -1, p2 = -1;
            if (i < n_win) window_hits(u, m, i, k1, k2, tb, bs, p1, p2);
            const unsigned b1 = __ballot_sync(NG_FULL, p1 >= 0);
            const unsigned b2 = __ballot_sync(NG_FULL, p2 >= 0);
            long long slot = o + __popc(b1 & lt_mask) + __popc(b2 & lt_mask);
            if (p1 >= 0) {
                pos[slot] = p1;
                hs[slot] = st[i];
                he[slot] = en[i + k1 - 1];
                ++slot;
            }
            if (p2 >= 0) {
                pos[slot] = p2;
                hs[slot] = st[i];
                he[slot] = en[i + k2 - 1];
            }
            o += __popc(b1) + __popc(b2);
        }
    }
}

// Arrow offsets are int32 (string) or int64 (large_string). `offsets`, `cjk`, `n_units`, `counts`
// and `hit_offsets` point at the batch's first document; `base` is offsets[0] of the batch (scratch
// index 0); `hit_offsets` are the batch-local prefix sums of `counts`. Launch with blockDim.x a
// multiple of 32.
#define NG_UNITS(SUFFIX, OffT)                                                                    \
    extern "C" __global__ void ngram_units_##SUFFIX(                                              \
        const unsigned char* __restrict__ data, const OffT* __restrict__ offsets,                 \
        long long n_docs, long long base, const unsigned char* __restrict__ cjk,                  \
        const u64* __restrict__ params, u64* __restrict__ units, int* __restrict__ ustart,        \
        int* __restrict__ uend, long long* __restrict__ n_units) {                                \
        units_warps<OffT>(data, offsets, n_docs, base, cjk, params, units, ustart, uend, n_units); \
    }

#define NG_COUNT(SUFFIX, OffT)                                                                    \
    extern "C" __global__ void ngram_count_##SUFFIX(                                              \
        const OffT* __restrict__ offsets, long long n_docs, long long base,                       \
        const unsigned char* __restrict__ cjk, const u64* __restrict__ units,                     \
        const long long* __restrict__ n_units, int wn, int wmin, int cn, int cmin,                \
        const u64* __restrict__ hashes, long long n_hashes, const long long* __restrict__ dir,    \
        int shift, const u64* __restrict__ filter, int fshift, const u64* __restrict__ params,    \
        long long* __restrict__ counts) {                                                         \
        const Table tb{hashes, n_hashes, dir, shift, filter, fshift};                             \
        count_warps<OffT>(offsets, n_docs, base, cjk, units, n_units, wn, wmin, cn, cmin, tb,     \
                          params, counts);                                                        \
    }

#define NG_FILL(SUFFIX, OffT)                                                                     \
    extern "C" __global__ void ngram_fill_##SUFFIX(                                               \
        const OffT* __restrict__ offsets, const long long* __restrict__ hit_docs,                 \
        long long n_hit_docs, long long base, const unsigned char* __restrict__ cjk,              \
        const u64* __restrict__ units, const int* __restrict__ ustart,                            \
        const int* __restrict__ uend, const long long* __restrict__ n_units, int wn, int wmin,    \
        int cn, int cmin, const u64* __restrict__ hashes, long long n_hashes,                     \
        const long long* __restrict__ dir, int shift, const u64* __restrict__ filter, int fshift, \
        const u64* __restrict__ params, const long long* __restrict__ hit_offsets,                \
        long long* __restrict__ pos, long long* __restrict__ hs, long long* __restrict__ he) {    \
        const Table tb{hashes, n_hashes, dir, shift, filter, fshift};                             \
        fill_warps<OffT>(offsets, hit_docs, n_hit_docs, base, cjk, units, ustart, uend, n_units,  \
                         wn, wmin, cn, cmin, tb, params, hit_offsets, pos, hs, he);               \
    }

NG_UNITS(i32, int)
NG_UNITS(i64, long long)
NG_COUNT(i32, int)
NG_COUNT(i64, long long)
NG_FILL(i32, int)
NG_FILL(i64, long long)
