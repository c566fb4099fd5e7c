"""A pool task that kills its own worker process (kill -9) once, for the executor's and the retry counters' tests.
Module-level so spawned workers can import it."""

from pathlib import Path


def die_once(x, marker_dir):
    """Task 2 kills its worker process (kill -9) the first time it runs: the marker file says it did."""
    import os
    import signal

    marker = Path(marker_dir) / "died"
    if x == 2 and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x

