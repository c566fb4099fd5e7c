"""Arrow text arrays as substring dedup reads them: one large_string (or large_binary) array, its byte buffers,
and byte slices of it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gpupipe.stages.dedup.substring.kernels import _gather


def buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes, int64 offsets) of a text array."""
    from gpupipe.kernels.text_hash import arrow_buffers

    data, offsets = arrow_buffers(arr)
    return data, offsets.astype(np.int64, copy=False)


def slices(texts: pa.Array, rows, starts, ends) -> pa.Array:
    """The byte slices [start, end) of the given rows, as a large_binary array."""
    data, offsets = buffers(texts)
    out, out_off = _gather(data, offsets, np.asarray(rows, np.int64), np.asarray(starts, np.int64),
                           np.asarray(ends, np.int64), False)
    return pa.Array.from_buffers(pa.large_binary(), len(out_off) - 1, [None, pa.py_buffer(out_off), pa.py_buffer(out)])
