"""Inputs the read stage must not trust blindly (issue #32): literal names, content-keyed folders, BOMs and UTF-16/32
JSONL, folder entries that are not regular files, and documents larger than `max_doc_bytes` (memory bounded by the
config, not the input). Real files, FIFOs, sockets and symlinks on disk; runs through `gpupipe run`."""

import codecs
import gzip
import json
import os
import socket
import threading
import tracemalloc
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard

from gpupipe.cli import main
from gpupipe.config_base import ConfigError
from gpupipe.io.inputs import resolve_inputs
from gpupipe.io.readers import iter_records
from gpupipe.io.records import Rejected, text_encoding
from gpupipe.run.rundir import input_fingerprint   # the one place an input's resume key is computed

DOCS = [{"id": f"d{i}", "text": f"document number {i}, with a few words of text in it"} for i in range(6)]


def lines(records) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()


def config(tmp_path: Path, paths: list, stages=({"normalize": {}},), **input_keys) -> Path:
    cfg = {"input": {"path": [str(p) for p in paths], **input_keys}, "output": str(tmp_path / "run"),
           "device": "cpu", "executor": {"kind": "local", "workers": 1}, "stages": list(stages)}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_stats(tmp_path: Path, paths: list, stages=({"normalize": {}},), **input_keys) -> dict:
    assert main(["run", str(config(tmp_path, paths, stages, **input_keys))]) == 0
    return json.loads((tmp_path / "run" / "stats.json").read_text())


def rejects(tmp_path: Path) -> list[dict]:
    folder = tmp_path / "run" / "stages" / "00-read" / "rejects"
    return [json.loads(x) for f in sorted(folder.glob("*.jsonl")) for x in f.read_text().splitlines()]


def split(items) -> tuple[list[dict], list[Rejected]]:
    items = list(items)
    return [i for i in items if isinstance(i, dict)], [i for i in items if isinstance(i, Rejected)]


# ------------------------------------------------------------------------------------------------ names and keys

def test_a_name_that_exists_is_that_file_even_with_glob_characters(tmp_path):
    (tmp_path / "data[1].jsonl").write_bytes(lines(DOCS * 3 + DOCS[:2]))   # 20 records
    (tmp_path / "data1.jsonl").write_bytes(lines(DOCS + DOCS[:1]))          # 7 records: what the glob would match
    stats = run_stats(tmp_path, [tmp_path / "data[1].jsonl"])
    assert stats["input_records"] == 20
    assert resolve_inputs([str(tmp_path / "data[1].jsonl")]).files == [str(tmp_path / "data[1].jsonl")]
    assert resolve_inputs([str(tmp_path / "data[0-9].jsonl")]).files == [str(tmp_path / "data1.jsonl")]  # a glob


def test_a_folder_is_keyed_by_every_page_so_a_page_rewritten_in_place_changes_the_key(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    for i in range(3):
        (site / f"p{i}.html").write_text(f"<html><body><p>page {i} says hello</p></body></html>")
    (site / "sub").mkdir()
    (site / "sub" / "q.html").write_text("<p>a page in a subfolder</p>")
    before = input_fingerprint([str(site)])
    assert input_fingerprint([str(site)]) == before   # stable while nothing changes
    st = os.stat(site)
    (site / "sub" / "q.html").write_text("<p>a page in a subfolder!</p>")   # same name, same folder
    assert os.stat(site).st_mtime_ns == st.st_mtime_ns   # the folder itself looks untouched ...
    assert input_fingerprint([str(site)]) != before      # ... its key does not
    before = input_fingerprint([str(site)])
    (site / "p1.html").rename(site / "p9.html")
    assert input_fingerprint([str(site)]) != before
    f = tmp_path / "a.jsonl"
    f.write_bytes(lines(DOCS))
    key = input_fingerprint([str(f)])
    f.write_bytes(lines(DOCS[::-1]))   # same size
    assert input_fingerprint([str(f)]) != key


def test_a_page_rewritten_in_place_is_read_again_on_the_next_run(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    for i in range(3):
        (site / f"p{i}.html").write_text(f"<html><body><article><p>{'Words of the page. ' * 30}{i}</p></article>"
                                         f"</body></html>")
    cfg = config(tmp_path, [site], [{"extract": {}}, {"normalize": {}}])
    assert main(["run", str(cfg)]) == 0
    (site / "p1.html").write_text("<html><body><article><p>" + "A rewritten page. " * 30 + "</p></article></body>"
                                  "</html>")
    assert main(["run", str(cfg)]) == 0
    from gpupipe.io.parts import part_paths, read_part

    texts = [t for p in part_paths(next((tmp_path / "run" / "stages").glob("*-normalize"))) for t in
             read_part(p)["text"]]
    assert any("A rewritten page." in t for t in texts)


# --------------------------------------------------------------------------------------------------- encodings

def test_a_utf8_bom_at_the_start_of_any_line_is_dropped(tmp_path):
    f = tmp_path / "cat.jsonl"
    f.write_bytes(codecs.BOM_UTF8 + lines(DOCS[:3]) + codecs.BOM_UTF8 + lines(DOCS[3:]) + b"\n" + codecs.BOM_UTF8
                  + b"\n")
    docs, rejected = split(iter_records(f))
    assert [d["id"] for d in docs] == [d["id"] for d in DOCS] and not rejected


@pytest.mark.parametrize("encoding, bom", [("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE),
                                           ("utf-16-le", b""), ("utf-16-be", b""),
                                           ("utf-32-le", codecs.BOM_UTF32_LE), ("utf-32-be", b"")])
@pytest.mark.parametrize("compress", ["plain", "gz", "zst"])
def test_utf16_and_utf32_jsonl_is_decoded(tmp_path, encoding, bom, compress):
    records = DOCS + [{"id": "zh", "text": "中文的文本，还有一个表情 😀"}]
    data = bom + "".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in records).encode(encoding)
    data = {"plain": data, "gz": gzip.compress(data), "zst": zstandard.ZstdCompressor().compress(data)}[compress]
    f = tmp_path / f"u.jsonl{'' if compress == 'plain' else '.' + compress}"
    f.write_bytes(data)
    docs, rejected = split(iter_records(f))
    assert [(d["id"], d["text"]) for d in docs] == [(r["id"], r["text"]) for r in records] and not rejected


def test_encoding_sniffing():
    assert text_encoding(b'{"te') == "utf-8" and text_encoding(b"") == "utf-8" and text_encoding(b"\0\0\0\0") == "utf-8"
    assert text_encoding(codecs.BOM_UTF32_LE + b"{\0\0\0") == "utf-32"   # not UTF-16 with a NUL character
    assert text_encoding('{"'.encode("utf-16-le")) == "utf-16-le"


def test_a_lone_surrogate_in_utf16_costs_its_line_only(tmp_path):
    f = tmp_path / "u.jsonl"
    good = codecs.BOM_UTF16_LE + lines(DOCS[:2]).decode().encode("utf-16-le")
    f.write_bytes(good + "\udc00".encode("utf-16-le", "surrogatepass") + lines(DOCS[2:]).decode().encode("utf-16-le"))
    docs, rejected = split(iter_records(f))
    assert [d["id"] for d in docs] == ["d0", "d1"] + [d["id"] for d in DOCS[3:]]
    assert [(r.reason, r.position) for r in rejected] == [("decode_error", 3)]   # that line only


# ------------------------------------------------------------------------------------- entries that are no file

def odd_folder(root: Path) -> tuple[Path, socket.socket]:
    root.mkdir()
    (root / "ok.jsonl").write_bytes(lines(DOCS))
    (root / "page.html").write_text("<html><body><p>" + "Some text of a page in the folder. " * 20
                                    + "</p></body></html>")
    os.mkfifo(root / "pipe.jsonl")
    os.mkfifo(root / "pipe.html")
    os.symlink("/dev/zero", root / "zero.jsonl")
    os.symlink("loop.jsonl", root / "loop.jsonl")
    os.symlink("missing.jsonl", root / "dangling.jsonl")
    os.symlink("missing.html", root / "dangling.html")
    os.symlink(".", root / "self")   # a symlink to a folder: not followed
    with open(os.fsencode(root) + b"/bad-\xff.jsonl", "wb") as f:
        f.write(lines(DOCS[:1]))
    with open(os.fsencode(root) + b"/bad-\xfe.html", "wb") as f:
        f.write(b"<p>a page whose name is not UTF-8</p>")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock.jsonl"))
    return root, sock


def test_only_regular_files_are_read_from_a_folder_the_rest_counted_by_reason(tmp_path):
    root, sock = odd_folder(tmp_path / "in")
    done: list = []
    try:
        # a FIFO opened for reading blocks until a writer comes: the run goes in a thread, so that a regression
        # fails here instead of hanging the suite (the join bounds only that failure, nothing waits on it otherwise)
        t = threading.Thread(target=lambda: done.append(run_stats(tmp_path, [root], [{"extract": {}}])), daemon=True)
        t.start()
        t.join(300)
        assert done, "the run did not finish: something opened a FIFO or /dev/zero"
    finally:
        sock.close()
    stats = done[0]
    read = stats["stages"][0]
    assert read["removed"] == {"not_regular_file": 10}
    assert read["docs_out"] == len(DOCS) + 1 and stats["conservation_ok"]
    assert stats["input_records"] == read["docs_out"] + 10
    why = {Path(r["detail"].split(" ")[0].rstrip(":")).name: r["detail"] for r in rejects(tmp_path)}
    assert "a FIFO" in why["pipe.jsonl"] and "a FIFO" in why["pipe.html"]
    assert "a character device" in why["zero.jsonl"] and "a socket" in why["sock.jsonl"]
    assert "a symlink loop" in why["loop.jsonl"] and "a dangling symlink" in why["dangling.jsonl"]
    assert "a dangling symlink" in why["dangling.html"] and "not followed" in why["self"]
    assert "not valid UTF-8" in why["bad-\\xff.jsonl"] and "not valid UTF-8" in why["bad-\\xfe.html"]


def test_a_named_input_that_is_not_a_regular_file_is_refused_before_any_work(tmp_path):
    os.mkfifo(tmp_path / "pipe.jsonl")
    with pytest.raises(ConfigError, match="pipe.jsonl is a FIFO, not a regular file"):
        resolve_inputs([str(tmp_path / "pipe.jsonl")])
    assert main(["run", str(config(tmp_path, [tmp_path / "pipe.jsonl"]))]) == 2
    assert not (tmp_path / "run" / "stages").exists()
    os.symlink("/dev/zero", tmp_path / "z.jsonl")   # a glob's match is counted like a folder's entry
    (tmp_path / "a.jsonl").write_bytes(lines(DOCS))
    got = resolve_inputs([str(tmp_path / "*.jsonl")])
    assert got.files == [str(tmp_path / "a.jsonl")]
    assert sorted(what for _, what in got.unreadable) == ["a FIFO", "a character device"]


# ------------------------------------------------------------------------------------------- max_doc_bytes

def peak_bytes(fn) -> tuple[object, int]:
    """fn()'s result and the most bytes Python held at once while it ran (tracemalloc: bytes objects, buffers)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("compress", ["plain", "gz", "zst"])
def test_a_line_longer_than_max_doc_bytes_is_skipped_as_it_streams(tmp_path, compress):
    big = {"id": "big", "text": "x" * (32 << 20)}
    data = lines(DOCS[:2]) + lines([big]) + lines(DOCS[2:])
    data = {"plain": data, "gz": gzip.compress(data), "zst": zstandard.ZstdCompressor().compress(data)}[compress]
    f = tmp_path / f"d.jsonl{'' if compress == 'plain' else '.' + compress}"
    f.write_bytes(data)
    (docs, rejected), peak = peak_bytes(lambda: split(iter_records(f, max_doc_bytes=1 << 20)))
    assert [d["id"] for d in docs] == [d["id"] for d in DOCS]
    assert [(r.reason, r.position) for r in rejected] == [("doc_too_large", 3)]
    assert "max_doc_bytes" in rejected[0].detail
    # the 32 MiB line was never held whole: about 2 x max_doc_bytes + five decompression steps (zstd's: 4 MiB)
    assert peak < (12 << 20 if compress != "zst" else 28 << 20), peak


def test_a_gzip_bomb_of_nuls_without_a_newline_is_read_in_bounded_memory(tmp_path):
    """64 MiB of NULs in 64 KiB of gzip (the issue's 4 GB from 4 MB, scaled down): one doc_too_large, and the reader
    never holds more than about max_doc_bytes + its steps, whatever the file inflates to."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * (1 << 20)
    f = tmp_path / "bomb.jsonl.gz"
    f.write_bytes(b"".join(c.compress(block) for _ in range(64)) + c.flush())
    assert f.stat().st_size < 128 << 10
    (docs, rejected), peak = peak_bytes(lambda: split(iter_records(f, max_doc_bytes=1 << 20)))
    assert not docs and [r.reason for r in rejected] == ["doc_too_large"]
    assert f"{64 << 20} bytes" in rejected[0].detail
    assert peak < 12 << 20, peak   # about 2 x max_doc_bytes (1 MiB) + LAG + a few 1 MiB steps, not 64 MiB


def test_a_zstd_bomb_is_read_in_bounded_memory(tmp_path):
    f = tmp_path / "bomb.jsonl.zst"
    f.write_bytes(zstandard.ZstdCompressor(level=19).compress(b"\0" * (64 << 20)))
    (docs, rejected), peak = peak_bytes(lambda: split(iter_records(f, max_doc_bytes=1 << 20)))
    assert not docs and [r.reason for r in rejected] == ["doc_too_large"]
    assert peak < 28 << 20, peak   # 128-byte feeds: at most 4 MiB a step (zstd's densest block), not 64 MiB


def test_pages_markdown_and_parquet_larger_than_max_doc_bytes_are_rejected(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "small.html").write_text("<p>small page</p>")
    (site / "big.html").write_text("<p>" + "y" * (2 << 20) + "</p>")
    (site / "bomb.html.gz").write_bytes(gzip.compress(b"<p>" + b"z" * (8 << 20)))
    docs, rejected = split(iter_records(site, "html_dir", max_doc_bytes=1 << 20))
    assert [d["id"] for d in docs] == ["small.html"]
    assert sorted(r.reason for r in rejected) == ["doc_too_large"] * 2
    md = tmp_path / "md"
    md.mkdir()
    (md / "a.md").write_text("# small\n")
    (md / "b.md").write_text("#" * (2 << 20))
    docs, rejected = split(iter_records(md, "markdown_dir", max_doc_bytes=1 << 20))
    assert [d["id"] for d in docs] == ["a.md"] and [r.reason for r in rejected] == ["doc_too_large"]
    pq.write_table(pa.table({"text": ["fine", "é" * (600 << 10), "fine too"]}), tmp_path / "t.parquet")
    docs, rejected = split(iter_records(tmp_path / "t.parquet", max_doc_bytes=1 << 20))  # 1.2 MB of UTF-8
    assert [d["text"] for d in docs] == ["fine", "fine too"] and [(r.reason, r.position) for r in rejected] == [
        ("doc_too_large", 1)]


def test_max_doc_bytes_is_configured_and_counted_in_a_run(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_bytes(lines(DOCS) + lines([{"text": "w " * (1 << 20)}]))
    stats = run_stats(tmp_path, [f], max_doc_bytes="1MiB")
    assert stats["stages"][0]["removed"] == {"doc_too_large": 1} and stats["conservation_ok"]
    assert [r["reason"] for r in rejects(tmp_path)] == ["doc_too_large"]
    assert main(["run", str(config(tmp_path, [f], max_doc_bytes=100))]) == 2   # below 1 KiB: refused
