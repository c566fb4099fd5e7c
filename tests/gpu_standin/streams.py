"""CUDA stream ordering, as the stand-in checks it: vector clocks over streams.

Every operation enqueued on a stream gets the stream's next sequence number. A stream's `clock` says, for every
stream, the last operation known to be finished before the stream's next one starts; the host has a clock too
(what a synchronize has shown finished). An operation may read a buffer whose last write is ordered before it by
one of CUDA's rules (the same stream; an event waited on; a host synchronize before it was enqueued; the legacy
default stream's implicit sync with blocking streams), and may write one whose last write and reads are ordered
so. Anything else is a race on a real device, and raises `HazardError` here.

The rules are the CUDA runtime's ("Stream synchronization behavior"): an action on the legacy default stream first
waits for all blocking streams and then every blocking stream waits for it; `Stream(non_blocking=True)` does
neither. CuPy's own: work runs on the current stream (`with stream:`, else the legacy default `Stream.null`);
`ndarray.get()`/`cupy.asnumpy` copy on the current (or given) stream and wait for it; `ndarray.set(a, stream)`
copies on that stream; `stream.record()` returns an Event; `stream.wait_event(e)` orders the stream after it.
"""

from __future__ import annotations

import itertools
import weakref


class HazardError(AssertionError):
    """Two accesses to one buffer on different streams with nothing ordering them."""


class Stats:
    """What a run did: host synchronisations, kernel launches, device bytes (live and peak)."""

    def __init__(self):
        self.syncs = 0
        self.launches: dict[str, int] = {}
        self.live_bytes = 0
        self.peak_bytes = 0
        self.allocated_bytes = 0

    def reset_peak(self):
        self.peak_bytes = self.live_bytes


def _merge(into: dict, other: dict) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


class Stream:
    """cupy.cuda.Stream: `null=True` is the legacy default stream; non_blocking streams skip its implicit sync."""

    _ids = itertools.count(1)

    def __init__(self, null: bool = False, non_blocking: bool = False, ptr: int | None = None):
        self.id = 0 if null else next(Stream._ids)
        self.null = null
        self.non_blocking = non_blocking
        self.seq = 0
        self.clock: dict[int, int] = {}
        self.ptr = 0 if null else (ptr if ptr is not None else 0x5000 + self.id)
        STATE.streams.add(self)

    def __repr__(self):
        kind = "legacy default" if self.null else ("non-blocking" if self.non_blocking else "blocking")
        return f"<stand-in {kind} stream {self.id}>"

    def full_clock(self) -> dict:
        c = dict(self.clock)
        c[self.id] = self.seq
        return c

    def __enter__(self):
        STATE.stack.append(self)
        return self

    def __exit__(self, *exc):
        STATE.stack.pop()

    def use(self):
        STATE.stack[-1] = self
        return self

    def synchronize(self):
        STATE.host_wait(self.full_clock())

    def record(self, event=None):
        event = event or Event()
        event.clock = self.full_clock()
        return event

    def wait_event(self, event):
        STATE.enqueue(self)       # cudaStreamWaitEvent is itself an action on the stream (legacy rules apply)
        _merge(self.clock, event.clock)

    @property
    def done(self) -> bool:
        return all(STATE.host.get(k, 0) >= v for k, v in self.full_clock().items())


class Event:
    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False):
        self.clock: dict[int, int] = {}

    def record(self, stream=None):
        (stream or STATE.current()).record(self)

    def synchronize(self):
        STATE.host_wait(self.clock)

    @property
    def done(self) -> bool:
        return all(STATE.host.get(k, 0) >= v for k, v in self.clock.items())


class Access:
    """The hazard state of one allocation (device buffer or pinned host buffer): the byte ranges of its writes and
    reads not yet known finished by the host, each with its (stream, seq). Ranges, not whole buffers: a batch
    copied into one part of a buffer while a kernel reads another part is no race."""

    __slots__ = ("writes", "reads", "label", "__weakref__")

    def __init__(self, label: str = "buffer"):
        self.writes: list[tuple[int, int, Stream, int]] = []
        self.reads: list[tuple[int, int, Stream, int]] = []
        self.label = label


class State:
    def __init__(self):
        self.streams = weakref.WeakSet()
        self.null = None
        self.stack: list[Stream] = []
        self.host: dict[int, int] = {}
        self.stats = Stats()

    def reset(self):
        self.reduction_accelerators = ["cub"]   # cupy._core's, as CuPy starts on CUDA
        self.streams = weakref.WeakSet()
        self.null = Stream(null=True)
        self.stack = [self.null]
        self.host = {}
        self.stats = Stats()

    def current(self) -> Stream:
        return self.stack[-1]

    def enqueue(self, s: Stream) -> int:
        """Queue one action on s: what the host has seen finished, and the legacy stream's implicit syncs."""
        _merge(s.clock, self.host)
        if s.null:
            for t in list(self.streams):
                if t is not s and not t.non_blocking:
                    _merge(s.clock, t.full_clock())
        elif not s.non_blocking:
            _merge(s.clock, self.null.full_clock())
        s.seq += 1
        return s.seq

    def host_wait(self, clock: dict) -> None:
        self.stats.syncs += 1
        _merge(self.host, clock)

    @staticmethod
    def _ordered(s: Stream, t: Stream, q: int) -> bool:
        return t is s or s.clock.get(t.id, 0) >= q

    def _prune(self, acc: Access) -> None:
        """Drop what the host has seen finished: every later action is ordered after it (enqueue merges the host)."""
        acc.writes = [r for r in acc.writes if self.host.get(r[2].id, 0) < r[3]]
        acc.reads = [r for r in acc.reads if self.host.get(r[2].id, 0) < r[3]]

    def read(self, acc: Access, s: Stream, seq: int, what: str, lo: int = 0, hi: int = 1 << 62) -> None:
        self._prune(acc)
        for w0, w1, t, q in acc.writes:
            if w0 < hi and lo < w1 and not self._ordered(s, t, q):
                raise HazardError(f"{what} reads {acc.label} bytes [{lo}, {hi}) on {s!r} (action {seq}), written "
                                  f"on {t!r} (action {q}) with nothing ordering the two (no shared stream, event "
                                  "waited on, or host sync)")
        acc.reads = [r for r in acc.reads if not (r[2] is s and lo <= r[0] and r[1] <= hi)]
        acc.reads.append((lo, hi, s, seq))

    def write(self, acc: Access, s: Stream, seq: int, what: str, lo: int = 0, hi: int = 1 << 62) -> None:
        self._prune(acc)
        for kind, records in (("written", acc.writes), ("read", acc.reads)):
            for r0, r1, t, q in records:
                if r0 < hi and lo < r1 and not self._ordered(s, t, q):
                    raise HazardError(f"{what} writes {acc.label} bytes [{lo}, {hi}) on {s!r} (action {seq}), "
                                      f"{kind} on {t!r} (action {q}) with nothing ordering the two")
        # what this write covers is ordered before it (checked above): only the new write is needed from now on
        acc.writes = [r for r in acc.writes if not (lo <= r[0] and r[1] <= hi)] + [(lo, hi, s, seq)]
        acc.reads = [r for r in acc.reads if not (lo <= r[0] and r[1] <= hi)]

    def host_writes(self, acc: Access, what: str, lo: int = 0, hi: int = 1 << 62) -> None:
        """The host writes a pinned buffer: every queued copy using those bytes must be finished (host sync)."""
        self._prune(acc)
        for r0, r1, t, q in acc.writes + acc.reads:
            if r0 < hi and lo < r1:
                raise HazardError(f"{what}: the host writes {acc.label} bytes [{lo}, {hi}) while {t!r} action {q} "
                                  "may still use them")


STATE = State()
