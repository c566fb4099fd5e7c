"""Storage that stops answering ends a run in one line naming the URL and the command that resumes it (#32): a real
S3 endpoint on 127.0.0.1 (moto's server mode) killed mid-run then restarted empty, an S3 endpoint that is down
from the start, an http:// input whose server is down. Calls on a URL are tried `storage.TRIES` times with backoff
first (fewer and shorter here, to keep the test short: the behaviour is the same)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

pytest.importorskip("s3fs", reason="the [cloud] extra (s3fs) is not installed")
pytest.importorskip("moto", reason="moto's server (the [dev] extra) is not installed")

from gpupipe.cli import describe_fault, main  # noqa: E402
from gpupipe.io import storage  # noqa: E402
from gpupipe.io.storage import StorageUnreachable  # noqa: E402

STAGES = [{"normalize": {}}, {"exact_dedup": {}}, {"tokenize": {"vocab_size": 300}}, {"pack": {"seq_len": 16}}]
# botocore's own retries, once: the run's retries (storage.TRIES) are what is tested
S3_OPTIONS = {"s3": {"config_kwargs": {"retries": {"max_attempts": 1}}}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(port: int, log: Path) -> subprocess.Popen:
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=fh, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=5).close()
            return proc
        except OSError:
            time.sleep(0.2)
    raise AssertionError(log.read_text())


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


@pytest.fixture
def s3_env(tmp_path, monkeypatch):
    """The AWS_* environment pointing at 127.0.0.1:PORT (nothing listening yet), quick retries, a work dir."""
    port = _free_port()
    for k, v in dict(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                     AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_DEFAULT_REGION="us-east-1",
                     GPUPIPE_WORK_DIR=str(tmp_path / "work")).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(storage, "TRIES", 2)
    monkeypatch.setattr(storage, "BACKOFF", 0.1)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()   # fsspec caches filesystems by arguments: the endpoint is in the env
    yield port
    s3fs.S3FileSystem.clear_instance_cache()


def write_cfg(path: Path, **kw) -> Path:
    kw.update(device="cpu", executor={"partition_docs": 20, "workers": 1}, storage={"options": S3_OPTIONS})
    kw.setdefault("stages", STAGES)
    path.write_text(yaml.safe_dump(kw, sort_keys=False))
    return path


def write_docs(path: Path) -> Path:
    path.write_text("".join(json.dumps({"text": f"document number {i} " + "word " * (i % 7 + 3)}) + "\n"
                            for i in range(60)), encoding="utf-8")
    return path


def test_s3_down_from_the_start_ends_in_one_line(tmp_path, s3_env, capsys):
    docs = write_docs(tmp_path / "docs.jsonl")
    cfg = write_cfg(tmp_path / "c.yaml", input={"path": str(docs)}, output="s3://bucket/runs/r1")
    t0 = time.monotonic()
    assert main(["run", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "s3://bucket/runs/r1" in err and "cannot be reached" in err and "2 tries" in err
    assert f"gpupipe run {cfg}" in err and "resume" in err
    assert time.monotonic() - t0 < 120


def test_http_input_whose_server_is_down_ends_in_one_line(tmp_path, s3_env, capsys):
    url = f"http://127.0.0.1:{_free_port()}/docs.jsonl"
    cfg = write_cfg(tmp_path / "c.yaml", input={"path": url}, output=str(tmp_path / "run"))
    assert main(["run", str(cfg)]) in (1, 2)
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and url in err, err
    assert not (tmp_path / "run" / "stages").exists()


def test_s3_killed_mid_run_then_restarted_empty(tmp_path, s3_env):
    """The server dies as exact_dedup starts: the run stops with StorageUnreachable naming the bucket URL (one line
    from the CLI); restarted empty, the same command runs again and ends with the shards of a local run."""
    from gpupipe.config import load_config
    from gpupipe.run.pipeline import run_pipeline

    docs = write_docs(tmp_path / "docs.jsonl")
    local = tmp_path / "local"
    assert main(["run", str(write_cfg(tmp_path / "l.yaml", input={"path": str(docs)}, output=str(local)))]) == 0
    port, log = s3_env, tmp_path / "moto.log"
    server = start_moto(port, log)
    try:
        storage.filesystem("s3://bucket")[0].mkdir("bucket")
        cfg_path = write_cfg(tmp_path / "c.yaml", input={"path": str(docs)}, output="s3://bucket/runs/r1")
        cfg = load_config(str(cfg_path))

        def kill_at(name, total, *size):
            if name.startswith("exact_dedup"):
                stop(server)
            return None
        with pytest.raises(StorageUnreachable) as e:
            run_pipeline(cfg, kill_at)
        line, code = describe_fault(e.value, ["run", str(cfg_path)])
        assert code == 1 and "s3://bucket/runs/r1" in line and "cannot be reached" in line, line
        assert f"gpupipe run {cfg_path}" in line and "\n" not in line

        server = start_moto(port, log)   # back, empty: the bucket is gone with it
        storage.filesystem("s3://bucket")[0].mkdir("bucket")
        assert main(["run", str(cfg_path)]) == 0
        for shard in sorted((local / "shards").iterdir()):
            assert storage.read_bytes(f"s3://bucket/runs/r1/shards/{shard.name}") == shard.read_bytes(), shard.name
    finally:
        stop(server)
