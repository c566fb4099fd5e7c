"""What a CuPy reduction compiles, by the length it reduces: CuPy's CUB block reductions against its own kernel.

Why (session 16, by reading cupy/_core/_cub_reduction.pyx, not yet seen on a device): with its default reduction
accelerator ("cub"), CuPy compiles a block-reduce kernel (NVRTC and jitify, with CUB's headers) whose block size it
takes from the reduced length below 2,048 elements (32 .. 512 threads), a full reduction in two passes (two kernels);
its own reduction kernel has a fixed block size and takes the stride as an argument. gpupipe's GPU paths turn the CUB
reductions off (kernels/_cuda.cupy_module); this prints, on a fresh kernel cache, the seconds and the kernels each
`.any()` compiled for several lengths, both ways, so a lease can tell whether that was the right call.

Usage: python profiling/gpu_reduction_compiles.py        (needs a GPU and CuPy; a fresh CUPY_CACHE_DIR is made)
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

LENGTHS = (100, 300, 1_000, 3_000, 100_000, 310)   # 310: a second length of the 300 class (by the reading: no compile)


def cache_files(folder: Path) -> int:
    return sum(1 for p in folder.rglob("*") if p.is_file())


def main() -> int:
    cache = Path(tempfile.mkdtemp(prefix="cupy-reductions-"))
    os.environ["CUPY_CACHE_DIR"] = str(cache)   # before CuPy compiles anything in this process
    import cupy as cp

    print(f"cupy {cp.__version__}; kernel cache {cache}; `.any()` of a bool array, each length's first call")
    print(f"{'reduction accelerators':<24}{'length':>9}{'seconds':>9}{'kernels compiled':>18}")
    totals = {}
    for accelerators in (["cub"], []):
        cp._core.set_reduction_accelerators(accelerators)
        name = repr(accelerators)
        totals[name] = [0.0, 0]
        for n in LENGTHS:
            flags = cp.arange(n, dtype=cp.int64) % 7 == 3   # the elementwise kernel compiles here, not timed
            cp.cuda.Device().synchronize()
            before, t0 = cache_files(cache), time.perf_counter()
            bool(flags.any())
            seconds, compiled = time.perf_counter() - t0, cache_files(cache) - before
            totals[name][0] += seconds
            totals[name][1] += compiled
            print(f"{name:<24}{n:>9}{seconds:>9.3f}{compiled:>18}", flush=True)
    for name, (seconds, compiled) in totals.items():
        print(f"total {name:<18}{'':>9}{seconds:>9.3f}{compiled:>18}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
