"""A run directory never looks complete when it is not, and a run's failures end in words: stale results removed
on a new config, referenced files keyed by content, one run per directory (a real lock between real processes),
empty runs refused, disk full / interrupt / report failure answered cleanly, terminal text printed as written."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from gpupipe.cli import main
from gpupipe.run.rundir import RunDir, claim

STAGES = [{"extract": {}}, {"normalize": {}}, {"langid": {"keep": ["en", "zh", "fr", "de", "es", "ru"]}},
          {"exact_dedup": {}}, {"tokenize": {"vocab_size": 512}}, {"pack": {"seq_len": 128}}]


def write_cfg(path: Path, **kw) -> Path:
    path.write_text(yaml.safe_dump(kw, sort_keys=False))
    return path


def leftovers(run: Path) -> list[str]:
    """Temp files (io.parts.atomic_output names them `.NAME.tmp.PID`) anywhere under the run directory."""
    return [str(p) for p in run.rglob("*") if ".tmp" in p.name]


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory, synth_crawl) -> Path:
    """A real tokenizer.json, trained by a run on the crawl."""
    tmp = tmp_path_factory.mktemp("tok")
    cfg = write_cfg(tmp / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp / "run"), device="cpu",
                    stages=STAGES)
    assert main(["run", str(cfg)]) == 0
    return tmp / "run" / "stages" / "05-tokenize" / "tokenizer.json"


def test_interrupted_rerun_with_changed_config_leaves_nothing_that_looks_complete(tmp_path, synth_crawl):
    run = tmp_path / "run"
    first = write_cfg(tmp_path / "a.yaml", input={"path": synth_crawl["warc"]}, output=str(run), device="cpu",
                      stages=STAGES)
    assert main(["run", str(first)]) == 0
    assert (run / "stats.json").is_file() and (run / "shards" / "manifest.json").is_file()

    # The same pipeline with another langid threshold, killed (-9) once its langid stage is done.
    changed = [dict(s) for s in STAGES]
    changed[2] = {"langid": {"keep": ["en", "zh", "fr", "de", "es", "ru"], "min_score": 0.95}}
    second = write_cfg(tmp_path / "b.yaml", input={"path": synth_crawl["warc"]}, output=str(run), device="cpu",
                       stages=changed)
    marker = run / "stages" / "03-langid" / "stats.json"
    # the chain extract → normalize → langid reruns whole (its stages keep no parts) and marks its stages last one
    # first: it is done when extract's marker is back (the run removed it when the chain started)
    chain_first = run / "stages" / "01-extract" / "stats.json"
    old_key = json.loads(marker.read_text())["key"]
    proc = subprocess.Popen([sys.executable, "-m", "gpupipe", "run", str(second)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.time() + 900   # bounds a hung run only: the loop waits on the marker (loaded machines are slow)
    while proc.poll() is None and time.time() < deadline:
        if marker.is_file() and json.loads(marker.read_text())["key"] != old_key and chain_first.is_file():
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads(marker.read_text())["key"] != old_key, proc.stderr.read().decode()

    assert not (run / "stats.json").exists(), "the old config's run stats survived a run of another config"
    assert not (run / "report.html").exists()
    assert not (run / "shards").exists(), "the old config's shards survived"
    for later in ("04-exact_dedup", "05-tokenize", "06-pack"):
        assert not (run / "stages" / later / "stats.json").exists(), f"{later} still looks complete"
    assert main(["verify", str(run / "shards")]) != 0
    # Resuming the new config finishes it: the stages before langid were never redone.
    assert main(["run", str(second)]) == 0
    stats = json.loads((run / "stats.json").read_text())
    assert [s["resumed"] for s in stats["stages"]] == [True] * 4 + [False] * 3
    assert stats["conservation_ok"]


def test_shards_of_an_earlier_config_do_not_outlive_a_config_without_pack(tmp_path, synth_crawl):
    run = tmp_path / "run"
    full = write_cfg(tmp_path / "a.yaml", input={"path": synth_crawl["warc"]}, output=str(run), device="cpu",
                     stages=STAGES)
    assert main(["run", str(full)]) == 0 and (run / "shards" / "manifest.json").is_file()
    curated = write_cfg(tmp_path / "b.yaml", input={"path": synth_crawl["warc"]}, output=str(run), device="cpu",
                        stages=STAGES[:4])
    assert main(["run", str(curated)]) == 0
    stats = json.loads((run / "stats.json").read_text())
    assert all(s["resumed"] for s in stats["stages"]) and stats["shards_dir"] is None
    assert not (run / "shards").exists(), "shards of the earlier config would pass gpupipe verify"


def test_tokenizer_replaced_in_place_with_same_size_and_mtime_is_not_reused(tmp_path, synth_crawl, tokenizer_file):
    tok = tmp_path / "tokenizer.json"
    tok.write_bytes(tokenizer_file.read_bytes())
    stages = STAGES[:4] + [{"tokenize": {"tokenizer": str(tok)}}, STAGES[5]]
    cfg = write_cfg(tmp_path / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp_path / "run"),
                    device="cpu", stages=stages)
    assert main(["run", str(cfg)]) == 0
    before = (tmp_path / "run" / "shards" / "shard-00000.bin").read_bytes()

    # Swap two vocabulary entries' ids: a different tokenizer of exactly the same size; then restore the mtime,
    # as `cp -p` / `rsync -a` leave a replaced file.
    st = tok.stat()
    data = json.loads(tok.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    a, b = [k for k, v in vocab.items() if v in (300, 301)]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    replaced = json.dumps(data, indent=2, ensure_ascii=False)
    original = tok.read_text(encoding="utf-8")
    if len(replaced.encode()) != len(original.encode()):  # re-serialised differently: edit the text itself
        replaced = original.replace(f'"{a}": 300', "\0").replace(f'"{b}": 301', f'"{b}": 300').replace(
            "\0", f'"{a}": 301')
    assert len(replaced.encode()) == st.st_size and replaced != original
    tok.write_text(replaced, encoding="utf-8")
    os.utime(tok, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert tok.stat().st_size == st.st_size and tok.stat().st_mtime_ns == st.st_mtime_ns

    assert main(["run", str(cfg)]) == 0
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    by_name = {s["name"]: s for s in stats["stages"]}
    assert by_name["exact_dedup"]["resumed"] and not by_name["tokenize"]["resumed"]
    assert (tmp_path / "run" / "shards" / "shard-00000.bin").read_bytes() != before


def test_file_hashes_follow_content_and_are_cached(tmp_path):
    run = RunDir(tmp_path / "run")
    f = tmp_path / "model.bin"
    f.write_bytes(b"abc")
    h1 = run.file_hashes([str(f)])[str(f)]
    assert json.loads((tmp_path / "run" / "file_hashes.json").read_text())[str(f.resolve())]["sha256"] == h1
    st = f.stat()
    f.write_bytes(b"abd")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert run.file_hashes([str(f)])[str(f)] != h1
    folder = tmp_path / "model_dir"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "w.bin").write_bytes(b"1")
    h_dir = run.file_hashes([str(folder)])[str(folder)]
    (folder / "sub" / "w.bin").rename(folder / "sub" / "v.bin")  # same bytes, another file name
    assert run.file_hashes([str(folder)])[str(folder)] != h_dir


HOLDER = textwrap.dedent("""
    import sys, time
    from gpupipe.run.rundir import RunDir, claim
    claim(sys.argv[1], [], [])   # as a run does: the folder is a run directory
    run = RunDir(sys.argv[1])
    run.lock()
    print("locked", flush=True)
    time.sleep(120)
""")


def test_second_run_on_a_locked_directory_is_refused_naming_the_holder(tmp_path, synth_crawl, capsys):
    run = tmp_path / "run"
    cfg = write_cfg(tmp_path / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(run), device="cpu",
                    stages=STAGES[:2])
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main(["run", str(cfg)]) == 2
        err = capsys.readouterr().err
        assert f"pid {holder.pid}" in err and "in use" in err
        assert not list((run / "stages").iterdir()), "the refused run touched the run directory"
    finally:
        holder.kill()
        holder.wait()
    # The holder died by kill -9: its lock is stale, the next run takes it and says so in the log.
    assert main(["run", str(cfg)]) == 0
    assert f"locked by pid {holder.pid}, which is gone" in (run / "logs" / "run.log").read_text()


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_empty_run_exits_nonzero_naming_the_fields_found(tmp_path, capsys):
    src = write_jsonl(tmp_path / "docs.jsonl", [{"id": str(i), "content": f"document number {i}", "url": None}
                                               for i in range(5)])
    cfg = write_cfg(tmp_path / "c.yaml", input={"path": str(src)}, output=str(tmp_path / "run"), device="cpu",
                    stages=[{"normalize": {}}])
    assert main(["run", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "no documents" in err and "missing_text 5" in err
    assert "content" in err and "id" in err, err   # the fields the file does have
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    assert stats["output_docs"] == 0 and stats["conservation_ok"]


def test_filters_that_remove_everything_exit_nonzero_unless_allowed(tmp_path, capsys):
    src = write_jsonl(tmp_path / "docs.jsonl", [{"text": f"short text {i}"} for i in range(4)])
    stages = [{"normalize": {}}, {"doc_filter": {"min_words": 1000}}]
    cfg = write_cfg(tmp_path / "c.yaml", input={"path": str(src)}, output=str(tmp_path / "run"), device="cpu",
                    stages=stages)
    assert main(["run", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "stage doc_filter removed all 4 documents" in err and "allow_empty" in err
    allowed = write_cfg(tmp_path / "d.yaml", input={"path": str(src)}, output=str(tmp_path / "run2"),
                        device="cpu", stages=stages, allow_empty=True)
    assert main(["run", str(allowed)]) == 0


@pytest.fixture
def small_disk(tmp_path):
    """A real 1.5 MB file system (tmpfs): needs root and mount; skipped with the reason elsewhere."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1536k", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_ends_in_a_message_with_no_temp_file_left(tmp_path, small_disk, capsys):
    from gpupipe.synth import write_synthetic_crawl

    crawl = write_synthetic_crawl(tmp_path / "big.warc.gz", docs=600, seed=3)
    run = small_disk / "run"
    cfg = write_cfg(tmp_path / "c.yaml", input={"path": crawl["warc"]}, output=str(run), device="cpu",
                    stages=STAGES, executor={"partition_docs": 50})
    assert main(["run", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "resume" in err
    assert leftovers(run) == []
    assert not (run / "stats.json").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_ends_in_a_message_and_resumes(tmp_path, synth_crawl, sig):
    run = tmp_path / "run"
    cfg = write_cfg(tmp_path / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(run), device="cpu",
                    stages=STAGES, executor={"partition_docs": 10})
    proc = subprocess.Popen([sys.executable, "-m", "gpupipe", "run", str(cfg)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    marker = run / "stages" / "01-extract" / "stats.json"
    deadline = time.time() + 900   # bounds a hung run only: the loop waits on the marker (loaded machines are slow)
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(sig)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err and "interrupted" in err and "resume" in err
    assert leftovers(run) == []
    assert main(["run", str(cfg)]) == 0
    stats = json.loads((run / "stats.json").read_text())
    assert stats["stages"][1]["resumed"] and stats["conservation_ok"]


def test_report_failure_is_a_warning_not_silence(tmp_path, synth_crawl, capsys):
    run = tmp_path / "run"
    claim(run, [], [])   # a run directory (a run writes into no other folder)
    (run / "audit").write_text("a file where the report's audit folder goes")
    cfg = write_cfg(tmp_path / "c.yaml", input={"path": synth_crawl["warc"]}, output=str(run), device="cpu",
                    stages=STAGES[:2])
    assert main(["run", str(cfg)]) == 0
    err = capsys.readouterr().err
    assert "warning: could not write" in err and "report.html" in err
    assert leftovers(run) == []


def test_messages_print_brackets_as_written(tmp_path, capsys):
    from gpupipe.cli import fail

    fail("pip install 'gpupipe[gpu]' and see [red]this[/red]", 2)
    assert "pip install 'gpupipe[gpu]' and see [red]this[/red]" in capsys.readouterr().err


def test_workers_flag_sets_the_local_pool_and_refuses_nonsense(tmp_path, capsys):
    src = write_jsonl(tmp_path / "docs.jsonl", [{"text": "some text here"}])
    cfg = write_cfg(tmp_path / "c.yaml", input={"path": str(src)}, output=str(tmp_path / "run"), device="cpu",
                    stages=[{"normalize": {}}])
    assert main(["run", str(cfg), "--workers", "3"]) == 0
    stats = json.loads((tmp_path / "run" / "stats.json").read_text())
    assert stats["executor"] == "local" and stats["workers"] == 3
    for bad in ("0", "many"):
        with pytest.raises(SystemExit) as e:
            main(["run", str(cfg), "--workers", bad])
        assert e.value.code == 2
    assert "expected a number of workers (1 or more) or auto" in capsys.readouterr().err


def test_minhash_params_prints_the_stage_defaults(capsys):
    from gpupipe.stages.dedup.fuzzy import FuzzyDedupConfig, lsh_shape

    assert main(["minhash-params", "--threshold", "0.8"]) == 0
    bands, rows = lsh_shape(FuzzyDedupConfig(threshold=0.8))
    assert (bands, rows) == (12, 10)
    out = capsys.readouterr().out
    chosen = next(line for line in out.splitlines() if "bands x rows" in line)
    assert f"{bands} x {rows} =" in chosen


def test_version_and_stage_names_in_help(capsys):
    from gpupipe import __version__
    from gpupipe.stages import STAGES as NAMES

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and __version__ in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out.replace("\n", " ")
    assert all(name in out for name in NAMES)
