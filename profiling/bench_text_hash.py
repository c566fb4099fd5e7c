"""Benchmark the 128-bit document hash against per-document hashing in Python.

Side by side on a synthetic corpus (default: 200k docs of ~2 KB and 2M docs of ~200 B):
  sha256    hashlib.sha256 per document in a Python loop (the baseline)
  xxh3_128  xxhash.xxh3_128 per document in a Python loop (when xxhash is installed)
  numba     text_hash_cpu, the numba twin, all cores (compile excluded)
  gpu       text_hash_gpu when CuPy sees a device: kernel time from CUDA events (compile excluded);
            the host-to-device copy of the buffers is timed and shown on its own line

Usage:  python profiling/bench_text_hash.py [--scale 0.1] [--chunks 4,8,16] [--check]
--check runs only the GPU-vs-CPU parity checks (the fallback of gpu_check.sh without pytest).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import sys
import time

import numpy as np

from gpupipe.kernels import text_hash as th


def make_corpus(n_docs: int, mean_len: int, seed: int = 0):
    """Printable-ASCII documents with lengths uniform in [mean/2, 3*mean/2], as Arrow buffers."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(mean_len // 2, mean_len * 3 // 2 + 1, n_docs)
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = rng.integers(32, 127, int(offsets[-1]), dtype=np.uint8)
    return data, offsets


def best_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def python_loop(digest, data, offsets):
    """Per-document calls as a Python pipeline would make them (memoryview slices: no copies)."""
    mv = memoryview(data)
    bounds = offsets.tolist()
    for i in range(len(bounds) - 1):
        digest(mv[bounds[i]:bounds[i + 1]])


def bench_corpus(name, data, offsets, repeat, chunks, rows):
    n_docs, n_bytes = len(offsets) - 1, data.nbytes

    def add(method, seconds, note=""):
        rows.append((name, method, seconds, n_bytes / seconds / 1e6, n_docs / seconds, note))

    add("sha256 (python loop)", best_time(lambda: python_loop(lambda b: hashlib.sha256(b).digest(),
                                                              data, offsets), 1))
    try:
        import xxhash

        add("xxh3_128 (python loop)", best_time(lambda: python_loop(xxhash.xxh3_128_digest, data,
                                                                    offsets), 1))
    except ImportError:
        pass
    th.text_hash_cpu(data, offsets[:2])  # numba compile (or cache load) outside the timing
    cpu = th.text_hash_cpu(data, offsets)
    add("numba twin (CPU)", best_time(lambda: th.text_hash_cpu(data, offsets), repeat))
    if th.gpu_available():
        bench_gpu(data, offsets, cpu, repeat, chunks, add)


def bench_gpu(data, offsets, cpu_result, repeat, chunks, add):
    import cupy as cp

    def copy():
        d, o = cp.asarray(data), cp.asarray(offsets)
        cp.cuda.Device().synchronize()
        return d, o

    copy()
    add("  host->device copy", best_time(copy, repeat), "pageable numpy -> device")
    d_data, d_offsets = copy()
    for chunk in chunks:
        out = th.text_hash_gpu(d_data, d_offsets, chunk=chunk)  # compile + warm up
        same = bool((out.get() == cpu_result).all())
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for _ in range(max(repeat, 3)):
            start.record()
            th.text_hash_gpu(d_data, d_offsets, chunk=chunk)
            stop.record()
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
        add(f"GPU kernel (chunk={chunk})", min(times), "bit-identical to CPU" if same else
            "MISMATCH vs CPU")
        if not same:
            raise SystemExit(f"GPU result differs from the CPU twin (chunk={chunk})")


def print_table(rows):
    baseline = {corpus: secs for corpus, method, secs, *_ in rows if method.startswith("sha256")}
    header = (f"{'corpus':<16} {'method':<24} {'seconds':>9} {'MB/s':>10} {'docs/s':>12} "
              f"{'x sha256':>9}")
    print(header)
    print("-" * len(header))
    for corpus, method, secs, mbps, docs, note in rows:
        ratio = baseline[corpus] / secs
        print(f"{corpus:<16} {method:<24} {secs:>9.4f} {mbps:>10.1f} {docs:>12.3g} {ratio:>8.1f}x"
              f"  {note}")


def parity_check() -> bool:
    """GPU vs numba twin, bit for bit: empties, long documents, both offset widths, chunk sizes."""
    import cupy as cp

    rng = np.random.default_rng(1)
    lengths = np.concatenate([np.zeros(50, int), rng.integers(0, 300, 3000),
                              rng.integers(200, 20_000, 300),
                              [127, 128, 129, 255, 256, 257, 511, 512, 513]])
    rng.shuffle(lengths)
    data = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8)
    small = rng.integers(0, 64, 1_000_000)
    small_data = rng.integers(0, 256, int(small.sum()), dtype=np.uint8)
    cases = []
    for dtype in (np.int32, np.int64):
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(dtype)
        cases += [(f"random {np.dtype(dtype).name}", data, offsets, th.GPU_CHUNK),
                  (f"sliced {np.dtype(dtype).name}", data, offsets[100:2101], th.GPU_CHUNK)]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    cases += [(f"chunk={c}", data, offsets, c) for c in (1, 8, 16, 32)]
    cases.append(("1M small docs", small_data,
                  np.concatenate([[0], np.cumsum(small)]).astype(np.int32), th.GPU_CHUNK))
    ok = True
    for name, d, o, chunk in cases:
        same = (th.text_hash_gpu(cp.asarray(d), cp.asarray(o), chunk=chunk).get()
                == th.text_hash_cpu(d, o)).all()
        print(f"parity {name:<16} {'ok' if same else 'MISMATCH'}")
        ok &= bool(same)
    return ok


def describe_machine():
    import numba

    print(f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}, "
          f"{os.cpu_count()} CPUs, numba threads {numba.get_num_threads()}")
    if th.gpu_available():
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        print(f"cupy {cp.__version__}, GPU {props['name'].decode()}")
    else:
        print("no CUDA device: GPU rows skipped")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply document counts by this")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs (fast methods)")
    ap.add_argument("--chunks", default=str(th.GPU_CHUNK),
                    help="GPU bytes per lane per tile, e.g. 4,8,16")
    ap.add_argument("--check", action="store_true", help="only the GPU-vs-CPU parity checks")
    args = ap.parse_args(argv)
    describe_machine()
    if args.check:
        if not th.gpu_available():
            print("no CUDA device: nothing to check")
            return 0
        return 0 if parity_check() else 1
    chunks = [int(c) for c in args.chunks.split(",")]
    rows = []
    for name, n_docs, mean_len in (("200k x 2KB", 200_000, 2048), ("2M x 200B", 2_000_000, 200)):
        n_docs = max(1, int(n_docs * args.scale))
        label = name if args.scale == 1 else f"{n_docs} x {mean_len}B"
        data, offsets = make_corpus(n_docs, mean_len)
        bench_corpus(label, data, offsets, args.repeat, chunks, rows)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
