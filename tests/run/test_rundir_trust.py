"""A run directory that checks what it trusts (#32): a run never destroys the user's files (it writes only into a
folder it created), a stage's marker vouches for its files (size and checksum) and resume redoes from the first
stage whose files are missing or damaged, rebuilding shards byte for byte; the lock is re-checked before a stage is
marked done; a read-only or vanished run directory and a damaged part end in one line."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gpupipe.cli import main
from gpupipe.run.rundir import RUN_MARKER, LockLost, RunDir, RunFault, claim

STAGES = [{"normalize": {}}, {"exact_dedup": {}}, {"tokenize": {"vocab_size": 300}}, {"pack": {"seq_len": 16}}]


def write_cfg(path: Path, **kw) -> Path:
    kw.setdefault("device", "cpu")
    kw.setdefault("executor", {"partition_docs": 20, "workers": 1})
    kw.setdefault("stages", STAGES)
    path.write_text(yaml.safe_dump(kw, sort_keys=False))
    return path


def write_docs(path: Path, n: int = 60) -> Path:
    path.write_text("".join(json.dumps({"text": f"document number {i} " + "word " * (i % 7 + 3)}) + "\n"
                            for i in range(n)), encoding="utf-8")
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def resumed(run: Path) -> list[bool]:
    return [s["resumed"] for s in json.loads((run / "stats.json").read_text())["stages"]]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run (read, normalize, exact_dedup, tokenize, pack) of 60 JSONL documents in 3 partitions: its
    config, run directory and shards; tests run copies of it (markers name files relative to the run)."""
    tmp = tmp_path_factory.mktemp("finished")
    docs = write_docs(tmp / "docs.jsonl")
    run = tmp / "run"
    cfg = write_cfg(tmp / "c.yaml", input={"path": str(docs)}, output=str(run))
    assert main(["run", str(cfg)]) == 0
    return {"docs": docs, "run": run, "shards": snapshot(run / "shards")}


def copy_of(finished, tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    shutil.copytree(finished["run"], run)
    (run / "stats.json").unlink()
    return run, write_cfg(tmp_path / "c.yaml", input={"path": str(finished["docs"])}, output=str(run))


# -- the user's files are never destroyed --------------------------------------------------------------------------

def refused(capsys, cfg_args: list[str], folder: Path, needle: str) -> None:
    before = snapshot(folder)
    assert main(cfg_args) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err
    assert snapshot(folder) == before, "a refused run changed the user's files"


def user_folder(root: Path) -> Path:
    """A folder of the user's: data, and their own stats.json and shards/ (names a run directory also has)."""
    root.mkdir()
    write_docs(root / "docs.jsonl", 20)
    (root / "stats.json").write_text('{"mine": true}\n')
    (root / "shards").mkdir()
    (root / "shards" / "notes.txt").write_text("my shards\n")
    (root / "stages").mkdir()
    return root


def test_output_that_is_the_input_folder_or_inside_it_is_refused(tmp_path, capsys):
    data = user_folder(tmp_path / "data")
    cfg = write_cfg(tmp_path / "a.yaml", input={"path": str(data)}, output=str(data), stages=STAGES[:2])
    refused(capsys, ["run", str(cfg)], data, "is the input")
    cfg = write_cfg(tmp_path / "b.yaml", input={"path": str(data)}, output=str(data / "run"), stages=STAGES[:2])
    for _ in range(2):   # the same command again: still refused, still nothing written
        refused(capsys, ["run", str(cfg)], data, "inside the input folder")
    assert not (data / "run").exists()


def test_output_holding_the_input_or_user_files_is_refused(tmp_path, capsys, monkeypatch):
    data = user_folder(tmp_path / "data")
    cfg = write_cfg(tmp_path / "a.yaml", input={"path": str(data / "docs.jsonl")}, output=str(data),
                    stages=STAGES[:2])
    refused(capsys, ["run", str(cfg)], data, "holds the input")
    other = tmp_path / "in.jsonl"
    write_docs(other, 10)
    cfg = write_cfg(tmp_path / "b.yaml", input={"path": str(other)}, output=str(data), stages=STAGES[:2])
    refused(capsys, ["run", str(cfg)], data, "holds files gpupipe did not write")
    # output '': the current folder, where the user keeps a stats.json and shards/
    monkeypatch.chdir(data)
    cfg = write_cfg(tmp_path / "c.yaml", input={"path": str(other)}, output="", stages=STAGES[:2])
    refused(capsys, ["run", str(cfg)], data, "holds files gpupipe did not write")


def test_new_empty_and_run_folders_are_taken(tmp_path):
    docs = write_docs(tmp_path / "docs.jsonl", 10)
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (tmp_path / "new" / "run", empty):
        cfg = write_cfg(tmp_path / "c.yaml", input={"path": str(docs)}, output=str(out), stages=STAGES[:1])
        assert main(["run", str(cfg)]) == 0
        assert (out / RUN_MARKER).is_file()
        assert main(["run", str(cfg)]) == 0 and all(resumed(out))   # its own folder: taken again
    # a run directory of a gpupipe before the marker (only run-directory names, its config among them) is taken
    (empty / RUN_MARKER).unlink()
    assert main(["run", str(cfg)]) == 0 and (empty / RUN_MARKER).is_file()


# -- markers vouch for content --------------------------------------------------------------------------------------

def test_marker_records_every_file_with_size_and_checksum(finished):
    from gpupipe.run.rundir import digest

    run = finished["run"]
    pack = json.loads((run / "stages" / "04-pack" / "stats.json").read_text())
    assert set(pack["files"]) >= {f"shards/{n}" for n in finished["shards"]}
    norm = json.loads((run / "stages" / "02-exact_dedup" / "stats.json").read_text())["files"]
    parts = sorted((run / "stages" / "02-exact_dedup").glob("part-*.parquet"))
    assert len(parts) == 3
    for p in parts:
        assert norm[f"stages/02-exact_dedup/{p.name}"] == [p.stat().st_size, digest(p)]
    assert "files" not in json.loads((run / "stats.json").read_text())["stages"][4]   # the marker's only


@pytest.mark.parametrize("damage", ["shards deleted", "one shard deleted", "a shard's byte flipped"])
def test_finished_run_rebuilds_missing_or_damaged_shards(finished, tmp_path, capsys, damage):
    run, cfg = copy_of(finished, tmp_path)
    shard = run / "shards" / "shard-00000.bin"
    if damage == "shards deleted":
        shutil.rmtree(run / "shards")
    elif damage == "one shard deleted":
        shard.unlink()
    else:
        data = bytearray(shard.read_bytes())
        data[7] ^= 0xFF
        shard.write_bytes(bytes(data))
    assert main(["run", str(cfg)]) == 0
    err = capsys.readouterr().err
    assert "stage 04-pack is redone" in err, err
    assert resumed(run) == [True] * 4 + [False]
    assert snapshot(run / "shards") == finished["shards"]
    assert main(["verify", str(run / "shards")]) == 0


def test_truncated_or_deleted_parts_redo_their_stage(finished, tmp_path, capsys):
    run, cfg = copy_of(finished, tmp_path)
    part = sorted((run / "stages" / "01-normalize").glob("part-*.parquet"))[1]
    part.write_bytes(part.read_bytes()[:-100])   # truncated, marker kept
    assert main(["run", str(cfg)]) == 0
    err = capsys.readouterr().err
    assert f"stage 01-normalize is redone: stages/01-normalize/{part.name} is " in err, err
    assert resumed(run) == [True] + [False] * 4
    assert snapshot(run / "shards") == finished["shards"]

    for p in (run / "stages" / "02-exact_dedup").glob("part-*.parquet"):   # a stage's parts deleted, marker kept
        p.unlink()
    assert main(["run", str(cfg)]) == 0
    assert "is missing" in capsys.readouterr().err
    assert resumed(run) == [True, True, False, False, False]
    stats = json.loads((run / "stats.json").read_text())
    assert stats["conservation_ok"] and snapshot(run / "shards") == finished["shards"]


def test_a_same_size_damage_upstream_is_found_by_verify_resume(finished, tmp_path, capsys):
    run, cfg = copy_of(finished, tmp_path)
    part = sorted((run / "stages" / "01-normalize").glob("part-*.parquet"))[0]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x01
    part.write_bytes(bytes(data))
    # Not read by this run (exact_dedup's parts are what tokenize read): sizes match, the run resumes past it.
    assert main(["run", str(cfg)]) == 0 and all(resumed(run))
    capsys.readouterr()
    assert main(["run", str(cfg), "--verify-resume"]) == 0
    assert f"{part.name} is damaged" in capsys.readouterr().err
    assert resumed(run) == [True] + [False] * 4
    assert snapshot(run / "shards") == finished["shards"]


def test_a_damaged_part_its_marker_vouches_for_ends_in_one_line_then_is_redone(finished, tmp_path, capsys):
    """Damage the checksum cannot see (the part rotted before its marker was written): the stage that reads it
    stops with one line naming the part, and the same command redoes the stage that wrote it."""
    from gpupipe.run.rundir import digest

    run, cfg = copy_of(finished, tmp_path)
    stage = run / "stages" / "02-exact_dedup"
    part = sorted(stage.glob("part-*.parquet"))[1]
    part.write_bytes(b"\0" * part.stat().st_size)   # same size, no Parquet footer ("magic bytes not found")
    marker = json.loads((stage / "stats.json").read_text())
    marker["files"][f"stages/02-exact_dedup/{part.name}"] = [part.stat().st_size, digest(part)]
    (stage / "stats.json").write_text(json.dumps(marker))
    (run / "stages" / "03-tokenize" / "stats.json").unlink()   # tokenize must run: it reads the part
    assert main(["run", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and part.name in err and "damaged" in err and "same command" in err, err
    assert len(err.strip().splitlines()) == 1
    assert main(["run", str(cfg)]) == 0
    assert resumed(run) == [True, True, False, False, False]
    assert snapshot(run / "shards") == finished["shards"]


# -- the lock, re-checked; a run directory that vanishes ------------------------------------------------------------

def test_check_lock_sees_a_deleted_or_stolen_lock(tmp_path):
    claim(tmp_path / "run", [], [])
    run = RunDir(tmp_path / "run")
    run.lock()
    run.check_lock("x")
    run.lock_file.unlink()
    with pytest.raises(LockLost, match="was removed while this run held it"):
        run.check_lock("marking stage 01-normalize done")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from gpupipe.run.rundir import RunDir; "
                               "RunDir(sys.argv[1]).lock(); print('locked', flush=True); time.sleep(60)",
                               str(run.root)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(LockLost, match=f"replaced while this run held it; pid {holder.pid} holds it now"):
            run.check_lock("marking stage 01-normalize done")
    finally:
        holder.kill()
        holder.wait()
        run.unlock()


def hook_at(stage: str, action):
    """A progress factory (the engine calls it as each group of stages starts) that runs `action` at `stage`."""
    def factory(name, total, *size):
        if name.startswith(stage):
            action()
        return None
    return factory


def test_a_deleted_lock_stops_the_run_before_its_next_marker(tmp_path):
    from gpupipe.config import load_config
    from gpupipe.run.pipeline import run_pipeline

    docs = write_docs(tmp_path / "docs.jsonl")
    run = tmp_path / "run"
    cfg = load_config(str(write_cfg(tmp_path / "c.yaml", input={"path": str(docs)}, output=str(run))))
    with pytest.raises(LockLost) as e:
        run_pipeline(cfg, hook_at("exact_dedup", lambda: (run / "run.lock").unlink()))
    assert "stopped before marking stage 02-exact_dedup done" in str(e.value)
    assert (run / "stages" / "01-normalize" / "stats.json").is_file()
    assert not (run / "stages" / "02-exact_dedup" / "stats.json").exists()
    assert main(["run", str(tmp_path / "c.yaml")]) == 0 and resumed(run) == [True, True, False, False, False]


@pytest.mark.parametrize("made_again", [False, True])
def test_a_run_directory_removed_mid_run_ends_in_one_line(tmp_path, made_again):
    """Removed as exact_dedup starts; `made_again`: a worker writing a part at that moment makes its folder again
    (atomic writes make their parents), so the folder is back without the run's marker."""
    from gpupipe.config import load_config
    from gpupipe.run.pipeline import run_pipeline

    docs = write_docs(tmp_path / "docs.jsonl")
    run = tmp_path / "run"
    cfg = load_config(str(write_cfg(tmp_path / "c.yaml", input={"path": str(docs)}, output=str(run))))

    def remove():
        shutil.rmtree(run)
        if made_again:
            (run / "stages" / "02-exact_dedup").mkdir(parents=True)
    with pytest.raises(RunFault, match="was removed while the run was writing it"):
        run_pipeline(cfg, hook_at("exact_dedup", remove))
    assert run.exists() == made_again
    assert main(["run", str(tmp_path / "c.yaml")]) == 0   # the same command starts it afresh
    assert not any(resumed(run))


# -- a read-only run directory --------------------------------------------------------------------------------------

@pytest.fixture
def mount(tmp_path):
    """A real small file system (tmpfs) that a test can remount read-only: needs root and mount."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")

    def read_only():
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
    try:
        yield mnt, read_only
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_read_only_run_directory_ends_in_one_line(tmp_path, mount, capsys):
    mnt, read_only = mount
    docs = write_docs(tmp_path / "docs.jsonl", 20)
    done = mnt / "done"
    cfg_done = write_cfg(tmp_path / "a.yaml", input={"path": str(docs)}, output=str(done), stages=STAGES[:2])
    assert main(["run", str(cfg_done)]) == 0
    read_only()
    cfg_fresh = write_cfg(tmp_path / "b.yaml", input={"path": str(docs)}, output=str(mnt / "fresh"),
                          stages=STAGES[:2])
    capsys.readouterr()
    for cfg in (cfg_fresh, cfg_done):   # a fresh run, and a finished run remounted read-only (its lock file)
        assert main(["run", str(cfg)]) == 1
        err = capsys.readouterr().err
        assert "cannot be written" in err and "Read-only file system" in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1


def test_disk_full_while_the_views_are_written_says_what_is_missing(tmp_path, mount):
    """The stages done and their stats written, the disk fills up (a real tmpfs): the run still succeeds, with
    warnings naming the report and the audit samples as missing and how to write them later."""
    from gpupipe.config import load_config
    from gpupipe.report.views import write_views
    from gpupipe.run.pipeline import run_pipeline

    mnt, _ = mount
    docs = write_docs(tmp_path / "docs.jsonl")
    run = mnt / "run"
    cfg = load_config(str(write_cfg(tmp_path / "c.yaml", input={"path": str(docs)}, output=str(run),
                                    stages=STAGES[:2])))

    def fill_then_write(root, result, seed):
        with open(mnt / "filler", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
            except OSError:
                pass
        write_views(root, result, seed)

    try:
        result = run_pipeline(cfg, views=fill_then_write)
    except OSError as e:   # the views' own stats.json write can be what meets the full disk
        pytest.fail(f"the run failed instead of warning: {e}")
    said = " ".join(result.get("warnings", []))
    assert "report.html" in said and "missing" in said and "gpupipe report" in said, said
    assert (run / "stages" / "02-exact_dedup" / "stats.json").is_file()


def test_a_lost_dask_scheduler_ends_in_one_line(tmp_path):
    """A real scheduler and worker (`dask scheduler`, `dask worker` on 127.0.0.1), the scheduler killed as
    exact_dedup starts: the run stops with an error the CLI says in one line with the command that resumes it."""
    import socket

    from distributed import Client

    from gpupipe.cli import describe_fault
    from gpupipe.config import load_config
    from gpupipe.run.pipeline import run_pipeline

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dask = str(Path(sys.executable).parent / "dask")
    address = f"tcp://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    sched = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                             **quiet)
    worker = subprocess.Popen([dask, "worker", address, "--nworkers", "1", "--nthreads", "1", "--no-dashboard"],
                              **quiet)
    try:
        with Client(address, timeout=120) as client:
            client.wait_for_workers(1, timeout=120)
        docs = write_docs(tmp_path / "docs.jsonl")
        cfg_path = write_cfg(tmp_path / "c.yaml", input={"path": str(docs)}, output=str(tmp_path / "run"),
                             executor={"kind": "dask", "scheduler_address": address, "partition_docs": 20})

        def kill_at(name, total, *size):
            if name.startswith("exact_dedup"):
                sched.kill()
                sched.wait()
        with pytest.raises(Exception) as e:
            run_pipeline(load_config(str(cfg_path)), kill_at)
        said = describe_fault(e.value, ["run", str(cfg_path)])
        assert said is not None, repr(e.value)
        line, code = said
        assert code == 1 and "Dask scheduler" in line and f"gpupipe run {cfg_path}" in line and "\n" not in line
    finally:
        for p in (sched, worker):
            p.kill()
            p.wait()
    assert main(["run", str(cfg_path), "--executor", "local"]) == 0   # resumed after the last completed stage
    assert resumed(tmp_path / "run") == [True, True, False, False, False]


def test_an_html_page_rewritten_in_place_is_read_again(tmp_path):
    pages = tmp_path / "pages"
    pages.mkdir()
    for i in range(3):
        (pages / f"p{i}.html").write_text(f"<html><body><article><p>{'A real paragraph of page text. ' * 20}"
                                          f"page {i}</p></article></body></html>", encoding="utf-8")
    cfg = write_cfg(tmp_path / "c.yaml", input={"path": str(pages)}, output=str(tmp_path / "run"),
                    stages=[{"extract": {}}, {"normalize": {}}])
    assert main(["run", str(cfg)]) == 0
    assert main(["run", str(cfg)]) == 0 and all(resumed(tmp_path / "run"))
    page = pages / "p1.html"
    page.write_text(page.read_text(encoding="utf-8").replace("page 1", "page X"), encoding="utf-8")  # same name, size
    assert main(["run", str(cfg)]) == 0 and not any(resumed(tmp_path / "run"))
    parts = sorted((tmp_path / "run" / "stages" / "02-normalize").glob("part-*.parquet"))
    assert pd.concat(pd.read_parquet(p) for p in parts)["text"].str.contains("page X").any()
