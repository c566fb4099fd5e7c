"""A numpy-backed stand-in for the subset of CuPy gpupipe uses, with stream-hazard tracking (streams.py) and
kernels run by emulators (emulators.py). Installed as `cupy`/`cupyx` in sys.modules by `tests.gpu_standin.install`.

Anything outside the subset raises (an unknown attribute of the module, of `cupy.cuda`, of an array; a numpy array
where CuPy refuses one), so a new CuPy call in gpupipe must be added here knowingly. Semantics kept from CuPy:
work runs on the current stream; an array op reads its inputs and writes its result there; `get()`/`asnumpy` copy
on the current (or given) stream and wait for it; `asarray` of host data copies on the current stream; reductions
and scalar indexing give 0-d device arrays, read back (a host sync) by int()/bool(); implicit conversion to numpy
is refused. `cupy.empty` is filled with 0xAB bytes, so a result that relies on unwritten memory shows.
"""

from __future__ import annotations

import builtins
import types
import weakref

import numpy as np

from . import emulators
from .streams import STATE, Access, Event, HazardError, Stream  # noqa: F401 (HazardError: re-exported)

__version__ = "13.99.0+standin"
STANDIN = True

int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
float32, float64, bool_ = np.float32, np.float64, np.bool_


class Unsupported(AttributeError, NotImplementedError):
    """A CuPy feature outside the stand-in's subset (an AttributeError too, so hasattr() answers False)."""


def _unsupported(what: str):
    return Unsupported(f"the CuPy stand-in does not cover {what}: add it to tests/gpu_standin knowingly "
                               "(with CuPy's semantics) if gpupipe now needs it")


# --------------------------------------------------------------------------------------------
# Device memory
# --------------------------------------------------------------------------------------------


def _free(stats, nbytes):
    stats.live_bytes -= nbytes


try:
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # numpy 1.x
    byte_bounds = np.byte_bounds


class _Memory:
    __slots__ = ("access", "nbytes", "base", "__weakref__")

    def __init__(self, a: np.ndarray, label: str):
        nbytes = a.nbytes
        self.access = Access(label)
        self.nbytes = nbytes
        self.base = byte_bounds(a)[0]
        st = STATE.stats
        st.live_bytes += nbytes
        st.allocated_bytes += nbytes
        st.peak_bytes = max(st.peak_bytes, st.live_bytes)
        weakref.finalize(self, _free, st, nbytes)


class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.offset = mem, offset

    @property
    def ptr(self) -> int:
        return 0x7F0000000000 + (id(self.mem) & 0xFFFFFFFF) * 4096 + self.offset


def _new(a: np.ndarray, s: Stream | None = None, seq: int = 0, label: str = "array") -> "ndarray":
    """A fresh device allocation holding `a` (owned), written by action (s, seq) unless s is None."""
    a = np.ascontiguousarray(a)
    mem = _Memory(a, f"{label} {a.dtype}{list(a.shape)}")
    out = ndarray._wrap(a, mem)
    if s is not None:
        _wr(out, s, seq, label)
    return out


def _span(arr) -> tuple[int, int]:
    lo, hi = byte_bounds(arr._a)
    return lo - arr._mem.base, hi - arr._mem.base


def _rd(arr, s, seq, what):
    STATE.read(arr._mem.access, s, seq, what, *_span(arr))


def _wr(arr, s, seq, what):
    STATE.write(arr._mem.access, s, seq, what, *_span(arr))


def _enqueue(stream=None):
    s = stream if stream is not None else STATE.current()
    return s, STATE.enqueue(s)


def _host_arg(x, what):
    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, np.ndarray) and x.ndim > 0:
        raise TypeError(f"{what}: a numpy array where CuPy wants a cupy.ndarray (CuPy never converts implicitly)")
    return x


def _arrays_in(obj, out):
    if isinstance(obj, ndarray):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _arrays_in(x, out)
    return out


def _unwrap(obj, what):
    if isinstance(obj, (list, tuple)):
        return type(obj)(_unwrap(x, what) for x in obj)
    return _host_arg(obj, what)


def _op(name, fn, *args, out=None, **kw):
    """Run numpy's fn as a device op on the current stream: reads of every array argument, a write of the result
    (a new allocation) or of `out`."""
    s, seq = _enqueue()
    for a in _arrays_in(list(args) + list(kw.values()), []):
        _rd(a, s, seq, name)
    np_args = _unwrap(args, name)
    np_kw = {k: _unwrap(v, name) for k, v in kw.items()}
    if out is not None:
        _wr(out, s, seq, name)
        fn(*np_args, out=out._a, **np_kw)
        return out
    res = fn(*np_args, **np_kw)
    return _result(res, s, seq, name)


def _result(res, s, seq, name):
    if isinstance(res, tuple):
        return tuple(_result(r, s, seq, name) for r in res)
    if isinstance(res, np.ndarray):
        return _new(res, s, seq, name)
    if isinstance(res, (np.generic, bool, int, float)):
        return _new(np.asarray(res), s, seq, name)   # CuPy: a 0-d device array
    raise TypeError(f"{name}: unexpected result {type(res)}")


class ndarray:
    """cupy.ndarray over a numpy view `_a` of an allocation `_mem`."""

    __array_ufunc__ = None          # numpy operators defer to ours, which refuse host arrays as CuPy does
    __array_priority__ = 1000

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        if memptr is not None or strides is not None:
            raise _unsupported("ndarray(memptr=...) (foreign device memory)")
        a = np.full(int(np.prod(shape)) * np.dtype(dtype).itemsize, 0xAB, np.uint8).view(dtype).reshape(shape)
        self._a, self._mem = a, _Memory(a, "ndarray")

    @classmethod
    def _wrap(cls, a, mem):
        self = object.__new__(cls)
        self._a, self._mem = a, mem
        return self

    def _view(self, a):
        return ndarray._wrap(a, self._mem)

    # --- attributes
    shape = property(lambda self: self._a.shape)
    ndim = property(lambda self: self._a.ndim)
    dtype = property(lambda self: self._a.dtype)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    T = property(lambda self: self._view(self._a.T))
    data = property(lambda self: MemoryPointer(self._mem, 0))

    @property
    def flags(self):
        return self._a.flags

    def __len__(self):
        return len(self._a)

    def __repr__(self):
        return f"standin.ndarray(shape={self.shape}, dtype={self.dtype})"

    def __array__(self, *args, **kw):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct "
                        "a NumPy array explicitly.")

    def __iter__(self):
        raise _unsupported("iterating a device array (one host sync per element)")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise _unsupported(f"ndarray.{name}")

    # --- host transfers
    def get(self, stream=None, order="C", out=None, blocking=True):
        s, seq = _enqueue(stream)
        _rd(self, s, seq, "ndarray.get")
        if blocking:
            STATE.host_wait(s.full_clock())
        res = self._a.copy()
        if out is not None:
            out[...] = res
            return out
        return res

    def set(self, arr, stream=None):
        if not isinstance(arr, np.ndarray):
            raise TypeError("ndarray.set takes a numpy array")
        s, seq = _enqueue(stream)
        _pinned_read(arr, s, seq, "ndarray.set (from pinned host memory)")
        _wr(self, s, seq, "ndarray.set")
        if arr.shape != self.shape:
            raise ValueError(f"ndarray.set: shape {arr.shape} into {self.shape}")
        self._a[...] = arr

    def _scalar(self, what):
        if self.size != 1:
            raise TypeError(f"only size-1 arrays convert to Python scalars ({what})")
        return self.get().reshape(())[()]

    def __int__(self):
        return int(self._scalar("int"))

    def __float__(self):
        return float(self._scalar("float"))

    def __bool__(self):
        return bool(self._scalar("bool"))

    def item(self):
        return self._scalar("item").item()

    def tolist(self):
        return self.get().tolist()

    # --- views and copies
    def __getitem__(self, idx):
        if _basic(idx):
            v = self._a[idx]
            if not isinstance(v, np.ndarray):     # CuPy: scalar indexing gives a 0-d view, not a host number
                v = self._a[(idx if isinstance(idx, tuple) else (idx,)) + (Ellipsis,)]
            return self._view(v)
        return _op("ndarray.__getitem__", lambda a, i: a[i], self, idx)

    def __setitem__(self, idx, value):
        s, seq = _enqueue()
        for a in _arrays_in([idx, value], []):
            _rd(a, s, seq, "ndarray.__setitem__")
        if isinstance(value, np.ndarray) and value.ndim > 0:
            raise TypeError("ndarray.__setitem__: a numpy array value (CuPy wants a cupy.ndarray or a scalar)")
        _wr(self, s, seq, "ndarray.__setitem__")
        self._a[_unwrap(idx, "index")] = _host_arg(value, "value")

    def reshape(self, *shape, order="C"):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        r = self._a.reshape(shape)
        if np.may_share_memory(r, self._a):
            return self._view(r)
        return _op("reshape", lambda a: a.reshape(shape), self)

    def ravel(self):
        return self.reshape(-1)

    def view(self, dtype):
        return self._view(self._a.view(dtype))

    def astype(self, dtype, copy=True, **kw):
        if not copy and np.dtype(dtype) == self.dtype:
            return self
        return _op("astype", lambda a: a.astype(dtype), self)

    def copy(self, order="C"):
        return _op("copy", np.copy, self)

    def fill(self, value):
        s, seq = _enqueue()
        _wr(self, s, seq, "ndarray.fill")
        self._a.fill(value)

    def all(self, axis=None):
        return _op("all", np.all, self, axis=axis)

    def any(self, axis=None):
        return _op("any", np.any, self, axis=axis)

    def sum(self, axis=None, dtype=None):
        return _op("sum", np.sum, self, axis=axis, dtype=dtype)

    def max(self, axis=None):
        return _op("max", np.max, self, axis=axis)

    def min(self, axis=None):
        return _op("min", np.min, self, axis=axis)

    def argmax(self, axis=None):
        return _op("argmax", np.argmax, self, axis=axis)

    def nonzero(self):
        return _op("nonzero", np.nonzero, self)

    def __dlpack__(self, stream=None, **kw):
        raise _unsupported("DLPack export (torch.from_dlpack needs a real device)")



def _basic(idx) -> bool:
    items = idx if isinstance(idx, tuple) else (idx,)
    return builtins.all(isinstance(i, (int, np.integer, slice)) or i is Ellipsis or i is None for i in items)


def _binary(name, fn, reflected=False):
    def method(self, other):
        if isinstance(other, np.ndarray) and other.ndim > 0:
            raise TypeError(f"Unsupported type {type(other)} in {name} (CuPy does not mix host arrays in)")
        if not isinstance(other, (ndarray, np.generic, np.ndarray, int, float, bool)):
            return NotImplemented
        return _op(name, (lambda a, b: fn(b, a)) if reflected else fn, self, other)
    return method


def _inplace(name, fn):
    def method(self, other):
        if isinstance(other, np.ndarray) and other.ndim > 0:
            raise TypeError(f"Unsupported type {type(other)} in {name}")
        s, seq = _enqueue()
        if isinstance(other, ndarray):
            _rd(other, s, seq, name)
        _rd(self, s, seq, name)
        _wr(self, s, seq, name)
        fn(self._a, _host_arg(other, name), out=self._a)
        return self
    return method


for _name, _fn in {"add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide,
                   "truediv": np.true_divide, "mod": np.mod, "and": np.bitwise_and, "or": np.bitwise_or,
                   "xor": np.bitwise_xor, "lshift": np.left_shift, "rshift": np.right_shift}.items():
    setattr(ndarray, f"__{_name}__", _binary(f"__{_name}__", _fn))
    setattr(ndarray, f"__r{_name}__", _binary(f"__r{_name}__", _fn, reflected=True))
    setattr(ndarray, f"__i{_name}__", _inplace(f"__i{_name}__", _fn))
for _name, _fn in {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
                   "ge": np.greater_equal}.items():
    setattr(ndarray, f"__{_name}__", _binary(f"__{_name}__", _fn))
ndarray.__hash__ = None
ndarray.__invert__ = lambda self: _op("__invert__", np.invert, self)
ndarray.__neg__ = lambda self: _op("__neg__", np.negative, self)
ndarray.__module__ = "cupy"      # what gpupipe's _xp() looks at to tell CuPy arrays from numpy's


# --------------------------------------------------------------------------------------------
# Pinned host memory (cupyx.empty_pinned): numpy arrays whose writes by the host are checked against the copies
# still queued from them
# --------------------------------------------------------------------------------------------


class _Pinned(np.ndarray):
    """A pinned host buffer: `_pinned` = (its Access, the allocation's first address), shared by its views."""

    def __array_finalize__(self, obj):
        pinned = getattr(obj, "_pinned", None)
        self._pinned = pinned if pinned is not None and np.may_share_memory(self, obj) else None

    def __setitem__(self, idx, value):
        if self._pinned is not None:
            target = np.ndarray.__getitem__(self, idx)
            lo, hi = byte_bounds(target) if isinstance(target, np.ndarray) else byte_bounds(self)
            acc, base = self._pinned
            STATE.host_writes(acc, "pinned buffer __setitem__", lo - base, hi - base)
        super().__setitem__(idx, value)


def _pinned_read(arr, s, seq, what):
    """A copy on stream s reads pinned host memory: recorded, so a host write before it finishes raises."""
    pinned = getattr(arr, "_pinned", None)
    if pinned is not None:
        acc, base = pinned
        lo, hi = byte_bounds(arr)
        STATE.read(acc, s, seq, what, lo - base, hi - base)


def _empty_pinned(shape, dtype=np.float64, order="C"):
    a = np.empty(shape, dtype=dtype).view(_Pinned)
    a._pinned = (Access(f"pinned {np.dtype(dtype)}{list(np.shape(a))}"), byte_bounds(a)[0])
    return a


# --------------------------------------------------------------------------------------------
# The module's functions
# --------------------------------------------------------------------------------------------


def asarray(a, dtype=None, order=None, *, blocking=False):
    if isinstance(a, ndarray):
        return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
    if hasattr(a, "__cuda_array_interface__") or hasattr(a, "__dlpack_device__") and not isinstance(a, np.ndarray):
        raise _unsupported(f"asarray of {type(a)}")
    s, seq = _enqueue()
    if isinstance(a, np.ndarray):
        _pinned_read(a, s, seq, "asarray (from pinned host memory)")
    host = np.array(a, dtype=dtype)     # CuPy: a copy on the current stream
    if blocking:
        STATE.host_wait(s.full_clock())
    return _new(host, s, seq, "asarray")


array = asarray


def ascontiguousarray(a, dtype=None):
    if not isinstance(a, ndarray):
        raise TypeError("ascontiguousarray takes a cupy.ndarray (asarray host data first)")
    if a._a.flags.c_contiguous and (dtype is None or np.dtype(dtype) == a.dtype):
        return a
    return _op("ascontiguousarray", lambda x: np.ascontiguousarray(x, dtype=dtype), a)


def asnumpy(a, stream=None, order="C", out=None, *, blocking=True):
    if isinstance(a, ndarray):
        return a.get(stream=stream, out=out, blocking=blocking)
    return np.asarray(a)


def empty(shape, dtype=np.float64, order="C"):
    return ndarray(shape if isinstance(shape, tuple) else (shape,), dtype)


def _filled(name, value):
    def make(shape, dtype=np.float64, order="C"):
        s, seq = _enqueue()
        return _new(np.full(shape, value, dtype=dtype), s, seq, name)
    make.__name__ = name
    return make


zeros, ones = _filled("zeros", 0), _filled("ones", 1)


def full(shape, fill_value, dtype=None, order="C"):
    s, seq = _enqueue()
    return _new(np.full(shape, fill_value, dtype=dtype), s, seq, "full")


def arange(*args, dtype=None):
    s, seq = _enqueue()
    return _new(np.arange(*args, dtype=dtype), s, seq, "arange")


def broadcast_to(a, shape):
    return a._view(np.broadcast_to(a._a, shape))


def _function(name, fn):
    def f(*args, **kw):
        return _op(name, fn, *args, **kw)
    f.__name__ = name
    return f


for _name in ("cumsum", "searchsorted", "argsort", "unique", "concatenate", "bincount", "maximum", "minimum",
              "flatnonzero", "repeat", "tile", "diff", "any", "all", "where", "stack", "sort", "isin"):
    globals()[_name] = _function(_name, getattr(np, _name))


def shape(a):
    return a.shape


def __getattr__(name):
    raise _unsupported(f"cupy.{name}")


# --------------------------------------------------------------------------------------------
# cupy.cuda and cupyx
# --------------------------------------------------------------------------------------------


class _StreamMeta(type):
    @property
    def null(cls):
        return STATE.null


class _CupyStream(Stream, metaclass=_StreamMeta):
    pass


def _external_stream(ptr, device_id=-1):
    return _CupyStream(ptr=ptr)          # a foreign stream: CUDA treats it as blocking unless made otherwise


class Device:
    def __init__(self, device=None):
        self.id = 0 if device is None else int(device)
        if self.id != 0:
            raise _unsupported(f"device {self.id} (the stand-in has one)")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def synchronize(self):
        clock = {}
        for s in list(STATE.streams):
            clock[s.id] = s.seq
        STATE.host_wait(clock)

    def use(self):
        pass


class RawModule:
    def __init__(self, code=None, *, path=None, options=(), backend="nvrtc", name_expressions=None, **kw):
        if code is None:
            raise _unsupported("RawModule(path=...)")
        self.code, self.options = code, tuple(options)

    def get_function(self, name):
        if name not in emulators.KERNELS:
            raise _unsupported(f"the kernel {name!r} (no emulator in tests/gpu_standin/emulators.py)")
        if f'extern "C" __global__ void {name}(' not in self.code and f"void {name[:-4]}_##SUFFIX(" not in self.code:
            raise AttributeError(f"{name} is not in this module's source")
        return RawKernel(name, *emulators.KERNELS[name])


class RawKernel:
    def __init__(self, name, params, emulate, spans=None):
        self.name, self.params, self.emulate, self.spans = name, params, emulate, spans

    def __call__(self, grid, block, args, *, shared_mem=0, stream=None):
        if not (isinstance(grid, tuple) and isinstance(block, tuple)) or not 1 <= len(grid) <= 3:
            raise TypeError(f"{self.name}: grid and block are tuples")
        if builtins.any(int(g) < 1 or int(g) >= 1 << 31 for g in grid) or np.prod(block) > 1024 or np.prod(block) < 1:
            raise ValueError(f"{self.name}: invalid launch configuration grid={grid} block={block}")
        if len(args) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} arguments, got {len(args)}")
        s, seq = _enqueue(stream)
        host = []
        # element ranges a kernel reads of a pointer argument, where it reads less than the whole array
        spans = self.spans([a._a if isinstance(a, ndarray) else a for a in args]) if self.spans else {}
        for i, (arg, (kind, dtype)) in enumerate(zip(args, self.params)):
            where = f"{self.name} argument {i}"
            if kind == "s":
                if not isinstance(arg, np.generic) or arg.dtype != dtype:
                    raise TypeError(f"{where}: a numpy {dtype} scalar expected (the C parameter's type), got "
                                    f"{type(arg).__name__}")
                host.append(arg)
                continue
            if not isinstance(arg, ndarray):
                raise TypeError(f"{where}: a device pointer ({dtype}*) expected, got {type(arg).__name__}")
            if arg.dtype != dtype:
                raise TypeError(f"{where}: {dtype}* expected, got an array of {arg.dtype}")
            if not arg._a.flags.c_contiguous:
                raise ValueError(f"{where}: not contiguous (the kernel indexes it flat)")
            if kind in ("in", "inout"):
                if i in spans:
                    lo, hi = _span(arg)
                    first, last = spans[i]
                    STATE.read(arg._mem.access, s, seq, self.name, lo + first * arg.itemsize,
                               lo + last * arg.itemsize)
                else:
                    _rd(arg, s, seq, self.name)
            host.append(arg._a)
        for arg, (kind, _) in zip(args, self.params):
            if kind in ("out", "inout"):
                _wr(arg, s, seq, self.name)
        STATE.stats.launches[self.name] = STATE.stats.launches.get(self.name, 0) + 1
        self.emulate(*host)


def _get_device_count():
    return 1


# cupy._core's accelerator switches (CuPy >= 11 on CUDA starts with ["cub"]; STATE.reset restores that)
_core = types.ModuleType("cupy._core")
_core.set_reduction_accelerators = lambda accelerators: setattr(STATE, "reduction_accelerators", list(accelerators))
_core.get_reduction_accelerators = lambda: list(STATE.reduction_accelerators)

cuda = types.ModuleType("cupy.cuda")
cuda.Stream = _CupyStream
cuda.ExternalStream = _external_stream
cuda.Event = Event
cuda.Device = Device
cuda.get_current_stream = lambda: STATE.current()
cuda.runtime = types.SimpleNamespace(getDeviceCount=_get_device_count, deviceSynchronize=lambda: Device().synchronize())
cuda.MemoryPointer = MemoryPointer
cuda.set_allocator = lambda allocator=None: None
cuda.MemoryAsyncPool = lambda *a, **k: types.SimpleNamespace(malloc=None)


def _cuda_getattr(name):
    raise _unsupported(f"cupy.cuda.{name}")


cuda.__getattr__ = _cuda_getattr


def _scatter_min(a, slices, value):
    s, seq = _enqueue()
    for x in _arrays_in([a, slices, value], []):
        _rd(x, s, seq, "cupyx.scatter_min")
    _wr(a, s, seq, "cupyx.scatter_min")
    np.minimum.at(a._a, _host_arg(slices, "scatter_min"), _host_arg(value, "scatter_min"))


cupyx = types.ModuleType("cupyx")
cupyx.empty_pinned = _empty_pinned
cupyx.scatter_min = _scatter_min
cupyx.__getattr__ = lambda name: (_ for _ in ()).throw(_unsupported(f"cupyx.{name}"))
