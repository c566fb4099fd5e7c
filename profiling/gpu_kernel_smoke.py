"""Every GPU kernel once, on about --mb of mixed random documents (ASCII, Chinese, emoji, empty, mangled UTF-8),
against its CPU twin: text_hash, MinHash signatures and band keys, shingle hashes (and sets), n-gram lookup, and
the near-dedup graph's array forms (star edges, Jaccard, components) against their numba twins. Small on purpose:
profiling/gpu_check.sh runs it under compute-sanitizer (memcheck, racecheck), on a non-blocking stream and with
CuPy's stream-ordered allocator, where a wrong index, a race or a missing stream argument shows up.

Usage:  python profiling/gpu_kernel_smoke.py [--mb 1] [--stream default|nonblocking] [--pool default|async]
        python profiling/gpu_kernel_smoke.py --compile-times    (in a fresh CUPY_CACHE_DIR: cold NVRTC compiles)
Exit status 1 on any mismatch; 0 when all agree, or with SKIP when CuPy sees no device.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))   # kernel_text: the tests' documents


def documents(mb: float):
    import kernel_text

    rng = random.Random(11)
    docs = kernel_text.corpus(rng, 64, 400, ["", "one", "😀", "数据"], word_share=0.6)
    size, base = sum(map(len, docs)), list(docs)
    while size < mb * 1e6:                      # near copies of the random ones, so the graph has edges
        d = rng.choice(base)
        docs.append(d + rng.choice([b" more", "，再".encode(), b""]))
        size += len(docs[-1])
    cjk = np.array([rng.random() < 0.3 for _ in docs], np.uint8)
    return kernel_text.buffers_of(docs), cjk


def compile_times() -> int:
    import cupy as cp

    from gpupipe.kernels._cuda import cuda_source
    from gpupipe.kernels.text_hash import GPU_CHUNK

    defines = {"text_hash.cu": (f"-DTH_CHUNK={GPU_CHUNK}",)}   # as the entry points compile them
    for name in sorted(p.name for p in (Path(__file__).resolve().parents[1] / "kernels").glob("*.cu")):
        t0 = time.perf_counter()
        module = cp.RawModule(code=cuda_source(name), options=("-std=c++17", *defines.get(name, ())))
        module.compile()
        print(f"cold NVRTC compile {name:<16} {time.perf_counter() - t0:7.2f} s")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=1.0)
    ap.add_argument("--stream", choices=["default", "nonblocking"], default="default")
    ap.add_argument("--pool", choices=["default", "async"], default="default")
    ap.add_argument("--compile-times", action="store_true")
    args = ap.parse_args()
    from gpupipe.kernels.text_hash import gpu_available

    if not gpu_available():
        print("SKIP: CuPy sees no CUDA device")
        return 0
    if args.compile_times:
        return compile_times()
    import cupy as cp

    from gpupipe.kernels import lsh_graph as lg
    from gpupipe.kernels import minhash as mh
    from gpupipe.kernels import ngram_hash as ng
    from gpupipe.kernels import text_hash as th

    if args.pool == "async":
        cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
    stream = cp.cuda.Stream(non_blocking=True) if args.stream == "nonblocking" else cp.cuda.Stream.null
    (data, offsets), cjk = documents(args.mb)
    failures, checks = [], []

    def same(name, got, want):
        checks.append(name)
        ok = all(np.array_equal(cp.asnumpy(g), w) for g, w in zip(got, want))
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
        if not ok:
            failures.append(name)

    with stream:
        d_data, d_offsets, d_cjk = cp.asarray(data), cp.asarray(offsets), cp.asarray(cjk)
        same("text_hash", [th.text_hash_gpu(d_data, d_offsets)], [th.text_hash_cpu(data, offsets)])
        a, b = mh.minhash_permutations(128, 3)
        sig = mh.minhash_gpu(d_data, d_offsets, d_cjk, a, b)
        same("minhash signatures (128)", [sig], [mh.minhash_cpu(data, offsets, cjk, a, b)])
        gen = np.random.default_rng(1)   # any (a, b): the general signature kernel
        ga, gb = gen.integers(1, mh.P61, 64, dtype=np.uint64), gen.integers(0, mh.P61, 64, dtype=np.uint64)
        same("minhash signatures, general (a, b)", [mh.minhash_gpu(d_data, d_offsets, d_cjk, ga, gb)],
             [mh.minhash_cpu(data, offsets, cjk, ga, gb)])
        keys = mh.band_keys_array(sig[:, :120], 12, 10)
        same("band keys 12x10", [keys], [mh.minhash_cpu(data, offsets, cjk, a[:120], b[:120], bands=12, rows=10)])
        for distinct in (False, True):
            same(f"shingle hashes (distinct={distinct})",
                 mh.shingle_hashes_gpu(d_data, d_offsets, d_cjk, distinct=distinct, batch_bytes=1 << 18),
                 mh.shingle_hashes_cpu(data, offsets, cjk, distinct=distinct))
        grams, _ = ng.gram_hashes_cpu(data, offsets, cjk, 8)
        table = ng.NgramTable(np.unique(grams[::7]))
        got, want = ng.ngram_lookup_gpu(d_data, d_offsets, d_cjk, table), ng.ngram_lookup_cpu(data, offsets, cjk,
                                                                                             table)
        same("ngram lookup", [got.hit_offsets, got.pos, got.start, got.end],
             [want.hit_offsets, want.pos, want.start, want.end])
        host_keys = cp.asnumpy(keys)
        doc = np.arange(host_keys.shape[0], dtype=np.int64) * 3
        u, v = lg.star_edges_keys(host_keys, doc)
        same("star edges", lg.star_edges_keys(keys, cp.asarray(doc)), [u, v])
        same("components", lg.components(cp.asarray(u), cp.asarray(v)), lg.components(u, v))
        flat, offs = mh.shingle_hashes_cpu(data, offsets, cjk, distinct=True)
        ia, ib = np.random.default_rng(0).integers(0, len(offs) - 1, (2, 5000))
        same("jaccard", [lg.jaccard(cp.asarray(flat), cp.asarray(offs), cp.asarray(ia), cp.asarray(ib))],
             [lg.jaccard(flat, offs, ia, ib)])
        stream.synchronize()
    print(f"{len(failures)} of {len(checks)} checks failed ({args.mb:g} MB, {len(cjk)} documents, "
          f"stream {args.stream}, pool {args.pool})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
