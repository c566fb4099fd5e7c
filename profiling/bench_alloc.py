"""First touch of a large kernel output: np.empty (numpy's MADV_HUGEPAGE advice) against kernels._memory.empty.

Usage:  python profiling/bench_alloc.py [--mb 121] [--repeat 5]

Each way runs in fresh `spawn` processes (the kernel's free huge pages depend on what a process freed before),
allocates --mb of uint64, and times a parallel numba kernel that writes every element once (as minhash_cpu writes
its signature matrix), then a second write of the same memory (no page faults left: the pure write cost).
The first-touch cost depends on the host's THP settings and memory fragmentation; the script prints them.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from pathlib import Path


def _write_twice(way: str, n: int) -> tuple[float, float]:
    import numpy as np
    from numba import njit, prange

    from gpupipe.kernels._memory import empty

    @njit(parallel=True)
    def fill(x):
        for i in prange(x.shape[0]):
            x[i] = i

    fill(np.empty(16, np.uint64))  # compile outside the timing
    t0 = time.perf_counter()
    x = np.empty(n, np.uint64) if way == "np.empty" else empty(n, np.uint64)
    fill(x)
    t1 = time.perf_counter()
    fill(x)
    return t1 - t0, time.perf_counter() - t1


def _thp(name: str) -> str:
    path = Path("/sys/kernel/mm/transparent_hugepage") / name
    return path.read_text().strip() if path.exists() else "n/a"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=121.0, help="buffer size in MB (121: 118,709 docs x 128 x 8 bytes)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    n = int(args.mb * 1e6) // 8
    print(f"THP enabled: {_thp('enabled')}; defrag: {_thp('defrag')}")
    ctx = mp.get_context("spawn")
    best = {}  # way -> median first-write seconds
    for way in ("np.empty", "kernels._memory.empty"):
        runs = []
        for _ in range(args.repeat):
            with ctx.Pool(1) as pool:
                runs.append(pool.apply(_write_twice, (way, n)))
        best[way] = sorted(r[0] for r in runs)[len(runs) // 2]  # the median: the stall comes and goes
        print(f"{way:24s} first write {' '.join(f'{r[0] * 1e3:6.1f}' for r in runs)} ms; "
              f"second write {min(r[1] for r in runs) * 1e3:.1f} ms")
    print(f"first write, median of {args.repeat}, np.empty / _memory.empty: "
          f"{best['np.empty'] / best['kernels._memory.empty']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
