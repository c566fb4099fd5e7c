"""The read stage's block reader (gpupipe/io/jsonl_blocks.py) against the line reader it stands in for: for every
input, the same parts byte for byte, the same rejects and counts; regular files taken by blocks, the rest by lines."""
from __future__ import annotations

import gzip
import json
import logging
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpupipe.io import jsonl_blocks
from gpupipe.stages.read import read_file_task
from tests.helpers import stage_dir

WORDS = "data pipeline 数据 清洗 模型 token shard crawl the of and 👍🏽 Привет naïve".split()


def records(n: int, seed: int = 0, **extra) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        rec = {"id": f"doc-{i}", "url": f"https://example.com/{i}", "text": " ".join(rng.choices(WORDS, k=rng.randint(3, 60))),
               "score": rng.random(), "rank": rng.randint(-5, 10**12), "ok": rng.random() < 0.5, "lang": "en"}
        rec.update({k: (v(i) if callable(v) else v) for k, v in extra.items()})
        out.append(rec)
    return out


def write(path: Path, recs: list, compress: bool = False) -> Path:
    data = "".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in recs).encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def read_both(path: Path, tmp: Path, monkeypatch, caplog, partitioning=(50, 4000), **kw) -> bool:
    """Reads `path` both ways and asserts the same result; True when the block reader took it."""
    results = []
    for way in ("blocks", "lines"):
        monkeypatch.setenv("GPUPIPE_JSONL_LINES", "1" if way == "lines" else "0")
        out = tmp / way / "run" / "stages" / "00-read"
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="gpupipe"):
            stats = read_file_task(3, str(path), "jsonl", kw.get("text_field", "text"), "web", partitioning,
                                   stage_dir(out), crawl_id=kw.get("crawl_id"))
        stats.pop("seconds"), stats.pop("docs_per_second")
        parts = {p.name: p.read_bytes() for p in sorted(out.glob("part-*.parquet"))}
        rejects = (out / "rejects" / "file-0003.jsonl").read_text()
        results.append((stats, parts, rejects, "read line by line" not in caplog.text))
    (s_b, parts_b, rej_b, took), (s_l, parts_l, rej_l, _) = results
    assert s_b == s_l
    assert parts_b.keys() == parts_l.keys()
    for name in parts_b:   # equal bytes; on a difference, say which column
        if parts_b[name] != parts_l[name]:
            a, b = (pq.read_table(tmp / w / "run" / "stages" / "00-read" / name) for w in ("blocks", "lines"))
            assert a.schema == b.schema and a.equals(b), name
            assert parts_b[name] == parts_l[name], name
    assert rej_b == rej_l
    return took


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(jsonl_blocks, "BLOCK_BYTES", 3000)   # many blocks, parts across block ends


def test_regular_file_is_read_by_blocks_exactly_as_by_lines(tmp_path, monkeypatch, caplog):
    path = write(tmp_path / "in.jsonl", records(400))
    assert read_both(path, tmp_path, monkeypatch, caplog)
    # parts cut by documents too, and one part for all
    assert read_both(path, tmp_path / "b", monkeypatch, caplog, partitioning=(7, 1 << 30))
    assert read_both(path, tmp_path / "c", monkeypatch, caplog, partitioning=(10**9, 1 << 30))


def test_parts_of_many_pages_and_blocks(tmp_path, monkeypatch, caplog):
    """Parquet pages of 1 MiB: a part of 3 MB from 30 blocks is written as the line reader writes it."""
    monkeypatch.setattr(jsonl_blocks, "BLOCK_BYTES", 100_000)
    recs = records(300, seed=3)
    for i, r in enumerate(recs):
        r["text"] = f"{i} " + "数据清洗 pipeline " * 400
    path = write(tmp_path / "in.jsonl", recs)
    assert read_both(path, tmp_path, monkeypatch, caplog, partitioning=(10**6, 1 << 30))


def test_ids_sources_dates_and_empty_texts(tmp_path, monkeypatch, caplog):
    recs = records(300, seed=1, source=lambda i: ["", "books", "web"][i % 3],
                   crawl_id=lambda i: "" if i % 2 else "CC-MAIN-2024-10",
                   extracted_at=lambda i: ["2024-05-18T01:58:10Z", "yesterday", "", "2024-05-18T03:58:10+02:00"][i % 4])
    for i, r in enumerate(recs):
        r["id"] = [r["id"], "dup", "", "dup#2"][i % 4]     # own ids, repeats (one spelling a repeat's id), none
        r["url"] = "" if i % 5 == 0 else r["url"]
        if i % 37 == 0:
            r["text"] = ["", "  ", "\u3000\n", "\x1c\x1d", " \t"][i % 5]   # str.strip() empties them all
    folder = tmp_path / "CC-MAIN-2023-50"
    folder.mkdir()
    path = write(folder / "in.jsonl.gz", recs, compress=True)
    assert read_both(path, tmp_path, monkeypatch, caplog)
    assert read_both(path, tmp_path / "b", monkeypatch, caplog, crawl_id="CC-MAIN-2025-01")
    for i, r in enumerate(recs):
        r["id"] = i % 50     # integer ids, repeated
    path = write(tmp_path / "ints.jsonl", recs)
    assert read_both(path, tmp_path / "c", monkeypatch, caplog)


def test_another_text_field_without_ids_or_urls(tmp_path, monkeypatch, caplog):
    recs = [{"content": f"body {i} " + "数据" * (i % 7), "text": "not this one", "n": i} for i in range(200)]
    path = write(tmp_path / "in.jsonl", recs)
    assert read_both(path, tmp_path, monkeypatch, caplog, text_field="content")


@pytest.mark.parametrize("case", [
    "blank_line", "nested", "missing_field", "null_field", "bad_json", "invalid_utf8", "timestamp", "long_int",
    "crlf", "bom", "surrogate", "not_object", "text_not_string", "html", "truncated_gzip", "utf16"])
def test_irregular_files_are_read_by_lines(tmp_path, monkeypatch, caplog, case):
    recs = records(120, seed=2)
    lines = [json.dumps(r, ensure_ascii=False) for r in recs]
    k = 97   # in a later block than the first
    if case == "blank_line":
        lines.insert(k, "")
    elif case == "nested":
        lines[k] = json.dumps({**recs[k], "meta": {"a": [1, 2]}})
    elif case == "missing_field":
        lines[k] = json.dumps({key: v for key, v in recs[k].items() if key != "score"})
    elif case == "null_field":
        lines[k] = json.dumps({**recs[k], "lang": None})
    elif case == "bad_json":
        lines[k] = lines[k][:-3]
    elif case == "timestamp":
        lines = [json.dumps({**r, "lang": "2024-05-18T01:58:10"}) for r in recs]
    elif case == "long_int":
        lines[k] = json.dumps({**recs[k], "rank": 12345678901234567890123})
    elif case == "surrogate":
        lines[k] = lines[k].replace('"lang": "en"', '"lang": "\\ud800"')
    elif case == "not_object":
        lines[k] = "[1, 2]"
    elif case == "text_not_string":
        lines[k] = json.dumps({**recs[k], "text": 42})
    elif case == "html":
        lines = [json.dumps({**r, "html": "<p>x</p>"}) for r in recs]
    data = ("\n".join(lines) + "\n").encode()
    if case == "invalid_utf8":
        data = data.replace("数据".encode(), b"\xff\xfe", 1)
    elif case == "crlf":
        data = data.replace(b"\n", b"\r\n")
    elif case == "bom":
        data = b"\xef\xbb\xbf" + data
    elif case == "utf16":
        data = data.decode().encode("utf-16")
    path = tmp_path / "in.jsonl"
    path.write_bytes(gzip.compress(data)[:-40] if case == "truncated_gzip" else data)
    assert not read_both(path, tmp_path, monkeypatch, caplog)


def test_long_line_over_max_doc_bytes_is_read_by_lines(tmp_path, monkeypatch, caplog):
    recs = records(50)
    recs[30]["text"] = "x" * 5000
    path = write(tmp_path / "in.jsonl", recs)
    took = []
    for way in ("0", "1"):
        monkeypatch.setenv("GPUPIPE_JSONL_LINES", way)
        out = tmp_path / way / "run" / "stages" / "00-read"
        with caplog.at_level(logging.DEBUG, logger="gpupipe"):
            stats = read_file_task(0, str(path), "jsonl", "text", "web", (50, 1 << 20), stage_dir(out),
                                   max_doc_bytes=1 << 12)
        took.append(stats["removed"])
    assert took[0] == took[1] == {"doc_too_large": 1}
    assert "read line by line" in caplog.text


def test_a_line_longer_than_a_block_is_read_by_lines(tmp_path, monkeypatch, caplog):
    recs = records(30)
    recs[20]["text"] = "长" * 4000    # 12,000 bytes: four blocks, under max_doc_bytes
    path = write(tmp_path / "in.jsonl", recs)
    assert not read_both(path, tmp_path, monkeypatch, caplog)
    with pytest.raises(jsonl_blocks.Irregular, match="a line longer than a block"):
        list(jsonl_blocks.iter_blocks(path, "text", 1 << 20))


def test_mixed_types_in_one_field(tmp_path, monkeypatch, caplog):
    """A field that is a number in one record and a string in another: both readers keep every document."""
    recs = records(40)
    for i, r in enumerate(recs):
        r["meta"] = i if i % 2 else f"s{i}"
    path = write(tmp_path / "in.jsonl", recs)
    assert not read_both(path, tmp_path, monkeypatch, caplog, partitioning=(10**6, 1 << 30))
    part = pq.read_table(tmp_path / "lines" / "run" / "stages" / "00-read" / "part-0003-000000.parquet")
    assert part["meta"].to_pylist() == [str(i) if i % 2 else f"s{i}" for i in range(40)]
    assert "field 'meta' holds int and str values" in caplog.text


def test_whitespace_is_what_str_strip_removes():
    assert set(jsonl_blocks._PY_WHITESPACE) == {c for c in map(chr, range(0x110000)) if c.isspace()}
