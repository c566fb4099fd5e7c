"""profiling/bench_extract.py's scoring of snippet sets, on a miniature of trafilatura's evaluation set (its layout:
tests/evaldata.json, the pages in tests/eval/ or tests/cache/), run as a script the way the benchmark is run."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.helpers import ROOT


BENCH = ROOT / "profiling" / "bench_extract.py"
PROSE = ("Rivers carve valleys over thousands of years as water erodes rock and carries sediment downstream. "
         "In mountain regions the slope is steep, so the water moves quickly and cuts deep V-shaped valleys. ")


def _load_bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_extract", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _miniature(root: Path) -> Path:
    tests = root / "tests"
    (tests / "eval").mkdir(parents=True)
    (tests / "cache").mkdir()
    page_a = (f"<html><body><nav><a href='/'>Startseite</a> <a href='/k'>Kontakt</a></nav><article><p>{PROSE}</p>"
              f"<p>Die Gurtla\u0308nge wird gepru\u0308ft.</p>"   # decomposed in the page, composed in the snippet
              f"<p>{PROSE.replace('Rivers', 'Streams')}</p></article><footer>Impressum</footer></body></html>")
    (tests / "eval" / "a.html").write_bytes(page_a.encode("utf-8"))
    page_b = f"<html><body><p>{PROSE.replace('Rivers', 'Glaciers')}</p></body></html>"
    (tests / "cache" / "b.html").write_bytes(page_b.encode("utf-8"))
    wanted_a = ["Rivers carve valleys", "Gurtl\u00e4nge wird gepr\u00fcft"]
    data = {"https://example.org/a": {"file": "a.html", "with": wanted_a, "without": ["Impressum", "Startseite"]},
            "https://example.org/b": {"file": "b.html", "with": ["Glaciers   carve"], "without": ["Rivers carve"]}}
    (tests / "evaldata.json").write_text(json.dumps(data), encoding="utf-8")
    return root


def test_eval_set_loader_and_snippet_counts(tmp_path):
    bench = _load_bench()
    pages, truth = bench.load_trafilatura_eval(_miniature(tmp_path), None)
    assert list(pages["id"]) == ["https://example.org/a", "https://example.org/b"]   # sorted by URL, cache/ or eval/
    assert "Rivers carve" in pages["html"][0] and truth["https://example.org/b"]["avoid"] == ["Rivers carve"]
    # whitespace collapsed on both sides; counts are (wanted found, unwanted found, wanted, unwanted)
    assert bench.snippet_counts(truth["https://example.org/b"], "Glaciers carve valleys") == (1, 0, 1, 1)
    assert bench.snippet_counts(truth["https://example.org/a"], "Rivers carve valleys. Impressum") == (1, 1, 2, 2)
    assert bench.snippet_counts(truth["https://example.org/a"], None) == (0, 0, 2, 2)
    p, r, f = bench.snippet_f1(np.array([(1, 1, 2, 2), (1, 0, 1, 1)]))
    assert (p, r) == (2 / 3, 2 / 3) and abs(f - 2 / 3) < 1e-12


def test_bench_script_scores_the_miniature(tmp_path):
    root = _miniature(tmp_path)
    out = subprocess.run([sys.executable, str(BENCH), "--trafilatura-eval", str(root), "--bootstrap", "1"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert "2 pages from" in out and "3 wanted and 3 unwanted snippets" in out
    rows = {line.split()[1].strip("()") for line in out.splitlines() if line.startswith("extract (")}
    # every row of the second table: name, precision, recall, F1, F1 tune, F1 held; the fast extractor finds all
    # three wanted snippets (the umlauts composed) and none of the unwanted ones
    fast = [line.split() for line in out.splitlines() if line.startswith("extract (fast)")][-1]
    assert fast[2:5] == ["1.0000", "1.0000", "1.0000"], out
    assert "auto" in rows and "trafilatura" in rows


def test_paired_interval_tells_a_real_gap_from_noise():
    """The per-kind gap's 95% interval: a constant gap on 40 pages sits inside it and excludes 0; the same mean gap
    carried by page-to-page swings of +-0.3 (extractors winning or losing single pages) gives an interval across 0."""
    paired_interval = _load_bench().paired_interval
    mean, lo, hi = paired_interval(np.full(40, 0.02))
    assert np.allclose([mean, lo, hi], 0.02, rtol=0, atol=1e-12)
    swings = np.where(np.arange(40) % 2 == 0, 0.32, -0.28)   # mean +0.02
    mean, lo, hi = paired_interval(swings)
    assert abs(mean - 0.02) < 1e-9 and lo < 0 < hi and hi - lo > 0.1
    assert paired_interval(swings) == (mean, lo, hi)            # seeded: the same interval every run
    assert all(np.isnan(paired_interval(np.array([]))))
