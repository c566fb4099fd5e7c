"""Where numba's compile seconds go: `gpupipe warmup`'s pipelines on a cold cache, per kernel and per stage.

Runs the warm-up (or one config's stations, --config) with NUMBA_CACHE_DIR pointed at an empty temporary folder, so
every kernel compiles, and listens to numba's "numba:compile" events: each compiled (function, signature) gets its
inclusive time (its callees compile inside it) and its self time (less its callees'), and LLVM's share of it, in
CPU seconds of the compiling thread (the machine may be shared).
Prints the top functions by self time, the functions compiled for more than one signature (each one a full compile),
and the per-stage table with wall and CPU seconds.

    python profiling/numba_compile_profile.py [--top 40] [--config configs/default.yaml] [--docs 300]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections import defaultdict


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--config", help="warm this config's stations only (gpupipe warmup CONFIG)")
    ap.add_argument("--stations", help="comma-separated stations of the full warm-up to keep, e.g. quality")
    ap.add_argument("--keep-cache", action="store_true", help="use numba's usual cache (warm figures)")
    args = ap.parse_args()
    if not args.keep_cache:
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="numba-cold-")
    from numba.core import event

    stack: list[list] = []  # [name, t0, children seconds, llvm seconds]
    rows: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])  # incl, self, llvm, signatures
    sigs: dict[str, list[str]] = defaultdict(list)
    llvm = [0.0, 0]  # t0, depth (the LLVM lock is re-entrant)

    class Compile(event.Listener):
        def on_start(self, ev) -> None:
            d = ev.data["dispatcher"]
            name = f"{d.py_func.__module__.rsplit('.', 1)[-1]}.{d.py_func.__qualname__}"
            stack.append([name, time.thread_time(), 0.0, 0.0])
            sigs[name].append(", ".join(str(a) for a in ev.data["args"]))

        def on_end(self, ev) -> None:
            name, t0, kids, lv = stack.pop()
            incl = time.thread_time() - t0
            r = rows[name]
            r[0] += incl if not any(s[0] == name for s in stack) else 0.0
            r[1] += incl - kids
            r[2] += lv
            r[3] += 1
            if stack:
                stack[-1][2] += incl

    class Llvm(event.Listener):
        def on_start(self, ev) -> None:
            if llvm[1] == 0:
                llvm[0] = time.thread_time()
            llvm[1] += 1

        def on_end(self, ev) -> None:
            llvm[1] -= 1
            if llvm[1] == 0 and stack:
                stack[-1][3] += time.thread_time() - llvm[0]

    event.register("numba:compile", Compile())
    event.register("numba:llvm_lock", Llvm())
    from gpupipe.warmup import warm_up

    w0, c0 = time.perf_counter(), _cpu()
    kwargs = {"config": args.config} if args.config else {}
    if args.stations:
        kwargs["stations"] = args.stations.split(",")
    stages = warm_up(docs=args.docs, **kwargs)
    wall, cpu = time.perf_counter() - w0, _cpu() - c0
    total_self = sum(r[1] for r in rows.values())
    print(f"{'function':<48} {'self':>7} {'incl':>7} {'llvm':>7} {'sigs':>4}")
    for name, r in sorted(rows.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"{name:<48} {r[1]:7.2f} {r[0]:7.2f} {r[2]:7.2f} {r[3]:4d}")
    print(f"{len(rows)} functions, {sum(r[3] for r in rows.values())} compiles, {total_self:.1f} CPU s compiling, "
          f"{sum(r[2] for r in rows.values()):.1f} of it in LLVM")
    print("\nfunctions compiled for more than one signature:")
    for name, s in sorted(sigs.items()):
        if len(s) > 1:
            print(f"  {name}:")
            for one in s:
                print(f"      ({one})")
    print(f"\n{'run':<6} {'stage':<16} {'seconds':>8} {'compile s':>9}")
    for s in stages:
        print(f"{s['run']:<6} {s['stage']:<16} {s['seconds']:8.2f} {s['compile_s']:9.2f}")
    print(f"warm-up: {wall:.1f} s wall, {cpu:.1f} s CPU (this process; numba compiles in it)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
