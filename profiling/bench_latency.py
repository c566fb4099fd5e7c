"""Latencies that tests leave alone (a test asserts behaviour, a benchmark asserts speed): each row is measured
here, printed beside its target, and the ratio says how far inside it the machine is now.

  synth 400 docs      `gpupipe synth --docs 400` (make demo's crawl) against 5 s
  time_limit stop     a page looping for ever under `extract_timeout` 0.3 s: seconds until it is stopped, against
                      the limit + 1 s (the watchdog's wake-up, the thread switch)
  time_limit wake-up  the same with 0.1 s while the watchdog sleeps for an earlier, longer limit (10 s): it must be
                      woken, not wait out its sleep

Usage:  python profiling/bench_latency.py [--repeat 3]      (the median of the repeats is shown)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gpupipe.extract.timeout import PageTimeout, time_limit
from gpupipe.synth import write_synthetic_crawl


def _synth() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        write_synthetic_crawl(Path(tmp) / "crawl.warc.gz", docs=400, seed=7)
        return time.perf_counter() - t0


def _stopped_after(limit: float) -> float:
    t0 = time.perf_counter()
    try:
        with time_limit(limit):
            while True:
                pass
    except PageTimeout:
        return time.perf_counter() - t0
    raise AssertionError("unreachable")


def _stop() -> float:
    for _ in range(200):
        with time_limit(0.3):
            pass
    return _stopped_after(0.3)


def _wake_up() -> float:
    for _ in range(200):
        with time_limit(10):
            pass
    time.sleep(0.5)   # the watchdog now sleeps about 10 s
    return _stopped_after(0.1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = [("synth 400 docs", _synth, 5.0), ("time_limit stop", _stop, 1.3), ("time_limit wake-up", _wake_up, 1.1)]
    print(f"{'what':<20} {'median s':>9} {'target s':>9} {'ratio':>6}")
    failed = 0
    for name, fn, target in rows:
        s = statistics.median(fn() for _ in range(args.repeat))
        failed += s > target
        print(f"{name:<20} {s:>9.3f} {target:>9.2f} {s / target:>6.2f}{'  OVER' if s > target else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
