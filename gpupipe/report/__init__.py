"""What a run did, for people and dashboards: RUN/report.html, audit samples and reviews, the stats schema.

    write_report(run_dir)        RUN/report.html (+ RUN/audit/ samples); the pipeline calls it after every run
    gpupipe report RUN_DIR       the same from the command line
    gpupipe audit RUN_DIR ...    record a reviewer's pass/fail per sample, gate on the pass rate (audit.py)
    schema.validate_stats(d)     RUN/stats.json against its documented schema (docs/stats_schema.md)
    metrics.run_metrics(...)     the dashboard metrics (pipeline health, data quality, output): stats.json
                                 `metrics` and RUN/metrics.prom (Prometheus)

What the report needs (pyarrow, numpy, its SVG charts in charts.py) is imported only when a report is written,
so `gpupipe` itself starts fast.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpupipe.report.audit import SAMPLE_SIZE, add_audit_parser
from gpupipe.run.rundir import REPORT_FILE, RunLayout


def write_report(run_dir: str | os.PathLike, audit_size: int = SAMPLE_SIZE, audit_seed: int | None = None,
                 audit_rows: int | None = None, location: str | None = None) -> Path:
    """Write RUN/audit/NN-name.jsonl samples (reused when unchanged) and RUN/report.html; returns the report path.
    run_dir is local; `location` is how the page names the run when that is elsewhere (its URL)."""
    from gpupipe.io.parts import atomic_write_text
    from gpupipe.report.audit import write_samples
    from gpupipe.report.html import AUDIT_ROWS_SHOWN, Run, render

    run = Run.load(run_dir, location)
    index = write_samples(run.root, audit_size, audit_seed)
    path = RunLayout(run.root).report
    atomic_write_text(path, render(run, index, AUDIT_ROWS_SHOWN if audit_rows is None else audit_rows))
    return path


def cmd_report(args) -> int:
    from rich.console import Console

    from gpupipe.report.location import RunLocation
    from gpupipe.run.rundir import NAMES, RunDirBusy

    try:
        with RunLocation(args.run_dir) as loc:   # a URL: through a local copy, the report uploaded back
            path = write_report(loc.local, args.audit_size, args.audit_seed, args.audit_rows, loc.url)
            loc.push(NAMES.report, NAMES.audit)
    except (ValueError, OSError, RunDirBusy) as e:
        Console(stderr=True, markup=False, highlight=False, soft_wrap=True).print(f"error: {e}")
        return 2
    local = f" (local copy: {path})" if loc.url else ""
    Console(highlight=False, markup=False, soft_wrap=True).print(  # unwrapped: paths stay whole
        f"report: {loc.where(path)}{local}  (audit samples: {loc.where(RunLayout(loc.local).audit)})")
    return 0


def add_report_parser(subparsers) -> None:
    r = subparsers.add_parser("report", help="write RUN/report.html (funnel, signals, tokens, audit samples)",
                              description=(
        "Write one self-contained HTML page of what a run did: the funnel with removal reasons, languages, "
        "quality-signal histograms with their thresholds, duplicate clusters, tokens, mixture ledger, throughput, "
        "audit samples and the resolved config. Also writes the audit samples to RUN/audit/NN-name.jsonl."))
    r.add_argument("run_dir", help="a run directory (with stats.json), or its URL: report.html is uploaded there")
    r.add_argument("--audit-size", dest="audit_size", type=int, default=SAMPLE_SIZE,
                   help=f"audit sample size per stage, kept and removed together (default {SAMPLE_SIZE})")
    r.add_argument("--audit-seed", dest="audit_seed", type=int, default=None,
                   help="audit sample seed (default: the run's seed)")
    r.add_argument("--audit-rows", dest="audit_rows", type=int, default=None,
                   help="samples per stage shown in the page (default 25; all are in the JSONL)")
    r.set_defaults(fn=cmd_report)


__all__ = ["REPORT_FILE", "add_audit_parser", "add_report_parser", "cmd_report", "write_report"]
