"""Benchmark the MinHash kernels alone: numba twin (all cores) vs the CUDA kernels.

Synthetic corpora (English word shingles, Chinese character shingles; ~2 KB and ~200 B documents),
num_perm=128, default shingle lengths:
  numba     minhash_cpu, all numba threads (compile excluded)
  gpu       minhash_gpu on device buffers when CuPy sees a device: CUDA events around the call (the default
            permutations are progressions: minhash_progression_*; a second row times random (a, b), which
            run minhash_signatures_*, one multiplication per permutation and shingle)
            (compile excluded; includes the host's batch planning from numpy offsets); the
            host-to-device copy of the buffers is timed on its own line
Reports seconds, MB/s, docs/s and GPU/CPU ratio; every GPU result is compared with the CPU's.

Usage:  python profiling/bench_minhash_kernel.py [--docs 20000] [--repeat 3] [--check]
--docs N: N documents in each ~2 KB corpus and 10 N in each ~200 B corpus.
--check runs only GPU-vs-CPU parity checks and exits non-zero on a mismatch.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

from gpupipe.kernels import minhash as mh

NUM_PERM = 128


def _vocab(lang: str, rng) -> tuple[list[bytes], np.ndarray]:
    """Tokens (words with their separator, or single characters and punctuation) and weights."""
    if lang == "en":
        letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)
        words = [bytes(rng.choice(letters, int(n))) for n in rng.integers(2, 11, 30_000)]
        words[::7] = [w.capitalize() for w in words[::7]]
        tokens = [w + b" " for w in words] + [b", ", b". ", b"; "]
    else:
        chars = [chr(c).encode() for c in range(0x4E00, 0x4E00 + 4000)]
        tokens = chars + ["，".encode(), "。".encode(), "、".encode()]
    weights = 1.0 / np.arange(1, len(tokens) - 2)  # Zipf-like content, then fixed punctuation
    weights = np.concatenate([weights / weights.sum() * 0.9, [0.05, 0.03, 0.02]])
    return tokens, weights


def make_corpus(lang: str, n_docs: int, mean_bytes: int, seed: int = 0):
    """Arrow-style buffers of n_docs documents of about mean_bytes each (vectorized gather)."""
    rng = np.random.default_rng(seed)
    tokens, weights = _vocab(lang, rng)
    tok_len = np.array([len(t) for t in tokens], dtype=np.int64)
    tok_off = np.concatenate([[0], np.cumsum(tok_len)])
    tok_data = np.frombuffer(b"".join(tokens), np.uint8)
    mean_tok = float((tok_len * weights).sum())
    per_doc = rng.integers(max(1, int(mean_bytes / mean_tok * 0.5)),
                           int(mean_bytes / mean_tok * 1.5) + 2, n_docs)
    ids = rng.choice(len(tokens), size=int(per_doc.sum()), p=weights)
    lens = tok_len[ids]
    ends = np.cumsum(lens)
    # byte j of the output is byte (j - start of its token) of that token
    src = np.repeat(tok_off[ids] - (ends - lens), lens) + np.arange(int(ends[-1]))
    data = tok_data[src]
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    offsets[1:] = ends[np.cumsum(per_doc) - 1]
    return data, offsets


def _time_cpu(data, offsets, cjk, a, b, repeat):
    mh.minhash_cpu(data, offsets[:2], cjk, a, b)  # compile (or cache load) outside the timing
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = mh.minhash_cpu(data, offsets, cjk, a, b)
        times.append(time.perf_counter() - t0)
    return min(times), out


def _time_gpu(data, offsets, cjk, a, b, repeat):
    """(h2d seconds, kernel seconds, result on the host)."""
    import cupy as cp

    def copy():
        t0 = time.perf_counter()
        d = cp.asarray(data)
        cp.cuda.Device().synchronize()
        return time.perf_counter() - t0, d

    h2d = min(copy()[0] for _ in range(repeat))
    d_data = copy()[1]
    out = mh.minhash_gpu(d_data, offsets, cjk, a, b)  # compile + warm up
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(max(repeat, 3)):
        start.record()
        mh.minhash_gpu(d_data, offsets, cjk, a, b)
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return h2d, min(times), out.get()


def bench(n_docs: int, repeat: int) -> bool:
    a, b = mh.minhash_permutations(NUM_PERM, seed=0)
    gen = np.random.default_rng(0)
    ga, gb = gen.integers(1, mh.P61, NUM_PERM, dtype=np.uint64), gen.integers(0, mh.P61, NUM_PERM, dtype=np.uint64)
    gpu = mh.gpu_available()
    header = (f"{'corpus':<18} {'method':<22} {'seconds':>9} {'MB/s':>9} {'docs/s':>11} "
              f"{'x numba':>8}")
    print(header)
    print("-" * len(header))
    ok = True
    for lang, mean_bytes, count in (("en", 2048, n_docs), ("zh", 2048, n_docs),
                                    ("en", 200, 10 * n_docs), ("zh", 200, 10 * n_docs)):
        data, offsets = make_corpus(lang, count, mean_bytes, seed=mean_bytes)
        cjk = lang == "zh"
        name = f"{lang} {count}x{mean_bytes}B"
        mb = data.nbytes / 1e6

        def row(method, secs, base, note=""):
            print(f"{name:<18} {method:<22} {secs:>9.4f} {mb / secs:>9.1f} {count / secs:>11.3g} "
                  f"{base / secs:>7.1f}x  {note}")

        cpu_secs, cpu_out = _time_cpu(data, offsets, cjk, a, b, repeat)
        row("numba twin (CPU)", cpu_secs, cpu_secs)
        if gpu:
            h2d, secs, gpu_out = _time_gpu(data, offsets, cjk, a, b, repeat)
            same = bool((gpu_out == cpu_out).all())
            ok &= same
            row("  host->device copy", h2d, cpu_secs, "pageable numpy -> device")
            row("GPU minhash_gpu", secs, cpu_secs, ("bit-identical to CPU" if same else "MISMATCH vs CPU")
                + " (progression kernel)")
            # the same with (a, b) that are no progression: minhash_signatures_*, a multiply per permutation
            _, g_secs, g_out = _time_gpu(data, offsets, cjk, ga, gb, repeat)
            g_same = bool((g_out == mh.minhash_cpu(data, offsets, cjk, ga, gb)).all())
            ok &= g_same
            row("GPU general (a, b)", g_secs, cpu_secs, ("bit-identical to CPU" if g_same else "MISMATCH vs CPU")
                + f"; progression kernel {g_secs / secs:.2f}x faster")
    return ok


def parity_check() -> bool:
    """GPU vs numba twin, bit for bit: mixed modes, empties, invalid UTF-8, long docs, batches."""
    import cupy as cp

    rng = np.random.default_rng(1)
    cases = []
    en, en_off = make_corpus("en", 3000, 600, seed=2)
    zh, zh_off = make_corpus("zh", 3000, 600, seed=3)
    data = np.concatenate([en, zh])
    offsets = np.concatenate([en_off, zh_off[1:] + en_off[-1]])
    cjk = np.r_[np.zeros(3000), np.ones(3000)].astype(np.uint8)
    perm = rng.permutation(6000)
    cases.append(("mixed en/zh", data, offsets, cjk))
    lengths = rng.integers(0, 3000, 2000)
    noise = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8)
    noise[rng.random(noise.size) < 0.2] = 32
    noise_off = np.concatenate([[0], np.cumsum(lengths)])
    cases.append(("random bytes i64", noise, noise_off, (rng.random(2000) < 0.5).astype(np.uint8)))
    cases.append(("random bytes i32", noise, noise_off.astype(np.int32), perm[:2000] % 2))
    long_data, long_off = make_corpus("en", 20, 100_000, seed=4)
    cases.append(("100 KB docs", long_data, long_off, 0))
    small, small_off = make_corpus("zh", 200_000, 200, seed=5)
    cases.append(("200k small docs", small, small_off.astype(np.int32), 1))
    cases.append(("sliced offsets", data, offsets[500:2501], cjk[500:2500]))
    empties = np.zeros(100, np.int64)
    cases.append(("empty docs", np.empty(0, np.uint8), empties, 0))
    ok = True
    for num_perm in (128, 300):
        a, b = mh.minhash_permutations(num_perm, seed=num_perm)
        for name, d, o, c in cases:
            got = mh.minhash_gpu(cp.asarray(d), cp.asarray(o), c, a, b).get()
            same = bool((got == mh.minhash_cpu(d, o, c, a, b)).all())
            print(f"parity {name:<18} num_perm={num_perm:<4} {'ok' if same else 'MISMATCH'}")
            ok &= same
    a, b = mh.minhash_permutations(64, seed=7)
    got = mh.minhash_gpu(cp.asarray(noise), cp.asarray(noise_off), 1, a, b, batch_bytes=10_000).get()
    same = bool((got == mh.minhash_cpu(noise, noise_off, 1, a, b)).all())
    print(f"parity {'small batches':<18} num_perm=64   {'ok' if same else 'MISMATCH'}")
    return ok and same


def describe_machine():
    import numba

    print(f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}, "
          f"{os.cpu_count()} CPUs, numba threads {numba.get_num_threads()}")
    if mh.gpu_available():
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        print(f"cupy {cp.__version__}, GPU {props['name'].decode()}")
    else:
        print("no CUDA device: GPU rows skipped")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=20_000,
                    help="documents per ~2 KB corpus (10x that per ~200 B corpus)")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    ap.add_argument("--check", action="store_true", help="only the GPU-vs-CPU parity checks")
    args = ap.parse_args(argv)
    describe_machine()
    if args.check:
        if not mh.gpu_available():
            print("no CUDA device: nothing to check")
            return 0
        return 0 if parity_check() else 1
    return 0 if bench(max(1, args.docs), args.repeat) else 1


if __name__ == "__main__":
    sys.exit(main())
