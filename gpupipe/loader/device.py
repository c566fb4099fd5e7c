"""Batches into torch tensors with no copy at the hand-off (DESIGN.md, "Loader"; issue 6, part 6).

CPU: `torch.from_numpy` on the array itself (a memmap view included): the tensor IS that memory.

GPU, per array:  host blocks --(one host copy)--> pinned staging buffer --(async H2D on a side
stream)--> CuPy array [--(widen uint16/32 → int64 on the GPU: 2 bytes a token cross the bus,
not 8)--> CuPy array] --torch.from_dlpack--> tensor over the same device memory.
The staging copy is the assembly step: the blocks of a batch (memmap views) are gathered
straight into the pinned buffer; page-locked memory is what lets the H2D copy run as DMA,
asynchronously.

Stream safety:
- Hand-off: `torch.from_dlpack` passes torch's current stream to CuPy's
  `__dlpack__(stream=...)`, and CuPy then records an event on ITS current stream and makes
  torch's stream wait on it. We call from_dlpack inside `with side_stream:`, so kernels torch
  queues afterwards see the copied data, without the host blocking.
- Reuse: device memory CuPy's pool hands out on the side stream may have been freed (the
  tensor dropped) while torch's kernels reading it were still queued. So each call first makes
  the side stream wait for all work queued on torch's stream so far (an event, no host sync).
  To keep the copy overlapped with compute, call to_device for batch k+1 before queuing step k.
- Staging: a pinned buffer is refilled only once the copy out of it has finished (its event);
  two per (shape, dtype) alternate, so the host rarely waits.

Imports only numpy at module level; torch and CuPy load on first use, and nothing from gpupipe
is imported, so this file also loads by path on a GPU box that lacks gpupipe's dependencies.
"""
from __future__ import annotations

import warnings
from collections import deque

import numpy as np

_SLOTS = 2        # pinned buffers per (shape, dtype)
_MAX_SHAPES = 16  # distinct (shape, dtype) staging rings kept per device


def to_device(batch, device="cuda", stream=None, *, widen: bool = False):
    """Move a batch into torch on `device` with no copy at the hand-off.

    batch: an ndarray (e.g. a memmap slice of consecutive blocks), a CPU torch tensor, a list
    of 1-D blocks (stacked into one array), or a dict of those → the same structure of tensors.
    widen: unsigned token ids (uint16/uint32) become int64 — on the GPU after the copy; on the
    CPU it is a copy, so leave it off for the zero-copy path.
    stream (GPU): a cupy.cuda.Stream, a torch.cuda.Stream, a raw stream pointer, or None for a
    per-device side stream.
    """
    if isinstance(batch, dict):
        return {k: to_device(v, device, stream, widen=widen) for k, v in batch.items()}
    if str(device).split(":")[0] == "cpu":
        return _to_cpu(batch, widen)
    return to_cuda_pair(batch, device, stream, widen=widen)[0]


# -- CPU ------------------------------------------------------------------------------------


def _is_tensor(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "is_pinned")


def _import_torch():
    """torch, or a clear error: it is not a base dependency of gpupipe (only the loader uses it)."""
    try:
        import torch
    except ImportError as e:
        raise ImportError(f"gpupipe.loader.to_device needs torch, which the base install leaves out: pip install "
                          f"'gpupipe[torch]' (or install the torch build for your CUDA or CPU first) ({e})") from None
    return torch


def _to_cpu(x, widen: bool):
    torch = _import_torch()

    if _is_tensor(x):
        return x.to(torch.int64) if widen and x.dtype in (torch.uint16, torch.uint32) else x
    a = np.stack(x) if isinstance(x, (list, tuple)) else x  # separate blocks: stacking is a copy
    if widen and a.dtype.kind == "u":
        a = a.astype(np.int64)
    if not a.flags.writeable:  # e.g. a memmap opened "r": torch shares it all the same, but warns
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(a)
    return torch.from_numpy(a)


# -- GPU ------------------------------------------------------------------------------------


class _Slot:
    """A pinned host buffer and the event that marks the end of the last copy out of it."""

    __slots__ = ("host", "event")

    def __init__(self, host):
        self.host, self.event = host, None

    def wait(self):
        if self.event is not None:
            self.event.synchronize()


class _DeviceState:
    """Per device: the side stream, pinned staging rings, host memory held until copied."""

    _by_device: dict[int, _DeviceState] = {}

    def __init__(self, cupy):
        self.cupy = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.rings: dict[tuple, deque] = {}
        self.held: deque = deque()  # (pinned tensor, event): kept alive until its copy is done
        self._streams: dict[int, object] = {}

    @classmethod
    def get(cls, index: int, cupy) -> _DeviceState:
        state = cls._by_device.get(index)
        if state is None:
            state = cls._by_device[index] = cls(cupy)
        return state

    def external(self, ptr: int):
        """A CuPy handle on a stream somebody else owns (torch's); 0 = the legacy default stream."""
        s = self._streams.get(ptr)
        if s is None:
            s = self._streams[ptr] = (self.cupy.cuda.Stream.null if ptr == 0
                                      else self.cupy.cuda.ExternalStream(ptr))
        return s

    def staged(self, x):
        """A pinned host array holding x, and the slot to mark once the copy is queued (None when
        x is already a pinned contiguous torch tensor, used in place)."""
        if _is_tensor(x) and x.is_pinned() and x.is_contiguous():
            return x.numpy(), None
        if _is_tensor(x):
            x = x.numpy()
        blocks = isinstance(x, (list, tuple))
        shape = (len(x),) + np.shape(x[0]) if blocks else x.shape
        dtype = np.asarray(x[0]).dtype if blocks else x.dtype
        slot = self._slot(shape, dtype)
        if blocks:
            np.stack(x, out=slot.host)  # assemble the batch straight into pinned memory
        else:
            np.copyto(slot.host, x, casting="no")
        return slot.host, slot

    def _slot(self, shape, dtype) -> _Slot:
        import cupyx

        key = (tuple(shape), np.dtype(dtype).str)
        ring = self.rings.pop(key, None)
        if ring is None:
            ring = deque()
            if len(self.rings) >= _MAX_SHAPES:  # forget the least recently used shape
                for old in self.rings.pop(next(iter(self.rings))):
                    old.wait()
        self.rings[key] = ring  # (re)inserted last: dict order = recency
        if len(ring) < _SLOTS:
            slot = _Slot(cupyx.empty_pinned(shape, dtype=dtype))
        else:
            slot = ring.popleft()
            slot.wait()
        ring.append(slot)
        return slot

    def hold(self, tensor, event) -> None:
        self.held.append((tensor, event))
        while self.held and self.held[0][1].done:
            self.held.popleft()


def _cupy_stream(stream, state: _DeviceState):
    if stream is None:
        return state.stream
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
        return state.external(stream.cuda_stream)
    if isinstance(stream, int):
        return state.external(stream)
    return stream  # a cupy stream


def to_cuda_pair(x, device="cuda", stream=None, *, widen: bool = False):
    """One array (ndarray, CPU tensor or list of blocks) → (torch tensor, the CuPy array it
    wraps). `tensor.data_ptr() == cupy_array.data.ptr`: that is the no-copy check."""
    import cupy
    torch = _import_torch()

    dev = torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"to_cuda_pair needs a CUDA device, got {device!r}")
    index = torch.cuda.current_device() if dev.index is None else dev.index
    with cupy.cuda.Device(index):
        state = _DeviceState.get(index, cupy)
        side = _cupy_stream(stream, state)
        consumer = state.external(torch.cuda.current_stream(index).cuda_stream)
        if side is not consumer:
            side.wait_event(consumer.record())  # memory torch may still read is not reused early
        host, slot = state.staged(x)
        with side:
            arr = cupy.empty(host.shape, dtype=host.dtype)
            arr.set(host, stream=side)  # async: host is page-locked
            copied = side.record()
            if slot is None:
                state.hold(x, copied)
            else:
                slot.event = copied
            if widen and arr.dtype.kind == "u":
                arr = arr.astype(cupy.int64)
            # inside `with side`: CuPy's __dlpack__ makes torch's current stream wait for `side`
            tensor = torch.from_dlpack(arr)
    return tensor, arr
