"""The one place that chooses CPU or GPU libraries.

`device: auto` uses the GPU when CuPy sees a CUDA device; `cpu` never touches CUDA; `gpu` fails early with a clear
message when no device is usable. Detection never crashes: on a machine without a driver CuPy may import fine and
only raise on first use, so we ask it for the device count inside a try.

Frames: pandas on the host, cuDF on the GPU when RAPIDS is installed (`frame_module`, `read_frame`, the transfer
helpers). String columns reach kernels as two buffers, `string_buffers(column)` -> (data, offsets): numpy views of
the Arrow buffers for pandas/Arrow, CuPy views of the cuDF column's own device buffers for cuDF (zero-copy both;
the cuDF API used and the RAPIDS pages it follows are cited in kernels/strings.py). cuDF, CuPy and pylibcudf are
imported only when a GPU path asks for them, so this module imports on any machine.
"""

from __future__ import annotations

import functools
import importlib.util

import os

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


# --------------------------------------------------------------------------------------------
# String buffers and frames on either side
# --------------------------------------------------------------------------------------------


def string_buffers(column):
    """(data uint8, offsets int32/int64 with n + 1 entries) of a string column, zero-copy.

    A pyarrow array or a pandas Series gives numpy views of its Arrow buffers; a cuDF Series gives CuPy views of
    its device buffers (chars and offsets child, through ``Series.to_pylibcudf``), with no host round trip.
    Offsets index ``data`` directly (a sliced column's start above 0), nulls read as "" and an empty column may
    have an empty ``data``. See kernels/strings.py for the contract and the RAPIDS documentation it relies on.
    """
    from gpupipe.kernels.strings import string_buffers as buffers

    return buffers(column)


def is_device_frame(obj) -> bool:
    """True for a cuDF DataFrame or Series (their data is on the GPU), recognised without importing cuDF."""
    from gpupipe.kernels.strings import is_cudf

    return is_cudf(obj)


def frame_nbytes(df) -> int:
    """Bytes a frame holds (pandas and cuDF both have ``memory_usage(deep=True)``): what a transfer moves."""
    return int(df.memory_usage(deep=True).sum())


def frame_to_device(df):
    """A cuDF frame from a pandas one, through Arrow (``cudf.DataFrame.from_arrow``); cuDF frames pass through."""
    if is_device_frame(df):
        return df
    import cudf
    import pyarrow as pa

    return cudf.DataFrame.from_arrow(pa.Table.from_pandas(df, preserve_index=False))


def frame_to_host(df):
    """A pandas frame from a cuDF one (pandas frames pass through).

    Through Arrow (``cudf.DataFrame.to_arrow(preserve_index=False)`` then ``pyarrow.Table.to_pandas``), the same
    conversion `gpupipe.io.parts.read_part` applies to a Parquet part, so a frame that visited the GPU comes back
    with the dtypes the CPU path has.
    https://docs.rapids.ai/api/cudf/stable/user_guide/api_docs/api/cudf.DataFrame.to_arrow/
    """
    if not is_device_frame(df):
        return df
    return df.to_arrow(preserve_index=False).to_pandas()


def read_frame(path: str | os.PathLike, device: str = "cpu", columns: list[str] | None = None):
    """A Parquet part as a frame: decoded on the GPU into cuDF (``cudf.read_parquet``) when ``device`` is "gpu" and
    cuDF is installed, else read with pyarrow into pandas (`gpupipe.io.parts.read_part`). `columns`: only those of
    them the part has (None: every column)."""
    from gpupipe.io.parts import part_columns, read_part

    if frame_module(device).__name__ == "cudf":
        import cudf

        return cudf.read_parquet(os.fspath(path), columns=part_columns(path, columns))
    return read_part(path, columns)


def write_frame(df, path: str | os.PathLike) -> int:
    """Write a frame as a Parquet part (`gpupipe.io.parts.write_part`); returns the bytes a cuDF frame moved to the
    host to be written (0 for pandas). One writer for both keeps the parts' schema identical on every path."""
    from gpupipe.io.parts import write_part

    moved = frame_nbytes(df) if is_device_frame(df) else 0
    write_part(frame_to_host(df), path)
    return moved
