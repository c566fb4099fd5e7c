"""The CUDA source of a kernel file with its local headers pasted in.

CuPy's on-disk kernel cache is keyed by the source text and the options, so a header passed with -I could be
edited and a stale binary served; pasting every `#include "x.cuh"` (once each, recursively) makes the cache key
cover the headers too.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

_HERE = Path(__file__).parent
_INCLUDE = re.compile(r'^#include "([\w.]+\.cuh)"\s*$', re.MULTILINE)


def cuda_source(name: str) -> str:
    seen: set[str] = set()

    def expand(match: re.Match) -> str:
        header = match.group(1)
        if header in seen:
            return ""
        seen.add(header)
        text = (_HERE / header).read_text().replace("#pragma once", "")
        return _INCLUDE.sub(expand, text)

    return _INCLUDE.sub(expand, (_HERE / name).read_text())


def cupy_module():
    """CuPy as gpupipe's GPU paths use it: every one of them gets it here.

    CuPy's CUB block reductions (its default reduction accelerator) are turned off in this process, unless the user
    chose with CUPY_ACCELERATORS. Such a kernel is compiled (NVRTC, with CUB's headers) for its block size, which
    CuPy sizes by the reduced array's length below 2,048 elements (cupy/_core/_cub_reduction.pyx,
    _get_cub_block_specs): a `.any()` over the offsets of a 300-document partition and of a 1,000-document one are
    two compiles, paid again by any run whose partitions have other sizes. CuPy's own reduction kernel has a fixed
    block size (the stride is an argument): one compile per operation and type. gpupipe's reductions are small
    checks and counts, where CUB's speed does not matter. CuPy's routine accelerator (CUB's device-wide functions,
    compiled into CuPy itself) is left as it is."""
    import cupy as cp

    if "CUPY_ACCELERATORS" not in os.environ:
        set_reductions = getattr(getattr(cp, "_core", None), "set_reduction_accelerators", None)
        if set_reductions is not None:
            set_reductions([])
    return cp


@functools.lru_cache(maxsize=None)
def raw_module(name: str, *defines: str):
    """The CuPy RawModule of a kernel file (compiled once per process and options; CuPy also caches on disk)."""
    cp = cupy_module()

    return cp.RawModule(code=cuda_source(name), options=("-std=c++17", *defines))
