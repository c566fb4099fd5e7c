"""The report's hand-written SVG charts (gpupipe/report/charts.py): well-formed, escaped, geometry that matches the
numbers, and no crash (or division by zero) on empty, zero, single-value or NaN data."""

import itertools
import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from gpupipe.report import charts as c

NUM = r"(-?[\d.]+)"
BOX = re.compile(rf"M{NUM} {NUM}h{NUM}v{NUM}h{NUM}z")


def svg_of(chart, chart_id="chart") -> tuple[str, ET.Element]:
    s = c.to_svg(chart, chart_id)
    return s, ET.fromstring(s)            # raises on anything not well-formed XML


def boxes(root: ET.Element, fill: str) -> list[tuple[float, float, float, float, str]]:
    """(x, y, w, h, tooltip) of the bars of one colour (rectangles with a tooltip; legend swatches have none)."""
    out = []
    for p in root.iter("path"):
        m = BOX.fullmatch(p.get("d", ""))
        if m and p.get("fill") == fill and p.find("title") is not None:
            out.append((*map(float, m.groups()[:4]), p.find("title").text))
    return out


def texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter("text")]


def shown_texts(root: ET.Element) -> list[str]:
    """What each <text> shows (its tooltip <title> left out)."""
    return [(t.text or "") + "".join(ch.tail or "" for ch in t) for t in root.iter("text")]


def check_svg(s: str, root: ET.Element) -> None:
    assert root.tag == "svg" and not [k for k in root.attrib if k.startswith("xmlns")]
    w, h = float(root.get("width")), float(root.get("height"))
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}" and w > 0 and h > 0
    assert not any(e.get("id") for e in root.iter()), "charts use no ids (several share one page)"
    assert not re.search(r"nan|inf", " ".join(e.get("d", "") + e.get("x", "") + e.get("y", "")
                                              for e in root.iter()), re.IGNORECASE)
    assert "url(" not in s and "href" not in s


def axis_map(root: ET.Element, vertical: bool):
    """px = a + b * value, from the tick labels of the x axis (text-anchor middle, under the axis) or y axis
    (text-anchor end, left of it), with their k/M suffixes."""
    pts = []
    for t in root.iter("text"):
        anchor, size = t.get("text-anchor"), t.get("font-size")
        if size != "10" or anchor != ("end" if vertical else "middle"):
            continue
        label = (t.text or "").replace(",", "").replace("\u2212", "-")
        mult = {"k": 1e3, "M": 1e6}.get(label[-1:], 1)
        pts.append((float(label.rstrip("kM")) * mult, float(t.get("y" if vertical else "x"))))
    (v0, p0), (v1, p1) = pts[0], pts[-1]
    b = (p1 - p0) / (v1 - v0)
    return lambda v: p0 + b * (v - v0)


# -- bars ----------------------------------------------------------------------------------------------------


def test_bar_widths_are_proportional_to_values_and_labelled():
    s, root = svg_of(c.bars(["a", "b", "c"], [10, 20, 5], "documents", "per language"))
    check_svg(s, root)
    bars = boxes(root, c.KEPT)
    assert len(bars) == 3
    widths = [b[2] for b in bars]
    assert widths[1] == pytest.approx(2 * widths[0], rel=0.02) and widths[0] == pytest.approx(2 * widths[2], rel=0.02)
    assert [b[1] for b in bars] == sorted(b[1] for b in bars)          # first label on top
    assert {"10", "20", "5", "a", "b", "c", "per language", "documents"} <= set(texts(root))
    sx = axis_map(root, vertical=False)                                 # the axis agrees with the bars
    for (x, _, w, _, _), v in zip(bars, [10, 20, 5]):
        assert x == pytest.approx(sx(0), abs=0.2) and x + w == pytest.approx(sx(v), abs=0.3)
    assert max(x + w for x, _, w, _, _ in bars) <= float(root.get("width"))


def test_value_labels_fit_in_the_chart():
    labels = [f"stage {i}" for i in range(5)]
    values = [10 ** i for i in range(5)]
    _, root = svg_of(c.bars(labels, values, "n", "t", "{:,} documents with a long note"))
    width = float(root.get("width"))
    for t in root.iter("text"):
        if (t.text or "").endswith("note"):
            assert float(t.get("x")) + c.text_width(t.text, 11) <= width + 1


def test_grouped_bars_legend_and_missing_values():
    series = {"MB in": [1.5, 0.0, float("nan")], "MB out": [3.0, 0.0, None]}
    s, root = svg_of(c.grouped_barh(["x", "y", "z"], series, "MB", "bytes"))
    check_svg(s, root)
    blue, orange = boxes(root, c.KEPT), boxes(root, c.REMOVED)
    assert len(blue) == 1 and len(orange) == 1                          # zero and missing values draw no bar
    assert orange[0][2] == pytest.approx(2 * blue[0][2], rel=0.02)
    shown = texts(root)
    assert {"MB in", "MB out", "1.50", "3.00", "0.00"} <= set(shown) and shown.count("n/a") == 2


def test_text_from_data_is_escaped():
    nasty = 'a<b & "c" \'d\' </svg>'
    s, root = svg_of(c.grouped_barh([nasty], {nasty + "1": [1], "ok": [2]}, nasty, nasty), nasty)
    check_svg(s, root)
    assert "</svg>" not in s[:-6] and "<b" not in s
    assert texts(root).count(nasty) == 3 and nasty + "1" in texts(root)   # title, xlabel, label; legend
    assert root.get("aria-label") == nasty
    s, root = svg_of(c.histogram(np.arange(5), nasty, nasty, [(nasty, 2.0)]))
    assert nasty in texts(root) and f"{nasty} 2" in texts(root)
    s, root = svg_of(c.signal_grid([c.Signal(nasty, np.arange(5.0), None, [(nasty, 1.0)])], nasty))
    assert nasty in texts(root) and f"{nasty} 1" in texts(root)
    s, root = svg_of(c.bars(["ctl\x00\x1f"], [1], "x", "t"))            # XML forbids these even escaped
    assert "ctl" in texts(root)


def test_long_labels_are_cut_with_the_whole_label_as_tooltip():
    long = "gopher_rep_dup_line_char_frac_" * 4
    _, root = svg_of(c.bars([long, "b"], [1, 2], "x", "t"))
    cut = [t for t in root.iter("text") if (t.find("title") is not None)]
    assert len(cut) == 1 and cut[0].find("title").text == long
    shown = cut[0].find("title").tail
    assert shown.endswith("…") and long.startswith(shown[:-1]) and c.text_width(shown, 12) <= 200


def test_funnel_segments_and_other_reasons():
    reasons = {f"r{i:02d}": [0, i + 1, 0] for i in range(20)}       # 210 removed in the second stage
    docs_in, kept = [100, 310, 100], [100, 100, 100]
    s, root = svg_of(c.funnel_docs(["00 read", "01 <quality>", "02 x"], docs_in, kept, reasons))
    check_svg(s, root)
    tips = [p.find("title").text for p in root.iter("path") if p.find("title") is not None]
    assert "other (7 reasons): 28" in tips                     # the 7 smallest of 20 share one segment
    assert sum(f"r{i:02d}: " in " ".join(tips) for i in range(20)) == 13
    rows = {}
    for fill in {p.get("fill") for p in root.iter("path")}:
        for x, y, w, h, _ in boxes(root, fill):
            rows.setdefault(y, []).append((x, w))
    assert len(rows) == 3
    per_row = [sum(w for _, w in segs) for _, segs in sorted(rows.items())]
    assert per_row[1] == pytest.approx(3.1 * per_row[0], rel=0.01) and per_row[2] == pytest.approx(per_row[0])
    segs = sorted(rows[sorted(rows)[1]])                       # stacked: each segment starts where one ends
    assert all(a[0] + a[1] == pytest.approx(b[0], abs=0.2) for a, b in itertools.pairwise(segs))
    assert {"100 in → 100 kept", "310 in → 100 kept", "01 <quality>", "documents"} <= set(texts(root))
    _, root = svg_of(c.funnel_docs(["a"], [5], [5], {"x": [3]}))           # a splitting stage: more out than in
    assert "5 in (+3 added) → 5 kept" in texts(root)


# -- histograms ----------------------------------------------------------------------------------------------


def stairs_heights(root: ET.Element, fill: str) -> tuple[list[float], list[float]]:
    """Bin tops (px) and edges (px) of a histogram layer: M x0 base (V top H x)+ then back along the base."""
    d = next(p.get("d") for p in root.iter("path") if p.get("fill") == fill and not BOX.fullmatch(p.get("d")))
    m = re.match(rf"M{NUM} {NUM}((?:V{NUM}H{NUM})+)", d)
    pairs = re.findall(rf"V{NUM}H{NUM}", m.group(3))
    n = len(pairs) // 2
    return [float(v) for v, _ in pairs[:n]], [float(m.group(1))] + [float(x) for _, x in pairs[:n]]


@pytest.mark.parametrize("values", [np.array([1, 1, 2, 3, 3, 3, 7]), np.arange(100) % 13,
                                    np.random.default_rng(1).normal(5, 2, 3000)])
def test_histogram_bars_sum_to_the_count(values):
    s, root = svg_of(c.histogram(values, "x", "t"))
    check_svg(s, root)
    tops, xs = stairs_heights(root, c.KEPT)
    sy = axis_map(root, vertical=True)
    px_per_doc = sy(1) - sy(0)
    got = [(t - sy(0)) / px_per_doc for t in tops]
    edges, _ = c._bins(values, values.dtype.kind == "i")
    want = np.histogram(values, edges)[0]
    assert len(got) == len(want) and sum(want) == len(values)
    tol = 0.06 / abs(px_per_doc)                                   # coordinates have one decimal
    assert np.allclose(got, want, atol=tol + 1e-9), (got, want)
    assert xs == sorted(xs)


def test_counts_match_numpy_histogram():
    rng = np.random.default_rng(0)
    for values in (rng.normal(size=5000), rng.integers(0, 50, 5000), np.array([0.0, 1.0, 1.0])):
        for edges in (np.linspace(values.min(), values.max(), 41), np.array([-1, 0, 0.5, 1, 10.0]),
                      np.unique(np.geomspace(1, 60, 20).round())):
            assert (c.counts(values, edges) == np.histogram(values, edges)[0]).all()


def test_nan_and_inf_are_skipped():
    v = np.array([1.0, np.nan, 2.0, np.inf, -np.inf, 2.0])
    s, root = svg_of(c.histogram(v, "x", "t"))
    check_svg(s, root)
    tops, _ = stairs_heights(root, c.KEPT)
    sy = axis_map(root, vertical=True)
    assert sum((t - sy(0)) / (sy(1) - sy(0)) for t in tops) == pytest.approx(3, abs=0.05)
    s, root = svg_of(c.signal_grid([c.Signal("q", v, np.array([np.nan, 5.0]), [("min", 1.5)])], "g"))
    check_svg(s, root)


def test_threshold_lines_where_the_values_are():
    values = np.linspace(0, 100, 1001)
    _, root = svg_of(c.histogram(values, "x", "t", [("min", 25.0), ("far", 1e9)]))
    dashed = [p for p in root.iter("path") if p.get("stroke-dasharray") and p.get("stroke") == c.LINE]
    lines = [p for p in dashed if p.find("title") is not None]
    assert [p.find("title").text for p in lines] == ["min 25"]       # far off-scale: in the legend only
    assert {"min 25", "far 1e+09"} <= set(texts(root))
    sx = axis_map(root, vertical=False)
    x = float(re.match(rf"M{NUM}", lines[0].get("d")).group(1))
    assert x == pytest.approx(sx(25), abs=0.3)


def test_signal_grid_stacks_kept_and_removed():
    kept, removed = np.array([1, 2, 2, 3]), np.array([0, 0, 2, 5, 5])
    s, root = svg_of(c.signal_grid([c.Signal("q_x", kept, removed, [("min_x", 1.0)]),
                                    c.Signal("q_y", np.arange(50.0))], "02-filter: signal columns"))
    check_svg(s, root)
    shown = texts(root)
    assert {"q_x", "min_x 1", "q_y", "kept", "removed", "threshold", "02-filter: signal columns"} <= set(shown)
    blue, _ = stairs_heights(root, c.KEPT)
    orange, _ = stairs_heights(root, c.REMOVED)
    assert len(blue) == len(orange) == 6                              # one bin per value 0..5
    assert all(o <= b + 1e-9 for o, b in zip(orange, blue))          # removed stacked on top (smaller y)


def test_log_bins_for_long_tailed_counts():
    values = np.concatenate([np.full(500, 50), np.arange(1, 20000, 40)]).astype(np.int64)
    _, root = svg_of(c.histogram(values, "x", "t"))
    assert {"10", "100", "1k", "10k"} <= set(texts(root))


def test_empty_zero_and_single_values_do_not_crash():
    cases = [c.bars([], [], "x", "empty"), c.bars(["a", "b"], [0, 0], "x", "zeros"),
             c.grouped_barh(["a"], {"s": [float("nan")]}, "x", "nan"),
             c.funnel_docs(["00 read"], [0], [0], {}), c.funnel_docs([], [], [], {}),
             c.histogram(np.array([]), "x", "none"), c.histogram(np.array([7]), "x", "one"),
             c.histogram(np.array([np.nan]), "x", "nan"), c.histogram(np.array([0.5, 0.5]), "x", "same"),
             c.histogram(np.array([3] * 10), "x", "ints", [("seq_len", 3.0)]),
             c.signal_grid([], "no signals"),
             c.signal_grid([c.Signal("a", np.array([np.nan])), c.Signal("b", np.array([], float)),
                            c.Signal("c", np.array([1.0]), np.array([])), c.Signal("d", np.zeros(5, np.int64))],
                           "edge cases")]
    for chart in cases:
        s, root = svg_of(chart)
        check_svg(s, root)
    _, root = svg_of(c.signal_grid([c.Signal("a", np.array([np.nan]))], "g"))
    assert "a: no values" in texts(root)


def test_output_is_deterministic():
    def build():
        rng = np.random.default_rng(3)
        return "".join(c.to_svg(ch, "x") for ch in (
            c.funnel_docs(["a", "b"], [10, 10], [10, 4], {"r": [0, 6]}),
            c.signal_grid([c.Signal("q", rng.normal(size=500), rng.normal(size=100), [("t", 0.1)])], "g"),
            c.histogram(rng.integers(0, 5000, 500), "x", "t")))
    assert build() == build()


def test_ticks_are_round_and_cover_the_range():
    for lo, hi in [(0, 118709), (0, 1), (-0.5, 0.5), (0, 3.7e6), (2.5, 3.5), (0, 7), (0, 0)]:
        vals, step = c.ticks(lo, hi)
        mant = step / 10 ** math.floor(math.log10(step))
        assert round(mant, 9) in (1, 2, 2.5, 5) and 2 <= len(vals) <= 7, (lo, hi, vals)
        assert all(lo - 1e-9 <= v <= max(hi, lo + 1) + 1e-9 for v in vals)
    vals, step = c.ticks(0, 7, 4, integer=True)
    assert step == 2 and vals == [0, 2, 4, 6]
    assert c.tick_labels([0, 50000, 100000], 50000) == ["0", "50k", "100k"]
    assert c.tick_labels([0, 0.25, 0.5], 0.25) == ["0", "0.25", "0.50"]
    assert c.tick_labels([0, 2e6, 4e6], 2e6) == ["0", "2M", "4M"]
