"""Do two run directories hold the same outputs, timings and locations aside? (issue #29's refactor check)

Usage:  python profiling/same_outputs.py RUN_A RUN_B [--show-ignored] [--max-rows 40]

Exit 0: same; 1: a difference (a table of them is printed); 2: RUN_A or RUN_B is not a run directory.

What is compared, by the file's path relative to the run directory (the union of both runs' files; a file in only
one run is a difference):
  shards/**                    byte for byte (token shards, manifest.json, tokenizer.json, megatron/data.bin/.idx)
  **/*.parquet                 the table: schema (names, types, schema metadata such as pandas') and every value,
                               in order (NaN equals NaN); a part file whose bytes differ but whose table is equal
                               is not a difference (noted only)
  stats.json, stages/*/stats.json
                               parsed JSON, the TIMING fields below dropped wherever they sit (also inside
                               "extra" and "metrics"), the run directory's path replaced by <RUN>; "key" is
                               compared as a note only (see LOCATION_FIELDS)
  audit/index.json             parsed JSON; "key" a note only
  file_hashes.json (any depth) parsed JSON; "identity" (size, mtime, ctime, inode of an input) a note only
  metrics.prom                 its sample lines, minus the timing metrics (METRICS_TIMING), run="<name>" -> <RUN>
  anything else (config.resolved.yaml, audit/*.jsonl, rejects/*.jsonl, clusters_sample.jsonl,
  decontam_report.json, stages/*/tokenizer.json, ...)
                               byte for byte once the run directory's path is replaced by <RUN>
Not compared (IGNORED_FILES): logs/ (timestamps), report.html (timings, run directory), run.lock (empty lock).

Timing fields (TIMING_*): wall times, throughputs, latency quantiles, compile times and memory peaks, none of which a
behaviour-preserving change keeps equal. They are dropped whether one run or both have them (numba_compile_s is
only there when a kernel compiled in that run). Every field name dropped is listed with --show-ignored.

Location fields (LOCATION_FIELDS): values that name where or when inputs and outputs live, not what they hold:
  key       a stage's resume key: sha256 of [input fingerprint = absolute path + size/mtime/ctime/inode of each input
            file, read partitioning, stage items, seed, hashes of referenced files]; it changes when the same inputs
            are copied or re-created. A difference is printed as a note (the resume cache of one run would not
            be reused by the other), not a failure.
  identity  file_hashes.json's [size, mtime_ns, ctime_ns, inode] of a referenced file (its sha256 is compared).
The run directory's absolute path (curated_dir, shards_dir, config.resolved.yaml's output, ...) is replaced by
<RUN> in both runs before comparing, so two runs in differently named directories compare equal.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

# -- what is timing, location or not compared ------------------------------------------------------------------------

# Field names (at any depth of a stats file) that are timings or memory peaks.
TIMING_FIELDS = {
    "seconds",                # stage / run wall time
    "docs_per_second",        # throughput
    "numba_compile_s",        # kernel compile time (present only when a kernel compiled in this run)
    "extract_ms",             # extract: summed per-page extraction time
    "peak_extract_page_ms",   # extract: slowest page
    "cpu_s",                  # CPU seconds of a stage (driver and workers)
}
TIMING_PATTERNS = [
    re.compile(r"^partition_seconds_"),   # partition_seconds_p50 / _p99: per-task latency quantiles
    re.compile(r"^peak_rss_"),            # peak_rss_mb_driver / _worker: memory peaks
    re.compile(r"^phase_.+_s$"),          # phase_sign_s, phase_edges_s, ...: per-phase wall times of a station
    re.compile(r"_seconds$"),             # any other wall time spelled out
]
# Fields compared as notes only (a difference is printed, exit status unaffected); see the docstring.
LOCATION_FIELDS = {"key", "identity", "workers"}   # workers: how many processes ran it, not what it made
# config.resolved.yaml lines that say how a run was executed, not what it computes (shown as notes)
EXECUTION_LINE = re.compile(r"^\s+workers: ")
# metrics.prom metrics that are timings.
METRICS_TIMING = re.compile(r"^gpupipe_\w*(seconds|per_second)\w*$")
# Files not compared at all.
IGNORED_FILES = ["logs/*", "report.html", "run.lock"]


def is_timing(name: str) -> bool:
    return name in TIMING_FIELDS or any(p.search(name) for p in TIMING_PATTERNS)


# -- helpers ----------------------------------------------------------------------------------------------------------

class Report:
    def __init__(self) -> None:
        self.diffs: list[tuple[str, str, str, str]] = []   # (file, what, A, B)
        self.notes: list[tuple[str, str, str, str]] = []
        self.ignored_fields: set[str] = set()
        self.compared = 0

    def diff(self, file: str, what: str, a: Any = "", b: Any = "") -> None:
        if isinstance(a, str) and isinstance(b, str) and a != b:
            # two long strings: show them from a little before where they part
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            if first > 20:
                what += f" (strings part at char {first})"
                a, b = "..." + a[first - 15:], "..." + b[first - 15:]
        self.diffs.append((file, what, short(a), short(b)))

    def note(self, file: str, what: str, a: Any = "", b: Any = "") -> None:
        self.notes.append((file, what, short(a), short(b)))


def short(v: Any, n: int = 60) -> str:
    s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
    s = s.replace("\n", "\\n")
    return s if len(s) <= n else s[: n - 3] + "..."


def run_paths(root: Path) -> list[str]:
    """The spellings of a run directory's path that may appear in its files (longest first)."""
    forms = {str(root), str(root.absolute()), os.path.realpath(root)}
    return sorted((f.rstrip("/") for f in forms if f not in ("", ".")), key=len, reverse=True)


def relocate(obj: Any, paths: list[str]) -> Any:
    if isinstance(obj, str):
        for p in paths:
            obj = obj.replace(p, "<RUN>")
        return obj
    if isinstance(obj, dict):
        return {k: relocate(v, paths) for k, v in obj.items()}
    if isinstance(obj, list):
        return [relocate(v, paths) for v in obj]
    return obj


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def walk_json(rel: str, a: Any, b: Any, where: str, rep: Report, strip_timing: bool, notes_only: set[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{where}.{k}" if where else str(k)
            if strip_timing and is_timing(str(k)):
                rep.ignored_fields.add(str(k))
                continue
            if k not in b:
                rep.diff(rel, f"{sub}: only in A", a[k], "(absent)")
            elif k not in a:
                rep.diff(rel, f"{sub}: only in B", "(absent)", b[k])
            elif k in notes_only:
                if not same_value(a[k], b[k]):
                    rep.note(rel, f"{sub} (location field, not compared)", a[k], b[k])
            else:
                walk_json(rel, a[k], b[k], sub, rep, strip_timing, notes_only)
    elif isinstance(a, list) and isinstance(b, list):
        # a list of stage dicts: name the stage rather than the index
        if len(a) != len(b):
            rep.diff(rel, f"{where}: list length", len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            label = x.get("name") if isinstance(x, dict) and isinstance(x.get("name"), str) else None
            walk_json(rel, x, y, f"{where}[{i}{':' + label if label else ''}]", rep, strip_timing, notes_only)
    elif not same_value(a, b):
        rep.diff(rel, where or "(value)", a, b)


# -- per kind of file -------------------------------------------------------------------------------------------------

def compare_bytes(rel: str, fa: Path, fb: Path, rep: Report) -> None:
    a, b = fa.read_bytes(), fb.read_bytes()
    if a != b:
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        rep.diff(rel, f"bytes differ (sizes {len(a)} / {len(b)}, first at byte {first})")


def compare_text(rel: str, fa: Path, fb: Path, pa_: list[str], pb_: list[str], rep: Report) -> None:
    a, b = fa.read_bytes(), fb.read_bytes()
    if a == b:
        return
    try:
        ta, tb = relocate(a.decode("utf-8"), pa_), relocate(b.decode("utf-8"), pb_)
    except UnicodeDecodeError:
        compare_bytes(rel, fa, fb, rep)
        return
    if ta == tb:
        return
    if rel == "config.resolved.yaml":
        keep = [[ln for ln in text.splitlines() if not EXECUTION_LINE.match(ln)] for text in (ta, tb)]
        if keep[0] == keep[1]:
            rep.note(rel, "executor workers differ", ta.count("\n"), tb.count("\n"))
            return
    la, lb = ta.splitlines(), tb.splitlines()
    bad = [i for i in range(max(len(la), len(lb))) if i >= len(la) or i >= len(lb) or la[i] != lb[i]]
    if len(la) != len(lb):
        rep.diff(rel, f"line count (of {len(la)} / {len(lb)}; {len(bad)} lines differ)", len(la), len(lb))
    i = bad[0]
    line_a = la[i] if i < len(la) else "(no line)"
    line_b = lb[i] if i < len(lb) else "(no line)"
    # for JSON lines, name the first differing field
    what = f"line {i + 1} differs ({len(bad)} lines differ)"
    try:
        ja, jb = json.loads(line_a), json.loads(line_b)
        if isinstance(ja, dict) and isinstance(jb, dict):
            keys = [k for k in sorted(set(ja) | set(jb)) if not same_value(ja.get(k, ...), jb.get(k, ...))]
            what += f", fields {keys}"
            line_a, line_b = {k: ja.get(k) for k in keys}, {k: jb.get(k) for k in keys}
    except ValueError:
        pass
    rep.diff(rel, what, line_a, line_b)


def compare_json(rel: str, fa: Path, fb: Path, pa_: list[str], pb_: list[str], rep: Report, strip_timing: bool,
                 notes_only: set[str]) -> None:
    try:
        a = relocate(json.loads(fa.read_text(encoding="utf-8")), pa_)
        b = relocate(json.loads(fb.read_text(encoding="utf-8")), pb_)
    except ValueError as e:
        rep.diff(rel, f"not JSON: {e}")
        return
    walk_json(rel, a, b, "", rep, strip_timing, notes_only)


def compare_metrics(rel: str, fa: Path, fb: Path, pa_: list[str], pb_: list[str], rep: Report) -> None:
    def samples(f: Path) -> list[str]:
        out = []
        for line in f.read_text(encoding="utf-8").splitlines():
            if not line or line.startswith("#"):
                continue
            name = re.split(r"[{ ]", line, maxsplit=1)[0]
            if METRICS_TIMING.match(name):
                rep.ignored_fields.add(f"metrics.prom:{name}")
                continue
            out.append(re.sub(r'run="[^"]*"', 'run="<RUN>"', line))
        return out

    a, b = samples(fa), samples(fb)
    for line in sorted(set(a) - set(b)):
        rep.diff(rel, "sample only in A", line, "")
    for line in sorted(set(b) - set(a)):
        rep.diff(rel, "sample only in B", "", line)
    if set(a) == set(b) and a != b:
        rep.diff(rel, "same samples in another order")


def compare_parquet(rel: str, fa: Path, fb: Path, rep: Report) -> None:
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(fa), pq.read_table(fb)
    if not ta.schema.equals(tb.schema, check_metadata=False):
        na, nb = ta.schema.names, tb.schema.names
        if na != nb:
            only_a, only_b = [n for n in na if n not in nb], [n for n in nb if n not in na]
            rep.diff(rel, "columns differ" + (" (order)" if not only_a and not only_b else ""),
                     only_a or na, only_b or nb)
        for n in na:
            if n in nb and ta.schema.field(n).type != tb.schema.field(n).type:
                rep.diff(rel, f"column {n}: type", str(ta.schema.field(n).type), str(tb.schema.field(n).type))
    ma, mb = ta.schema.metadata or {}, tb.schema.metadata or {}
    if ma != mb:
        for k in sorted(set(ma) | set(mb)):
            if ma.get(k) != mb.get(k):
                rep.diff(rel, f"schema metadata {k.decode(errors='replace')}", (ma.get(k) or b"(absent)").decode(
                    errors="replace"), (mb.get(k) or b"(absent)").decode(errors="replace"))
    if ta.num_rows != tb.num_rows:
        rep.diff(rel, "row count", ta.num_rows, tb.num_rows)
        if "id" in ta.schema.names and "id" in tb.schema.names:
            ia, ib = ta.column("id").to_pylist(), tb.column("id").to_pylist()
            sa, sb = set(ia), set(ib)
            only_a, only_b = [i for i in ia if i not in sb], [i for i in ib if i not in sa]
            rep.diff(rel, f"ids: {len(only_a)} only in A, {len(only_b)} only in B", only_a[:3], only_b[:3])
        return
    ids = ta.column("id").to_pylist() if "id" in ta.schema.names else None
    bad_cols = []
    for n in ta.schema.names:
        if n not in tb.schema.names:
            continue
        ca, cb = ta.column(n), tb.column(n)
        if ca.type == cb.type and ca.equals(cb):
            continue
        va, vb = ca.to_pylist(), cb.to_pylist()
        bad = [i for i in range(len(va)) if not same_value(va[i], vb[i])]
        if bad:   # else equal once NaN == NaN (a type difference is reported above)
            bad_cols.append((n, bad, va[bad[0]], vb[bad[0]]))
    for n, bad, x, y in bad_cols[:8]:
        where = f"row {bad[0]}" + (f" id={ids[bad[0]]}" if ids else "")
        rep.diff(rel, f"column {n}: {len(bad)} of {ta.num_rows} rows differ (first: {where})", x, y)
    if len(bad_cols) > 8:
        rep.diff(rel, f"... and {len(bad_cols) - 8} more columns differ", [c[0] for c in bad_cols[8:]], "")
    if fa.read_bytes() != fb.read_bytes() and not any(d[0] == rel for d in rep.diffs):
        rep.note(rel, "Parquet bytes differ, table equal")


# -- driver -----------------------------------------------------------------------------------------------------------

def files_of(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def ignored(rel: str) -> bool:
    return any(fnmatch.fnmatch(rel, pat) for pat in IGNORED_FILES)


def compare_runs(a: Path, b: Path) -> Report:
    rep = Report()
    pa_, pb_ = run_paths(a), run_paths(b)
    fa, fb = files_of(a), files_of(b)
    for rel in sorted(fa | fb):
        if ignored(rel):
            continue
        if rel not in fb:
            rep.diff(rel, "file only in A")
            continue
        if rel not in fa:
            rep.diff(rel, "file only in B")
            continue
        rep.compared += 1
        x, y = a / rel, b / rel
        name = rel.rsplit("/", 1)[-1]
        if rel.startswith("shards/"):
            compare_bytes(rel, x, y, rep)
        elif name.endswith(".parquet"):
            compare_parquet(rel, x, y, rep)
        elif rel == "stats.json" or re.fullmatch(r"stages/[^/]+/stats\.json", rel):
            compare_json(rel, x, y, pa_, pb_, rep, strip_timing=True, notes_only={"key", "workers"})
        elif rel == "audit/index.json":
            compare_json(rel, x, y, pa_, pb_, rep, strip_timing=False, notes_only={"key"})
        elif name == "file_hashes.json":
            compare_json(rel, x, y, pa_, pb_, rep, strip_timing=False, notes_only={"identity"})
        elif rel == "metrics.prom":
            compare_metrics(rel, x, y, pa_, pb_, rep)
        else:
            compare_text(rel, x, y, pa_, pb_, rep)
    return rep


def print_table(title: str, rows: list[tuple[str, str, str, str]], limit: int) -> None:
    print(title)
    head = ("file", "what", "A", "B")
    shown = rows[:limit]
    widths = [min(max(len(r[i]) for r in [head, *shown]), cap) for i, cap in enumerate((58, 70, 60, 60))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    print("  " + fmt.format(*head))
    print("  " + fmt.format(*("-" * w for w in widths)))
    for r in shown:
        print("  " + fmt.format(*r))
    if len(rows) > limit:
        print(f"  ... and {len(rows) - limit} more")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--max-rows", type=int, default=200, help="differences printed at most (all are counted)")
    ap.add_argument("--show-ignored", action="store_true", help="list the timing fields dropped")
    args = ap.parse_args(argv)
    for r in (args.run_a, args.run_b):
        if not (r / "stats.json").is_file():
            print(f"error: {r} is not a finished run directory (no stats.json)", file=sys.stderr)
            return 2
    rep = compare_runs(args.run_a, args.run_b)
    print(f"A: {args.run_a}\nB: {args.run_b}\n{rep.compared} files compared (ignored: {', '.join(IGNORED_FILES)})")
    if args.show_ignored:
        print("timing fields dropped: " + ", ".join(sorted(rep.ignored_fields)))
    if rep.notes:
        print_table(f"notes ({len(rep.notes)}, not differences):", rep.notes, args.max_rows)
    if rep.diffs:
        files = sorted({d[0] for d in rep.diffs})
        print_table(f"DIFFERENCES: {len(rep.diffs)} in {len(files)} files", rep.diffs, args.max_rows)
        return 1
    print("SAME: no difference (timings and locations aside)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
