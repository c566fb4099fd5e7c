"""Fault suite: bad inputs, bad configs and faults, each tried through the real `gpupipe` command in a fresh process.

Three tables, and a total line per table:
  bad inputs   handled cleanly = exit 0, 1 or 2, no traceback, and when stats.json exists, conservation holds
               and every input record is accounted for (docs in = docs out + removed)
  bad configs  refused before work = exit 2, no traceback, the message names the key (or file), and no stage
               folder was created
  faults       survived = after the fault (kill -9 after each stage and inside each phase of the global
               stages, Ctrl-C, SIGTERM, a second run at once, a stale lock, an interrupted run of a changed
               config), the directory never looks complete when it is not, and the resumed run ends with shards
               byte-identical to an undisturbed run

Usage:  python profiling/fault_suite.py [--work DIR] [--docs 150] [--only phases|rundir]
(rundir: the run directory faults of #32 alone, each counted clean / lost / traceback / hung / blow-up)
Exit 1 if anything was not handled. Needs nothing outside the project (the crawl is `gpupipe synth`'s).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

STAGES = [{"extract": {}}, {"normalize": {}}, {"langid": {"keep": ["en", "zh", "fr", "de", "es", "ru"]}},
          {"doc_filter": {"min_words": 20}}, {"exact_dedup": {}}, {"fuzzy_dedup": {}},
          {"tokenize": {"vocab_size": 512}}, {"pack": {"seq_len": 128}}]
TEXT_STAGES = [{"normalize": {}}, {"exact_dedup": {}}]


def gpupipe(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpupipe", *args], capture_output=True, text=True,
                          timeout=timeout)


def write_cfg(path: Path, **kw) -> Path:
    kw.setdefault("device", "cpu")
    path.write_text(yaml.safe_dump(kw, sort_keys=False))
    return path


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def accounted(run: Path) -> tuple[bool, str]:
    stats_file = run / "stats.json"
    if not stats_file.is_file():
        return True, "no stats"
    s = json.loads(stats_file.read_text())
    ok = s["conservation_ok"] and s["input_records"] + s["docs_added_total"] == s["output_docs"] + s["removed_total"]
    read = s["stages"][0]
    return ok, f"{s['input_records']} records: {s['output_docs']} out, read removed {read['removed']}"


# ----------------------------------------------------------------------------------------------- bad inputs

def bad_inputs(work: Path, crawl: Path) -> list[tuple[str, Path, list]]:
    """(name, input path, stages) for each bad input, made on disk."""
    from gpupipe.synth import write_synthetic_crawl

    d = work / "inputs"
    d.mkdir()
    cases: list[tuple[str, Path, list]] = []
    raw = crawl.read_bytes()

    def member_starts(data: bytes) -> list[int]:
        return [i for i in range(len(data) - 2) if data[i:i + 3] == b"\x1f\x8b\x08"]

    starts = member_starts(raw)
    cut = bytearray(raw)
    for s in starts[5:65:10]:  # six damaged gzip members
        cut[s + 12:s + 40] = b"\0" * 28
    (d / "damaged_members.warc.gz").write_bytes(bytes(cut))
    cases.append(("six damaged gzip members", d / "damaged_members.warc.gz", STAGES[:2]))
    (d / "truncated.warc.gz").write_bytes(raw[: len(raw) // 2 + 7])
    cases.append(("WARC truncated mid-record", d / "truncated.warc.gz", STAGES[:2]))

    plain = gzip.decompress(raw)
    first = plain.find(b"Content-Length:", plain.find(b"WARC-Type: response"))
    eol = plain.find(b"\r\n", first)
    (d / "lying_length.warc").write_bytes(plain[:first] + b"Content-Length: 99999999" + plain[eol:])
    cases.append(("plain WARC, Content-Length too long", d / "lying_length.warc", STAGES[:2]))
    (d / "short_length.warc").write_bytes(plain[:first] + b"Content-Length: 40" + plain[eol:])
    cases.append(("plain WARC, Content-Length too short", d / "short_length.warc", STAGES[:2]))

    html = d / "html_no_url"
    html.mkdir()
    for i in range(5):
        (html / f"p{i}.html").write_text(f"<html><body><article><p>{'A real paragraph of page text. ' * 20}"
                                         f"number {i}</p></article></body></html>")
    cases.append(("HTML folder without URLs", html, STAGES[:2]))
    mixed = d / "mixed_folder"
    mixed.mkdir()
    jsonl(mixed / "a.jsonl", [{"text": f"a document in a jsonl file, number {i}"} for i in range(4)])
    (mixed / "b.html").write_text("<html><body><p>" + "Some html text for the folder. " * 20 + "</p></body></html>")
    (mixed / "notes.txt").write_text("not a supported input")
    (mixed / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    cases.append(("folder of JSONL + HTML + unsupported files", mixed, STAGES[:2]))
    jdir = d / "jsonl_folder"
    jdir.mkdir()
    for k in range(3):
        jsonl(jdir / f"part{k}.jsonl", [{"text": f"text {k}-{i} of the folder"} for i in range(3)])
    cases.append(("folder of JSONL files", jdir, TEXT_STAGES))

    mix_json = jsonl(d / "docs.jsonl", [{"text": f"a jsonl document {i} beside a crawl"} for i in range(6)])
    cases.append(("WARC + JSONL in one run", [str(crawl), str(mix_json)], STAGES[:3]))
    (d / "empty.parquet").write_bytes(b"")
    cases.append(("zero-byte Parquet", d / "empty.parquet", TEXT_STAGES))
    import pandas as pd

    pd.DataFrame({"content": ["x", "y"], "id": ["1", "2"]}).to_parquet(d / "no_text.parquet")
    cases.append(("Parquet without the text column", d / "no_text.parquet", TEXT_STAGES))
    (d / "garbage.parquet").write_bytes(b"PAR1" + os.urandom(200) + b"PAR1")
    cases.append(("corrupt Parquet", d / "garbage.parquet", TEXT_STAGES))
    jsonl(d / "bad_lines.jsonl", [{"text": "fine line one"}, "{not json", '{"text": 5}', "\udcff".encode(
        "utf-8", "surrogateescape").decode("latin-1"), {"text": "fine line two"}])
    cases.append(("JSONL with bad lines", d / "bad_lines.jsonl", TEXT_STAGES))
    (d / "bad.jsonl.gz").write_bytes(gzip.compress(b'{"text": "ok"}\n')[:-6])
    cases.append(("truncated .jsonl.gz", d / "bad.jsonl.gz", TEXT_STAGES))
    (d / "empty.jsonl").write_text("")
    cases.append(("empty input file", d / "empty.jsonl", TEXT_STAGES))
    jsonl(d / "wrong_field.jsonl", [{"content": "text under another name"}])
    cases.append(("JSONL without the text field", d / "wrong_field.jsonl", TEXT_STAGES))
    (d / "notes.txt").write_text("plain text")
    cases.append(("unknown extension", d / "notes.txt", TEXT_STAGES))
    big = write_synthetic_crawl(d / "tiny.warc.gz", docs=3, seed=1)
    cases.append(("filters remove everything", Path(big["warc"]),
                  STAGES[:2] + [{"doc_filter": {"min_words": 100000, "max_words": 1000000}}]))
    return cases


def run_bad_inputs(work: Path, crawl: Path) -> list[tuple[str, bool, str]]:
    rows = []
    for i, (name, path, stages) in enumerate(bad_inputs(work, crawl)):
        run = work / f"in-{i}"
        paths = path if isinstance(path, list) else str(path)
        cfg = write_cfg(work / f"in-{i}.yaml", input={"path": paths}, output=str(run), stages=stages)
        r = gpupipe("run", str(cfg))
        ok_acc, what = accounted(run)
        clean = r.returncode in (0, 1, 2) and "Traceback" not in r.stderr and ok_acc
        lines = r.stderr.strip().splitlines() or [""]
        said = next((x for x in lines if x.startswith("error:")), lines[-1])[:150] if r.returncode else what
        rows.append((name, clean, f"exit {r.returncode}: {said}"))
    return rows


# ---------------------------------------------------------------------------------------------- bad configs

def bad_configs(work: Path, crawl: Path, tok: Path) -> list[tuple[str, dict | str, str]]:
    """(name, config or raw YAML text, text the message must contain)."""
    base = {"input": {"path": str(crawl)}, "output": str(work / "cfg-run"), "stages": STAGES}

    def with_stage(i: int, params: dict) -> dict:
        stages = [dict(s) for s in STAGES]
        (name, old), = stages[i].items()
        stages[i] = {name: {**old, **params}}
        return {**base, "stages": stages}

    a_file = work / "output_is_a_file"
    a_file.write_text("x")
    return [
        ("pack.seq_len 0", with_stage(7, {"seq_len": 0}), "seq_len"),
        ("pack.blocks_per_shard 0", with_stage(7, {"blocks_per_shard": 0}), "blocks_per_shard"),
        ("fuzzy_dedup.num_perm 0", with_stage(5, {"num_perm": 0}), "num_perm"),
        ("fuzzy_dedup.threshold 1.5", with_stage(5, {"threshold": 1.5}), "threshold"),
        ("fuzzy_dedup bands x rows > num_perm", with_stage(5, {"bands": 20, "rows": 10}), "num_perm"),
        ("tokenize.vocab_size 100", with_stage(6, {"vocab_size": 100}), "vocab_size"),
        ("doc_filter min_words > max_words", with_stage(3, {"min_words": 500, "max_words": 100}), "min_words"),
        ("langid.min_score 1.5", with_stage(2, {"min_score": 1.5}), "min_score"),
        ("langid.keep unknown code", with_stage(2, {"keep": ["en", "english"]}), "english"),
        ("tokenize.tokenizer missing", with_stage(6, {"tokenizer": str(work / "nope.json")}), "tokenizer"),
        ("decontaminate.index missing", {**base, "stages": STAGES[:5] + [
            {"decontaminate": {"index": str(work / "nope.parquet")}}]}, "index"),
        ("quality_classifier.model missing", {**base, "stages": STAGES[:5] + [
            {"quality_classifier": {"model": str(work / "nope.bin")}}]}, "model"),
        ("output is a file", {**base, "output": str(a_file)}, "output"),
        ("misspelt stage", {**base, "stages": STAGES[:5] + [{"fuzy_dedup": {}}]}, "fuzzy_dedup"),
        ("misspelt parameter", with_stage(3, {"min_word": 5}), "min_words"),
        ("unknown top-level key", {**base, "sead": 1}, "seed"),
        ("input not found", {**base, "input": {"path": str(work / "missing.warc.gz")}}, "input"),
        ("stage after pack", {**base, "stages": STAGES + [{"normalize": {}}]}, "pack"),
        ("HTML input without extract", {**base, "stages": STAGES[1:]}, "extract"),
        ("not YAML", "input: [unclosed\n", "YAML"),
        ("tokenizer given is fine (control: must run)", with_stage(6, {"tokenizer": str(tok)}), ""),
    ]


def run_bad_configs(work: Path, crawl: Path, tok: Path) -> list[tuple[str, bool, str]]:
    rows = []
    for i, (name, cfg, needle) in enumerate(bad_configs(work, crawl, tok)):
        path = work / f"cfg-{i}.yaml"
        if isinstance(cfg, str):
            path.write_text(cfg)
        else:
            write_cfg(path, **cfg)
        shutil.rmtree(work / "cfg-run", ignore_errors=True)
        r = gpupipe("run", str(path))
        if not needle:  # the control: a valid config must not be refused
            rows.append((name, r.returncode == 0, f"exit {r.returncode}"))
            continue
        no_work = not (work / "cfg-run" / "stages").exists()
        ok = r.returncode == 2 and "Traceback" not in r.stderr and needle in r.stderr and no_work
        said = " ".join(r.stderr.split())[:110]
        rows.append((name, ok, f"exit {r.returncode}{'' if no_work else ', WORK DONE'}: {said}"))
    return rows


# --------------------------------------------------------------------------------------------------- faults

def shard_bytes(run: Path) -> dict[str, bytes]:
    folder = run / "shards"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()} if folder.is_dir() else {}


def looks_complete(run: Path) -> bool:
    return (run / "stats.json").exists() or (run / "shards" / "manifest.json").exists()


def kill_when(cfg: Path, ready, sig: int = signal.SIGKILL, timeout: float = 300) -> int | None:
    """Start a run, send `sig` once `ready()` is true; the exit code, or None if it finished first."""
    proc = subprocess.Popen([sys.executable, "-m", "gpupipe", "run", str(cfg)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + timeout
    while not ready() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    if proc.poll() is not None:
        return None
    proc.send_signal(sig)
    proc.communicate(timeout=120)
    return proc.returncode


def stop_and_resume(work: Path, tag: str, crawl: Path, reference: dict[str, bytes], ready, sig: int
                    ) -> tuple[bool, int | None, str]:
    """Run the pipeline into work/tag, send `sig` once `ready()`, then run it again: whether the stopped directory
    did not look complete and the resumed one ends with the reference shards; the stop's exit code; what resumed."""
    run = work / tag
    cfg = write_cfg(work / f"{tag}.yaml", input={"path": str(crawl)}, output=str(run), stages=STAGES,
                    executor={"partition_docs": 20})
    code = kill_when(cfg, ready, sig)
    partial_ok = code is None or not looks_complete(run)
    r = gpupipe("run", str(cfg))
    same = r.returncode == 0 and shard_bytes(run) == reference
    return partial_ok and same, code, f"exit {r.returncode}, shards {'identical' if same else 'DIFFER'}"


def run_faults(work: Path, crawl: Path, only: str | None = None) -> list[tuple[str, bool, str]]:
    rows = []
    ref_run = work / "ref"
    ref_cfg = write_cfg(work / "ref.yaml", input={"path": str(crawl)}, output=str(ref_run), stages=STAGES,
                        executor={"partition_docs": 20})
    assert gpupipe("run", str(ref_cfg)).returncode == 0, "the undisturbed reference run failed"
    reference = shard_bytes(ref_run)
    names = ["read"] + [next(iter(s)) for s in STAGES]
    for i, name in enumerate(names[:-1] if only != "phases" else []):
        for sig, label in ((signal.SIGKILL, "kill -9"), (signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")):
            if (sig == signal.SIGINT and i % 3 != 0) or (sig == signal.SIGTERM and i % 3 != 1):
                continue  # Ctrl-C and SIGTERM each at every third stage is enough
            marker = work / f"fault-{i}-{sig}" / "stages" / f"{i:02d}-{name}" / "stats.json"
            ok, code, resumed = stop_and_resume(work, f"fault-{i}-{sig}", crawl, reference, marker.exists, sig)
            rows.append((f"{label} after stage {name}", ok, f"stopped with {code}, resumed: {resumed}"))

    rows += run_phase_faults(work, crawl, reference)
    if only == "phases":
        return rows

    # A second run at once on the same directory, then a stale lock left by kill -9.
    run = work / "twice"
    cfg = write_cfg(work / "twice.yaml", input={"path": str(crawl)}, output=str(run), stages=STAGES,
                    executor={"partition_docs": 20})
    first = subprocess.Popen([sys.executable, "-m", "gpupipe", "run", str(cfg)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    while not (run / "stages" / "01-extract").exists() and first.poll() is None:
        time.sleep(0.01)
    second = gpupipe("run", str(cfg))
    first.send_signal(signal.SIGKILL)
    first.wait()
    refused = second.returncode == 2 and f"pid {first.pid}" in second.stderr
    r = gpupipe("run", str(cfg))
    rows.append(("second run on a busy directory, then the holder killed (stale lock)",
                 refused and r.returncode == 0 and shard_bytes(run) == reference,
                 f"second: exit {second.returncode}; after kill -9: exit {r.returncode}"))

    # An interrupted run of a changed config never leaves the old config's results looking complete.
    run = work / "changed"
    cfg = write_cfg(work / "changed-a.yaml", input={"path": str(crawl)}, output=str(run), stages=STAGES,
                    executor={"partition_docs": 20})
    gpupipe("run", str(cfg))
    changed = [dict(s) for s in STAGES]
    changed[3] = {"doc_filter": {"min_words": 30}}
    cfg_b = write_cfg(work / "changed-b.yaml", input={"path": str(crawl)}, output=str(run), stages=changed,
                      executor={"partition_docs": 20})
    marker = run / "stages" / "04-doc_filter" / "stats.json"
    old = marker.read_text()
    proc = subprocess.Popen([sys.executable, "-m", "gpupipe", "run", str(cfg_b)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    while proc.poll() is None and (not marker.exists() or marker.read_text() == old):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stale = looks_complete(run) or (run / "stages" / "08-pack" / "stats.json").exists()
    verify = gpupipe("verify", str(run / "shards"))
    rows.append(("changed config interrupted after its changed stage", not stale and verify.returncode != 0,
                 f"stats/shards left: {stale}; verify exit {verify.returncode}"))
    return rows


def run_phase_faults(work: Path, crawl: Path, reference: dict[str, bytes]) -> list[tuple[str, bool, str]]:
    """kill -9 inside each phase of the global stages, once the phase has written its first exchange file
    (`stages/exchange.py` names the folders: one per exchange, one file per producer or key)."""
    rows = []
    names = ["read"] + [next(iter(s)) for s in STAGES]
    phases = [("exact_dedup", "keys/*"), ("exact_dedup", "removals/*"), ("fuzzy_dedup", "bands/*"),
              ("fuzzy_dedup", "keys-g*/*"), ("fuzzy_dedup", "edges-g*/*"), ("fuzzy_dedup", "shingles/*"),
              ("fuzzy_dedup", "pairs/*"), ("fuzzy_dedup", "removals/*"), ("fuzzy_dedup", "sample-texts/*")]
    for k, (name, pattern) in enumerate(phases):
        i = names.index(name)
        exchange = work / f"phase-{k}" / "stages" / f"{i:02d}-{name}" / "_exchange"
        ok, code, resumed = stop_and_resume(work, f"phase-{k}", crawl, reference,
                                            lambda: any(exchange.glob(pattern)), signal.SIGKILL)
        rows.append((f"kill -9 inside {name}, once _exchange/{pattern} exists", ok,
                     f"{'killed' if code is not None else 'FINISHED FIRST (not a kill inside)'}, resumed: {resumed}"))
    return rows


# ---------------------------------------------------------------------------- run directory faults (#32)
# Each case: how it ended, counted as clean (exit code and one `error:`/`warning:` line or a correct rebuild),
# lost (the user's files changed, shards not byte-identical to an undisturbed run, or a run that says OK with
# something missing), traceback, hung (past its timeout) or blow-up (peak RSS over RSS_BOUND_MB).
RSS_BOUND_MB = 4096


def _gpupipe_rss(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 900
                 ) -> tuple[subprocess.CompletedProcess | None, float]:
    """`gpupipe ARGS` in a fresh process: the result (None when it hung past `timeout`) and its peak RSS in MB."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    try:
        r = subprocess.run([sys.executable, "-m", "gpupipe", *args], capture_output=True, text=True,
                           timeout=timeout, cwd=cwd, env=env)
    except subprocess.TimeoutExpired:
        return None, 0.0
    return r, max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before) / 1024


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _verdict(r, rss: float, ok: bool, lost: bool = False) -> str:
    if r is None:
        return "hung"
    if "Traceback" in r.stderr:
        return "traceback"
    if rss > RSS_BOUND_MB:
        return "blow-up"
    return "lost" if lost else "clean" if ok else "not handled"


def _one_line(r) -> bool:
    return r is not None and len([x for x in r.stderr.strip().splitlines() if x.startswith("error:")]) == 1


def _said(r) -> str:
    if r is None:
        return "hung"
    lines = [x for x in r.stderr.strip().splitlines() if x.startswith(("error:", "warning:"))] or [""]
    return f"exit {r.returncode}: {lines[0][:110]}"


def run_dir_cases(work: Path, crawl: Path) -> list[tuple[str, str, str]]:
    """(name, verdict, what happened) for each run-directory fault."""
    rows: list[tuple[str, str, str]] = []
    base = work / "rd"
    base.mkdir()
    ref = base / "ref"
    # no langid, no fuzzy dedup: shorter, the same kinds of stages (a fused chain extract+normalize+doc_filter, a
    # global stage, tokenize, pack)
    stages = [STAGES[0], STAGES[1], STAGES[3], STAGES[4], STAGES[6], STAGES[7]]
    ex = {"partition_docs": 30}
    ref_cfg = write_cfg(base / "ref.yaml", input={"path": str(crawl)}, output=str(ref), stages=stages, executor=ex)
    r, _ = _gpupipe_rss("run", str(ref_cfg), timeout=1800)
    assert r is not None and r.returncode == 0, f"the undisturbed reference run failed: {r and r.stderr[-2000:]}"
    reference = shard_bytes(ref)

    # -- the user's files: refused before any work, nothing changed
    def user_folder(root: Path) -> Path:
        root.mkdir(parents=True)
        jsonl(root / "docs.jsonl", [{"text": f"the user's document number {i} with a few more words"}
                                    for i in range(20)])
        (root / "stats.json").write_text('{"mine": true}\n')
        (root / "shards").mkdir()
        (root / "shards" / "notes.txt").write_text("my own shards folder\n")
        (root / "stages").mkdir()
        return root

    for k, (name, make) in enumerate([
            ("output is the input folder", lambda d: (d, d, None)),
            ("output inside the input folder (3 times)", lambda d: (d, d / "run", None)),
            ("output '' (the current folder, user's stats.json, shards/)",
             lambda d: (jsonl(base / "other.jsonl", [{"text": "a document elsewhere"}]), "", d)),
            ("output an existing folder of the user's", lambda d: (crawl, d, None))]):
        data = user_folder(base / f"user-{k}")
        src, out, cwd = make(data)
        before = _tree(data)
        cfg = write_cfg(base / f"user-{k}.yaml", input={"path": str(src)}, output=str(out), stages=TEXT_STAGES
                        if str(src).endswith(".jsonl") or src == data else stages[:2])
        for _ in range(3 if "3 times" in name else 1):
            r, rss = _gpupipe_rss("run", str(cfg), cwd=cwd)
        lost = _tree(data) != before
        rows.append((name, _verdict(r, rss, r is not None and r.returncode == 2 and _one_line(r), lost),
                     _said(r) + ("; USER FILES CHANGED" if lost else "")))

    # -- a finished run re-run after damage: rebuilt byte for byte
    def damaged(tag: str, damage, extra: tuple[str, ...] = ()) -> tuple[str, str]:
        run = base / tag
        shutil.copytree(ref, run)
        cfg = write_cfg(base / f"{tag}.yaml", input={"path": str(crawl)}, output=str(run), stages=stages,
                        executor=ex)
        damage(run)
        r, rss = _gpupipe_rss("run", str(cfg), *extra)
        if r is not None and r.returncode == 1 and _one_line(r):   # stopped with one line: the same command again
            r, rss = _gpupipe_rss("run", str(cfg), *extra)
        same = r is not None and r.returncode == 0 and shard_bytes(run) == reference
        verify = gpupipe("verify", str(run / "shards")).returncode == 0
        return _verdict(r, rss, same and verify, lost=r is not None and r.returncode == 0 and not (same and verify)), \
            _said(r) + f"; shards {'identical' if same else 'DIFFER'}"

    def flip(path: Path, at: float = 0.5) -> None:
        data = bytearray(path.read_bytes())
        data[int(len(data) * at)] ^= 0x01
        path.write_bytes(bytes(data))

    def first_part(run: Path, stage: str) -> Path:
        return sorted(run.glob(f"stages/*-{stage}/part-*.parquet"))[0]

    def vouched_garbage(run: Path) -> None:   # a part that rotted before its checksum was taken
        from gpupipe.run.rundir import digest

        part = first_part(run, "exact_dedup")
        part.write_bytes(b"\0" * part.stat().st_size)
        marker = part.parent / "stats.json"
        m = json.loads(marker.read_text())
        m["files"][part.relative_to(run).as_posix()] = [part.stat().st_size, digest(part)]
        marker.write_text(json.dumps(m))
        next(run.glob("stages/*-tokenize/stats.json")).unlink()

    for tag, name, damage, extra in [
            ("shards-gone", "finished run, shards/ deleted", lambda r: shutil.rmtree(r / "shards"), ()),
            ("shard-gone", "finished run, one shard deleted", lambda r: (r / "shards" / "shard-00000.bin").unlink(),
             ()),
            ("shard-flip", "finished run, a shard's byte flipped", lambda r: flip(r / "shards" / "shard-00000.bin"),
             ()),
            ("part-cut", "finished run, a curated part truncated",
             lambda r: first_part(r, "exact_dedup").write_bytes(first_part(r, "exact_dedup").read_bytes()[:-99]), ()),
            ("parts-gone", "a stage's parts deleted, its marker kept",
             lambda r: [p.unlink() for p in r.glob("stages/*-doc_filter/part-*.parquet")], ()),
            ("upstream-flip", "an upstream part's byte flipped, --verify-resume",
             lambda r: flip(first_part(r, "doc_filter")), ("--verify-resume",)),
            ("vouched-garbage", "a damaged part its marker vouches for (magic bytes)", vouched_garbage, ())]:
        verdict, what = damaged(tag, damage, extra)
        rows.append((name, verdict, what))

    # -- mid-run faults: one line, then the same command ends with the reference shards
    def mid_run(tag: str, act, expect: str) -> tuple[str, str]:
        run = base / tag
        cfg = write_cfg(base / f"{tag}.yaml", input={"path": str(crawl)}, output=str(run), stages=stages,
                        executor=ex)
        marker = run / "stages" / "02-normalize" / "stats.json"
        proc = subprocess.Popen([sys.executable, "-m", "gpupipe", "run", str(cfg)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        while not marker.exists() and proc.poll() is None:
            time.sleep(0.005)
        act(run)
        try:
            err = proc.communicate(timeout=900)[1]
        except subprocess.TimeoutExpired:
            proc.kill()
            return "hung", "the faulted run hung"
        r = subprocess.CompletedProcess(proc.args, proc.returncode, "", err)
        first = _said(r)
        if "Traceback" in err:
            return "traceback", first
        if proc.returncode == 0:
            return "not handled", f"{first}: finished (the fault came too late)"
        again, rss = _gpupipe_rss("run", str(cfg))
        same = again is not None and again.returncode == 0 and shard_bytes(run) == reference
        ok = proc.returncode == 1 and _one_line(r) and expect in err and same
        return _verdict(again, rss, ok, lost=again is not None and again.returncode == 0 and not same), \
            f"{first}; again: shards {'identical' if same else 'DIFFER'}"

    verdict, what = mid_run("lock-gone", lambda r: (r / "run.lock").unlink(), "lock")
    rows.append(("lock file deleted mid-run", verdict, what))
    verdict, what = mid_run("dir-gone", lambda r: shutil.rmtree(r), "removed")
    rows.append(("run directory removed mid-run", verdict, what))

    # -- a read-only run directory (a real tmpfs remounted read-only: needs root)
    mnt = base / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mnt)], capture_output=True).returncode:
        rows.append(("read-only run directory", "skipped", "cannot mount a tmpfs here (needs root)"))
    else:
        try:
            done = write_cfg(base / "ro-done.yaml", input={"path": str(crawl)}, output=str(mnt / "done"),
                             stages=stages[:2])
            _gpupipe_rss("run", str(done))
            subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
            fresh = write_cfg(base / "ro-fresh.yaml", input={"path": str(crawl)}, output=str(mnt / "fresh"),
                              stages=stages[:2])
            for name, cfg in (("read-only file system, fresh run", fresh),
                              ("finished run remounted read-only (the lock file)", done)):
                r, rss = _gpupipe_rss("run", str(cfg))
                rows.append((name, _verdict(r, rss, r is not None and r.returncode == 1 and _one_line(r)), _said(r)))
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False)

    # -- a lost Dask scheduler: a real one (`dask scheduler`, `dask worker`), killed once a stage is marked
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dport = s.getsockname()[1]
    dask, address = str(Path(sys.executable).parent / "dask"), f"tcp://127.0.0.1:{dport}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    sched = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(dport), "--no-dashboard"],
                             **quiet)
    worker = subprocess.Popen([dask, "worker", address, "--nworkers", "1", "--nthreads", "1", "--no-dashboard"],
                              **quiet)
    try:
        from distributed import Client

        with Client(address, timeout=120) as client:
            client.wait_for_workers(1, timeout=120)
        dex = {**ex, "kind": "dask", "scheduler_address": address}
        cfg = write_cfg(base / "dask.yaml", input={"path": str(crawl)}, output=str(base / "dask"), stages=stages,
                        executor=dex)
        marker = base / "dask" / "stages" / "02-normalize" / "stats.json"
        proc = subprocess.Popen([sys.executable, "-m", "gpupipe", "run", str(cfg)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        while not marker.exists() and proc.poll() is None:
            time.sleep(0.005)
        sched.kill()
        try:
            err = proc.communicate(timeout=600)[1]
            r = subprocess.CompletedProcess(proc.args, proc.returncode, "", err)
            again, rss = _gpupipe_rss("run", str(cfg), "--executor", "local")
            same = again is not None and again.returncode == 0 and shard_bytes(base / "dask") == reference
            ok = proc.returncode == 1 and _one_line(r) and "Dask scheduler" in err and same
            verdict = "traceback" if "Traceback" in err else _verdict(again, rss, ok)
            rows.append(("Dask scheduler killed mid-run", verdict,
                         f"{_said(r)}; again (local): shards {'identical' if same else 'DIFFER'}"))
        except subprocess.TimeoutExpired:
            proc.kill()
            rows.append(("Dask scheduler killed mid-run", "hung", "the run did not end"))
    finally:
        for proc_ in (sched, worker):
            proc_.kill()
            proc_.wait()

    # -- disk full while the report and audit samples are written: a tmpfs just big enough for the run's stages
    mnt = base / "small"
    mnt.mkdir()
    views = sum(p.stat().st_size for p in [ref / "report.html", ref / "metrics.prom", *(ref / "audit").rglob("*")]
                if p.is_file())
    need = sum(p.stat().st_size for p in ref.rglob("*") if p.is_file()) - views
    size_kb = (need + 4096 * sum(1 for _ in ref.rglob("*"))) // 1024 + 64
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(mnt)],
                      capture_output=True).returncode:
        rows.append(("disk full while the report/audit are written", "skipped", "cannot mount a tmpfs (root)"))
    else:
        try:
            cfg = write_cfg(base / "small.yaml", input={"path": str(crawl)}, output=str(mnt / "run"), stages=stages,
                            executor=ex)
            r, rss = _gpupipe_rss("run", str(cfg))
            warned = r is not None and r.returncode == 0 and "missing" in r.stderr
            stopped = r is not None and r.returncode == 1 and _one_line(r) and "space" in r.stderr
            rows.append(("disk full while the report/audit are written", _verdict(r, rss, warned or stopped),
                         _said(r) + f" (tmpfs {size_kb} KiB; views {views // 1024} KiB)"))
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False)

    # -- storage that does not answer: a closed port on 127.0.0.1

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "GPUPIPE_WORK_DIR": str(base / "work")}
    docs = jsonl(base / "docs.jsonl", [{"text": f"a document number {i} for the storage case"} for i in range(20)])
    for name, inp, out in (("S3 run directory, server down", str(docs), "s3://bucket/runs/r1"),
                           ("http:// input, server down", f"http://127.0.0.1:{port}/docs.jsonl", str(base / "h"))):
        try:
            import s3fs  # noqa: F401
        except ImportError:
            rows.append((name, "skipped", "s3fs (the [cloud] extra) is not installed"))
            continue
        cfg = write_cfg(base / f"st-{len(rows)}.yaml", input={"path": inp}, output=out, stages=TEXT_STAGES)
        r, rss = _gpupipe_rss("run", str(cfg), env=env, timeout=240)
        url = out if out.startswith("s3") else inp
        rows.append((name, _verdict(r, rss, r is not None and r.returncode in (1, 2) and _one_line(r)
                                    and url in r.stderr), _said(r)))
    return rows


def run_dir_table(work: Path, crawl: Path) -> int:
    rows = run_dir_cases(work, crawl)
    print("\n## run directory faults (#32)")
    for name, verdict, what in rows:
        print(f"  {verdict:<11} {name:<58} {what}")
    counts = {v: sum(1 for _, x, _ in rows if x == v) for v in
              ("clean", "lost", "traceback", "hung", "blow-up", "not handled", "skipped")}
    print(f"  run directory faults: {len(rows)} tried, " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    return len(rows) - counts["clean"] - counts["skipped"]


def table(title: str, rows: list[tuple[str, bool, str]], verdict: str) -> int:
    print(f"\n## {title}")
    for name, ok, what in rows:
        print(f"  {'ok  ' if ok else 'FAIL'}  {name:<58} {what}")
    good = sum(ok for _, ok, _ in rows)
    print(f"  {title}: {len(rows)} tried, {good} {verdict}")
    return len(rows) - good


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", help="working folder (default: a fresh temp folder, removed at the end)")
    ap.add_argument("--docs", type=int, default=150, help="pages in the synthetic crawl (default 150)")
    ap.add_argument("--only", choices=["phases", "rundir"], help="phases: only the faults table's kills inside the "
                    "phases of the global stages (exact_dedup, fuzzy_dedup); rundir: only the run directory faults")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="gpupipe-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    from gpupipe.synth import write_synthetic_crawl

    crawl = Path(write_synthetic_crawl(work / "crawl.warc.gz", docs=args.docs, seed=0)["warc"])
    t0 = time.time()
    failed = 0
    if not args.only:
        tok_run = work / "tok"
        write_cfg(work / "tok.yaml", input={"path": str(crawl)}, output=str(tok_run), stages=STAGES)
        assert gpupipe("run", str(work / "tok.yaml")).returncode == 0
        tok = next(tok_run.glob("stages/*-tokenize/tokenizer.json"))
        failed += table("bad inputs", run_bad_inputs(work, crawl), "handled cleanly")
        failed += table("bad configs", run_bad_configs(work, crawl, tok), "refused before work (control: ran)")
        # #32's inputs-and-configs block: its own script and table (profiling/fault_inputs.py), counted as one
        failed += subprocess.run([sys.executable, str(Path(__file__).with_name("fault_inputs.py")),
                                  "--work", str(work / "inputs-32")]).returncode != 0
    if args.only != "rundir":
        failed += table("faults", run_faults(work, crawl, args.only), "survived with identical output")
    if args.only in (None, "rundir"):
        failed += run_dir_table(work, crawl)
    print(f"\n{time.time() - t0:.0f} s; {'all clean' if not failed else f'{failed} NOT handled'}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
