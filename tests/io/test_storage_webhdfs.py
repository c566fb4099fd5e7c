"""HDFS (seed 002's storage, #35 part 6): webhdfs:// through fsspec's pure-Python WebHDFS client, against a
WebHDFS-speaking server on 127.0.0.1 (tests/helpers/webhdfs.py: the REST operations a NameNode and DataNode
answer, 307 redirects included) — storage calls, then a run reading its input from HDFS and writing its run
directory there, byte-identical to the local run; hdfs:// without a JVM is one line saying what it needs."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpupipe.cli import main
from gpupipe.io import storage
from tests.helpers import write_config
from tests.helpers.webhdfs import WebHDFSServer

pytest.importorskip("requests", reason="fsspec's WebHDFS client needs requests")


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hdfs")
    with WebHDFSServer(root) as server:
        yield server, root


def test_storage_calls_on_webhdfs(hdfs, tmp_path):
    server, root = hdfs
    base = server.url("/t/calls")
    storage.write_bytes(f"{base}/a/one.bin", b"0123456789" * 1000)
    assert (root / "t/calls/a/one.bin").read_bytes() == b"0123456789" * 1000
    assert storage.exists(f"{base}/a/one.bin") and storage.isfile(f"{base}/a/one.bin")
    assert storage.isdir(f"{base}/a") and not storage.exists(f"{base}/nothing")
    assert storage.size(f"{base}/a/one.bin") == 10_000
    assert storage.read_bytes(f"{base}/a/one.bin", 5, 12) == b"5678901"
    with storage.open_input(f"{base}/a/one.bin", block_size=4096) as f:   # streamed: ranged OPENs
        f.seek(9_995)
        assert f.read() == b"56789"
    src = tmp_path / "local.txt"
    src.write_bytes(b"x" * 70_000)
    storage.put_file(src, f"{base}/a/two.txt")
    storage.put_file(src, f"{base}/a/two.txt")          # replaced
    assert storage.listdir(f"{base}/a") == ["one.bin", "two.txt"]   # no temporary name left behind
    assert storage.glob(f"{base}/a/*.txt") == [f"{base}/a/two.txt"]   # a URL that opens: host and port kept
    assert storage.find(base) == ["a/one.bin", "a/two.txt"]
    storage.get_file(f"{base}/a/two.txt", tmp_path / "back.txt")
    assert (tmp_path / "back.txt").read_bytes() == src.read_bytes()
    before = storage.identity(f"{base}/a/one.bin")
    os.utime(root / "t/calls/a/one.bin", ns=(0, 10**18))
    assert storage.identity(f"{base}/a/one.bin") != before   # a rewritten file is another version
    storage.remove(f"{base}/a", recursive=True)
    assert not storage.exists(f"{base}/a")
    ops = {op for _, op, _ in server.requests}
    assert {"GETFILESTATUS", "LISTSTATUS", "OPEN", "CREATE", "APPEND", "RENAME", "DELETE"} <= ops


def test_a_file_is_written_aside_and_renamed(hdfs):
    server, root = hdfs
    server.requests.clear()
    storage.write_bytes(server.url("/t/atomic/stats.json"), b'{"done": true}')
    created = [p for m, op, p in server.requests if op == "CREATE"]
    renamed = [p for m, op, p in server.requests if op == "RENAME"]
    assert created and all(p != "/t/atomic/stats.json" for p in created)   # never CREATE under the real name
    assert renamed == created[:1]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, synth_crawl):
    tmp = tmp_path_factory.mktemp("local-run")
    cfg = write_config(tmp / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp / "run"))
    assert main(["run", str(cfg)]) == 0
    return tmp / "run"


def test_run_reads_and_writes_webhdfs_to_the_local_bytes(hdfs, local_run, synth_crawl, tmp_path, monkeypatch):
    server, root = hdfs
    monkeypatch.setenv("GPUPIPE_WORK_DIR", str(tmp_path / "work"))
    storage.put_file(synth_crawl["warc"], server.url("/in/crawl.warc.gz"))
    cfg = write_config(tmp_path / "c.yaml", input={"path": str(local_run / "config.resolved.yaml")}, output="x")
    url = server.url("/runs/r1")
    assert main(["run", str(cfg), "--input", server.url("/in/*.warc.gz"), "--output", url]) == 0
    local = {p.name: p.read_bytes() for p in (local_run / "shards").iterdir() if p.is_file()}
    there = {p.name: p.read_bytes() for p in (root / "runs/r1/shards").iterdir() if p.is_file()}
    assert there == local and local
    stats = json.loads((root / "runs/r1/stats.json").read_text())
    assert stats["conservation_ok"] and stats["stages"][0]["bytes_in"] == Path(synth_crawl["warc"]).stat().st_size
    assert main(["verify", f"{url}/shards"]) == 0
    assert not [p for p in root.rglob(".*.tmp.*")]


def test_hdfs_without_a_jvm_is_one_line_before_any_work(tmp_path, synth_crawl, capsys, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    monkeypatch.delenv("ARROW_LIBHDFS_DIR", raising=False)
    try:   # a machine with a JVM and libhdfs would start it: nothing to check here then
        storage.filesystem("hdfs://127.0.0.1:1/x")
        pytest.skip("libhdfs and a JVM are available here")
    except storage.StorageUnavailable:
        pass
    cfg = write_config(tmp_path / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp_path / "run"))
    assert main(["run", str(cfg), "--output", "hdfs://127.0.0.1:1/runs/r1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "JAVA_HOME" in err[0] and "libhdfs" in err[0] and "webhdfs://" in err[0]
    assert not (tmp_path / "run").exists()
