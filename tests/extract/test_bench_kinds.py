"""profiling/bench_extract.py --wcxb: WCXB's layout (html/<id>.html.gz, ground-truth.json.gz), its bag-of-words F1,
the choose/held-out split by page id, the per-kind table and the trafilatura cache, on a miniature run as a script."""

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

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
    (root / "html").mkdir(parents=True)
    rows = "".join(f"<li class='item'><a href='/i{i}'>Listed river guide number {i} with a title</a></li>"
                   for i in range(5))
    pages = {"0001": ("article", f"<html><body><article><p>{PROSE}</p></article></body></html>", PROSE),
             "0002": ("listing", f"<html><body><ul>{rows}</ul></body></html>",
                      "\n".join(f"Listed river guide number {i} with a title" for i in range(5))),
             "0003": ("article", "<html><body><div id='app'></div></body></html>", "")}   # empty reference: left out
    truth = {}
    for key, (kind, html, text) in pages.items():
        (root / "html" / f"{key}.html.gz").write_bytes(gzip.compress(html.encode("utf-8")))
        truth[key] = {"text": text, "url": None, "type": kind, "lang": "en"}
    (root / "ground-truth.json.gz").write_bytes(gzip.compress(json.dumps(truth).encode("utf-8")))
    return root


def test_wcxb_loader_metric_and_split(tmp_path):
    bench = _load_bench()
    pages, truth = bench.load_wcxb(_miniature(tmp_path), None)
    assert list(pages["id"]) == ["0001", "0002"] and set(truth) == {"0001", "0002"}
    assert bench.bow_f1("The river, the VALLEY", "the river the valley") == 1.0
    assert bench.bow_f1("a b c d", "a b") == 2 * 2 / (4 + 2) and bench.bow_f1("a b", None) == 0.0
    # the split depends on the id alone: the same page is in the same half in any subset, and both halves occur
    halves = [bench.choose_half(f"{i:04d}") for i in range(200)]
    assert 60 < sum(halves) < 140 and bench.choose_half("0001") == bench.choose_half("0001")


def test_bench_script_prints_kinds_and_reuses_its_cache(tmp_path):
    root, cache = _miniature(tmp_path / "wcxb"), tmp_path / "cache"
    cmd = [sys.executable, str(BENCH), "--wcxb", str(root), "--cache", str(cache), "--skip", "extract (resiliparse)"]
    first = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert first.returncode == 0, first.stderr
    assert "2 pages from" in first.stdout and "choose half" in first.stdout and "held-out half" in first.stdout
    assert len(list(cache.glob("*.json"))) == 2   # trafilatura defaults and precision mode, keyed by the pages
    # columns: article, listing, all; each page is in one half, so each half has one kind with no page (nan)
    rows = [line.split()[2:5] for line in first.stdout.splitlines() if line.startswith("extract (auto) ")
            and "vs" not in line and "[" not in line]
    assert len(rows) == 2 and "extract (resiliparse)" not in first.stdout
    # the listing's titles are links: auto keeps them, as it keeps the article (F1 1.0 on both, in either half)
    assert sorted(rows[0] + rows[1]) == ["1.000"] * 4 + ["nan"] * 2 and rows[0][2] == rows[1][2] == "1.000"
    # and the gap to trafilatura's defaults per kind with its interval: one page per half, so each interval is a
    # point (or nan where the half has no page of the kind); columns article, listing, all
    gaps = [line for line in first.stdout.splitlines() if line.startswith("extract (auto) ") and "[" in line
            and "vs" not in line]
    num = r"([+-](?:\d\.\d{3}|nan))"
    cells = [re.findall(rf"{num} \[{num},{num}\]", g) for g in gaps]
    assert len(gaps) == 2 and [len(c) for c in cells] == [3, 3], gaps
    assert all(mean == lo == hi for c in cells for mean, lo, hi in c)
    assert sorted(c[0][0] == "+nan" or c[1][0] == "+nan" for c in cells) == [True, True]   # one empty kind a half
    second = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert second.returncode == 0, second.stderr
    # trafilatura's rows come from the cache: the same scores and the same timings, to the digit
    pick = [line for line in first.stdout.splitlines() if line.startswith("trafilatura defaults")]
    assert len(pick) == 2
    assert pick == [line for line in second.stdout.splitlines() if line.startswith("trafilatura defaults")]
