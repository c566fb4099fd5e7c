// 128-bit document hash over Arrow string buffers: one warp per document.
//
// The hash (defined in kernels/text_hash.py, whose numba twin computes it with sequential Horner):
//   h_k = sum_i (b_i + 1) * B_k^(n-1-i) mod p,  p = 2^61 - 1,  final_k = fmix64(h_k ^ (n * C_k)).
// Polynomial hashes are associative over concatenation, H(x||y) = H(x) * B^len(y) + H(y), which
// lets 32 lanes hash one document together and combine exactly.
//
// Layout of the work: the document is cut into tiles of 32*TH_CHUNK bytes, aligned to its END, so
// that only the first tile is partial. The missing bytes in front of it count as zeros, and leading
// zeros add nothing to a polynomial hash (exponents count from the end). In every tile lane l hashes
// its TH_CHUNK contiguous bytes (a warp reads one contiguous tile: few cache lines per load) and
// folds that into its running value: E_l = E_l * B^(32*TH_CHUNK) + seg. At the end
// H = sum_l E_l * B^((31-l)*TH_CHUNK), summed as a 5-step tree over warp shuffles where step r joins
// neighbours 2^r lanes apart with the (warp-uniform) power B^(2^r * TH_CHUNK).
//
// params: for each base k in {0, 1}, 8 uint64 at params[8k]: B, B^(c), B^(2c), B^(4c), B^(8c),
// B^(16c), B^(32c) with c = TH_CHUNK, then the length constant C. The host computes them, so the
// constants live in one place (text_hash.py); TH_CHUNK must match (the launcher passes -DTH_CHUNK).
#include "mersenne.cuh"

#ifndef TH_CHUNK
#define TH_CHUNK 4  // bytes per lane per tile; any value >= 1 gives the same hash
#endif
#define TH_TILE (32 * TH_CHUNK)
#define TH_NPARAMS 8

template <typename OffT>
__device__ __forceinline__ void text_hash_warps(const unsigned char* __restrict__ data,
                                                const OffT* __restrict__ offsets, long long n_docs,
                                                const u64* __restrict__ params,
                                                u64* __restrict__ out) {
    const int lane = threadIdx.x & 31;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long n_warps = ((long long)gridDim.x * blockDim.x) >> 5;
    const u64 base1 = params[0], base2 = params[TH_NPARAMS];
    const u64 tile1 = params[6], tile2 = params[TH_NPARAMS + 6];

    // `doc` is warp-uniform, so whole warps stay converged for the shuffles below.
    for (long long doc = warp; doc < n_docs; doc += n_warps) {
        const long long start = (long long)offsets[doc];
        const long long len = (long long)offsets[doc + 1] - start;
        const long long n_tiles = (len + TH_TILE - 1) / TH_TILE;
        const long long pad = n_tiles * TH_TILE - len;  // virtual zero bytes before the document

        u64 e1 = 0, e2 = 0;
        for (long long t = 0; t < n_tiles; ++t) {
            const long long j0 = t * TH_TILE + lane * TH_CHUNK - pad;  // may be < 0 in tile 0
            u64 s1 = 0, s2 = 0;
#pragma unroll
            for (int r = 0; r < TH_CHUNK; ++r) {
                const long long j = j0 + r;
                if (j >= 0) {  // skipping a leading virtual zero is exact: s is still 0 there
                    const u64 v = (u64)data[start + j] + 1;
                    s1 = addmod61(mulmod61(s1, base1), v);
                    s2 = addmod61(mulmod61(s2, base2), v);
                }
            }
            e1 = addmod61(mulmod61(e1, tile1), s1);
            e2 = addmod61(mulmod61(e2, tile2), s2);
        }

        // Tree over lanes: after step r, lane l (l % 2^(r+1) == 0) holds the hash of lanes
        // l .. l + 2^(r+1) - 1. Other lanes compute values nobody reads.
#pragma unroll
        for (int r = 0; r < 5; ++r) {
            const u64 o1 = __shfl_down_sync(0xffffffffu, e1, 1 << r);
            const u64 o2 = __shfl_down_sync(0xffffffffu, e2, 1 << r);
            e1 = addmod61(mulmod61(e1, params[1 + r]), o1);
            e2 = addmod61(mulmod61(e2, params[TH_NPARAMS + 1 + r]), o2);
        }

        if (lane == 0) {
            const u64 n = (u64)len;
            out[2 * doc] = fmix64(e1 ^ (n * params[7]));
            out[2 * doc + 1] = fmix64(e2 ^ (n * params[TH_NPARAMS + 7]));
        }
    }
}

// Arrow string columns come with int32 offsets (string) or int64 (large_string): one entry each.
// out is (n_docs, 2) uint64, row-major. Launch with blockDim.x a multiple of 32.
extern "C" __global__ void text_hash_i32(const unsigned char* __restrict__ data,
                                         const int* __restrict__ offsets, long long n_docs,
                                         const u64* __restrict__ params, u64* __restrict__ out) {
    text_hash_warps<int>(data, offsets, n_docs, params, out);
}

extern "C" __global__ void text_hash_i64(const unsigned char* __restrict__ data,
                                         const long long* __restrict__ offsets, long long n_docs,
                                         const u64* __restrict__ params, u64* __restrict__ out) {
    text_hash_warps<long long>(data, offsets, n_docs, params, out);
}
