"""The CUDA source of a kernel file with its local headers pasted in.

CuPy's on-disk kernel cache is keyed by the source text and the options, so a header passed with -I could be
edited and a stale binary served; pasting every `#include "x.cuh"` (once each, recursively) makes the cache key
cover the headers too.
"""

from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=None)
def raw_module(name: str, *defines: str):
    """The CuPy RawModule of a kernel file (compiled once per process and options; CuPy also caches on disk)."""
    import cupy as cp

    return cp.RawModule(code=cuda_source(name), options=("-std=c++17", *defines))
