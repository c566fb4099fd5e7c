// MinHash signatures over Arrow string buffers: two kernels per batch of documents (and a third that
// writes the shingle hashes themselves, for the exact Jaccard check on the device).
//
// The definition lives in kernels/minhash.py (its numba twin decodes each document left to right).
// Here:
//   minhash_units_*       one warp per document: unit hashes u (Horner over a unit's folded bytes,
//                         base BU) into a scratch at the document's own byte range (a document has
//                         at most one unit per byte), and the unit count.
//   minhash_signatures_*  one block per document, one thread per permutation: the shingle hashes
//                         H_i = fmix64(S_i ^ kk), S_i = sum_r u_{i+r} BS^(kk-1-r), a tile at a time
//                         into shared memory, then sig_j = min_i (a_j * (H_i mod p) + b_j) mod p.
//   minhash_progression_* the signatures again, for progression permutations (the default): one
//                         multiplication per shingle per MH_PPT permutations, chunks of a document on
//                         many blocks (see below); minhash_gpu picks it when (a, b) are progressions.
//   minhash_shingles_*    one block per document: H_i itself, flat (shingle_hashes_cpu's values).
//
// Segmentation without a sequential decode. UTF-8 resynchronises: byte i starts a code point
// unless a well-formed sequence starting at i-1, i-2 or i-3 covers it (a lead byte is never a
// continuation byte, so every well-formed sequence is met by the left-to-right decoder, and every
// other byte is an invalid byte on its own). So each lane classifies its byte from the bytes around
// it: member (part of a non-separator code point) and cp_start. A unit starts at a member byte that
// starts a code point (character mode) or follows a non-member (word mode).
//
// Unit hashes per 32-byte tile (lane l: byte t0 + l): an inclusive segmented scan over lanes of
// (head, h, len) with  A (+) B = B.head ? B : (A.head, A.h * BU^B.len + B.h, A.len + B.len),
// which is Horner over each unit's bytes; the unit still open at the end of a tile is carried into
// the next one (h_carry * BU^len + h). len <= 32, so BU^0..BU^32 come from a table (params).
// The hash of a unit is written by the lane holding its last byte; for lane 31 that is only known
// in the next tile (or after the last one), so lane 0 writes the carried unit there.
//
// params (built by minhash._gpu_params): [0] BU, [1] BS, [2..3] ASCII separator bitmask
// (bit c of word c/64), [4..36] BU^0 .. BU^32.
#include "mersenne.cuh"

#define MH_FULL 0xffffffffu
#define MH_POW 4           // index of BU^0 in params
#define MH_MAX_BLOCK 256   // most threads per signature block (= shared tile); minhash.py matches

#include "utf8_units.cuh"

template <typename OffT>
__device__ __forceinline__ void units_warps(const unsigned char* __restrict__ data,
                                            const OffT* __restrict__ offsets, long long n_docs,
                                            long long base, const unsigned char* __restrict__ cjk,
                                            const u64* __restrict__ params, u64* __restrict__ units,
                                            long long* __restrict__ n_units) {
    __shared__ u64 pw[33];
    for (int t = threadIdx.x; t < 33; t += blockDim.x) pw[t] = params[MH_POW + t];
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
        const bool char_mode = cjk[doc] != 0;
        long long count = 0;  // units started before this tile
        u64 carry_h = 0;      // hash so far of the unit open at the end of the last tile
        bool carry_m = false; // whether the last tile's final byte was a member

        for (long long t0 = s; t0 < e; t0 += 32) {
            const long long i = t0 + lane;
            bool m, cp_start;
            classify(data, s, e, i, sep_lo, sep_hi, m, cp_start);
            bool prev_m = __shfl_up_sync(MH_FULL, (int)m, 1) != 0;
            if (lane == 0) prev_m = carry_m;
            const bool start = m && (char_mode ? cp_start : !prev_m);
            // The carried unit ends before this tile unless lane 0 continues it.
            if (lane == 0 && carry_m && !(m && !start)) out[count - 1] = carry_h;

            unsigned c = m ? data[i] : 0u;
            if (c - 'A' < 26u) c += 32u;  // ASCII-only case folding
            u64 h = m ? (u64)c + 1 : 0;
            int len = m ? 1 : 0;
            bool head = !m || start;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const u64 h_o = __shfl_up_sync(MH_FULL, h, d);
                const int len_o = __shfl_up_sync(MH_FULL, len, d);
                const bool head_o = __shfl_up_sync(MH_FULL, (int)head, d) != 0;
                if (lane >= d && !head) {
                    h = addmod61(mulmod61(h_o, pw[len]), h);
                    len += len_o;
                    head = head_o;
                }
            }
            if (m && !head) h = addmod61(mulmod61(carry_h, pw[len]), h);  // began in a past tile

            const unsigned starts = __ballot_sync(MH_FULL, start);
            const long long idx = count + __popc(starts & le_mask) - 1;
            const bool next_m = __shfl_down_sync(MH_FULL, (int)m, 1) != 0;
            const bool next_start = __shfl_down_sync(MH_FULL, (int)start, 1) != 0;
            if (lane < 31 && m && (!next_m || next_start)) out[idx] = h;

            carry_m = __shfl_sync(MH_FULL, (int)m, 31) != 0;
            carry_h = __shfl_sync(MH_FULL, h, 31);
            count += __popc(starts);
        }
        if (lane == 0) {
            if (carry_m) out[count - 1] = carry_h;
            n_units[doc] = count;
        }
    }
}

template <typename OffT>
__device__ __forceinline__ void signature_blocks(
    const OffT* __restrict__ offsets, long long n_docs, long long base,
    const unsigned char* __restrict__ cjk, const u64* __restrict__ units,
    const long long* __restrict__ n_units, const u64* __restrict__ a, const u64* __restrict__ b,
    int num_perm, int word_k, int char_k, const u64* __restrict__ params, u64* __restrict__ out) {
    __shared__ u64 xs[MH_MAX_BLOCK];  // one tile of shingle hashes, already reduced mod p
    const u64 bs = params[1];
    const int nt = blockDim.x;

    // `doc`, the permutation passes and the tile loop are block-uniform: __syncthreads is safe.
    for (long long doc = blockIdx.x; doc < n_docs; doc += gridDim.x) {
        const u64* u = units + ((long long)offsets[doc] - base);
        const long long m = n_units[doc];
        const int k = cjk[doc] ? char_k : word_k;
        const int kk = m < (long long)k ? (int)m : k;  // fewer units than k: one shingle of all
        const long long n_sh = m == 0 ? 0 : m - kk + 1;
        const u64 tag = (u64)kk;

        for (int p0 = 0; p0 < num_perm; p0 += nt) {
            const int j = p0 + threadIdx.x;
            const bool has_perm = j < num_perm;
            const u64 aj = has_perm ? a[j] : 0, bj = has_perm ? b[j] : 0;
            u64 lowest = MERSENNE61;  // EMPTY when the document has no shingle
            for (long long t0 = 0; t0 < n_sh; t0 += nt) {
                const long long i = t0 + threadIdx.x;
                if (i < n_sh) {
                    u64 acc = 0;
                    for (int r = 0; r < kk; ++r) acc = addmod61(mulmod61(acc, bs), u[i + r]);
                    xs[threadIdx.x] = reduce61(fmix64(acc ^ tag));
                }
                __syncthreads();
                const int n_tile = (int)(n_sh - t0 < nt ? n_sh - t0 : nt);
#pragma unroll 4
                for (int q = 0; q < n_tile; ++q) {  // xs[q] is a broadcast read
                    const u64 v = addmod61(mulmod61(aj, xs[q]), bj);
                    lowest = v < lowest ? v : lowest;
                }
                __syncthreads();  // before the next tile overwrites xs
            }
            if (has_perm) out[doc * num_perm + j] = lowest;
        }
    }
}

// Progression permutations (a_j = a0 + j*da, b_j = b0 + j*db mod p, as minhash_permutations makes
// them): v_j(h) = (a_j*h + b_j) mod p = v_0(h) + j*w(h) with w(h) = (da*h + db) mod p, exactly. So a
// thread covering MH_PPT consecutive permutations pays one multiplication per shingle (its first
// v_j) and MH_PPT - 1 modular additions, where minhash_signatures_* pays MH_PPT multiplications.
// Work items are chunks of MH_CHUNK shingles of one document (chunk_doc, chunk_first), so a long
// document spreads over many blocks; each block writes its minima with atomicMin into `out`, which
// the caller fills with EMPTY first (a document without shingles keeps it). Per chunk: the block
// turns its shingles into (v_0, w) in shared memory, then `ranges` = ceil(num_perm / MH_PPT)
// permutation ranges x `groups` = blockDim / ranges shingle subsets (i = g, g + groups, ...) run;
// with groups > 1 the minima meet in shared memory (red) before one atomicMin per permutation.
#define MH_PPT 8
#define MH_CHUNK 1024

template <typename OffT>
__device__ __forceinline__ void progression_chunks(
    const OffT* __restrict__ offsets, long long base, const unsigned char* __restrict__ cjk,
    const u64* __restrict__ units, const long long* __restrict__ n_units,
    const long long* __restrict__ chunk_doc, const long long* __restrict__ chunk_first, long long n_chunks,
    u64 a0, u64 b0, u64 da, u64 db, int num_perm, int word_k, int char_k, const u64* __restrict__ params,
    u64* __restrict__ out) {
    __shared__ u64 v0s[MH_CHUNK];
    __shared__ u64 ws[MH_CHUNK];
    __shared__ u64 red[MH_MAX_BLOCK * MH_PPT];
    const u64 bs = params[1];
    const int nt = blockDim.x;
    const int ranges = (num_perm + MH_PPT - 1) / MH_PPT;
    const int groups = ranges >= nt ? 1 : nt / ranges;

    // `c` is block-uniform, so every __syncthreads below is reached by the whole block.
    for (long long c = blockIdx.x; c < n_chunks; c += gridDim.x) {
        const long long doc = chunk_doc[c], first = chunk_first[c];
        const u64* u = units + ((long long)offsets[doc] - base);
        const long long m = n_units[doc];
        const int k = cjk[doc] ? char_k : word_k;
        const int kk = m < (long long)k ? (int)m : k;
        const long long n_sh = m == 0 ? 0 : m - kk + 1;
        const int count = (int)(n_sh - first < MH_CHUNK ? n_sh - first : MH_CHUNK);
        // The host plans chunks from byte counts (>= shingles): a chunk past the last shingle has nothing to do.
        // count is block-uniform, so the whole block skips together and every __syncthreads stays matched.
        if (count <= 0) continue;
        __syncthreads();  // the last item's tile and minima are no longer read
        for (int i = threadIdx.x; i < count; i += nt) {
            u64 acc = 0;
            for (int r = 0; r < kk; ++r) acc = addmod61(mulmod61(acc, bs), u[first + i + r]);
            const u64 h = reduce61(fmix64(acc ^ (u64)kk));
            v0s[i] = addmod61(mulmod61(a0, h), b0);
            ws[i] = addmod61(mulmod61(da, h), db);
        }
        __syncthreads();
        const int g = groups > 1 ? threadIdx.x / ranges : 0;
        const int r_first = groups > 1 ? threadIdx.x % ranges : threadIdx.x;
        const int r_step = groups > 1 ? ranges : nt;
        for (int r = r_first; g < groups && r < ranges; r += r_step) {
            const u64 j0 = (u64)r * MH_PPT;
            u64 lo[MH_PPT];
#pragma unroll
            for (int q = 0; q < MH_PPT; ++q) lo[q] = MERSENNE61;
            for (int i = g; i < count; i += groups) {
                const u64 w = ws[i];
                u64 v = addmod61(v0s[i], mulmod61(w, j0));
#pragma unroll
                for (int q = 0; q < MH_PPT; ++q) {
                    lo[q] = v < lo[q] ? v : lo[q];
                    v = addmod61(v, w);
                }
            }
            if (groups > 1) {
#pragma unroll
                for (int q = 0; q < MH_PPT; ++q) red[(g * ranges + r) * MH_PPT + q] = lo[q];
            } else {
#pragma unroll
                for (int q = 0; q < MH_PPT; ++q)
                    if (j0 + q < (u64)num_perm)
                        atomicMin((unsigned long long*)&out[doc * num_perm + (long long)j0 + q],
                                  (unsigned long long)lo[q]);
            }
        }
        if (groups > 1) {
            __syncthreads();
            for (int j = threadIdx.x; j < num_perm; j += nt) {
                u64 best = MERSENNE61;
                for (int gg = 0; gg < groups; ++gg) {
                    const u64 x = red[gg * ranges * MH_PPT + j];
                    best = x < best ? x : best;
                }
                atomicMin((unsigned long long*)&out[doc * num_perm + j], (unsigned long long)best);
            }
        }
    }
}

// The shingle base hashes themselves (shingle_hashes_cpu's H_i, not reduced mod p), for the exact
// Jaccard check on the device: one block per document, thread i writes H_i at out[out_offsets[doc] + i]
// (out_offsets: the batch's prefix sum of shingle counts, from n_units). Same windows as above.
template <typename OffT>
__device__ __forceinline__ void shingle_blocks(
    const OffT* __restrict__ offsets, long long n_docs, long long base,
    const unsigned char* __restrict__ cjk, const u64* __restrict__ units,
    const long long* __restrict__ n_units, int word_k, int char_k, const u64* __restrict__ params,
    const long long* __restrict__ out_offsets, u64* __restrict__ out) {
    const u64 bs = params[1];
    for (long long doc = blockIdx.x; doc < n_docs; doc += gridDim.x) {
        const u64* u = units + ((long long)offsets[doc] - base);
        const long long m = n_units[doc];
        const int k = cjk[doc] ? char_k : word_k;
        const int kk = m < (long long)k ? (int)m : k;
        const long long n_sh = m == 0 ? 0 : m - kk + 1;
        u64* o = out + out_offsets[doc];
        for (long long i = threadIdx.x; i < n_sh; i += blockDim.x) {
            u64 acc = 0;
            for (int r = 0; r < kk; ++r) acc = addmod61(mulmod61(acc, bs), u[i + r]);
            o[i] = fmix64(acc ^ (u64)kk);
        }
    }
}

// Arrow offsets are int32 (string) or int64 (large_string). `offsets`, `cjk`, `n_units` and `out`
// point at the batch's first document; `base` is offsets[0] of the batch (scratch index 0).
// units: launch with blockDim.x a multiple of 32. signatures: blockDim.x <= MH_MAX_BLOCK.
extern "C" __global__ void minhash_units_i32(const unsigned char* __restrict__ data,
                                             const int* __restrict__ offsets, long long n_docs,
                                             long long base, const unsigned char* __restrict__ cjk,
                                             const u64* __restrict__ params, u64* __restrict__ units,
                                             long long* __restrict__ n_units) {
    units_warps<int>(data, offsets, n_docs, base, cjk, params, units, n_units);
}

extern "C" __global__ void minhash_units_i64(const unsigned char* __restrict__ data,
                                             const long long* __restrict__ offsets,
                                             long long n_docs, long long base,
                                             const unsigned char* __restrict__ cjk,
                                             const u64* __restrict__ params, u64* __restrict__ units,
                                             long long* __restrict__ n_units) {
    units_warps<long long>(data, offsets, n_docs, base, cjk, params, units, n_units);
}

extern "C" __global__ void minhash_signatures_i32(
    const int* __restrict__ offsets, long long n_docs, long long base,
    const unsigned char* __restrict__ cjk, const u64* __restrict__ units,
    const long long* __restrict__ n_units, const u64* __restrict__ a, const u64* __restrict__ b,
    int num_perm, int word_k, int char_k, const u64* __restrict__ params, u64* __restrict__ out) {
    signature_blocks<int>(offsets, n_docs, base, cjk, units, n_units, a, b, num_perm, word_k, char_k,
                          params, out);
}

extern "C" __global__ void minhash_signatures_i64(
    const long long* __restrict__ offsets, long long n_docs, long long base,
    const unsigned char* __restrict__ cjk, const u64* __restrict__ units,
    const long long* __restrict__ n_units, const u64* __restrict__ a, const u64* __restrict__ b,
    int num_perm, int word_k, int char_k, const u64* __restrict__ params, u64* __restrict__ out) {
    signature_blocks<long long>(offsets, n_docs, base, cjk, units, n_units, a, b, num_perm, word_k,
                                char_k, params, out);
}

extern "C" __global__ void minhash_shingles_i32(
    const int* __restrict__ offsets, long long n_docs, long long base,
    const unsigned char* __restrict__ cjk, const u64* __restrict__ units,
    const long long* __restrict__ n_units, int word_k, int char_k, const u64* __restrict__ params,
    const long long* __restrict__ out_offsets, u64* __restrict__ out) {
    shingle_blocks<int>(offsets, n_docs, base, cjk, units, n_units, word_k, char_k, params, out_offsets,
                        out);
}

extern "C" __global__ void minhash_shingles_i64(
    const long long* __restrict__ offsets, long long n_docs, long long base,
    const unsigned char* __restrict__ cjk, const u64* __restrict__ units,
    const long long* __restrict__ n_units, int word_k, int char_k, const u64* __restrict__ params,
    const long long* __restrict__ out_offsets, u64* __restrict__ out) {
    shingle_blocks<long long>(offsets, n_docs, base, cjk, units, n_units, word_k, char_k, params,
                              out_offsets, out);
}

extern "C" __global__ void minhash_progression_i32(
    const int* __restrict__ offsets, long long base, const unsigned char* __restrict__ cjk,
    const u64* __restrict__ units, const long long* __restrict__ n_units,
    const long long* __restrict__ chunk_doc, const long long* __restrict__ chunk_first, long long n_chunks,
    u64 a0, u64 b0, u64 da, u64 db, int num_perm, int word_k, int char_k, const u64* __restrict__ params,
    u64* __restrict__ out) {
    progression_chunks<int>(offsets, base, cjk, units, n_units, chunk_doc, chunk_first, n_chunks, a0, b0, da,
                            db, num_perm, word_k, char_k, params, out);
}

extern "C" __global__ void minhash_progression_i64(
    const long long* __restrict__ offsets, long long base, const unsigned char* __restrict__ cjk,
    const u64* __restrict__ units, const long long* __restrict__ n_units,
    const long long* __restrict__ chunk_doc, const long long* __restrict__ chunk_first, long long n_chunks,
    u64 a0, u64 b0, u64 da, u64 db, int num_perm, int word_k, int char_k, const u64* __restrict__ params,
    u64* __restrict__ out) {
    progression_chunks<long long>(offsets, base, cjk, units, n_units, chunk_doc, chunk_first, n_chunks, a0, b0,
                                  da, db, num_perm, word_k, char_k, params, out);
}
