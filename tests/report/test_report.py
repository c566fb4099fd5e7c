"""RUN/report.html on a real run, opened in a real headless Chromium; the stats schema; quiet non-TTY progress;
the NVTX ranges the profiling notes list."""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import numpy as np
import pytest

from gpupipe.cli import main
from gpupipe.report import add_report_parser, write_report
from gpupipe.report.schema import RUN_STATS_SCHEMA, validate_run_dir, validate_stage_stats, validate_stats
from tests.helpers import ROOT as REPO

CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium") if p and os.path.exists(p)), None)
# Debian's chromium, with nothing that reaches out to the network (the report must not need it either)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--host-resolver-rules=MAP * ~NOTFOUND"]
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get "
                                                             "install -y chromium); the browser test is skipped")


@pytest.fixture(scope="module")
def run(tmp_path_factory, synth_crawl):
    """A real run of configs/default.yaml on the synthetic crawl, and its report."""
    from tests.helpers import write_config

    tmp = tmp_path_factory.mktemp("report")
    cfg = write_config(tmp / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp / "run"))
    assert main(["run", str(cfg)]) == 0
    root = tmp / "run"
    report = write_report(root)
    manifest = json.loads((root / "shards" / "manifest.json").read_text())
    return {"root": root, "report": report, "stats": json.loads((root / "stats.json").read_text()),
            "manifest": manifest, "index": json.loads((root / "audit" / "index.json").read_text())}


# -- a small DOM from the browser's serialization ----------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag, attrs, parent=None):
        self.tag, self.attrs, self.parent, self.children, self.own_text = tag, dict(attrs), parent, [], []

    def text(self) -> str:
        return "".join(self.own_text) + "".join(c.text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            yield from c.iter()

    def find_all(self, tag=None, **attrs):
        return [n for n in self.iter() if (tag is None or n.tag == tag)
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]


class DomBuilder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = self.cur = Node("#document", {})

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.own_text.append(data)


def parse(html: str) -> Node:
    b = DomBuilder()
    b.feed(html)
    return b.root


def chromium(*args, timeout=120) -> subprocess.CompletedProcess:
    import tempfile

    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=timeout)


@pytest.fixture(scope="module")
def dom(run):
    r = chromium("--dump-dom", run["report"].resolve().as_uri())
    assert r.returncode == 0 and "</html>" in r.stdout, r.stderr[-2000:]
    return parse(r.stdout)


def by_id(dom: Node, id_: str) -> Node:
    hits = dom.find_all(id=id_)
    assert len(hits) == 1, f"#{id_}: {len(hits)} elements in the rendered page"
    return hits[0]


def values(dom: Node, chart: str):
    node = by_id(dom, f"chart-{chart}")
    assert node.find_all("svg"), f"chart {chart} has no SVG"
    return json.loads(node.attrs["data-values"])


def number(text: str) -> float:
    return float(text.replace(",", ""))


# -- the report in a browser ---------------------------------------------------------------------------------------


@needs_chromium
def test_every_chart_and_table_is_rendered(dom, run):
    charts = {n.attrs["data-chart"] for n in dom.find_all("figure")}
    assert {"funnel-docs", "funnel-bytes", "languages-03", "tokens-lang-08", "signals-03-langid",
            "signals-04-doc_filter", "clusters-07", "tokens-hist-08", "time"} <= charts
    for c in charts:
        fig = by_id(dom, f"chart-{c}")
        assert fig.find_all("svg") and fig.find_all("path"), f"chart {c} drew nothing"
        assert fig.find_all("figcaption")[0].text().strip()
    tables = {n.attrs.get("data-table") for n in dom.find_all("table")}
    assert {"summary", "funnel", "dedup", "tokens-source", "tokens-lang-08", "throughput", "extra"} <= tables
    for folder in run["index"]["stages"]:
        assert f"audit-{folder}" in tables
    assert "funnel" in by_id(dom, "table-funnel").attrs["data-table"]
    assert by_id(dom, "config-resolved").text().startswith("input:")
    assert "No mixture stage" in by_id(dom, "mixture").text()


@needs_chromium
def test_numbers_shown_equal_stats_json(dom, run):
    stats, manifest = run["stats"], run["manifest"]
    body = [r for r in by_id(dom, "table-funnel").iter() if r.tag == "tr" and "data-stage" in r.attrs]
    assert [r.attrs["data-stage"] for r in body] == [s["name"] for s in stats["stages"]]
    for row, s in zip(body, stats["stages"]):
        for key in ("docs_in", "docs_out", "bytes_in", "bytes_out"):
            cell = row.find_all("td", data_key=key)[0]
            assert int(cell.attrs["data-value"]) == s[key] and number(cell.text()) == s[key], (s["name"], key)
        reasons = [sp for sp in row.find_all("span") if "data-reason" in sp.attrs]
        assert {sp.attrs["data-reason"]: int(sp.attrs["data-value"]) for sp in reasons} == s["removed"]
        for sp in reasons:
            assert sp.text() == f"{sp.attrs['data-reason']} {s['removed'][sp.attrs['data-reason']]:,}"
    summary = by_id(dom, "table-summary")
    for key in ("input_records", "output_docs", "removed_total", "docs_added_total", "seconds"):
        assert number(summary.find_all("td", data_key=key)[0].text()) == stats[key]
    for key in ("tokens", "sequences", "documents_packed"):
        assert number(summary.find_all("td", data_key=f"manifest.{key}")[0].text()) == manifest[key]

    funnel = values(dom, "funnel-docs")
    assert funnel["docs_in"] == [s["docs_in"] for s in stats["stages"]]
    assert funnel["kept"] == [s["docs_out"] for s in stats["stages"]]
    for reason, counts in funnel["removed"].items():
        assert counts == [s["removed"].get(reason, 0) for s in stats["stages"]]
    assert values(dom, "funnel-bytes")["bytes_out"] == [s["bytes_out"] for s in stats["stages"]]
    assert values(dom, "time")["seconds"] == [s["seconds"] for s in stats["stages"]]

    st = {s["name"]: s for s in stats["stages"]}
    assert values(dom, "languages-03") == {k[10:]: v for k, v in st["langid"]["extra"].items()
                                          if k.startswith("kept_lang_")}
    assert values(dom, "tokens-lang-08") == {k[7:]: v for k, v in st["tokenize"]["extra"].items()
                                            if k.startswith("tokens_")}
    assert values(dom, "clusters-07") == {k[13:]: v for k, v in st["fuzzy_dedup"]["extra"].items()
                                         if k.startswith("cluster_size_")}
    # the bar labels in the SVG are the same numbers, as text
    svg_text = by_id(dom, "chart-languages-03").text()
    for n in values(dom, "languages-03").values():
        assert f"{n:,}" in svg_text
    for row in by_id(dom, "table-tokens-source").find_all("tr", data_source="web"):
        assert number(row.find_all("td", data_key="tokens")[0].text()) == manifest["tokens_per_source"]["web"]
    for row in (r for r in by_id(dom, "table-throughput").iter() if "data-stage" in r.attrs):
        s = st[row.attrs["data-stage"]]
        assert float(row.find_all("td", data_key="seconds")[0].attrs["data-value"]) == s["seconds"]
    extra_rows = [r for r in by_id(dom, "table-extra").iter() if "data-stage" in r.attrs]
    assert len(extra_rows) == sum(len(s["extra"]) for s in stats["stages"])


@needs_chromium
def test_thresholds_come_from_the_resolved_config(dom):
    langid = values(dom, "signals-03-langid")["lang_score"]
    assert langid["thresholds"] == {"min_score zh": 0.65, "min_score en": 0.8, "min_score default": 0.85}
    assert langid["removed"] > 0          # rejects carry lang_score: removed documents are plotted too
    doc = values(dom, "signals-04-doc_filter")
    assert doc["q_word_count"]["thresholds"] == {"min_words": 50, "max_words": 100000}
    assert doc["q_mean_word_length"]["thresholds"] == {"min_mean_word_length": 3, "max_mean_word_length": 10}


@needs_chromium
def test_audit_tables_in_the_page(dom, run):
    for folder, info in run["index"]["stages"].items():
        det = by_id(dom, f"audit-{folder}")
        assert det.tag == "details" and "open" not in det.attrs            # collapsed
        assert int(det.attrs["data-samples"]) == info["kept_sampled"] + info["removed_sampled"]
        shown = [r.attrs["data-sample"] for r in det.iter() if r.tag == "tr" and "data-sample" in r.attrs]
        lines = (run["root"] / "audit" / info["file"]).read_text().splitlines()
        assert shown == [json.loads(x)["sample_id"] for x in lines[:25]]


@needs_chromium
def test_screenshot_renders(run, tmp_path):
    png = tmp_path / "report.png"
    r = chromium("--window-size=1280,2400", f"--screenshot={png}", run["report"].resolve().as_uri())
    assert r.returncode == 0 and png.is_file(), r.stderr[-2000:]
    Image = pytest.importorskip("PIL.Image", reason="Pillow not installed (it came with matplotlib, which the "
                                                    "report no longer needs)")
    img = Image.open(png).convert("RGB").resize((320, 600))
    colors = img.getcolors(maxcolors=1 << 16) or []
    drawn = sum(n for n, c in colors if sum(c) < 600)       # not white / light grey background
    assert drawn > 0.05 * 320 * 600, "the screenshot is (nearly) blank"
    assert any(c[2] > c[0] + 40 for _, c in colors), "no blue bars: the charts did not render"


def test_report_is_self_contained(run):
    """Nothing the browser would fetch: no scripts, links, images or frames, href only to in-page anchors, CSS
    without url()/@import. Checked on the parsed document, so text that merely shows HTML (audit samples of the
    read stage) does not count."""
    dom = parse(run["report"].read_text(encoding="utf-8"))
    tags = {n.tag for n in dom.iter()}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed", "image", "audio", "video", "base"}
    for n in dom.iter():
        for name, value in n.attrs.items():
            value = value or ""
            assert name != "src", n.tag
            if name.endswith("href"):
                assert value.startswith("#"), (n.tag, name, value)
            if name == "style" or name == "clip-path":
                assert not re.search(r"url\(\s*['\"]?(?!#)", value), (n.tag, value)
            assert not name.startswith("xmlns"), "namespace URLs left in an inline SVG"
    css = "".join(n.text() for n in dom.find_all("style"))
    assert "@import" not in css and "url(" not in css


def test_every_chart_is_a_well_formed_scalable_svg(run):
    """Each chart's <svg> parses as XML on its own, has a viewBox, no ids (several share the page) and no
    namespace URL; every id in the page is unique; the funnel's bars are as long as the stats say."""
    import xml.etree.ElementTree as ET

    from gpupipe.report.charts import KEPT

    page = run["report"].read_text(encoding="utf-8")
    figures = re.findall(r'<figure id="chart-([^"]+)"[^>]*>(<svg.*?</svg>)<figcaption>', page, re.DOTALL)
    assert len(figures) == page.count("<svg") == page.count("</svg>") >= 9
    roots = {}
    for chart, svg in figures:
        root = ET.fromstring(svg)
        assert root.tag == "svg" and re.fullmatch(r"0 0 [\d.]+ [\d.]+", root.get("viewBox")), chart
        assert not any(el.get("id") for el in root.iter()) and "xmlns" not in svg, chart
        assert root.find("path") is not None or root.find(".//path") is not None, chart
        roots[chart] = root
    ids = [n.attrs["id"] for n in parse(page).iter() if n.attrs.get("id")]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})

    kept = [s["docs_out"] for s in run["stats"]["stages"]]
    bars = [p for p in roots["funnel-docs"].iter("path") if p.get("fill") == KEPT and p.find("title") is not None]
    widths = [float(re.search(r"h([\d.]+)", p.get("d")).group(1)) for p in bars]
    assert len(widths) == sum(k > 0 for k in kept)
    assert np.allclose(np.array(widths) / max(widths), np.array([k for k in kept if k]) / max(kept), atol=0.005)


def test_report_cli_and_sections_of_a_short_run(tmp_path, synth_crawl, capsys):
    """A run without tokenize/pack/dedup: the report still has every section, saying what is absent."""
    from tests.helpers import write_config

    cfg = write_config(tmp_path / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp_path / "run"),
                       stages=[{"extract": {}}, {"langid": {"keep": ["en"]}}])
    assert main(["run", str(cfg)]) == 0
    p = argparse.ArgumentParser(prog="gpupipe")
    add_report_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["report", str(tmp_path / "run"), "--audit-size", "10", "--audit-rows", "3"])
    assert args.fn(args) == 0
    html = (tmp_path / "run" / "report.html").read_text()
    for sid in ("summary", "funnel", "languages", "signals", "dedup", "tokens", "mixture", "throughput", "audit",
                "config"):
        assert f'<section id="{sid}">' in html
    assert "No tokenize stage" in html and "No dedup stage" in html
    assert html.count('<tr data-sample="02-langid:') == 3
    args = p.parse_args(["report", str(tmp_path)])
    assert args.fn(args) == 2                              # not a run directory


def test_histograms_are_sampled_when_large(run, monkeypatch):
    from gpupipe.report import html as report_html

    monkeypatch.setattr(report_html, "MAX_VALUES", 40)
    r = report_html.Run.load(run["root"])
    sigs, n = report_html.stage_signals(r, 4)
    assert n == run["stats"]["stages"][4]["docs_out"] > 40
    assert sigs and all(10 < len(s.kept) < 80 for s in sigs)
    again, _ = report_html.stage_signals(r, 4)
    assert all((a.kept == b.kept).all() for a, b in zip(sigs, again))        # seeded


# -- stats.json schema --------------------------------------------------------------------------------------------


def test_stats_schema_on_a_real_run(run):
    assert validate_stats(run["stats"]) == []
    assert validate_run_dir(run["root"]) == []
    stage = json.loads((run["root"] / "stages" / "03-langid" / "stats.json").read_text())
    assert validate_stage_stats(stage) == []
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.validate(run["stats"], RUN_STATS_SCHEMA)


def test_stats_schema_catches_problems(run):
    bad = json.loads(json.dumps(run["stats"]))
    bad["stages"][3]["docs_out"] += 1
    assert any("docs_in" in p for p in validate_stats(bad))
    bad = json.loads(json.dumps(run["stats"]))
    bad["new_field"] = 1
    assert any("undocumented field 'new_field'" in p for p in validate_stats(bad))
    bad = json.loads(json.dumps(run["stats"]))
    bad["stages"][0]["removed"]["x"] = "7"
    bad["device"] = "tpu"
    problems = validate_stats(bad)
    assert any("stages[0].removed.x" in p for p in problems) and any("device" in p for p in problems)


def test_schema_doc_lists_every_field():
    doc = (REPO / "docs" / "stats_schema.md").read_text()
    for key in RUN_STATS_SCHEMA["properties"]:
        assert f"`{key}`" in doc, key
    for key in RUN_STATS_SCHEMA["properties"]["stages"]["items"]["properties"]:
        assert f"`{key}`" in doc, key


# -- progress: quiet when not on a terminal ------------------------------------------------------------------------


def test_non_tty_run_prints_only_the_summary(tmp_path, synth_crawl):
    from tests.helpers import write_config

    cfg = write_config(tmp_path / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp_path / "run"))
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    r = subprocess.run([sys.executable, "-m", "gpupipe", "run", str(cfg)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    for stream in (r.stdout, r.stderr):
        assert "\x1b[" not in stream and "\r" not in stream          # no ANSI codes, no redrawn lines
        assert "partitions" not in stream and "docs/s ·" not in stream   # no progress columns
        assert not re.search(r"━+╸|╺━+", stream)                       # no partly filled bar
    assert "gpupipe funnel" in r.stdout and "run directory:" in r.stdout
    bars = [line for line in r.stdout.splitlines() if "━" in line]
    assert all(line.lstrip()[:1] in "┏┡┗└┌" for line in bars), bars     # only the table's own borders


# -- profiling notes -----------------------------------------------------------------------------------------------


def nvtx_ranges_in_code() -> set[str]:
    """Every range name passed to annotate(...) / _nvtx_range(...), f-string fields written as <stage>."""
    names = set()
    for path in [*(REPO / "gpupipe").rglob("*.py"), *(REPO / "kernels").glob("*.py")]:
        for m in re.finditer(r"""(?:annotate|_nvtx_range)\(\s*(f?)["']([^"']+)["']""", path.read_text()):
            names.add(re.sub(r"\{[^}]*\}", "<stage>", m.group(2)) if m.group(1) else m.group(2))
    names.discard("message")
    return names


def test_profiling_notes_name_every_nvtx_range():
    ranges = nvtx_ranges_in_code()
    assert {"gpupipe/<stage>", "gpupipe/<stage>/keys", "gpupipe/kernel/minhash"} <= ranges
    readme = (REPO / "profiling" / "README.md").read_text()
    listed = subprocess.run(["bash", str(REPO / "profiling" / "nsys.sh"), "--list"], capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0, listed.stderr
    for name in ranges:
        assert f"`{name}`" in readme, f"profiling/README.md does not explain NVTX range {name}"
        assert name in listed.stdout, f"nsys.sh --list does not name {name}"


def test_profiling_readme_lists_every_script():
    readme = (REPO / "profiling" / "README.md").read_text()
    for script in sorted((REPO / "profiling").glob("*")):
        if script.suffix in (".py", ".sh"):
            assert f"profiling/{script.name}" in readme, f"profiling/README.md does not list {script.name}"


def test_a_resumed_run_reports_the_time_of_its_stages(tmp_path, synth_crawl):
    """#28 (7a): a fully resumed run's report gives the stages' recorded time (summed) and says they were resumed,
    not only the seconds of the invocation that found everything done."""
    from tests.helpers import write_config

    cfg = write_config(tmp_path / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp_path / "run"),
                       stages=[{"extract": {}}, {"langid": {"keep": ["en"]}}])
    assert main(["run", str(cfg)]) == 0
    first = json.loads((tmp_path / "run" / "stats.json").read_text())
    assert "resumed" not in (tmp_path / "run" / "report.html").read_text().split("<main>")[0]
    assert main(["run", str(cfg)]) == 0                 # everything done already: every stage resumed
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    assert all(s["resumed"] for s in stats["stages"])
    total = round(sum(s["seconds"] for s in first["stages"]), 3)
    assert total == round(sum(s["seconds"] for s in stats["stages"]), 3)
    html = (tmp_path / "run" / "report.html").read_text()
    header = html.split("<main>")[0]
    assert (f"{total} s in its stages, 3 of 3 resumed from an earlier invocation (this one took "
            f"{stats['seconds']} s)") in header
    summary = parse(html).find_all("table", data_table="summary")[0]
    assert float(summary.find_all("td", data_key="stage_seconds")[0].attrs["data-value"]) == total
    assert summary.find_all("td", data_key="resumed_stages")[0].text() == "read, extract, langid"
    assert f"the whole run took {total} s in its stages" in html
