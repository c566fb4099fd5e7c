"""The report's charts, written as inline SVG by hand: horizontal bars (stacked or grouped) and histograms.

Each chart function lays its chart out on a pixel canvas and returns it as an `Svg`; `to_svg` renders that to an
<svg> element with a viewBox, so the page scales it to its width. No plotting library: the layout is fixed arithmetic
(text widths are estimated from character counts), which keeps a report with dozens of histograms at milliseconds
where matplotlib's layout engine took seconds. Text stays text, so the numbers in a chart are in the DOM. The
output has no ids (several charts share one page, so nothing can collide) and no external reference, every text
from the data is escaped, and the same input gives the same bytes.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

KEPT, REMOVED, LINE = "#4477aa", "#ee7733", "#cc3311"
INK, FAINT, GRID = "#222", "#555", "#e4e4e4"
# removal reasons: matplotlib's tab20 without its two blues, which read as "kept"
PALETTE = ["#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896", "#9467bd", "#c5b0d5", "#8c564b",
           "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d", "#17becf", "#9edae5"]
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")   # not allowed in XML, even escaped


# -- a tiny SVG builder ------------------------------------------------------------------------------------------


def _f(v: float) -> str:
    """A coordinate: one decimal at most, so output is short and the same on every platform."""
    s = f"{v:.1f}".rstrip("0").rstrip(".")
    return "0" if s == "-0" else s


def _esc(s: str) -> str:
    return html.escape(_CONTROL.sub("", s), quote=True)


def text_width(s: str, size: float) -> float:
    """Estimated rendered width in px: ~0.6 em per character, 1 em for wide (CJK) ones."""
    return size * sum(1.0 if ord(c) >= 0x2E80 else 0.6 for c in s)


def fit(s: str, width: float, size: float) -> str:
    """s, cut with an ellipsis to fit `width` px."""
    if text_width(s, size) <= width:
        return s
    s = s[:int(width / (0.6 * size))]   # no character is narrower than 0.6 em: the rest cannot fit
    while s and text_width(s + "…", size) > width:
        s = s[:-1]
    return s + "…"


def box(x: float, y: float, w: float, h: float) -> str:
    return f"M{_f(x)} {_f(y)}h{_f(w)}v{_f(h)}h{_f(-w)}z"


class Svg:
    """A chart: elements on a `width` x `height` px canvas, in drawing order."""

    def __init__(self, width: float, height: float, title: str = ""):
        self.width, self.height, self.title, self.parts = width, height, title, []

    def path(self, d: str, fill: str = "none", stroke: str = "", dash: bool = False, tip: str = "") -> None:
        if not d:
            return
        attrs = f' stroke="{stroke}"' if stroke else ""
        attrs += ' stroke-dasharray="4 3" stroke-width="1.3"' if dash else ""
        self.parts.append(f'<path d="{d}" fill="{fill}"{attrs}' + (f"><title>{_esc(tip)}</title></path>" if tip
                                                                     else "/>"))

    def text(self, x: float, y: float, s: str, size: float = 11, anchor: str = "start", width: float = 0,
             bold: bool = False, fill: str = "", rotate: bool = False) -> None:
        """Text centred vertically on y; cut to `width` px if given (the whole text then shows as a tooltip)."""
        s = str(s)
        shown = fit(s, width, size) if width else s
        attrs = f' font-size="{_f(size)}"' if size != 11 else ""
        attrs += f' text-anchor="{anchor}"' if anchor != "start" else ""
        attrs += ' font-weight="600"' if bold else ""
        attrs += f' fill="{fill}"' if fill else ""
        attrs += f' transform="rotate(-90 {_f(x)} {_f(y)})"' if rotate else ""
        tip = f"<title>{_esc(s)}</title>" if shown != s else ""
        self.parts.append(f'<text x="{_f(x)}" y="{_f(y)}" dy=".35em"{attrs}>{tip}{_esc(shown)}</text>')

    def legend(self, x: float, y: float, items: Sequence[tuple[str, str]], width: float = 200,
               across: bool = False) -> float:
        """Swatches and names from (x, y), one per row (or in one row when `across`); a "--" colour prefix draws
        a dashed line. Returns the y below (or the x after) the last item."""
        for name, color in items:
            if color.startswith("--"):
                self.path(f"M{_f(x)} {_f(y)}h12", stroke=color[2:], dash=True)
            else:
                self.path(box(x, y - 5, 12, 10), fill=color)
            label = fit(name, width - 14, 11)
            self.text(x + 16, y, label)
            if across:
                x += 16 + text_width(label, 11) + 14
            else:
                y += 16
        return x if across else y

    def render(self, label: str) -> str:
        w, h = _f(self.width), _f(self.height)
        return (f'<svg role="img" aria-label="{_esc(self.title or label)}" viewBox="0 0 {w} {h}" width="{w}" '
                f'height="{h}" font-family="{FONT}" font-size="11" fill="{INK}">{"".join(self.parts)}</svg>')


def to_svg(chart: Svg, chart_id: str) -> str:
    """The chart as an <svg> element that can sit inline in HTML with other charts."""
    return chart.render(chart_id)


def _palette(n: int) -> list[str]:
    return [PALETTE[i % len(PALETTE)] for i in range(n)]


def _finite(v) -> bool:
    return v is not None and isinstance(v, (int, float, np.number)) and math.isfinite(v)


def _num(v) -> str:
    return f"{v:,}" if isinstance(v, (int, np.integer)) else f"{v:,.4g}"


# -- axes ------------------------------------------------------------------------------------------------------


def ticks(lo: float, hi: float, n: int = 5, integer: bool = False) -> tuple[list[float], float]:
    """About n round values (1, 2, 2.5 or 5 x 10^k apart; no 2.5 for integers) within [lo, hi], and their step."""
    if not hi > lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10.0 ** math.floor(math.log10(raw))
    steps = (1, 2, 5, 10) if integer else (1, 2, 2.5, 5, 10)
    step = next(m * mag for m in steps if m * mag >= raw * (1 - 1e-9))
    if integer:
        step = max(step, 1.0)
    k0, k1 = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    return [round(k * step, 12) for k in range(k0, k1 + 1)], step


def tick_labels(values: Sequence[float], step: float) -> list[str]:
    """One format per axis: k or M for large values, as many decimals as the step needs."""
    top = max((abs(v) for v in values), default=0)
    if top >= 1e9 or 0 < step < 1e-6:
        return [f"{v:.3g}" for v in values]
    div, suffix = (1e6, "M") if top >= 1e6 else (1e3, "k") if top >= 1e4 else (1, "")
    s = step / div
    d = next((d for d in range(10) if abs(round(s, d) - s) <= 1e-9 * s), 9)
    return [f"{v / div:,.{d}f}{suffix}".replace("-", "\u2212") if v else "0" for v in values]


def _decade(v: float) -> str:
    return f"{v / 1e6:g}M" if v >= 1e6 else f"{v / 1e3:g}k" if v >= 1e3 else f"{v:g}"


def _xaxis(svg: Svg, sx, x0: float, x1: float, y0: float, y1: float, values: Sequence[float],
           labels: Sequence[str], grid: bool = False) -> None:
    """Bottom axis at y1 with tick marks and labels (and light grid lines up to y0)."""
    if grid:
        svg.path("".join(f"M{_f(sx(v))} {_f(y0)}V{_f(y1)}" for v in values), stroke=GRID)
    svg.path(f"M{_f(x0)} {_f(y1)}H{_f(x1)}" + "".join(f"M{_f(sx(v))} {_f(y1)}v4" for v in values), stroke=INK)
    for v, s in zip(values, labels):
        svg.text(sx(v), y1 + 13, s, size=10, anchor="middle")


def _yaxis(svg: Svg, sy, x0: float, y0: float, y1: float, values: Sequence[float], labels: Sequence[str]) -> None:
    svg.path(f"M{_f(x0)} {_f(y0)}V{_f(y1)}" + "".join(f"M{_f(x0)} {_f(sy(v))}h-4" for v in values), stroke=INK)
    for v, s in zip(values, labels):
        svg.text(x0 - 6, sy(v), s, size=10, anchor="end")


# -- horizontal bars -------------------------------------------------------------------------------------------

Bar = tuple[list[tuple[str, float, str]], str]   # segments (name, value, colour) left to right; text after it


def _hbars(labels: Sequence[str], rows: list[list[Bar]], legend: list[tuple[str, str]], xlabel: str, title: str,
           width: float, bar: float) -> Svg:
    """One row per label, holding its bars top to bottom. The scale is the largest that leaves room for every
    bar's text after it, so the text never runs off the chart."""
    pad, label_w = 10, min(max((text_width(str(s), 12) for s in labels), default=0), 200) + 10
    legend_w = min(max(text_width(n, 11) for n, _ in legend) + 16, 230) + 20 if legend else 0
    x0, x1 = pad + label_w, width - pad - legend_w
    nbars = max((len(r) for r in rows), default=1)
    row_h = nbars * bar + 8
    y0 = 34
    y1 = y0 + max(len(rows), 1) * row_h
    room = []
    for r in rows:
        for segments, note in r:
            total = sum(max(v, 0) for _, v, _ in segments if _finite(v))
            note_w = min(text_width(note, 11) + 6, 0.6 * (x1 - x0))
            if total > 0:
                room.append((x1 - x0 - note_w) / total)
    scale = min(room, default=x1 - x0)
    sx = lambda v: x0 + v * scale
    svg = Svg(width, max(y1 + 46, y0 + 16 * len(legend) + pad), title)
    svg.text(width / 2, 14, title, size=13, anchor="middle", width=width - 2 * pad)
    tv, step = ticks(0, (x1 - x0) / scale)
    _xaxis(svg, sx, x0, x1, y0, y1, tv, tick_labels(tv, step), grid=True)
    svg.text((x0 + x1) / 2, y1 + 31, xlabel, size=12, anchor="middle", width=x1 - x0)
    for i, (label, r) in enumerate(zip(labels, rows)):
        top = y0 + i * row_h + 4
        svg.text(x0 - 6, top + len(r) * bar / 2, str(label), size=12, anchor="end", width=label_w - 10)
        for j, (segments, note) in enumerate(r):
            y, x = top + j * bar, 0.0
            for name, v, color in segments:
                if _finite(v) and v > 0:
                    svg.path(box(sx(x), y + 1, v * scale, bar - 2), fill=color, tip=f"{name}: {_num(v)}")
                    x += v
            svg.text(sx(x) + 3, y + bar / 2, note, width=0.6 * (x1 - x0))
    svg.path(f"M{_f(x0)} {_f(y0)}V{_f(y1)}", stroke=INK)
    svg.legend(x1 + 20, y0 + 6, legend, width=legend_w - 20)
    return svg


def funnel_docs(stages: Sequence[str], docs_in: Sequence[int], kept: Sequence[int],
                removed: dict[str, Sequence[int]], max_reasons: int = 14) -> Svg:
    """One horizontal bar per stage: documents kept, then each removal reason stacked after them. Beyond
    `max_reasons` (a quality stage has dozens) the smallest reasons share one "other" segment, so the legend
    fits; the funnel table lists every reason."""
    if len(removed) > max_reasons:
        top = sorted(removed, key=lambda r: -sum(removed[r]))[:max_reasons - 1]
        rest = [r for r in removed if r not in top]
        other = [sum(c) for c in zip(*(removed[r] for r in rest))]
        removed = {**{r: removed[r] for r in top}, f"other ({len(rest)} reasons)": other}
    colors = dict(zip(removed, _palette(len(removed))))
    rows = []
    for i, (n, k) in enumerate(zip(docs_in, kept)):
        segments = [("kept", k, KEPT)] + [(r, c[i], colors[r]) for r, c in removed.items()]
        total = sum(v for _, v, _ in segments)
        added = f" (+{int(total - n):,} added)" if total != n else ""   # a splitting stage (chunk_markdown)
        rows.append([(segments, f"{int(n):,} in{added} → {int(k):,} kept")])
    legend = [("kept", KEPT)] + list(colors.items())
    return _hbars(stages, rows, legend, "documents", "documents through each stage: kept, and removed by reason",
                  960, 24)


def grouped_barh(labels: Sequence[str], series: dict[str, Sequence[float]], xlabel: str, title: str,
                 fmt: str = "{:,.2f}") -> Svg:
    """Bars side by side per label (e.g. MB in / MB out per stage), each labelled with its value."""
    colors = [KEPT, REMOVED, *_palette(len(series))]
    rows = [[([(name, values[i], colors[j])], fmt.format(values[i]) if _finite(values[i]) else "n/a")
             for j, (name, values) in enumerate(series.items())] for i in range(len(labels))]
    legend = list(zip(series, colors)) if len(series) > 1 else []
    return _hbars(labels, rows, legend, xlabel, title, 720, 16 if len(series) > 1 else 22)


def bars(labels: Sequence[str], values: Sequence[float], xlabel: str, title: str, fmt: str = "{:,}") -> Svg:
    return grouped_barh(labels, {xlabel: values}, xlabel, title, fmt)


# -- histograms ------------------------------------------------------------------------------------------------


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


def counts(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """np.histogram(values, edges)[0] (last bin closed; NaN and out-of-range values not counted), without the
    sort np.histogram does when given edges, its slow part on dozens of 100k-value columns: equal bins take its
    arithmetic fast path, others a binary search per value."""
    d = np.diff(edges)
    if np.allclose(d, d[0], rtol=1e-9, atol=0):
        return np.histogram(values, len(d), (edges[0], edges[-1]))[0]
    v = values[(values >= edges[0]) & (values <= edges[-1])]
    i = np.searchsorted(edges, v, side="right") - 1
    return np.bincount(np.minimum(i, len(edges) - 2), minlength=len(edges) - 1)


def _finite_values(a: np.ndarray | None) -> np.ndarray:
    if a is None:
        return np.empty(0)
    a = np.asarray(a)
    return a[np.isfinite(a)] if a.dtype.kind == "f" else a


def _hist_plot(svg: Svg, x0: float, y0: float, x1: float, y1: float, edges: np.ndarray, log: bool,
               layers: list[tuple[str, np.ndarray]], marks: Sequence[tuple[str, float]], integer: bool) -> None:
    """Stacked histogram in the box (x0, y0)-(x1, y1): layers are (colour, counts) bottom first, each one filled
    step area (one path, no seams between bins); marks are dashed vertical lines (those outside are not drawn)."""
    t = (lambda v: math.log10(1 + max(v, 0))) if log else float   # log: for counts >= 0, 0 stays at the origin
    lo, hi = t(edges[0]), t(edges[-1])
    sx = lambda v: x0 + (t(v) - lo) / (hi - lo) * (x1 - x0)
    total = sum((c for _, c in layers), np.zeros(len(edges) - 1, np.int64))
    yv, step = ticks(0, max(int(total.max(initial=0)), 1), 4, integer=True)
    ytop = max(yv[-1], math.ceil(total.max(initial=0) / step) * step, 1)
    if yv[-1] < ytop:
        yv.append(ytop)
    sy = lambda v: y1 - v / ytop * (y1 - y0)
    xs = [_f(sx(e)) for e in edges]
    base = np.zeros(len(edges) - 1, np.int64)
    for color, c in layers:
        top = base + c
        if c.any():   # up and across the tops left to right, then back along the base right to left
            d = f"M{xs[0]} {_f(sy(base[0]))}" + "".join(f"V{_f(sy(v))}H{xs[i + 1]}" for i, v in enumerate(top))
            d += "".join(f"V{_f(sy(v))}H{xs[i]}" for i, v in reversed(list(enumerate(base)))) + "z"
            svg.path(d, fill=color)
        base = top
    if log:
        decades = [10 ** k for k in range(int(math.log10(max(edges[-1], 1))) + 1) if edges[0] <= 10 ** k]
        decades = ([0] if edges[0] <= 0 else []) + decades[::max(1, math.ceil(len(decades) / 6))]
        xv, xl = decades, [_decade(v) for v in decades]
    else:
        xv, xstep = ticks(edges[0], edges[-1], 5, integer)
        xl = tick_labels(xv, xstep)
    _xaxis(svg, sx, x0, x1, y0, y1, xv, xl)
    _yaxis(svg, sy, x0, y0, y1, yv, tick_labels(yv, step))
    for label, v in marks:
        if _finite(v) and edges[0] <= v <= edges[-1]:
            svg.path(f"M{_f(sx(v))} {_f(y0)}V{_f(y1)}", stroke=LINE, dash=True, tip=f"{label} {v:g}")


def _pack(items: list[str], chars: int) -> list[str]:
    """Items joined by commas into lines of about `chars` characters, breaking between items only."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 2 + len(item) <= chars:
            lines[-1] += ", " + item
        else:
            lines.append(item)
    return lines


def signal_grid(signals: list[Signal], title: str) -> Svg:
    """Small multiples: one histogram per signal, kept and removed stacked, thresholds as dashed lines."""
    ncols = max(1, min(3 if len(signals) <= 9 else 4, len(signals)))
    nrows = max(1, math.ceil(len(signals) / ncols))
    pad, top, cell_w, cell_h = 10, 50, 280, 172
    svg = Svg(2 * pad + ncols * cell_w, top + nrows * cell_h, title)
    svg.text(pad, 14, title, size=13, bold=True, width=svg.width - 2 * pad)
    legend = [("kept", KEPT)] + [("removed", REMOVED)] * any(s.removed is not None and len(s.removed)
                                                              for s in signals)
    legend += [("threshold", "--" + LINE)] * any(s.thresholds for s in signals)
    svg.legend(pad + 8, 34, legend, across=True)
    for k, s in enumerate(signals):
        cx, cy = pad + (k % ncols) * cell_w, top + (k // ncols) * cell_h
        kept, removed = _finite_values(s.kept), _finite_values(s.removed)
        values = np.concatenate([kept, removed]) if len(removed) else kept
        names = _pack([f"{label} {t:g}" for label, t in s.thresholds], 40)
        if len(names) > 2:
            names = [names[0], names[1] + ", …"]
        svg.text(cx + 8, cy + 6, s.column + ("" if len(values) else ": no values"), size=12, bold=True,
                 width=cell_w - 16)
        for j, line in enumerate(names):
            svg.text(cx + 8, cy + 21 + 13 * j, line, size=10.5, fill=FAINT, width=cell_w - 16)
        if not len(values):
            continue
        integer = np.issubdtype(np.asarray(s.kept).dtype, np.integer)
        edges, log = _bins(values, integer, [t for _, t in s.thresholds])
        layers = [(KEPT, counts(kept, edges))] + ([(REMOVED, counts(removed, edges))] if len(removed) else [])
        _hist_plot(svg, cx + 44, cy + 48, cx + cell_w - 14, cy + cell_h - 28, edges, log, layers, s.thresholds,
                   integer)
    return svg


def histogram(values: np.ndarray, xlabel: str, title: str, lines: list[tuple[str, float]] = ()) -> Svg:
    width, height = 720, 290
    x0, x1, y0, y1 = 64, width - 18, 56 if lines else 36, height - 46
    svg = Svg(width, height, title)
    svg.text(width / 2, 14, title, size=13, anchor="middle", width=width - 20)
    svg.legend(x0, 34, [(f"{label} {v:g}", "--" + LINE) for label, v in lines], across=True)
    svg.text(14, (y0 + y1) / 2, "documents", size=12, anchor="middle", rotate=True)
    svg.text((x0 + x1) / 2, y1 + 31, xlabel, size=12, anchor="middle", width=x1 - x0)
    v = _finite_values(values)
    if not len(v):
        svg.path(f"M{x0} {_f(y0)}V{_f(y1)}H{x1}", stroke=INK)
        svg.text((x0 + x1) / 2, (y0 + y1) / 2, "no values", anchor="middle", fill=FAINT)
        return svg
    integer = np.issubdtype(np.asarray(values).dtype, np.integer)
    edges, log = _bins(v, integer, [m for _, m in lines])
    _hist_plot(svg, x0, y0, x1, y1, edges, log, [(KEPT, counts(v, edges))], lines, integer)
    return svg


__all__ = ["KEPT", "LINE", "REMOVED", "Signal", "Svg", "bars", "counts", "funnel_docs", "grouped_barh", "histogram",
           "signal_grid", "ticks", "to_svg"]
