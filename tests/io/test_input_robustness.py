"""Inputs as users have them (issue #14 items 1, 3, 4, 10): HTML folders whose pages name no URL, folders of mixed
files, WARC and JSONL in one run, broken Parquet and unknown files. Real files on disk, through `gpupipe run`."""

import gzip
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from gpupipe.cli import main
from gpupipe.stages.read import InputConfig
from gpupipe.io.parts import part_paths, read_part
from gpupipe.io.readers import iter_records
from gpupipe.stages.base import RunContext
from gpupipe.stages.read import ReadStage
from gpupipe.synth.text import EN, article


def english(seed: int) -> str:
    title, paragraphs = article(EN, random.Random(seed))
    return title + "\n\n" + "\n\n".join(paragraphs)


def html_page(seed: int, url: str | None = None) -> str:
    title, paragraphs = article(EN, random.Random(seed))
    canonical = f'<link rel="canonical" href="{url}">' if url else ""
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (f"<html><head><title>{title}</title>{canonical}</head><body><nav><a href='/'>Home</a></nav>"
            f"<article><h1>{title}</h1>{body}</article><footer>Copyright 2024</footer></body></html>")


def jsonl_file(path: Path, records: list[dict]) -> Path:
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def text_docs(prefix: str, seeds: range) -> list[dict]:
    return [{"id": f"{prefix}{s}", "text": english(s)} for s in seeds]


def config(tmp_path: Path, inputs: list, stages: list, **input_keys) -> Path:
    cfg = {"input": {"path": [str(p) for p in inputs], **input_keys}, "output": str(tmp_path / "run"),
           "device": "cpu", "executor": {"kind": "local", "partition_docs": 100}, "stages": stages}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_ok(cfg: Path) -> dict:
    assert main(["run", str(cfg)]) == 0
    return json.loads((Path(yaml.safe_load(cfg.read_text())["output"]) / "stats.json").read_text())


def stage_docs(run: Path, folder: str) -> dict[str, dict]:
    rows = [r for p in part_paths(run / "stages" / folder) for r in read_part(p).to_dict("records")]
    return {r["id"]: r for r in rows}


def read_rejects(run: Path) -> list[dict]:
    files = sorted((run / "stages" / "00-read" / "rejects").glob("*.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines()]


# ----------------------------------------------------------------------------- item 1: pages without a URL


def test_html_folder_pages_without_url_are_extracted(tmp_path):
    """Pages with and without a canonical URL in one part: the null urls (NaN in pandas) reach trafilatura as
    None, so no page is lost as extract_error."""
    site = tmp_path / "site"
    site.mkdir()
    for i in range(6):
        url = f"https://example.com/a{i}" if i % 2 else None
        (site / f"p{i}.html.gz").write_bytes(gzip.compress(html_page(i, url).encode()))
    stats = run_ok(config(tmp_path, [site], [{"extract": {}}]))
    extract = stats["stages"][1]
    assert extract["removed"] == {} and extract["docs_out"] == 6
    assert not any(k.startswith("extract_error") for k in extract["extra"])
    docs = stage_docs(tmp_path / "run", "01-extract")
    assert sorted(docs) == [f"p{i}.html.gz" for i in range(6)]
    for i in range(6):
        assert article(EN, random.Random(i))[1][0][:40] in docs[f"p{i}.html.gz"]["text"]


# ----------------------------------------------------------------------------- item 3: folders of mixed files


def test_folder_of_data_files_is_read_file_by_file(tmp_path):
    """A folder of JSONL and Parquet files is not an HTML folder: each file is read by its own format; stray files
    are counted by name as unsupported_file; hidden entries are skipped and counted."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / ".git").mkdir()
    jsonl_file(data / "a.jsonl", text_docs("a", range(0, 3)))
    jsonl_file(data / "sub" / "b.jsonl.gz", text_docs("b", range(3, 5)))
    pq.write_table(pa.Table.from_pylist(text_docs("c", range(5, 7))), data / "c.parquet")
    (data / "README").write_text("about this data")
    (data / "notes.txt").write_text("notes")
    (data / "sub" / "logo.png").write_bytes(b"\x89PNG\r\n")
    (data / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (data / ".git" / "config").write_text("[core]")

    stats = run_ok(config(tmp_path, [data], [{"normalize": {}}]))
    read = stats["stages"][0]
    assert read["docs_in"] == 10 and read["docs_out"] == 7
    assert read["removed"] == {"unsupported_file": 3}
    assert read["extra"]["hidden_skipped"] == 2  # .DS_Store and .git/
    assert read["extra"]["format_jsonl"] == 2 and read["extra"]["format_parquet"] == 1
    assert sorted(stage_docs(tmp_path / "run", "01-normalize")) == ["a0", "a1", "a2", "b3", "b4", "c5", "c6"]
    unsupported = sorted(Path(r["file"]).name for r in read_rejects(tmp_path / "run"))
    assert unsupported == ["README", "logo.png", "notes.txt"]
    assert all(r["reason"] == "unsupported_file" and r["file"] in r["detail"] for r in read_rejects(tmp_path / "run"))
    log = (tmp_path / "run" / "logs" / "run.log").read_text()
    assert all(str(data / name) in log for name in ("README", "notes.txt", "sub/logo.png"))


def test_folder_mixing_html_and_jsonl(tmp_path):
    """HTML pages and a JSONL file in one folder: the pages are extracted, the JSONL documents keep their text."""
    site = tmp_path / "site"
    site.mkdir()
    for i in range(3):
        (site / f"p{i}.html").write_text(html_page(10 + i, f"https://example.com/{i}"))
    records = text_docs("j", range(20, 22))
    jsonl_file(site / "more.jsonl", records)
    (site / "notes.md").write_text("# not read: Markdown only from a folder of Markdown")

    stats = run_ok(config(tmp_path, [site], [{"extract": {}}]))
    read, extract = stats["stages"][0], stats["stages"][1]
    assert (read["docs_out"], read["removed"]) == (5, {"unsupported_file": 1})
    assert (extract["docs_in"], extract["docs_out"], extract["removed"]) == (5, 5, {})
    docs = stage_docs(tmp_path / "run", "01-extract")
    assert {r["id"]: r["text"] for r in records} == {k: docs[k]["text"] for k in ("j20", "j21")}
    assert article(EN, random.Random(10))[1][0][:40] in docs["p0.html"]["text"]
    assert "Markdown is read only from a folder holding no HTML" in read_rejects(tmp_path / "run")[0]["detail"]


def test_markdown_folder_counts_its_stray_files(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nText.")
    (docs / "diagram.png").write_bytes(b"\x89PNG")
    read = ReadStage.of(InputConfig(path=[str(docs)]), RunContext(), (100, 2**27))
    assert list(zip(read.files, read.formats)) == [(str(docs), "markdown_dir"),
                                                   (str(docs / "diagram.png"), "unsupported")]


# ----------------------------------------------------------------------------- item 4: WARC and JSONL in one run


def test_warc_and_jsonl_in_one_run(tmp_path, synth_crawl):
    """The default pipeline over a WARC and a JSONL file: parts with and without HTML, and with different column
    sets, go through every stage; the JSONL documents skip extraction and reach the curated output."""
    from tests.helpers import write_config

    records = text_docs("j", range(100, 106))
    jsonl = jsonl_file(tmp_path / "extra.jsonl", [dict(r, url=f"https://jsonl.example/{r['id']}") for r in records])
    cfg = write_config(tmp_path / "c.yaml", input={"path": [synth_crawl["warc"], str(jsonl)]},
                       output=str(tmp_path / "run"), keep_intermediate=True)  # extract's own parts, to read
    stats = run_ok(cfg)
    assert stats["conservation_ok"]
    extract = stats["stages"][1]
    assert extract["docs_in"] == synth_crawl["pages"] + len(records)
    extracted = stage_docs(tmp_path / "run", "01-extract")
    assert all(extracted[r["id"]]["text"] == r["text"] for r in records)
    curated = stage_docs(tmp_path / "run", Path(stats["curated_dir"]).name)
    assert {r["id"] for r in records} <= set(curated)


def test_html_input_without_extract_still_refused(tmp_path, synth_crawl, capsys):
    jsonl = jsonl_file(tmp_path / "extra.jsonl", text_docs("j", range(2)))
    assert main(["run", str(config(tmp_path, [synth_crawl["warc"], jsonl], [{"normalize": {}}]))]) == 2
    assert "first stage must be 'extract'" in " ".join(capsys.readouterr().err.split())


# ----------------------------------------------------------------------------- item 10: user errors, no traceback


def test_broken_parquet_files_are_counted_not_raised(tmp_path):
    good = jsonl_file(tmp_path / "good.jsonl", text_docs("g", range(2)))
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1 this is not really parquet PAR1")
    no_text = tmp_path / "notext.parquet"
    pq.write_table(pa.table({"id": ["x", "y"], "url": ["u", "v"], "content": [english(1), english(2)]}), no_text)

    stats = run_ok(config(tmp_path, [good, empty, corrupt, no_text], [{"normalize": {}}]))
    read = stats["stages"][0]
    assert read["docs_out"] == 2 and read["removed"] == {"unreadable_record": 2, "missing_text": 2}
    rejects = read_rejects(tmp_path / "run")
    unreadable = [r for r in rejects if r["reason"] == "unreadable_record"]
    assert [Path(r["file"]).name for r in unreadable] == ["empty.parquet", "corrupt.parquet"]
    assert "empty.parquet" in unreadable[0]["detail"] and "corrupt.parquet" in unreadable[1]["detail"]
    assert all("no string field 'text'; fields found: content, id, url" in r["detail"]
               for r in rejects if r["reason"] == "missing_text")


def test_jsonl_without_text_field_names_the_fields_it_has(tmp_path):
    path = jsonl_file(tmp_path / "t.jsonl", [{"id": "a", "url": "u", "content": "hello"}, {"id": "b", "text": 7}])
    first, second = iter_records(path)
    assert first.reason == "missing_text" and "no string field 'text'; fields found: content, id, url" in first.detail
    assert "fields found: id, text" in second.detail and "int" in second.detail


@pytest.mark.parametrize("make,needle", [
    (lambda d: (d / "data.csv").write_text("a,b") and [d / "data.csv"], "cannot tell the input format"),
    (lambda d: [d / "missing.jsonl"], "input not found"),
    (lambda d: (d / "empty").mkdir() or [d / "empty"], "holds no files"),
])
def test_user_errors_are_config_errors(tmp_path, capsys, make, needle):
    inputs = make(tmp_path)
    assert main(["run", str(config(tmp_path, inputs, [{"normalize": {}}]))]) == 2
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert needle in err and inputs[0].name in err and "Traceback" not in err


def test_folder_with_a_file_format_is_a_config_error(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    jsonl_file(tmp_path / "d" / "a.jsonl", text_docs("a", range(1)))
    assert main(["run", str(config(tmp_path, [tmp_path / "d"], [{"normalize": {}}], format="jsonl"))]) == 2
    assert "is a folder" in " ".join(capsys.readouterr().err.split())
