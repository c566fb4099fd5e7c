"""Seed 002 §1.3's record fields in curated documents (crawl_id, content_length, extracted_at) and `gpupipe export
--format jsonl` (#35 part 5): a real WARC (warcinfo with isPartOf, responses with their WARC-Date) through real
stages; the same export bytes whatever the partitioning."""
from __future__ import annotations

import gzip
import json
from io import BytesIO
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from gpupipe.cli import main
from gpupipe.io.parts import part_paths
from gpupipe.stages.read import _record_row, extracted_at
from tests.helpers.tokens import real_texts

CRAWL = "CC-MAIN-2024-51"


def write_warc(path: Path, n: int = 24) -> dict[str, str]:
    """A gzip-per-record WARC: a warcinfo naming the crawl, then n HTML responses; {url: WARC-Date}."""
    texts = [t for t in real_texts(1500) if len(t.strip()) > 500][:n]
    dates = {}
    with open(path, "wb") as fh:
        w = WARCWriter(fh, gzip=True)
        info = f"software: test\r\nisPartOf: {CRAWL}\r\n".encode()
        w.write_record(w.create_warc_record("", "warcinfo", payload=BytesIO(info), length=len(info),
                                            warc_headers_dict={"WARC-Date": "2024-12-01T00:00:00Z"}))
        for i, text in enumerate(texts):
            url = f"https://example.com/doc/{i}"
            dates[url] = f"2024-12-{1 + i % 28:02d}T10:{i % 60:02d}:{(7 * i) % 60:02d}Z"
            paras = "".join(f"<p>{p}</p>" for p in text.split("\n") if p.strip())
            body = f"<html><head><title>d{i}</title></head><body><article>{paras}</article></body></html>".encode()
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
            w.write_record(w.create_warc_record(url, "response", payload=BytesIO(body), length=len(body),
                                                http_headers=http, warc_headers_dict={"WARC-Date": dates[url]}))
    return dates


def run(tmp: Path, name: str, src: Path, **executor) -> Path:
    cfg = {"input": {"path": str(src)}, "output": str(tmp / name), "device": "cpu", "executor": executor,
           "stages": [{"extract": {}}, {"normalize": {}}, {"tokenize": {"vocab_size": 300}},
                      {"pack": {"seq_len": 32}}]}
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", str(tmp / f"{name}.yaml")]) == 0
    return tmp / name


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    dates = write_warc(tmp / "crawl.warc.gz")
    return tmp, dates, run(tmp, "one", tmp / "crawl.warc.gz")


def test_curated_documents_carry_the_seed_fields(crawl):
    _, dates, out = crawl
    rows = [r for p in part_paths(out / "stages" / "02-normalize") for r in pq.read_table(p).to_pylist()]
    assert len(rows) > 10
    for r in rows:
        assert r["crawl_id"] == CRAWL                    # the warcinfo record's isPartOf
        assert r["extracted_at"] == dates[r["url"]]      # the page's WARC-Date, not the clock
        assert r["content_length"] == len(r["text"])     # of the final text (normalize changed some)


def test_export_writes_seed_002_json_lines_the_same_whatever_the_partitioning(crawl, capsys):
    tmp, dates, out = crawl
    assert main(["export", str(out), "--format", "jsonl", "--out", str(tmp / "one.jsonl")]) == 0
    assert "02-normalize" in capsys.readouterr().out          # the stage before tokenize
    lines = [json.loads(line) for line in (tmp / "one.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [r for p in part_paths(out / "stages" / "02-normalize") for r in pq.read_table(p).to_pylist()]
    assert [list(d) for d in lines] == [["id", "text", "url", "source", "crawl_id", "language", "metadata"]] * len(rows)
    assert [d["text"] for d in lines] == [r["text"] for r in rows]
    for d in lines:
        assert (d["crawl_id"], d["source"], d["language"]) == (CRAWL, "web", None)
        assert d["metadata"] == {"content_length": len(d["text"]), "extracted_at": dates[d["url"]]}

    many = run(tmp, "many", tmp / "crawl.warc.gz", partition_docs=3, workers=2)
    assert len(part_paths(many / "stages" / "00-read")) > 3
    assert main(["export", str(many), "--out", str(tmp / "many.jsonl.gz")]) == 0
    assert gzip.decompress((tmp / "many.jsonl.gz").read_bytes()) == (tmp / "one.jsonl").read_bytes()
    assert main(["export", str(many), "--out", str(tmp / "again.jsonl.gz")]) == 0
    assert (tmp / "again.jsonl.gz").read_bytes() == (tmp / "many.jsonl.gz").read_bytes()


def test_export_of_a_folder_that_is_no_run_is_refused(tmp_path, capsys):
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "not a gpupipe run directory" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_text_records_crawl_id_and_dates():
    seed_record = {"id": "cc-1", "text": "文档正文", "crawl_id": "CC-MAIN-2023-50",
                   "metadata": json.dumps({"content_length": 4, "extracted_at": "2026-03-18T10:30:00Z"})}
    row = _record_row(seed_record, 0, 0, "web", "/data/x.jsonl")
    assert (row["crawl_id"], row["extracted_at"], row["content_length"]) == \
        ("CC-MAIN-2023-50", "2026-03-18T10:30:00Z", 4)
    row = _record_row({"id": "a", "text": "abc"}, 0, 1, "web", "s3://b/crawl-data/CC-MAIN-2024-10/segments/x.jsonl")
    assert (row["crawl_id"], row["extracted_at"]) == ("CC-MAIN-2024-10", None)
    assert _record_row({"id": "a", "text": "abc", "crawl_id": "X"}, 0, 1, "web", "", "CC-MAIN-2025-05")["crawl_id"] \
        == "CC-MAIN-2025-05"                                   # input.crawl_id wins
    assert extracted_at({"warc_date": "2024-05-18T03:58:10.123+02:00"}) == "2024-05-18T01:58:10.123000Z"
