"""A per-page time bound that really stops the page: a watchdog thread raises `PageTimeout` inside the thread that
runs the extractor (CPython's PyThreadState_SetAsyncExc), so the extractor unwinds and the thread goes on with the
next page. Nothing is left running.

Why not the alternatives: `signal.setitimer` works only in the main thread, and Dask runs tasks in worker threads;
a child process per page costs milliseconds of fork/pickle per page (more than the fast extractor itself); a thread
that is abandoned keeps burning the CPU. The asynchronous exception is checked between bytecodes, so pure-Python
work (trafilatura's loops, our block walk) stops within microseconds of the deadline; a single long C call (lxml
parsing a giant page) finishes first, which `max_html_bytes` bounds. `PageTimeout` derives from BaseException so
that the extractors' own `except Exception` handlers (trafilatura has several) do not swallow it. Where it is
swallowed anyway (a bare `except:`, or delivered inside a garbage-collector callback, where Python prints it as
"Exception ignored" and goes on), the watchdog raises it again every REFIRE_S seconds until the page ends.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from contextlib import contextmanager

REFIRE_S = 0.25   # a page still running this long after its PageTimeout gets another one


class PageTimeout(BaseException):
    """A page ran past its time limit."""


def _set_async_exc(tid: int, exc) -> None:
    """Raise `exc` asynchronously in thread `tid`; exc None (a NULL pointer) clears a pending one."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), None if exc is None else ctypes.py_object(exc))


class _Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active: dict[int, tuple[int, float]] = {}   # token -> (thread id, deadline)
        self._fired: dict[int, float] = {}   # token -> when to raise again if its page is still running
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None
        self._wake = 0.0      # when the watchdog thread wakes next (monotonic); 0: not known, notify
        self._idle = 1.0      # its wait when nothing is pending: the last limit started

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():   # also after a fork
            self._wake = float("inf")   # the new thread computes its first wake-up from what is active
            self._thread = threading.Thread(target=self._run, name="gpupipe-extract-watchdog", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for token, (tid, deadline) in list(self._active.items()):
                    if deadline <= now and self._fired.get(token, 0.0) <= now:
                        self._fired[token] = now + REFIRE_S
                        _set_async_exc(tid, PageTimeout)
                pending = [self._fired.get(t, d) for t, (_, d) in self._active.items()]
                # idle: wake after the last limit used, so that a page started meanwhile with that limit (the usual
                # case: one stage, one limit) needs no notify; see start()
                wait = max(0.0, min(pending) - now) if pending else self._idle
                self._wake = now + wait
                self._cond.wait(timeout=wait)

    def start(self, seconds: float) -> int:
        with self._cond:
            self._ensure_thread()
            token = next(self._tokens)
            deadline = time.monotonic() + seconds
            self._active[token] = (threading.get_ident(), deadline)
            self._idle = seconds
            # a wake-up already due before this deadline will see it: no notify, no thread switch per page
            if deadline < self._wake:
                self._cond.notify()
            return token

    def stop(self, token: int) -> bool:
        """Deregister; True when the watchdog fired (any exception it left pending is cleared)."""
        with self._cond:
            tid, _ = self._active.pop(token)
            fired = self._fired.pop(token, None) is not None
            if fired:
                _set_async_exc(tid, None)   # NULL clears an exception not yet delivered
            return fired


_WATCHDOG = _Watchdog()


@contextmanager
def time_limit(seconds: float | None):
    """Raise PageTimeout in this thread if the block runs longer than `seconds` (None or <= 0: no limit)."""
    if not seconds or seconds <= 0:
        yield
        return
    token = _WATCHDOG.start(seconds)
    fired = False
    try:
        yield
    except PageTimeout:
        fired = True
    finally:
        fired = _WATCHDOG.stop(token) or fired
    if fired:
        raise PageTimeout(f"page took more than {seconds:g} s")
