// SimHash fingerprints from shingle hashes (the definition: kernels/simhash.py; its numba twin is _fold_docs).
//
// One block of 64 threads per document (grid-stride over documents): thread j counts the document's shingle
// hashes with bit j set (c_j, an exact integer count); bit j of the fingerprint is 1 when 2*c_j > m, m the
// document's shingle count (the same test as sum of +-1 > 0, in the same integers as the CPU twin). The bits
// meet in a shared word by atomicOr; thread 0 writes it. A document without shingles gets 0.
typedef unsigned long long u64;

#define SH_BITS 64

extern "C" __global__ void simhash_fold(const u64* __restrict__ flat, const long long* __restrict__ offsets,
                                        long long n_docs, u64* __restrict__ out) {
    __shared__ u64 sig;
    const int j = threadIdx.x;  // blockDim.x == SH_BITS
    for (long long doc = blockIdx.x; doc < n_docs; doc += gridDim.x) {
        if (j == 0) sig = 0;
        __syncthreads();
        const long long s = offsets[doc], e = offsets[doc + 1];
        long long ones = 0;
        for (long long i = s; i < e; ++i) ones += (long long)((flat[i] >> j) & 1ull);
        if (2 * ones > e - s) atomicOr(&sig, 1ull << j);
        __syncthreads();
        if (j == 0) out[doc] = sig;
        __syncthreads();
    }
}
