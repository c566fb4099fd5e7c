"""Benchmark exact-substring dedup (gpupipe/stages/dedup/substring/) on real text.

1. In memory, one group: MB/s of each step (join, suffix array, LCP, marking, ranges, final cuts, cutting) and of
   the whole, peak RSS added over the loaded corpus (bytes per text byte, against the ~10n bound), bytes removed.
2. Baseline on a subsample: a plain-Python dict of every L-byte window (the same definition, first document of each
   window kept), its MB/s and the ratio; the removed bytes of both are checked equal.
3. Through the pipeline (--stage): the real stage on a JSONL of the same documents with one group and with the text
   split into 4 and 16 groups: seconds, cross-group anchors and region bytes, and whether the outputs are identical.

Usage:  python profiling/bench_substring.py CORPUS.jsonl[.gz] [--docs N] [--min-length 200] [--baseline-mb 2]
                                            [--stage]
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from gpupipe.stages.dedup import substring as ds
from gpupipe.stages.dedup.substring import kernels as sk
from gpupipe.stages.dedup.substring.text import buffers


def load_texts(path: str, docs: int | None) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    out = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if docs is not None and len(out) >= docs:
                break
            t = json.loads(line).get("text")
            if t:
                out.append(t)
    return out


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def reset_peak_rss() -> None:
    """Linux >= 4.0: writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def timed(steps: dict, name: str, fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    steps[name] = time.perf_counter() - t0
    return out


def stage_logic(arr: pa.Array, L: int) -> tuple[dict, int, int]:
    """duplicate_ranges + final_cuts + apply_cuts, step by step (the same calls, timed one by one)."""
    steps: dict[str, float] = {}
    data, offsets = buffers(arr)
    joined, seg_starts = timed(steps, "join", sk._join, data, offsets)
    sa = timed(steps, "suffix array", ds.suffix_array, joined)
    plcp = timed(steps, "lcp (kasai)", sk._permuted_lcp, joined, sa)
    mark = timed(steps, "mark repeats", sk._mark_duplicates, sa, plcp, seg_starts, seg_starts[:-1], seg_starts[1:],
                 L, False)
    del sa, plcp
    t0 = time.perf_counter()
    empty = np.empty(0, np.int64)
    k = sk._cover(mark, L, False, empty, empty)
    s, e = np.empty(k, np.int64), np.empty(k, np.int64)
    sk._cover(mark, L, True, s, e)
    seg = np.searchsorted(seg_starts, s, side="right") - 1
    steps["ranges"] = time.perf_counter() - t0
    rows, cs, ce = timed(steps, "final cuts", ds.final_cuts, arr, seg, s - seg_starts[seg], e - seg_starts[seg])
    timed(steps, "cut text", ds.apply_cuts, arr, rows, cs, ce)
    return steps, int((ce - cs).sum()), int(len(np.unique(rows)))


def python_windows(texts: list[str], L: int) -> int:
    """Baseline: a dict of every L-byte window → the first document holding it; bytes covered by later copies."""
    first: dict[bytes, int] = {}
    removed = 0
    for d, t in enumerate(texts):
        b = t.encode()
        cover = np.zeros(len(b), dtype=bool)
        for p in range(len(b) - L + 1):
            if first.setdefault(b[p:p + L], d) != d:
                cover[p:p + L] = True
        removed += int(cover.sum())
    return removed


def removed_bytes_raw(texts: list[str], L: int) -> int:
    seg, s, e = ds.duplicate_ranges(pa.array(texts, type=pa.large_string()), L, False)
    return int((e - s).sum())


def run_stage(texts: list[str], L: int, group_bytes: int, tmp: Path, name: str) -> dict:
    import yaml

    from gpupipe.cli import main
    from gpupipe.stages import STAGES

    STAGES.setdefault("substring_dedup", ds.SubstringDedup)
    src = tmp / "in.jsonl"
    if not src.exists():
        with open(src, "w", encoding="utf-8") as f:
            for i, t in enumerate(texts):
                f.write(json.dumps({"id": f"d{i}", "text": t}, ensure_ascii=False) + "\n")
    cfg = {"input": {"path": str(src)}, "output": str(tmp / name), "device": "cpu",
           "executor": {"kind": "local", "partition_docs": 2000},
           "stages": [{"substring_dedup": {"min_length": L, "group_bytes": group_bytes}}]}
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    t0 = time.perf_counter()
    assert main(["run", str(tmp / f"{name}.yaml")]) == 0
    wall = time.perf_counter() - t0
    stats = json.loads((tmp / name / "stats.json").read_text())["stages"][1]
    import pandas as pd

    from gpupipe.io.parts import part_paths
    out = pd.concat([pd.read_parquet(p, columns=["id", "text"])
                     for p in part_paths(tmp / name / "stages" / "01-substring_dedup")])
    return {"stats": stats, "wall": wall, "texts": list(zip(out["id"], out["text"]))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus")
    ap.add_argument("--docs", type=int, default=None)
    ap.add_argument("--min-length", type=int, default=200)
    ap.add_argument("--baseline-mb", type=float, default=2.0, help="subsample size for the Python baseline")
    ap.add_argument("--stage", action="store_true", help="also run the stage through the pipeline (3 group sizes)")
    args = ap.parse_args()
    L = args.min_length

    texts = load_texts(args.corpus, args.docs)
    arr = pa.array(texts, type=pa.large_string())
    n_bytes = int(arr.nbytes - 8 * (len(arr) + 1))
    print(f"corpus: {args.corpus}: {len(texts)} docs, {n_bytes / 1e6:.1f} MB of UTF-8 text, min_length {L}")

    ds.substring_dedup(texts[:50], ds.SubstringDedupConfig(min_length=L))   # compile the numba kernels
    ds.winnow_anchors(arr.slice(0, 50), L)
    reset_peak_rss()
    base_rss = rss_mb()
    t0 = time.perf_counter()
    steps, cut, modified = stage_logic(arr, L)
    total = time.perf_counter() - t0
    added = peak_rss_mb() - base_rss
    print(f"\nstage logic, one group ({n_bytes / 1e6:.1f} MB):")
    for name, sec in steps.items():
        print(f"  {name:14s} {sec:8.3f} s  {n_bytes / sec / 1e6 if sec else float('inf'):9.1f} MB/s")
    print(f"  {'total':14s} {total:8.3f} s  {n_bytes / total / 1e6:9.1f} MB/s")
    t0 = time.perf_counter()
    ds.winnow_anchors(arr, L)
    wsec = time.perf_counter() - t0
    print(f"  (+ winnowing anchors for the cross-group pass: {wsec:.3f} s, {n_bytes / wsec / 1e6:.1f} MB/s)")
    print(f"peak RSS added: {added:.0f} MiB = {added * 2**20 / n_bytes:.1f} bytes per text byte "
          f"(bound: text + SA 4 + LCP 4 + marks 1 = ~10, plus the Arrow copies)")
    print(f"removed: {cut} bytes ({100 * cut / n_bytes:.2f}% of the text) from {modified} documents")

    sub, size = [], 0
    for t in texts:
        if size >= args.baseline_mb * 1e6:
            break
        sub.append(t)
        size += len(t.encode())
    t0 = time.perf_counter()
    base_removed = python_windows(sub, L)
    py_sec = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = removed_bytes_raw(sub, L)
    our_sec = time.perf_counter() - t0
    print(f"\nbaseline on {len(sub)} docs / {size / 1e6:.1f} MB: Python dict of every {L}-byte window "
          f"{py_sec:.2f} s = {size / py_sec / 1e6:.2f} MB/s; suffix array {our_sec:.3f} s = "
          f"{size / our_sec / 1e6:.1f} MB/s; ratio {py_sec / our_sec:.0f}x; "
          f"removed bytes equal: {base_removed == ours} ({ours})")
    print(f"baseline memory: one dict entry per distinct window, ~{L + 100} bytes per text byte "
          f"(a {L}-byte key each), versus ~10 for the suffix array")

    if args.stage:
        print("\nthrough the pipeline (partitions of 2000 docs):")
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            ref = None
            for label, gb in (("1 group", 2**40), ("~4 groups", n_bytes // 4 + 1), ("~16 groups", n_bytes // 16 + 1)):
                r = run_stage(texts, L, gb, tmp, label.replace(" ", "").replace("~", ""))
                x = r["stats"]["extra"]
                same = ref is None or r["texts"] == ref
                ref = ref or r["texts"]
                print(f"  {label:10s} groups {x.get('groups')}: stage {r['stats']['seconds']:.2f} s "
                      f"({n_bytes / r['stats']['seconds'] / 1e6:.1f} MB/s), cut {x.get('bytes_cut')} bytes, "
                      f"dropped {x.get('docs_dropped')}, cross-group anchors {x.get('cross_group_anchors', 0)}, "
                      f"region bytes {x.get('cross_region_bytes', 0)} "
                      f"({100 * x.get('cross_region_bytes', 0) / n_bytes:.1f}% of text), "
                      f"peak worker RSS {x.get('peak_rss_mb_worker')} MiB, output identical: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
