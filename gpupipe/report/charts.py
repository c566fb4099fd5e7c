"""The report's charts: matplotlib figures rendered to inline SVG strings.

Figures are built with `matplotlib.figure.Figure` and never through pyplot, so no GUI backend is chosen and no
global figure state is touched (the pipeline calls this at the end of every run, possibly in a process that plots
for itself); rendering is the SVG backend's, which is file-only like Agg. Text stays text (`svg.fonttype: none`),
so the numbers in a chart are in the DOM, and the SVG is stripped of its XML prologue, metadata and namespace URLs
so the page holds no external reference. Element ids are prefixed per chart: several SVGs share one document.
"""

from __future__ import annotations

import io
import math
import re
import textwrap
from dataclasses import dataclass, field
from typing import Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure

KEPT, REMOVED, LINE = "#4477aa", "#ee7733", "#cc3311"
_RC = {"svg.fonttype": "none", "svg.hashsalt": "gpupipe", "font.size": 9, "axes.spines.top": False,
       "axes.spines.right": False, "axes.titlesize": 9, "legend.fontsize": 8, "legend.frameon": False}
_WIDTH = 10.0   # inches; the page scales SVGs to its width


def to_svg(fig: Figure, chart_id: str) -> str:
    """The figure as an <svg> element that can sit inline in HTML with other charts."""
    buf = io.StringIO()
    with matplotlib.rc_context(_RC):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    head, rest = svg.split(">", 1)   # the <svg ...> tag: no namespace URLs (inline SVG in HTML needs none)
    svg = re.sub(r'\s(?:xmlns(?::\w+)?)="[^"]*"', "", head) + ">" + rest
    p = re.sub(r"\W", "-", chart_id)
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{p}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{p}-\1)", svg)
    svg = re.sub(r'href="#([^"]+)"', rf'href="#{p}-\1"', svg)
    return svg.replace("<svg", f'<svg role="img" aria-label="{p}"', 1)


def _figure(height: float, width: float = _WIDTH) -> Figure:
    with matplotlib.rc_context(_RC):
        return Figure(figsize=(width, height), layout="constrained")


def _palette(n: int) -> list:
    """Colours for removal reasons: tab20 without its two blues, which read as "kept"."""
    cmap = matplotlib.colormaps["tab20"]
    return [cmap(2 + i % 18) for i in range(n)]


def funnel_docs(stages: Sequence[str], docs_in: Sequence[int], kept: Sequence[int],
                removed: dict[str, Sequence[int]], max_reasons: int = 14) -> Figure:
    """One horizontal bar per stage: documents kept, then each removal reason stacked after them. Beyond
    `max_reasons` (a quality stage has dozens) the smallest reasons share one "other" segment, so the legend
    fits; the funnel table lists every reason."""
    if len(removed) > max_reasons:
        top = sorted(removed, key=lambda r: -sum(removed[r]))[:max_reasons - 1]
        rest = [r for r in removed if r not in top]
        other = np.sum([removed[r] for r in rest], axis=0)
        removed = {**{r: removed[r] for r in top}, f"other ({len(rest)} reasons)": other}
    with matplotlib.rc_context(_RC):
        fig = _figure(max(0.45 * len(stages) + 1.2, 0.2 * len(removed) + 1.0))
        ax = fig.subplots()
        y = np.arange(len(stages))[::-1]
        left = np.asarray(kept, float)
        ax.barh(y, left, color=KEPT, label="kept")
        for (reason, counts), color in zip(removed.items(), _palette(len(removed))):
            ax.barh(y, counts, left=left, color=color, label=reason)
            left = left + np.asarray(counts, float)
        for yi, total, n, k in zip(y, left, docs_in, kept):
            added = f" (+{int(total - n):,} added)" if total != n else ""   # a splitting stage (chunk_markdown)
            ax.text(total, yi, f" {int(n):,} in{added} → {int(k):,} kept", va="center", fontsize=8)
        ax.set_yticks(y, stages)
        ax.set_xlabel("documents")
        ax.set_xlim(0, max(left.max(initial=1), 1) * 1.3)
        fig.legend(loc="outside right upper")
        ax.set_title("documents through each stage: kept, and removed by reason")
    return fig


def grouped_barh(labels: Sequence[str], series: dict[str, Sequence[float]], xlabel: str, title: str,
                 fmt: str = "{:,.2f}") -> Figure:
    """Bars side by side per label (e.g. MB in / MB out per stage), each labelled with its value."""
    with matplotlib.rc_context(_RC):
        fig = _figure((0.22 + 0.18 * len(series)) * len(labels) + 1.0, width=7.5)
        ax = fig.subplots()
        h = 0.8 / max(len(series), 1)
        y = np.arange(len(labels))[::-1]
        colors = [KEPT, REMOVED, *_palette(len(series))]
        for i, (name, values) in enumerate(series.items()):
            bars = ax.barh(y + (len(series) / 2 - i - 0.5) * h, values, height=h, color=colors[i], label=name)
            ax.bar_label(bars, labels=[fmt.format(v) for v in values], padding=2, fontsize=7)
        ax.set_yticks(y, labels)
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        ax.margins(x=0.15)
        if len(series) > 1:
            fig.legend(loc="outside right upper")
    return fig


def bars(labels: Sequence[str], values: Sequence[float], xlabel: str, title: str, fmt: str = "{:,}") -> Figure:
    return grouped_barh(labels, {xlabel: values}, xlabel, title, fmt)


@dataclass
class Signal:
    """One signal column: its values in kept documents and (where the rejects carry it) removed ones."""

    column: str
    kept: np.ndarray
    removed: np.ndarray | None = None
    thresholds: list[tuple[str, float]] = field(default_factory=list)


def _bins(values: np.ndarray, integer: bool, marks: Sequence[float] = ()) -> tuple[np.ndarray, bool]:
    """Histogram bins over the data and the thresholds near it (those far outside are named in the title, not
    drawn, so they do not squash the histogram); log-spaced for long-tailed counts such as word counts."""
    lo, hi = float(values.min()), float(values.max())
    span = hi - lo
    for m in marks:
        if lo - 0.5 * span <= m <= hi + 0.5 * span:
            lo, hi = min(lo, m), max(hi, m)
    if integer and lo >= 0 and hi > 1000 and hi > 20 * max(np.median(values), 1):
        edges = np.unique(np.geomspace(max(lo, 1), hi + 1, 40).round())
        return (np.concatenate(([0], edges)) if lo < 1 else edges), True
    if integer and hi - lo < 40:       # small counts: one bin per value
        return np.arange(lo - 0.5, hi + 1.5), False
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(lo, hi, 41), False


def _stacked(ax, parts: list[np.ndarray], bins: np.ndarray) -> None:
    """Kept and removed as stacked step areas: one artist per series (ax.hist draws one patch per bin, which is
    slow for grids of dozens of histograms)."""
    total = np.zeros(len(bins) - 1)
    layers = []
    for p, color, label in zip(parts, (KEPT, REMOVED), ("kept", "removed")):
        counts, _ = np.histogram(p[np.isfinite(p)], bins=bins)
        layers.append((total.copy(), total + counts, color, label))
        total = total + counts
    for base, top, color, label in layers:
        ax.stairs(top, bins, baseline=base, fill=True, color=color, label=label)


def signal_grid(signals: list[Signal], title: str) -> Figure:
    """Small multiples: one histogram per signal, kept and removed stacked, thresholds as dashed lines."""
    ncols = max(1, min(3 if len(signals) <= 9 else 4, len(signals)))
    nrows = max(1, math.ceil(len(signals) / ncols))
    with matplotlib.rc_context(_RC):
        # a fixed grid in inches (no layout engine: constrained layout costs seconds on dozens of axes):
        # 0.9 in on top for the title and the first row's titles, 0.75 in between rows for titles and ticks
        top, bottom, gap, cell = 0.9, 0.35, 0.75, 1.55
        height = top + bottom + nrows * cell + (nrows - 1) * gap
        fig = Figure(figsize=(3.2 * ncols, height))
        axes = np.atleast_1d(fig.subplots(nrows, ncols)).ravel()
        fig.subplots_adjust(left=0.5 / (3.2 * ncols), right=0.98, bottom=bottom / height, top=1 - top / height,
                            wspace=0.3, hspace=gap / cell)
        for ax, s in zip(axes, signals):
            parts = [s.kept] + ([s.removed] if s.removed is not None and len(s.removed) else [])
            values = np.concatenate(parts)
            values = values[np.isfinite(values)]
            if not len(values):
                ax.set_title(f"{s.column}: no values", loc="left", fontsize=8)
                continue
            bins, log = _bins(values, np.issubdtype(s.kept.dtype, np.integer), [t for _, t in s.thresholds])
            _stacked(ax, parts, bins)
            if log:
                ax.set_xscale("symlog", linthresh=1)
            lo, hi = bins[0], bins[-1]
            span = hi - lo
            for label, t in s.thresholds:
                if lo - 0.05 * span <= t <= hi + 0.05 * span:
                    ax.axvline(t, color=LINE, linestyle="--", linewidth=1)
            names = textwrap.fill(", ".join(f"{label} {t:g}" for label, t in s.thresholds), 40)
            ax.set_title(s.column + (f"\n{names}" if names else ""), loc="left", fontsize=8)
            if len(parts) > 1:
                ax.legend()
        for ax in axes[len(signals):]:
            ax.set_visible(False)
        fig.suptitle(title, y=1 - 0.12 / height, va="top")
    return fig


def histogram(values: np.ndarray, xlabel: str, title: str, lines: list[tuple[str, float]] = ()) -> Figure:
    with matplotlib.rc_context(_RC):
        fig = _figure(3.0, width=7.5)
        ax = fig.subplots()
        if len(values):
            bins, log = _bins(values, np.issubdtype(values.dtype, np.integer), [v for _, v in lines])
            ax.hist(values, bins=bins, color=KEPT)
            if log:
                ax.set_xscale("symlog", linthresh=1)
        for label, v in lines:
            ax.axvline(v, color=LINE, linestyle="--", linewidth=1, label=f"{label} {v:g}")
        if lines:
            ax.legend()
        ax.set_xlabel(xlabel)
        ax.set_ylabel("documents")
        ax.set_title(title)
    return fig


__all__ = ["Signal", "bars", "funnel_docs", "grouped_barh", "histogram", "signal_grid", "to_svg"]
