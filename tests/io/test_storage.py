"""io/storage.py without a server: what is a URL, local paths keep their plain calls and rename semantics, a
missing filesystem package names the extra, and the loader's chunk cache stays within its bound."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from gpupipe.io import storage


def test_what_is_a_url():
    for url in ("s3://b/k", "gs://b/k", "https://host/x.warc.gz", "abfs://c/p", "hdfs://nn/p"):
        assert storage.is_url(url), url
    for path in ("data/x.warc.gz", "/abs/path", "file:///tmp/x", "C://windows", "", "relative/s3://x"):
        assert not storage.is_url(path), path
    assert storage.join("s3://b/runs/", "stages", "x") == "s3://b/runs/stages/x"
    assert storage.basename("s3://b/in/crawl.warc.gz") == "crawl.warc.gz"


def test_local_paths_take_the_plain_calls(tmp_path):
    f = tmp_path / "sub" / "a.bin"
    storage.write_bytes(str(f), b"0123456789")
    assert storage.read_bytes(str(f)) == b"0123456789" and storage.read_bytes(str(f), 2, 5) == b"234"
    assert storage.isfile(str(f)) and storage.isdir(str(tmp_path / "sub")) and storage.size(str(f)) == 10
    assert storage.find(str(tmp_path)) == ["sub/a.bin"] and storage.listdir(str(tmp_path / "sub")) == ["a.bin"]
    assert storage.glob(str(tmp_path / "*" / "*.bin")) == [str(f)]
    with storage.open_input(str(f)) as fh:
        assert type(fh).__name__ == "BufferedReader" and storage.file_size(fh) == 10
    assert not list((tmp_path / "sub").glob(".*")), "the atomic write left no temp file"
    assert storage.local_copy(str(f)) == str(f)
    storage.remove(str(tmp_path / "sub"), recursive=True)
    assert not storage.exists(str(f))


def test_a_missing_filesystem_names_the_extra():
    code = ("import sys; sys.modules['s3fs'] = None\n"
            "from gpupipe.io import storage\n"
            "try:\n    storage.exists('s3://bucket/x')\n"
            "except storage.StorageUnavailable as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'gpupipe[cloud]'" in out


# `gpupipe` with s3fs unimportable (the base install, without the [cloud] extra), whether or not it is installed here
WITHOUT_S3FS = "import sys; sys.modules['s3fs'] = None; from gpupipe.cli import entry; entry()"


@pytest.mark.parametrize("argv", [
    ["run", "{cfg}", "--output", "s3://bucket/runs/r1"],
    ["run", "{cfg}", "--input", "s3://bucket/crawl/x.warc.gz"],
    ["run", "{s3cfg}"],                                   # the URLs in the config file itself
    ["run", "{s3cfg}", "--input", "{warc}"],              # the config's output only
    ["verify", "s3://bucket/runs/r1/shards"],
    ["chunk-markdown", "s3://bucket/docs", "--out", "{tmp}/chunks"],
    ["report", "s3://bucket/runs/r1"],
    ["plan", "s3://bucket/runs/r1", "--tokens", "1B"],
])
def test_s3_without_s3fs_is_one_error_line(argv, tmp_path, synth_crawl):
    """A user without the [cloud] extra gets one line naming the install command, exit 2, no traceback."""
    from tests.helpers import write_config

    cfg = write_config(tmp_path / "local.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp_path / "run"))
    s3cfg = write_config(tmp_path / "s3.yaml", input={"path": "s3://bucket/crawl/x.warc.gz"},
                         output="s3://bucket/runs/r1")
    args = [a.format(cfg=cfg, s3cfg=s3cfg, warc=synth_crawl["warc"], tmp=tmp_path) for a in argv]
    r = subprocess.run([sys.executable, "-c", WITHOUT_S3FS, *args], capture_output=True, text=True, cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("error: s3://bucket/") and "s3:// URLs need s3fs" in lines[0], lines
    assert lines[0].endswith("pip install 'gpupipe[cloud]'")
    assert not list(tmp_path.glob("run*")) and not (tmp_path / "chunks").exists()   # stopped before any work


@pytest.mark.parametrize("argv", [["verify", "s3://bucket/runs/r1/shards"],
                                  ["run", "{cfg}", "--input", "s3://bucket/crawl/*.warc.gz"]])
def test_s3_without_credentials_is_one_error_line(argv, tmp_path, synth_crawl):
    """s3fs installed but no credentials anywhere (environment, files, instance metadata): one line saying where
    credentials go, exit 2, not botocore's traceback."""
    pytest.importorskip("s3fs", reason="the [cloud] extra (s3fs) is not installed")
    import os

    from tests.helpers import write_config

    cfg = write_config(tmp_path / "local.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp_path / "run"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_EC2_METADATA_DISABLED="true", AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_ENDPOINT_URL="http://127.0.0.1:9")
    r = subprocess.run([sys.executable, "-m", "gpupipe", *[a.format(cfg=cfg) for a in argv]], capture_output=True,
                       text=True, cwd=tmp_path, env=env)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "Unable to locate credentials" in lines[0] and "AWS_ACCESS_KEY_ID" in lines[0]
    assert not (tmp_path / "run").exists()


def test_http_urls_are_not_written(tmp_path):
    with pytest.raises(ValueError, match="can be read, not written"):
        storage.write_bytes("https://example.invalid/x", b"")


def test_chunk_cache_is_bounded():
    from gpupipe.loader.remote import ChunkCache

    cache = ChunkCache(max_bytes=3000)
    chunk = lambda: np.zeros(1000, dtype=np.uint8)  # noqa: E731
    for i in range(10):
        cache.get("u", i, chunk)
        assert cache.held <= 3000
    assert cache.requests == 10
    cache.get("u", 9, chunk)   # still held: no request
    assert cache.requests == 10
    cache.get("u", 0, chunk)   # dropped long ago
    assert cache.requests == 11


def test_credentials_in_storage_options_are_not_written_to_the_resolved_config(tmp_path, synth_crawl):
    import yaml

    from gpupipe.config import REDACTED, dump_config, validate_config

    options = {"s3": {"endpoint_url": "http://127.0.0.1:9", "key": "AKIDEXAMPLE", "secret": "s3cr3t-value",
                      "client_kwargs": {"aws_session_token": "tok-value", "region_name": "eu-west-1"}}}
    try:
        cfg = validate_config({"input": {"path": synth_crawl["warc"]}, "output": str(tmp_path / "r"),
                               "storage": {"options": options}, "stages": [{"extract": {}}]})
        assert cfg.storage.options == options   # the run itself uses them
        text = dump_config(cfg)
    finally:
        storage.configure({})
    assert not any(v in text for v in ("AKIDEXAMPLE", "s3cr3t-value", "tok-value"))
    written = yaml.safe_load(text)["storage"]["options"]["s3"]
    assert written == {"endpoint_url": "http://127.0.0.1:9", "key": REDACTED, "secret": REDACTED,
                       "client_kwargs": {"aws_session_token": REDACTED, "region_name": "eu-west-1"}}
