"""NVTX ranges (`gpupipe/<stage>`, `gpupipe/kernel/<name>`) that cost nothing where CUDA or nvtx is absent."""

from __future__ import annotations

import contextlib

try:
    import nvtx as _nvtx
except ImportError:  # nvtx is a dependency, but kernels must import on a bare GPU box too
    _nvtx = None


def annotate(message: str):
    """Context manager / decorator marking a range in Nsight Systems timelines."""
    if _nvtx is None:
        return contextlib.nullcontext()
    return _nvtx.annotate(message, domain="gpupipe")
