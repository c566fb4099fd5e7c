"""Text columns between pandas and Arrow, and Arrow compute spread over the cores.

pandas 3 keeps `str` columns in Arrow, so a column goes to a `pa.Array` and back without a Python object per
document (`text_array`, `text_series`); a round trip through `to_pylist` costs ~3 µs a document, more than most
stages spend on it. Arrow's compute kernels run on one core and release the GIL, so an element-wise pipeline of
them runs on contiguous slices in threads (`map_slices`), with the same result as on the whole array.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import pandas as pd
import pyarrow as pa

MIN_SLICE_ROWS = 2048  # below this per slice, a thread costs more than it saves


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def text_array(col) -> pa.Array:
    """A text column (pandas, cuDF, Arrow, or a list) as one contiguous `large_string` array, nulls as "" (a binary
    one as `large_binary`, nulls as b""): the one way every stage hands texts to its kernels."""
    if isinstance(col, pa.Array | pa.ChunkedArray):
        arr = col
    elif hasattr(col, "to_arrow") and not isinstance(col, pd.Series):   # a cuDF column: to the host, as Arrow
        arr = col.to_arrow()
    else:
        arr = pa.array(col, type=pa.large_string(), from_pandas=True)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    binary = pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)
    want = pa.large_binary() if binary else pa.large_string()
    if arr.type != want:
        arr = arr.cast(want)
    return arr.fill_null(b"" if binary else "") if arr.null_count else arr


def text_series(arr: pa.Array, like: pd.Series) -> pd.Series:
    """`arr` as a Series with `like`'s index and string dtype; zero-copy for Arrow-backed string dtypes."""
    if isinstance(like.dtype, pd.StringDtype) and like.dtype.storage == "pyarrow":
        return pd.Series(pd.array(arr, dtype=like.dtype), index=like.index)
    return pd.Series(arr.to_pylist(), index=like.index, dtype=like.dtype)


def map_slices(fn: Callable[[pa.Array], pa.Array], arr: pa.Array, threads: int | None = None) -> pa.Array:
    """fn (element-wise: row i of the result depends on row i of the input only) over contiguous slices of arr in
    threads, concatenated in order: equal to fn(arr)."""
    k = min(threads or cores(), len(arr) // MIN_SLICE_ROWS)
    if k <= 1:
        return fn(arr)
    bounds = [len(arr) * i // k for i in range(k + 1)]
    with ThreadPoolExecutor(k, thread_name_prefix="gpupipe-arrow") as pool:
        parts = list(pool.map(lambda i: fn(arr.slice(bounds[i], bounds[i + 1] - bounds[i])), range(k)))
    return pa.concat_arrays(parts)
