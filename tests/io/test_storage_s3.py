"""Object storage end to end, against a real S3 endpoint on 127.0.0.1: moto's server mode (`python -m moto.server`,
an HTTP S3 API) started here, credentials and endpoint from the standard environment (AWS_ENDPOINT_URL, ...).

The synthetic crawl uploaded to s3://bucket/in/: a run reading it (streamed) and writing its run directory to
s3://bucket/runs/... gives shards byte-identical to the same run on local disk; `gpupipe verify s3://...` passes;
ShardDataset over s3:// yields the same epoch as over the local copy; a run killed with kill -9 resumes from what
the bucket holds (on a fresh local copy) to the same bytes. Inputs over http:// (a local server with ranges) too."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("s3fs", reason="the [cloud] extra (s3fs) is not installed")
pytest.importorskip("moto", reason="moto's server (the [dev] extra) is not installed")

from gpupipe.cli import main  # noqa: E402
from gpupipe.io import storage  # noqa: E402
from tests.helpers import ROOT

BUCKET = "bucket"
START_TIMEOUT = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory, synth_crawl):
    """A moto S3 server on a free port, the AWS_* environment pointing at it (this process and its children),
    a bucket holding the synthetic crawl at s3://bucket/in/crawl.warc.gz."""
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    env_keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION",
                "GPUPIPE_WORK_DIR")
    saved = {k: os.environ.get(k) for k in env_keys}
    proc = None
    for _ in range(5):   # a port taken between choosing and binding: choose again
        port = _free_port()
        with open(log, "ab") as fh:
            proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                    stdout=fh, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=5).close()
                break
            except OSError:
                time.sleep(0.2)
        if proc.poll() is None:
            break
    assert proc is not None and proc.poll() is None, log.read_text()
    try:
        os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                          AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_DEFAULT_REGION="us-east-1")
        fs, _ = storage.filesystem(f"s3://{BUCKET}")
        fs.mkdir(BUCKET)
        storage.put_file(synth_crawl["warc"], f"s3://{BUCKET}/in/crawl.warc.gz")
        yield f"s3://{BUCKET}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def local_shards(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run / "shards").iterdir()) if p.is_file()}


def bucket_shards(url: str) -> dict[str, bytes]:
    return {n: storage.read_bytes(f"{url}/shards/{n}") for n in storage.listdir(f"{url}/shards")
            if storage.isfile(f"{url}/shards/{n}")}


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, synth_crawl):
    from tests.helpers import write_config

    tmp = tmp_path_factory.mktemp("local-run")
    cfg = write_config(tmp / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp / "run"))
    assert main(["run", str(cfg)]) == 0
    return tmp / "run"


@pytest.fixture(scope="module")
def s3_run(s3, local_run, tmp_path_factory):
    """`gpupipe run CONFIG --input s3://bucket/in/crawl.warc.gz --output s3://bucket/runs/r1`."""
    from tests.helpers import write_config

    tmp = tmp_path_factory.mktemp("s3-run")
    os.environ["GPUPIPE_WORK_DIR"] = str(tmp / "work")
    cfg = write_config(tmp / "c.yaml", input={"path": str(local_run / "config.resolved.yaml")}, output="unused")
    url = f"{s3}/runs/r1"
    assert main(["run", str(cfg), "--input", f"{s3}/in/crawl.warc.gz", "--output", url]) == 0
    return url


def test_run_on_s3_gives_the_local_bytes(s3_run, local_run):
    assert bucket_shards(s3_run) == local_shards(local_run)
    stats = json.loads(storage.read_bytes(f"{s3_run}/stats.json"))
    assert stats["shards_dir"] == f"{s3_run}/shards" and stats["conservation_ok"]
    assert stats["stages"][0]["bytes_in"] == storage.size("s3://bucket/in/crawl.warc.gz")
    for s in stats["stages"]:   # every stage committed: its marker in the bucket
        name = f"{stats['stages'].index(s):02d}-{s['name']}"
        assert json.loads(storage.read_bytes(f"{s3_run}/stages/{name}/stats.json"))["key"] == s["key"]
    assert storage.isfile(f"{s3_run}/config.resolved.yaml") and storage.isfile(f"{s3_run}/logs/run.log")


def test_verify_on_s3(s3_run, capsys):
    assert main(["verify", f"{s3_run}/shards"]) == 0
    assert "OK:" in capsys.readouterr().out
    # a flipped byte in the bucket is caught, as on disk
    bad = f"{s3_run.rsplit('/', 1)[0]}/bad-shards"
    for n in storage.listdir(f"{s3_run}/shards"):
        data = storage.read_bytes(f"{s3_run}/shards/{n}")
        if n == "shard-00000.bin":
            data = data[:10] + bytes([data[10] ^ 1]) + data[11:]
        storage.write_bytes(f"{bad}/{n}", data)
    assert main(["verify", bad]) == 1
    assert "shard-00000.bin: sha256 mismatch" in capsys.readouterr().err


def test_loader_over_s3_yields_the_local_epoch(s3_run, local_run):
    pytest.importorskip("torch")
    from gpupipe.loader import ShardDataset

    local = ShardDataset(local_run / "shards", seed=3, buffer_size=16)
    remote = ShardDataset(f"{s3_run}/shards", seed=3, buffer_size=16, cache_bytes=64 * 512 * 2,
                          return_block_ids=True)
    assert len(local) == len(remote) > 0
    for epoch in (0, 1):
        local.set_epoch(epoch)
        remote.set_epoch(epoch)
        a = [x["input_ids"].tolist() for x in local]
        b = [x["input_ids"].tolist() for x in remote]
        assert a == b
    # ranged reads of chunk_blocks (= buffer_size) blocks, through a cache that stays within its bound
    assert 0 < remote._cache.held <= remote.cache_bytes
    assert remote._cache.requests < 2 * len(remote)
    # resume mid-epoch over s3 gives the rest of the local epoch
    state = remote.state_dict(consumed=5)
    again = ShardDataset(f"{s3_run}/shards", seed=3, buffer_size=16)
    again.load_state_dict(state)
    local.set_epoch(1)
    assert [x["input_ids"].tolist() for x in again] == [x["input_ids"].tolist() for x in local][5:]


def test_kill_9_then_resume_on_s3_from_a_fresh_local_copy(s3, local_run, tmp_path):
    """kill -9 once the first map chain (extract … pii) is committed to the bucket; the resume runs on another
    local copy (another machine), takes the committed stages from the bucket, and ends with the same shards."""
    from tests.helpers import write_config

    url = f"{s3}/runs/killed"
    cfg = write_config(tmp_path / "c.yaml", input={"path": f"{s3}/in/crawl.warc.gz"}, output=url)
    env = {**os.environ, "GPUPIPE_WORK_DIR": str(tmp_path / "machine-1")}
    proc = subprocess.Popen([sys.executable, "-m", "gpupipe", "run", str(cfg)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # a chain's stages are committed last stage first: its first stage's marker commits the whole chain
    marker = f"{url}/stages/01-extract/stats.json"

    def committed() -> bool:
        try:
            storage.read_bytes(marker)
            return True
        except FileNotFoundError:
            return False

    try:
        deadline = time.monotonic() + 300
        while not committed() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert committed(), proc.stderr.read().decode() if proc.poll() is not None else "timeout"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert not storage.exists(f"{url}/stats.json"), "the run finished before it could be killed"

    os.environ["GPUPIPE_WORK_DIR"] = str(tmp_path / "machine-2")
    assert main(["run", str(cfg)]) == 0
    stats = json.loads(storage.read_bytes(f"{url}/stats.json"))
    resumed = [s["name"] for s in stats["stages"] if s["resumed"]]
    assert resumed[:6] == ["read", "extract", "normalize", "langid", "doc_filter", "pii"]
    assert bucket_shards(url) == local_shards(local_run)
    assert main(["verify", f"{url}/shards"]) == 0


def test_input_glob_on_s3_and_an_http_url(s3, local_run, tmp_path, synth_crawl):
    from tests.helpers import write_config
    from tests.helpers.range_http import RangeServer

    cfg = write_config(tmp_path / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp_path / "a"))
    assert main(["run", str(cfg), "--input", f"{s3}/in/*.warc.gz", "--output", str(tmp_path / "a")]) == 0
    assert local_shards(tmp_path / "a") == local_shards(local_run)
    # a prefix ("folder") of data files: each file an input
    assert main(["run", str(cfg), "--input", f"{s3}/in/", "--output", str(tmp_path / "p")]) == 0
    assert local_shards(tmp_path / "p") == local_shards(local_run)
    with RangeServer(Path(synth_crawl["warc"]).parent) as srv:
        url = srv.url + Path(synth_crawl["warc"]).name
        assert main(["run", str(cfg), "--input", url, "--output", str(tmp_path / "b")]) == 0
        ranged = [r for m, n, r in srv.requests if m == "GET" and n.endswith(".warc.gz")]
        assert ranged and all(r and r.startswith("bytes=") for r in ranged), "streamed by ranged reads"
    assert local_shards(tmp_path / "b") == local_shards(local_run)


def test_bad_urls_are_refused_before_any_work(s3, tmp_path, capsys):
    from tests.helpers import write_config

    cfg = write_config(tmp_path / "c.yaml", input={"path": f"{s3}/in/crawl.warc.gz"}, output=str(tmp_path / "r"))
    assert main(["run", str(cfg), "--input", f"{s3}/in/nothing-*.warc.gz"]) == 2
    assert "matched nothing" in capsys.readouterr().err
    assert main(["run", str(cfg), "--input", f"{s3}/in/missing.warc.gz"]) == 2
    assert "input not found: s3://bucket/in/missing.warc.gz" in capsys.readouterr().err
    assert main(["run", str(cfg), "--output", "https://example.com/runs/x"]) == 2
    assert "can be read, not written" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_tokenizer_on_s3_is_the_local_one(s3, local_run, tmp_path, monkeypatch):
    """A FileRef at a URL (the tokenize stage's tokenizer.json): copied locally once, the same shards as the same
    file named by a local path."""
    import yaml

    from tests.helpers import write_config

    monkeypatch.setenv("GPUPIPE_WORK_DIR", str(tmp_path / "work"))
    tok = local_run / "shards" / "tokenizer.json"
    storage.put_file(tok, f"{s3}/models/tokenizer.json")
    stages = yaml.safe_load((local_run / "config.resolved.yaml").read_text())["stages"]
    shards = {}
    for where, ref in (("local", str(tok)), ("s3", f"{s3}/models/tokenizer.json")):
        items = [{"tokenize": {"tokenizer": ref}} if "tokenize" in s else s for s in stages]
        cfg = write_config(tmp_path / f"{where}.yaml", input={"path": f"{s3}/in/crawl.warc.gz"},
                           output=str(tmp_path / where), stages=items)
        assert main(["run", str(cfg)]) == 0
        shards[where] = local_shards(tmp_path / where)
        manifest = json.loads(shards[where].pop("manifest.json"))
        manifest.pop("config_hash")   # a hash of the config's text, which names the tokenizer differently
        shards[where]["manifest"] = manifest
    assert shards["s3"] == shards["local"] and shards["local"]
    resolved = yaml.safe_load((tmp_path / "s3" / "config.resolved.yaml").read_text())
    assert {"tokenizer": f"{s3}/models/tokenizer.json"}.items() <= next(
        s["tokenize"] for s in resolved["stages"] if "tokenize" in s).items()   # the config keeps the URL
    copies = list((tmp_path / "work" / "files").glob("*/tokenizer.json"))
    assert len(copies) == 1 and copies[0].read_bytes() == tok.read_bytes()   # downloaded once, reused


def test_fetch_cc_into_a_bucket(s3, synth_crawl, tmp_path, monkeypatch):
    """fetch-cc --out s3://...: a cut connection resumes from the local staging folder, the objects are the
    server's bytes, a re-run fetches nothing."""
    import gzip
    import shutil

    from tests.helpers.range_http import RangeServer

    monkeypatch.setenv("GPUPIPE_WORK_DIR", str(tmp_path / "work"))
    crawl = "CC-MAIN-2024-51"
    rels = [f"crawl-data/{crawl}/segments/17330.{s}/warc/{crawl}-{s}-0000{k}.warc.gz" for s in (0, 1) for k in (0, 1)]
    for rel in rels:
        (tmp_path / "site" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(synth_crawl["warc"], tmp_path / "site" / rel)
    with gzip.open(tmp_path / "site" / "crawl-data" / crawl / "warc.paths.gz", "wt") as f:
        f.write("\n".join(rels) + "\n")
    out = f"{s3}/cc/"
    names = [r.rsplit("/", 1)[1] for r in rels]
    with RangeServer(tmp_path / "site", cut={names[1]: 1}) as srv:
        args = ["fetch-cc", "--crawl", crawl, "--segments", "2", "--out", out, "--base-url", srv.url,
                "--backoff", "0.05"]
        assert main(args) == 0
        assert any(r for m, n, r in srv.requests if m == "GET" and n == names[1] and r), "resumed by a range"
        for n in names:
            assert storage.read_bytes(out + n) == Path(synth_crawl["warc"]).read_bytes()
        srv.requests.clear()
        assert main(args) == 0
        assert not srv.gets()


def test_storage_options_from_the_config_reach_the_dask_workers(s3, local_run, tmp_path, monkeypatch):
    """No AWS_* environment at all: the endpoint and credentials come from `storage.options` only, in the driver
    and, through the executor's worker plugin, in each Dask worker process (they read the input themselves)."""
    from tests.helpers import write_config

    endpoint = os.environ["AWS_ENDPOINT_URL"]
    for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("GPUPIPE_WORK_DIR", str(tmp_path / "work"))
    options = {"s3": {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}}
    url = f"{s3}/runs/options"
    cfg = write_config(tmp_path / "c.yaml", input={"path": f"{s3}/in/crawl.warc.gz"}, output=url,
                       storage={"options": options}, executor={"kind": "dask", "workers": 2, "partition_docs": 30})
    try:
        assert main(["run", str(cfg)]) == 0
        assert bucket_shards(url) == local_shards(local_run)
    finally:
        storage.configure({})


def test_a_decontamination_index_on_s3_is_the_local_one(s3, synth_crawl, tmp_path, monkeypatch):
    """The decontaminate stage's index (a FileRef) read from the bucket: same leaks found, same shards."""
    import yaml

    from tests.helpers import write_config

    monkeypatch.setenv("GPUPIPE_WORK_DIR", str(tmp_path / "work"))
    index = tmp_path / "benchmark.index.parquet"
    assert main(["decontam-index", "--out", str(index), synth_crawl["benchmark"]]) == 0
    storage.put_file(index, f"{s3}/index/benchmark.index.parquet")
    default = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())["stages"]
    runs = {}
    for where, ref in (("local", str(index)), ("s3", f"{s3}/index/benchmark.index.parquet")):
        stages = [s for s in default if "tokenize" not in s and "pack" not in s]
        stages += [{"decontaminate": {"index": ref, "policy": "cut"}}] + [s for s in default if "tokenize" in s
                                                                         or "pack" in s]
        cfg = write_config(tmp_path / f"{where}.yaml", input={"path": synth_crawl["warc"]},
                           output=str(tmp_path / where), stages=stages)
        assert main(["run", str(cfg)]) == 0
        stats = json.loads((tmp_path / where / "stats.json").read_text())
        decon = next(s for s in stats["stages"] if s["name"] == "decontaminate")
        shards = local_shards(tmp_path / where)
        manifest = json.loads(shards.pop("manifest.json"))
        manifest.pop("config_hash")   # a hash of the config's text, which names the index differently
        # memory and numba's first-call compile time are the machine's, not results (the first run may compile)
        counts = {k: v for k, v in decon["extra"].items()   # timings aside
                  if not k.startswith(("peak_rss", "phase_")) and k not in ("numba_compile_s", "cpu_s")}
        runs[where] = (counts, decon["removed"], shards, manifest)
    assert runs["s3"] == runs["local"]
    assert runs["local"][0]["docs_with_leaks"] > 0
    # the benchmark file itself in the bucket: the same index (its URL was once mangled into "s3:/...")
    name = Path(synth_crawl["benchmark"]).name
    storage.put_file(synth_crawl["benchmark"], f"{s3}/bench/{name}")
    assert main(["decontam-index", "--out", str(tmp_path / "from-s3.parquet"), f"{s3}/bench/{name}"]) == 0
    import pandas as pd

    assert pd.read_parquet(tmp_path / "from-s3.parquet").equals(pd.read_parquet(index))


def test_report_plan_and_audit_read_a_run_directory_in_the_bucket(s3_run, local_run, tmp_path, monkeypatch, capsys):
    """#28 (5): `gpupipe report|plan|audit s3://...` on the run directory `run` wrote there, as the README's
    recipes do, each from a machine that never saw the run (a fresh GPUPIPE_WORK_DIR): the report is written back
    into the bucket, the plan is the local run's, the audit's reviews and verdict land in the bucket too."""
    from gpupipe.plan import plan_from_run

    monkeypatch.setenv("GPUPIPE_WORK_DIR", str(tmp_path / "machine-a"))
    storage.remove(f"{s3_run}/report.html")
    assert main(["report", s3_run]) == 0
    out = capsys.readouterr().out
    assert f"report: {s3_run}/report.html" in out and f"audit samples: {s3_run}/audit" in out
    html = storage.read_text(f"{s3_run}/report.html")
    assert f"gpupipe audit {s3_run} --stage" in html and f"RUN/stats.json of {s3_run}" in html
    assert 'data-key="output_docs"' in html and "s3:/bucket" not in html

    assert main(["plan", s3_run, "--tokens", "1T", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    here = plan_from_run(local_run, 10**12)
    assert plan["run_dir"] == s3_run and plan["measured_tokens"] == here["measured_tokens"]
    assert plan["final_bytes"] == here["final_bytes"] > 0   # the same shards, listed in the bucket
    for i, st in enumerate(plan["stages"]):
        folder = f"{s3_run}/stages/{i:02d}-{st['name']}"
        parquet = sum(storage.size(f"{folder}/{rel}") for rel in storage.find(folder) if rel.endswith(".parquet"))
        assert st["temp_bytes"] == pytest.approx(parquet * plan["scale"])
    assert main(["plan", s3_run, "--tokens", "1T"]) == 0
    out = capsys.readouterr().out
    assert s3_run in out and "s3:/bucket" not in out

    samples = [json.loads(line) for line in storage.read_text(f"{s3_run}/audit/03-langid.jsonl").splitlines()]
    review = tmp_path / "review.jsonl"
    review.write_text("".join(json.dumps({"sample_id": s["sample_id"], "pass": True}) + "\n" for s in samples[:10]))
    assert main(["audit", s3_run, "--stage", "langid", "--review", str(review)]) == 0
    out = capsys.readouterr().out
    assert "PASS: 03-langid" in out and f"results: {s3_run}/audit/03-langid.review.json" in out
    assert json.loads(storage.read_text(f"{s3_run}/audit/03-langid.review.json"))["reviewed"] == 10
    # a second reviewer on another machine: the bucket's reviews are the starting point
    monkeypatch.setenv("GPUPIPE_WORK_DIR", str(tmp_path / "machine-b"))
    review.write_text("".join(json.dumps({"sample_id": s["sample_id"], "pass": False}) + "\n" for s in samples[10:11]))
    assert main(["audit", s3_run, "--stage", "03-langid", "--review", str(review)]) == 0
    verdict = json.loads(storage.read_text(f"{s3_run}/audit/03-langid.review.json"))
    assert (verdict["reviewed"], verdict["passed"], verdict["verdict"]) == (11, 10, "WARN")
    assert len(storage.read_text(f"{s3_run}/audit/03-langid.reviews.jsonl").splitlines()) == 11
    capsys.readouterr()

    for cmd in (["report", f"{s3_run}-missing"], ["plan", f"{s3_run}-missing", "--tokens", "1T"],
                ["audit", f"{s3_run}-missing", "--stage", "langid"]):
        assert main(cmd) == 2
        assert f"{s3_run}-missing is not a finished run directory (no stats.json)" in capsys.readouterr().err


def test_verify_checks_megatron_files_in_the_bucket(s3, tmp_path, capsys):
    """#28 (4) over s3://: the Megatron .bin/.idx the manifest lists are read by ranged requests and checked."""
    from tests.helpers import megatron_run

    local = megatron_run(tmp_path, [f"document {i} " + "word " * (i % 11 + 2) for i in range(30)])
    url = f"{s3}/megatron-shards"
    for f in sorted(p for p in local.rglob("*") if p.is_file()):
        data = f.read_bytes()
        if f.name == "data.bin":
            data = data[:6] + bytes([data[6] ^ 1]) + data[7:]
        storage.write_bytes(f"{url}/{f.relative_to(local).as_posix()}", data)
    assert main(["verify", url]) == 1
    assert f"{url}/megatron/data.bin: sha256 mismatch" in capsys.readouterr().err
    storage.put_file(local / "megatron" / "data.bin", f"{url}/megatron/data.bin")
    assert main(["verify", url]) == 0
    assert "Megatron megatron/data.bin/.idx: 30 documents" in capsys.readouterr().out


def test_the_readmes_object_storage_recipe_as_written(s3, local_run, synth_crawl, capsys):
    """README "Object storage": its command lines read out of README.md and run as written, the bucket's run
    directory renamed only (the module's own run holds s3://bucket/runs/r1) and the config's path made absolute."""
    import re
    import shlex

    root = ROOT
    readme = (root / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Object storage\n.*?```bash\n(.*?)```", readme, re.S).group(1)
    lines = [ln for ln in block.splitlines() if ln.startswith(("gpupipe ", "python -c"))]
    assert [ln.split()[1] for ln in lines if ln.startswith("gpupipe")] == ["run", "verify", "report", "plan",
                                                                           "audit"]
    storage.put_file(synth_crawl["warc"], f"{s3}/crawl/crawl.warc.gz")
    fill = {"s3://bucket/runs/r1": f"{s3}/runs/readme", "configs/default.yaml": str(root / "configs/default.yaml")}
    for line in lines:
        for k, v in fill.items():
            line = line.replace(k, v)
        words = shlex.split(line)
        if words[0] == "python":
            done = subprocess.run([sys.executable] + words[1:], capture_output=True, text=True, cwd=root)
            assert done.returncode == 0 and int(done.stdout) > 0, done.stderr
            continue
        code = main(words[1:])
        out = capsys.readouterr()
        if words[1] == "audit":   # no reviews given: the samples are in the bucket, and it says how to review
            assert "no reviews yet for 07-fuzzy_dedup" in out.err and storage.isfile(
                f"{s3}/runs/readme/audit/07-fuzzy_dedup.jsonl"), out.err
        else:
            assert code == 0, (line, out.err)
    assert bucket_shards(f"{s3}/runs/readme") == local_shards(local_run)
    assert storage.isfile(f"{s3}/runs/readme/report.html")
