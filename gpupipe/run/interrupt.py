"""Ctrl-C and SIGTERM stop a run, never silently.

Python raises KeyboardInterrupt wherever the main thread happens to be, and a library's bare `except:` (HTML
parsers and their fallbacks have them) can swallow it: the run would go on and exit 0. So the request is also
remembered, and the executors check it after every task and the pipeline after every stage. Signals belong to the
process, so this is process state by nature; `stop_on_signals` sets it up and clears it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Iterator

_received: list[int] = []   # the signals received while stop_on_signals is active


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def check() -> None:
    """Raise Interrupted if a stop was requested (even if the first KeyboardInterrupt was swallowed)."""
    if _received:
        raise Interrupted(_received[0])


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted (a KeyboardInterrupt) now and at every later check()."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread
        yield
        return

    def handler(signum, frame):
        _received.append(signum)
        raise Interrupted(signum)

    def unraisable(info):
        # Raised inside a C callback (numba's compiler cache hook, say), the interrupt cannot propagate and Python
        # would print it as "Exception ignored ... Traceback"; it is not lost (check() raises it again): stay quiet.
        if not (_received and issubclass(info.exc_type, KeyboardInterrupt)):
            old_hook(info)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    old_hook, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        sys.unraisablehook = old_hook
        _received.clear()
