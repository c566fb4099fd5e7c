"""String columns as the two buffers every kernel takes: ``data`` (uint8, the UTF-8 bytes) and
``offsets`` (int32 or int64, n + 1 entries; document i is ``data[offsets[i]:offsets[i + 1]]``).

- Arrow arrays and pandas Series (pyarrow-backed or object): zero-copy numpy views of the Arrow
  buffers (:func:`arrow_buffers`).
- cuDF Series: zero-copy CuPy views of the column's device buffers (:func:`cudf_buffers`); the text
  never goes to the host and back.

Both follow one contract, so a kernel cannot tell them apart: offsets index ``data`` directly (a
sliced column's offsets may start above 0, ``data`` is the whole buffer), nulls read as the empty
string (their slot is empty; when a producer left bytes under a null, the column is rebuilt with
nulls filled by "" — a copy, only then), and an empty or all-null column may have an empty ``data``.

This module imports neither pandas nor cuDF: it recognises a cuDF Series by its type's module, so
kernels stay importable on a machine with only numpy, numba, pyarrow and CuPy.
"""

from __future__ import annotations

import numpy as np

from ._cuda import cupy_module


def check_buffers(data, offsets) -> None:
    """The two buffers as every kernel reads them, numpy or CuPy alike: ``data`` 1-d uint8, ``offsets`` 1-d int32
    or int64 with n + 1 entries, never decreasing and within ``data``. A clear error here instead of an illegal
    address on the GPU or a segfault in numba (the kernels index ``data`` by the offsets unchecked). Costs one
    pass over the offsets, not the text (and, on the GPU, one synchronisation)."""
    if data.dtype != np.uint8 or data.ndim != 1:
        raise TypeError(f"data must be a 1-d uint8 array, got {data.dtype} with ndim {data.ndim}")
    if offsets.dtype not in (np.int32, np.int64) or offsets.ndim != 1 or offsets.shape[0] < 1:
        raise TypeError("offsets must be a 1-d int32 or int64 array with n + 1 entries")
    first, last = int(offsets[0]), int(offsets[-1])
    if first < 0 or last > data.shape[0]:
        raise ValueError(f"offsets run from {first} to {last}, outside the {data.shape[0]} bytes of data")
    if offsets.shape[0] > 2:
        down = offsets[1:] < offsets[:-1]
        if bool(down.any()):
            i = int(down.argmax())
            raise ValueError(f"offsets must not decrease: offsets[{i + 1}] = {int(offsets[i + 1])} < "
                             f"offsets[{i}] = {int(offsets[i])}")


# --------------------------------------------------------------------------------------------
# Arrow (host)
# --------------------------------------------------------------------------------------------


def _single_array(arr):
    """One contiguous Array from a ChunkedArray (zero-copy when it has a single chunk)."""
    import pyarrow as pa

    if arr.num_chunks == 1:
        return arr.chunk(0)
    if arr.num_chunks == 0:
        return pa.array([], type=arr.type)
    try:
        return arr.combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowCapacityError):  # > 2 GiB of text: int32 offsets overflow
        large = pa.large_binary() if pa.types.is_binary(arr.type) else pa.large_string()
        return arr.cast(large).combine_chunks()


def _null_slots_hold_bytes(arr, offsets) -> bool:
    """Arrow allows a null slot to span bytes; such slots must become empty before hashing."""
    import pyarrow.compute as pc

    valid = pc.is_valid(arr).to_numpy(zero_copy_only=False)
    return bool(np.any(np.diff(offsets)[~valid]))


def arrow_buffers(arr) -> tuple[np.ndarray, np.ndarray]:
    """Zero-copy numpy views (values uint8, offsets int32/int64 with n+1 entries) of a string array.

    Accepts (large_)string and (large_)binary Arrays or ChunkedArrays (several chunks are combined,
    which copies). A sliced array keeps its offsets as they are (they index the whole value buffer).
    Nulls hash as "": their slots are normally empty already; if one is not, the array is rebuilt
    with nulls filled by "" (a copy, only then).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(arr, pa.ChunkedArray):
        arr = _single_array(arr)
    t = arr.type
    if pa.types.is_null(t):  # e.g. a column of only None: all empty
        return np.empty(0, dtype=np.uint8), np.zeros(len(arr) + 1, dtype=np.int32)
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        arr = arr.cast(pa.large_binary() if pa.types.is_binary_view(t) else pa.large_string())
        t = arr.type
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        off_dtype = np.dtype(np.int64)
    elif pa.types.is_string(t) or pa.types.is_binary(t):
        off_dtype = np.dtype(np.int32)
    else:
        raise TypeError(f"expected a string or binary Arrow array, got {t}")
    if len(arr) == 0:
        return np.empty(0, dtype=np.uint8), np.zeros(1, dtype=off_dtype)

    def views(a):
        _, off_buf, data_buf = a.buffers()
        offsets = np.frombuffer(off_buf, dtype=off_dtype, count=len(a) + 1,
                                offset=a.offset * off_dtype.itemsize)
        data = np.empty(0, np.uint8) if data_buf is None else np.frombuffer(data_buf, np.uint8)
        return data, offsets

    data, offsets = views(arr)
    if arr.null_count and _null_slots_hold_bytes(arr, offsets):
        empty = "" if pa.types.is_string(t) or pa.types.is_large_string(t) else b""
        data, offsets = views(pc.fill_null(arr, pa.scalar(empty, type=t)))
    return data, offsets


def _to_arrow(strings):
    """An Arrow array from Arrow, pandas (pyarrow-backed or object), cuDF-like or a sequence."""
    import pyarrow as pa

    if isinstance(strings, (pa.Array, pa.ChunkedArray)):
        return strings
    if hasattr(strings, "to_arrow") and not hasattr(strings, "__arrow_array__"):
        return strings.to_arrow()  # cuDF / polars Series: a device-to-host copy for cuDF
    if not hasattr(strings, "__arrow_array__") and not hasattr(strings, "dtype"):
        strings = list(strings)
    return pa.array(strings)  # pandas input: None / NaN become null


# --------------------------------------------------------------------------------------------
# cuDF (device): the column's own buffers as CuPy arrays
# --------------------------------------------------------------------------------------------
#
# The API used, as documented by RAPIDS (read in the stable, legacy and 26.x pages cited):
#
# - cudf.Series.to_pylibcudf() -> (pylibcudf.Column, metadata): "This is always a zero-copy
#   operation. The result is a view of the existing data."
#   https://docs.rapids.ai/api/cudf/stable/user_guide/api_docs/api/cudf.Series.to_pylibcudf
#   (cuDF releases without the Series method have the same on the column: the older
#   cudf.core.column.ColumnBase.to_pylibcudf(mode="read"), used as a fallback.)
# - pylibcudf.Column: type(), size() (rows), offset() (first row within the buffers, set by
#   slicing), data() (the buffer: a gpumemoryview, "a GPU equivalent of memoryview for any objects
#   exposing a CUDA Array Interface"; since 25.x any object of the Span protocol: ptr, size),
#   children(), child(i).
#   https://docs.rapids.ai/api/cudf/stable/pylibcudf/api_docs/column
#   https://docs.rapids.ai/api/cudf/stable/pylibcudf/api_docs/gpumemoryview
# - A libcudf STRING column: the characters are the parent's data buffer, its only child
#   (strings_column_view::offsets_column_index = 0) holds the offsets. chars_begin() "does not
#   apply the offset of the parent. The offsets child must be used to properly address the char
#   bytes ... chars_begin(stream)[offsets_begin()[i]]": offsets are absolute positions in the chars
#   buffer and a slice only moves where the offsets start (parent offset() + child offset()).
#   https://docs.rapids.ai/api/libcudf/stable/strings__column__view_8hpp_source.html
#   pylibcudf's own Column code: "A strings column with no children is created for empty/all null"
#   and "the size of the character array stored in the parent is the last offset".
# - Offsets are INT32, or INT64 once a column's characters pass the large-strings threshold
#   (cudf::strings::get_offset64_threshold, is_large_strings_enabled):
#   https://docs.rapids.ai/api/libcudf/legacy/utilities_8hpp_source
#   The kernels take either.
# - Nulls: libcudf does not promise empty null rows ("A LIST or STRING column might have non-empty
#   rows that are marked as null", cudf::has_nonempty_nulls in cudf/copying.hpp,
#   https://docs.rapids.ai/api/libcudf/stable/namespacemembers_func_h.html). So when the Series
#   has nulls we check their lengths on the device (Series.isna() and .values, a CuPy array) and
#   only if one holds bytes take Series.fillna("") (a copy on the device) — as arrow_buffers does.
#
# Lifetime: cupy.asarray on an object with __cuda_array_interface__ wraps the pointer without a
# copy and keeps a reference to that object (which keeps the cuDF buffer alive); callers also hold
# the Series while a kernel runs. Spilling (dask-cuda's enable_cudf_spill) must not move a buffer
# a kernel reads: cuDF's spilling guide speaks of "permanently exposed" buffers, those whose device
# pointer was handed out, which stay on the device (https://docs.nvidia.com/cudf/26.10/cudf/spilling/);
# not verified here without a GPU. Ordering: libcudf and CuPy both work on the default stream here
# (CuPy's current stream unless a caller changed it), so a kernel launched on these views runs after
# the cuDF work that produced them.

_OFFSET_DTYPES = {"INT32": np.int32, "INT64": np.int64}


def is_cudf(obj) -> bool:
    """True for cuDF objects (Series, DataFrame, Index), recognised without importing cuDF."""
    module = type(obj).__module__ or ""
    return module == "cudf" or module.startswith("cudf.")


def _type_name(data_type) -> str:
    tid = data_type.id()
    return getattr(tid, "name", None) or str(tid).rsplit(".", 1)[-1]


def _pylibcudf_column(series):
    # Under cuDF spilling (enable_cudf_spill) the views below must stay valid while the kernels read them. cuDF's
    # rule (SpillableBuffer.get_ptr): a pointer taken inside `acquire_spill_lock()` pins the buffer for that
    # context only; taken outside one, as here, it marks the buffer exposed, which pins it for good. So the
    # buffers are held (correct whatever runs later), at the price of never spilling this column again; the
    # partition is done with it after the stage, and its successor columns are new, spillable buffers.
    to_plc = getattr(series, "to_pylibcudf", None)
    if callable(to_plc):
        out = to_plc()
        return out[0] if isinstance(out, tuple) else out
    return series._column.to_pylibcudf(mode="read")  # cuDF before Series.to_pylibcudf


def _device_bytes(buf):
    """A CuPy uint8 view of a pylibcudf buffer (gpumemoryview, rmm.DeviceBuffer or a Span)."""
    cp = cupy_module()

    if buf is None:
        return cp.empty(0, dtype=cp.uint8)
    if hasattr(buf, "__cuda_array_interface__"):
        arr = cp.asarray(buf)  # zero-copy: wraps the pointer, keeps `buf` alive
        return arr.reshape(-1).view(cp.uint8)
    nbytes = int(getattr(buf, "nbytes", None) or buf.size)  # Span protocol: ptr + size in bytes
    mem = cp.cuda.UnownedMemory(int(buf.ptr), nbytes, buf)
    return cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))


def _cudf_views(series):
    cp = cupy_module()

    col = _pylibcudf_column(series)
    if _type_name(col.type()) != "STRING":
        raise TypeError(f"expected a cuDF string column, got {_type_name(col.type())}")
    n = int(col.size())
    children = col.children()
    if n == 0 or not children:  # empty or all null: no offsets child, every row is ""
        return cp.empty(0, dtype=cp.uint8), cp.zeros(n + 1, dtype=cp.int32)
    off_col = children[0]
    dtype = np.dtype(_OFFSET_DTYPES[_type_name(off_col.type())])
    start = int(off_col.offset()) + int(col.offset())
    raw = _device_bytes(off_col.data())
    raw = raw[:raw.size - raw.size % dtype.itemsize]   # whole elements only (an allocation may be padded)
    offsets = raw.view(dtype)[start:start + n + 1]
    if offsets.shape[0] != n + 1:
        raise ValueError(f"offsets buffer holds {raw.size // dtype.itemsize} entries, row {start} + {n} needs more")
    return _device_bytes(col.data()), offsets


def cudf_buffers(series):
    """Zero-copy CuPy views (data uint8, offsets int32/int64 with n+1 entries) of a cuDF string
    Series, by the contract of :func:`arrow_buffers`; see the notes above for the API used."""
    cp = cupy_module()

    data, offsets = _cudf_views(series)
    if series.null_count:
        null = cp.asarray(series.isna().values)
        if bool(cp.any((offsets[1:] != offsets[:-1]) & null)):
            data, offsets = _cudf_views(series.fillna(""))
    return data, offsets


# --------------------------------------------------------------------------------------------
# One entry for every column kind
# --------------------------------------------------------------------------------------------


def string_buffers(strings):
    """(data, offsets) of a string column, zero-copy where the input allows: numpy views for Arrow
    arrays, pandas Series and sequences; CuPy views on the GPU for a cuDF Series."""
    if is_cudf(strings):
        return cudf_buffers(strings)
    return arrow_buffers(_to_arrow(strings))


def kernel_inputs(strings, device: str):
    """(data, offsets, on_gpu) for a kernel entry point: where the kernel runs and its buffers.

    ``device`` "cpu", "gpu" or "auto". A cuDF Series runs on the GPU in place for "gpu" and "auto"
    (its buffers are already there) and is copied to the host only when "cpu" is asked for; other
    inputs give host buffers, and run on the GPU for "gpu" (the kernel copies them there) or for
    "auto" when CuPy sees a device.
    """
    if device not in ("cpu", "gpu", "auto"):
        raise ValueError(f"device must be 'cpu', 'gpu' or 'auto', got {device!r}")
    if is_cudf(strings):
        if device == "cpu":
            return (*arrow_buffers(strings.to_arrow()), False)
        return (*cudf_buffers(strings), True)
    data, offsets = arrow_buffers(_to_arrow(strings))
    return data, offsets, device == "gpu" or (device == "auto" and gpu_available())


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device; never raises."""
    try:
        import cupy as cp

        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False
