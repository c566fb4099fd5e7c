"""gpupipe's own extractor (`extractor: fast` / `auto`), the per-page time bound, and determinism across workers."""

import threading
import time

import pandas as pd
import pytest
import yaml

from gpupipe.extract.fast import extract_text
from gpupipe.extract.timeout import PageTimeout, time_limit
from gpupipe.stages.base import RunContext
from gpupipe.stages.extract import Extract, ExtractConfig

PROSE = ("Rivers carve valleys over thousands of years as water erodes rock and carries sediment downstream. "
         "In mountain regions the slope is steep, so the water moves quickly and cuts deep V-shaped valleys. ")

DOC_PAGE = f"""<html><head><title>Docs</title></head><body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/api">API reference</a></li><li><a href="/faq">FAQ</a></li></ul></nav>
<div class="cookie-banner">We use cookies to improve your experience. Accept all cookies.</div>
<main><h1>Installing the tool</h1>
<p>{PROSE}</p>
<h2>From a wheel</h2>
<p>{PROSE.replace("Rivers", "Wheels")}</p>
<pre><code>pip install tool
    tool --help   # indented, kept verbatim</code></pre>
<img src="x.png" alt="A diagram of the installer that should not appear">
<table><tr><th>Platform</th><th>Wheel</th></tr><tr><td>Linux</td><td>manylinux_2_17</td></tr>
<tr><td>macOS</td><td>arm64</td></tr></table>
<p>{PROSE.replace("Rivers", "Tables")}</p>
<div class="share-buttons"><a href="/t">Tweet</a> <a href="/f">Share on Facebook</a></div>
</main>
<aside class="sidebar"><h3>Related</h3><ul><li><a href="/a">Another page about rivers</a></li></ul></aside>
<footer>Copyright 2024 Example Docs. Privacy policy. Terms of use.</footer></body></html>"""


def _stage(**params) -> Extract:
    stage = Extract(ExtractConfig(**params), RunContext())
    stage.setup()
    return stage


def _frame(htmls):
    return pd.DataFrame({"id": [f"p{i}" for i in range(len(htmls))], "doc_index": range(len(htmls)),
                         "url": ["https://example.com/docs"] * len(htmls), "html": htmls})


def test_fast_keeps_structure_and_drops_boilerplate():
    lines = extract_text(DOC_PAGE).text.split("\n")
    assert "Installing the tool" in lines and "From a wheel" in lines          # headings as lines of their own
    assert "pip install tool\n    tool --help   # indented, kept verbatim" in "\n".join(lines)  # <pre> verbatim
    assert "Platform | Wheel" in lines and "Linux | manylinux_2_17" in lines   # table rows as text rows
    text = "\n".join(lines)
    assert "Wheels carve" in text and "Tables carve" in text
    for boiler in ("API reference", "cookies", "Tweet", "Another page", "Copyright", "diagram of the installer"):
        assert boiler not in text, boiler


def test_fast_tables_can_be_left_out():
    text = extract_text(DOC_PAGE, tables=False).text
    assert "Wheels carve" in text and "manylinux" not in text


@pytest.mark.parametrize("extractor", ["fast", "auto"])
def test_stage_extractors_and_reasons(extractor):
    df = _frame([DOC_PAGE, "", "<html><body><div></div></body></html>"])
    kept, rejects, stats = _stage(extractor=extractor).run_partition(df)
    assert kept["id"].tolist() == ["p0"] and "Wheels carve" in kept["text"].iloc[0]
    assert dict(stats.removed) == {"empty_html": 1, "no_main_text": 1}
    assert stats.extra["peak_extract_page_ms"] >= 0 and "extract_ms" in stats.extra
    if extractor == "auto":   # both pages with HTML kept little text: trafilatura was asked for them
        assert stats.extra["extract_fallback"] == 2


def test_fast_survives_pathological_nesting():
    """20,000 nested divs: the block walk is iterative (no recursion limit)."""
    html = "<html><body>" + "<div>" * 20000 + f"<p>{PROSE}</p>" + "</div>" * 20000 + "</body></html>"
    assert "Rivers carve" in extract_text(html).text


def _huge_table_page(rows: int = 5000) -> str:
    cells = "".join("<tr>" + "".join(f"<td><div><span>c{i} {j}</span></div></td>" for j in range(10)) + "</tr>"
                    for i in range(rows))
    return f"<html><body><article><p>{PROSE}</p><table>{cells}</table></article></body></html>"


def test_timeout_stops_a_pathological_page_and_the_partition_goes_on():
    """trafilatura takes seconds on a 50,000-cell table (about 9 s here); with a 0.5 s limit it is stopped, counted
    as extract_timeout, and the next page is extracted."""
    stage = _stage(extractor="trafilatura", extract_timeout=0.5)
    t0 = time.perf_counter()
    kept, rejects, stats = stage.run_partition(_frame([_huge_table_page(), DOC_PAGE]))
    elapsed = time.perf_counter() - t0
    assert dict(stats.removed) == {"extract_timeout": 1}
    assert kept["id"].tolist() == ["p1"] and "Wheels carve" in kept["text"].iloc[0]
    assert elapsed < 4.0, elapsed
    assert [t.name for t in threading.enumerate() if t.name.startswith("gpupipe")] == \
        ["gpupipe-extract-watchdog"]   # only the one idle watchdog; nothing left extracting


def test_time_limit_in_a_worker_thread():
    """Dask runs tasks in worker threads, where signal-based timers do not work: the bound works there too."""
    outcome = []

    def work():
        try:
            with time_limit(0.2):
                while True:
                    pass
        except PageTimeout:
            outcome.append("stopped")
        with time_limit(5):            # a later page in the same thread is not hit by a stale exception
            outcome.append(sum(range(1000)))
    th = threading.Thread(target=work)
    th.start()
    th.join(10)
    assert not th.is_alive() and outcome == ["stopped", 499500]


def test_time_limit_off():
    with time_limit(0):
        assert sum(range(10)) == 45


@pytest.mark.slow
def test_same_output_for_one_and_two_workers(tmp_path):
    """Determinism: `extractor: auto` gives the same parts with 1 and 2 workers (and on a resumed run)."""
    from gpupipe.cli import main as gpupipe_main
    from gpupipe.io.parts import part_paths, read_part

    html_dir = tmp_path / "html"
    html_dir.mkdir()
    for i in range(8):
        (html_dir / f"page{i}.html").write_text(DOC_PAGE.replace("Installing", f"Installing {i}"))

    def run(workers: int, name: str) -> list:
        cfg = {"input": {"path": str(html_dir)}, "output": str(tmp_path / name), "device": "cpu",
               "executor": {"kind": "local" if workers == 1 else "dask", "workers": workers, "partition_docs": 2},
               "stages": [{"extract": {"extractor": "auto"}}]}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        assert gpupipe_main(["run", str(path)]) == 0
        frames = [read_part(p)[["id", "text"]] for p in part_paths(tmp_path / name / "stages" / "01-extract")]
        return sorted(zip(*pd.concat(frames).T.values))

    one, two = run(1, "one"), run(2, "two")
    assert one == two and len(one) == 8
    assert run(1, "one") == one   # run again on the finished run directory: resume keeps the same output
