"""The one place that chooses CPU or GPU libraries.

`device: auto` uses the GPU when CuPy sees a CUDA device; `cpu` never touches CUDA; `gpu` fails early with a clear
message when no device is usable. Detection never crashes: on a machine without a driver CuPy may import fine and
only raise on first use, so we ask it for the device count inside a try.
"""

from __future__ import annotations

import functools
import importlib.util

import numpy as np
import pandas as pd


class DeviceError(RuntimeError):
    pass


@functools.lru_cache(maxsize=1)
def gpu_status() -> tuple[bool, str]:
    """(usable, why): whether CuPy can run kernels here, and a short reason when it cannot."""
    if importlib.util.find_spec("cupy") is None:
        return False, "CuPy is not installed (pip install 'gpupipe[gpu]')"
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no device, broken toolkit: all mean "no GPU here"
        return False, f"CuPy cannot reach a CUDA device: {type(e).__name__}: {e}"
    if n < 1:
        return False, "no CUDA device visible (CUDA_VISIBLE_DEVICES?)"
    return True, f"{n} CUDA device(s)"


def has_cudf() -> bool:
    return importlib.util.find_spec("cudf") is not None and gpu_status()[0]


def resolve_device(requested: str) -> str:
    """auto|cpu|gpu → cpu|gpu, raising DeviceError when gpu is asked for and unusable."""
    if requested == "cpu":
        return "cpu"
    ok, why = gpu_status()
    if requested == "gpu" and not ok:
        raise DeviceError(f"device 'gpu' was requested but {why}; use --device cpu or auto")
    if requested not in ("auto", "gpu"):
        raise DeviceError(f"unknown device {requested!r}: expected auto, cpu or gpu")
    return "gpu" if ok else "cpu"


def array_module(device: str):
    """numpy on the CPU, cupy on the GPU."""
    if device == "gpu":
        import cupy

        return cupy
    return np


def frame_module(device: str):
    """pandas, or cudf when on the GPU and RAPIDS is installed (frames otherwise stay pandas; kernels copy buffers)."""
    if device == "gpu" and has_cudf():
        import cudf

        return cudf
    return pd


def to_host(a):
    """A numpy array from a numpy or cupy array."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)
