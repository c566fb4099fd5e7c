"""The views of a finished run, written after the engine wrote its stats: the dashboard metrics (into stats.json
and RUN/metrics.prom) and RUN/report.html. A view never fails a run whose outputs are written: what goes wrong is
logged and returned as a warning. `gpupipe run` hands `write_views` to the engine (`run_pipeline(views=...)`), which
calls it inside the run's lock, before the results are committed to a bucket."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from gpupipe.io.parts import atomic_write_text
from gpupipe.run.rundir import RunLayout

log = logging.getLogger("gpupipe")


def write_views(root: str | Path, result: dict[str, Any], seed: int) -> None:
    """Add `metrics` to the run's stats (and stats.json), write metrics.prom and report.html; failures go to
    `result["warnings"]`."""
    from gpupipe.report import write_report
    from gpupipe.report.metrics import run_metrics, write_metrics

    layout = RunLayout(root)
    try:
        result["metrics"] = run_metrics(result, layout.root, seed)
    except Exception as e:
        log.exception("could not compute the run's metrics")
        result.setdefault("warnings", []).append(f"could not compute metrics: {type(e).__name__}: {e}")
    try:
        atomic_write_text(layout.stats, json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        if "metrics" in result:
            write_metrics(layout.root, result)
    except OSError as e:   # disk full, say: the run's outputs and stats are written; say what is missing
        log.exception("could not write the metrics")
        result.setdefault("warnings", []).append(
            f"could not write the metrics ({type(e).__name__}: {e}): {layout.metrics} and the `metrics` of "
            f"{layout.stats} may be missing; the same `gpupipe run` again, once there is space, writes them (nothing "
            f"is redone)")
    try:
        write_report(layout.root)
    except Exception as e:
        log.exception("could not write %s", layout.report)
        result.setdefault("warnings", []).append(
            f"could not write {layout.report} ({type(e).__name__}: {e}): the report and any audit samples not yet in "
            f"{layout.audit} are missing; `gpupipe report {layout.root}` writes them")


__all__ = ["write_views"]
