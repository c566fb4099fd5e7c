"""The README's recipes, run as written: the command lines are read out of README.md (so an edit there is tested
here), with only the placeholders (CONFIG, OUT, the bucket) put in. Local globs, `fetch-cc` then `run` on what it
fetched, and a stage that does nothing saying so."""

from __future__ import annotations

import gzip
import json
import re
import shlex
import shutil

import pytest

from gpupipe.cli import main
from tests.helpers import ROOT
from tests.helpers.range_http import RangeServer

README = (ROOT / "README.md").read_text(encoding="utf-8")
CRAWL = "CC-MAIN-2024-51"


def recipe(pattern: str) -> str:
    """The one README command line matching `pattern` (a regex), as written."""
    found = re.findall(pattern, README)
    assert len(found) == 1, (pattern, found)
    return found[0]


def argv(line: str, **placeholders: str) -> list[str]:
    words = shlex.split(line)
    assert words[0] == "gpupipe", line
    for k, v in placeholders.items():
        words = [w.replace(k, v) for w in words]
    return words[1:]


def test_fetch_cc_then_run_on_what_it_fetched(tmp_path, synth_crawl, capsys):
    """`gpupipe fetch-cc ... --out DIR`, then the README's `gpupipe run CONFIG --input 'OUT/*.warc.gz'`: the glob
    (local, quoted as written) reads every fetched file."""
    rels = []
    for k in range(2):
        rel = f"crawl-data/{CRAWL}/segments/1733066035857.0/warc/{CRAWL}-20241200-{k:05d}.warc.gz"
        (tmp_path / "site" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(synth_crawl["warc"], tmp_path / "site" / rel)
        rels.append(rel)
    with gzip.open(tmp_path / "site" / "crawl-data" / CRAWL / "warc.paths.gz", "wt") as f:
        f.write("\n".join(rels) + "\n")
    out = tmp_path / "crawl"
    with RangeServer(tmp_path / "site") as srv:
        assert main(["fetch-cc", "--crawl", CRAWL, "--segments", "1", "--out", str(out),
                     "--base-url", srv.url]) == 0
    line = recipe(r"Then `(gpupipe run CONFIG --input 'OUT/\*\.warc\.gz')`")
    run = tmp_path / "run"
    assert main(argv(line, CONFIG=str(ROOT / "configs/default.yaml"), OUT=str(out)) + ["--output", str(run)]) == 0
    stats = json.loads((run / "stats.json").read_text())
    one = sum(1 for _ in open(synth_crawl["truth"], encoding="utf-8"))
    assert stats["input_records"] == 2 * one and stats["conservation_ok"]
    assert main(["verify", str(run / "shards")]) == 0


def test_local_glob_that_matches_nothing_is_a_config_error(tmp_path, capsys):
    code = main(["run", str(ROOT / "configs/default.yaml"), "--input", str(tmp_path / "none" / "*.warc.gz"),
                 "--output", str(tmp_path / "run")])
    assert code == 2
    assert "input pattern matched nothing" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()   # refused before any work


def test_a_file_named_like_a_pattern_is_that_file(tmp_path):
    """`data[1].jsonl` beside `data1.jsonl`: the name exists, so it is the file, not the pattern's match."""
    (tmp_path / "data[1].jsonl").write_text("".join(json.dumps({"text": f"literal file record {i}"}) + "\n"
                                                    for i in range(20)))
    (tmp_path / "data1.jsonl").write_text("".join(json.dumps({"text": f"other file record {i}"}) + "\n"
                                                  for i in range(7)))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"input": {"path": str(tmp_path / "data[1].jsonl")}, "output": str(tmp_path / "run"),
                               "stages": [{"normalize": {}}]}))
    assert main(["run", str(cfg)]) == 0
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    assert stats["input_records"] == 20


@pytest.mark.slow
def test_a_skipped_stage_says_so(tmp_path, synth_crawl, capsys):
    """configs/full.yaml's classifier has `model: null`: the console, stats.json and the report say it did nothing,
    rather than show it passing documents at some docs/s."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"input": {"path": synth_crawl["warc"]}, "output": str(tmp_path / "run"),
                               "stages": [{"extract": {}}, {"classifier": {"model": None}}, {"pii": {}}]}))
    assert main(["run", str(cfg)]) == 0
    captured = capsys.readouterr()
    console = re.sub(r"\s+", " ", captured.out + captured.err)
    assert "stage classifier did nothing: no model given (model: null)" in console
    assert "classifier (skipped" in console
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    stage = next(s for s in stats["stages"] if s["name"] == "classifier")
    assert stage["skipped"].startswith("no model given") and stage["docs_in"] == stage["docs_out"] > 0
    assert any("classifier did nothing" in w for w in stats["warnings"])
    html = (tmp_path / "run" / "report.html").read_text(encoding="utf-8")
    assert "data-skipped" in html and "warning: stage classifier did nothing" in html
    # a stage that works is not marked
    assert not next(s for s in stats["stages"] if s["name"] == "pii").get("skipped")
