"""`gpupipe run`: the stages of a config, one after another, each over all partitions, into a run directory."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from gpupipe import __version__, retries
from gpupipe._numba_cache import compile_seconds
from gpupipe.acquire.commoncrawl import fetch_retries
from gpupipe.backend import has_cudf, resolve_device
from gpupipe.config_base import ConfigError, file_refs
from gpupipe.config import RunConfig, dump_config, local_file_refs
from gpupipe.io import storage
from gpupipe.io.inputs import Inputs, resolve_inputs
from gpupipe.io.parts import atomic_write_text
from gpupipe.run import interrupt
from gpupipe.run.executors import make_executor
from gpupipe.run.phases import run_stage
from gpupipe.run.remote import RemoteRun, default_work_dir
from gpupipe.run.rundir import RunDir, RunFault, StageDir, claim, input_fingerprint, stage_key
from gpupipe.run.tasks import fusable, map_chain_task
from gpupipe.stages import STAGES, build_stage
from gpupipe.stages.base import RunContext, Stage, StageStats, peak_rss_mb
from gpupipe.stages.read import ReadStage

log = logging.getLogger("gpupipe")

HTML_FORMATS = {"warc", "html_dir"}


class RunResultError(RuntimeError):
    """A run that finished with a result it must not pass as a success; `result` is its stats (written)."""

    def __init__(self, message: str, result: dict[str, Any] | None = None):
        super().__init__(message)
        self.result = result


class ConservationError(RunResultError):
    """Documents were lost or invented between stages."""


class EmptyRunError(RunResultError):
    """The run finished but yielded no documents (and the config does not say `allow_empty: true`)."""


def _check_plan(inputs: Inputs, cfg: RunConfig) -> None:
    """Refuse, before any work, plans that cannot work (HTML input without extraction). HTML and text inputs may
    be mixed when extract comes first: documents that already have text pass through it unchanged."""
    first = next(iter(cfg.stages[0])) if cfg.stages else None
    html = [(f, fmt) for f, fmt in zip(inputs.files, inputs.formats) if fmt in HTML_FORMATS]
    if html and first != "extract":
        raise ConfigError(f"input {html[0][0]} holds HTML ({html[0][1]}): the first stage must be 'extract'")
    if not html and "extract" in (next(iter(s)) for s in cfg.stages):
        raise ConfigError("stage 'extract' needs HTML input (WARC or a folder of .html files)")


def check_conservation(stages: list[dict[str, Any]]) -> list[str]:
    """Every stage: docs in (+ rows a splitting stage added, `extra.docs_added`) = docs out + removed; each stage
    takes what the previous one gave."""
    problems = []
    for i, s in enumerate(stages):
        if s["docs_in"] + s.get("extra", {}).get("docs_added", 0) != s["docs_out"] + sum(s["removed"].values()):
            problems.append(f"stage {s['name']}: {s['docs_in']} in != {s['docs_out']} out + "
                            f"{sum(s['removed'].values())} removed")
        if i and s["docs_in"] != stages[i - 1]["docs_out"]:
            problems.append(f"stage {s['name']}: takes {s['docs_in']} docs but {stages[i - 1]['name']} "
                            f"gave {stages[i - 1]['docs_out']}")
    return problems


class _RunLog(logging.FileHandler):
    def handleError(self, record):   # noqa: N802 - a full disk must not print logging's traceback: the log is best
        pass                         # effort, the run's own writes say what failed


@contextlib.contextmanager
def _log_to(run: RunDir):
    """The run's log file takes gpupipe's records and Dask's: a lost scheduler's reconnect errors and tracebacks go
    to the log, not the terminal, where the CLI says what happened in one line."""
    handler = _RunLog(run.log, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    dask = logging.getLogger("distributed")
    terminal = {h: h.level for h in dask.handlers if isinstance(h, logging.StreamHandler)
                and getattr(h, "stream", None) in (sys.stderr, sys.stdout)}
    for h in terminal:
        h.setLevel(logging.CRITICAL + 1)
    dask.addHandler(handler)
    try:
        yield handler
    finally:
        dask.removeHandler(handler)
        for h, level in terminal.items():
            h.setLevel(level)
        log.removeHandler(handler)
        handler.close()


def run_pipeline(cfg: RunConfig, progress_factory: Callable[[str, int], Any] | None = None,
                 views: Callable[[Path, dict, int], None] | None = None, verify_resume: bool = False
                 ) -> dict[str, Any]:
    """Run (or resume) a config; returns the run stats, also written to RUN/stats.json.

    progress_factory(stage_name, total_tasks) returns a context manager with an `advance(n)` method, for
    progress display; None shows nothing. views(run_root, result, seed) writes the run's views once its stats are
    written (the CLI passes gpupipe/report's `write_views`: metrics, report), inside the run's lock and before the
    results are committed to a bucket; None writes none. verify_resume: check the checksum of every file a
    completed stage's marker vouches for (else sizes of all, checksums of what the run reads on from: `plan_run`).
    """
    # retries the driver makes outside any stage (listing the inputs, pulling a bucket's run directory): the run's
    # `retries`, beside those each stage's stats hold
    with retries.counting() as driver_retries:
        return _run_pipeline(cfg, progress_factory, views, verify_resume, driver_retries)


def _run_pipeline(cfg: RunConfig, progress_factory, views, verify_resume: bool, driver_retries) -> dict[str, Any]:
    device = resolve_device(cfg.device)
    storage.configure(cfg.storage.options)
    inputs = resolve_inputs(cfg.input.path, cfg.input.format)   # a ConfigError before any work
    _check_plan(inputs, cfg)

    remote = None
    if storage.is_url(cfg.output):   # a bucket: the run works in a local copy, committed stage by stage
        remote = RemoteRun(cfg.output, Path(cfg.storage.work_dir) if cfg.storage.work_dir
                           else default_work_dir(cfg.output))
    root = remote.local if remote else cfg.output
    try:
        claim(root, [p for p in cfg.input.path], inputs.files)   # a ConfigError before anything is written
        run = RunDir(root)
        stale = run.lock()  # before anything in the run directory changes
    except OSError as e:
        if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise RunFault(f"the run directory {root} cannot be written ({e.strerror}: {e.filename}): choose an "
                           f"output on a writable file system") from e
        raise
    try:
        if remote is not None:
            log.info("run directory %s: local copy %s", cfg.output, remote.local)
            remote.pull()
        try:
            result = _run_locked(cfg, run, inputs, device, stale, progress_factory, remote, views, verify_resume,
                                 driver_retries)
        except (EmptyRunError, ConservationError):
            if remote is not None:   # the run's stats.json says what went wrong: the bucket gets it too
                remote.push_results()
            raise
        if remote is not None:
            remote.push_results()
        return result
    except Exception as e:
        if not isinstance(e, RunFault) and run.vanished():   # whatever failed first, that is the cause
            raise _vanished(root, e) from e
        raise
    finally:
        run.unlock()


def input_bytes(inputs: Inputs) -> int | None:
    """The input files' total size, when every input is a file (a folder's pages are not summed)."""
    return sum(map(storage.size, inputs.files)) if all(map(storage.isfile, inputs.files)) else None


def _referenced_files(items: list[dict[str, Any]], run: RunDir) -> list[dict[str, str]]:
    """Per stage item: {field: content hash} of the files its config names (models, tokenizer, index)."""
    out = []
    for item in items:
        (name, params), = item.items()
        refs = dict(file_refs(STAGES[name].Config.model_validate(params)))
        hashes = run.file_hashes(list(refs.values()))
        out.append({field: hashes[path] for field, path in refs.items()})
    return out


def explain_empty(stages: list[dict[str, Any]], run: RunDir) -> str:
    """Why a run yielded nothing: the stage that removed the last documents, its reasons, and for the read stage
    the first rejected record's detail (e.g. the fields a file has when `text_field` names none of them)."""
    if stages[0]["docs_in"] == 0:
        return "the input holds no records"
    last = next(s for s in stages if s["docs_out"] == 0)
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(last["removed"].items(), key=lambda kv: -kv[1]))
    what = "input records" if last["name"] == "read" else "documents"
    msg = f"stage {last['name']} removed all {last['docs_in']} {what} it was given ({reasons})"
    if last["name"] == "read" and last["removed"]:
        top = max(last["removed"], key=last["removed"].get)
        for f in run.stage(0, "read").rejected_records():
            with open(f, encoding="utf-8") as fh:
                detail = next((r["detail"] for r in map(json.loads, fh) if r["reason"] == top), None)
            if detail:
                msg += f"; first {top}: {detail}"
                break
    return msg


def _groups(stages: list, first: int | None, places: bool = False) -> list[list[int]]:
    """The stages from `first` on, as runs of work: each maximal sequence of consecutive fusable map stages is one
    chain (one task per partition), every other stage a group of its own. `places`: the executor places tasks by
    resources, so a chain never mixes host and device stations (a GPU worker never extracts HTML)."""
    groups: list[list[int]] = []
    for i in range(len(stages))[first if first is not None else len(stages):]:
        prev = stages[groups[-1][-1]] if groups else None
        same_place = not places or (prev is not None and prev.resources.device == stages[i].resources.device)
        if groups and fusable(stages[i]) and fusable(prev) and same_place:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _run_chain(executor, chain: list[Stage], dirs: list[StageDir], parts: list[Path], keep_intermediate: bool,
               progress: Callable[[int], None]) -> list[dict[str, Any]]:
    """A chain of map stages over every partition: one read and one write per partition (plus each stage's
    rejects), each stage's stats summed over the partitions. The chain's wall time is shared out over its stages
    in proportion to their summed task times."""
    n = len(parts)
    t0, c0 = time.perf_counter(), compile_seconds()
    results = executor.map(map_chain_task, [[s.spec() for s in chain]] * n, parts, [dirs] * n,
                           [keep_intermediate] * n, progress=progress, label="+".join(s.name for s in chain),
                           resources=chain[0].resources, stateless=True)   # map stations keep no partition state
    wall, here = time.perf_counter() - t0, compile_seconds() - c0
    busy = [sum(r[k]["seconds"] for r in results) for k in range(len(chain))]
    out = []
    for k, stage in enumerate(chain):
        total = StageStats()
        for r in results:
            total.merge(StageStats.from_dict(r[k]))
        share = busy[k] / sum(busy) if sum(busy) else 1 / len(chain)
        d = total.to_dict(stage.name, wall * share)
        if results:
            d["columns"] = results[0][k]["columns"]
        if len(chain) > 1:
            d["parts_kept"] = keep_intermediate or k == len(chain) - 1
        out.append(d)
    # Tasks on two threads of this process read one process-wide compile clock, so each counts the other's
    # compiles too: the chain's compile seconds are scaled down to what this process compiled.
    counted = sum(d["extra"].get("numba_compile_s", 0) for d in out)
    if here and counted > here:
        for d in out:
            if "numba_compile_s" in d["extra"]:
                d["extra"]["numba_compile_s"] = round(d["extra"]["numba_compile_s"] * here / counted, 3)
    return out


@dataclass
class RunPlan:
    """What a run will do, decided before any work: its stages (built with the run's one context), their folders
    and keys, and the first stage to redo (None: everything is complete)."""
    ctx: RunContext
    stages: list[Stage]
    dirs: list[StageDir]
    keys: list[str]
    first_rerun: int | None
    notes: list[str]       # completed stages redone because their files are not what their markers vouch for


def plan_run(cfg: RunConfig, run: RunDir, inputs: Inputs, device: str, verify_all: bool = False) -> RunPlan:
    """The run's context, stages, keys, and where resume starts (a completed stage is one whose marker carries its
    key and whose files are as the marker recorded: `first_to_redo`; a chain that ran fused resumes as a
    whole)."""
    items = local_file_refs(cfg.stages)[0]   # FileRefs at URLs: their local copies (config.local_file_refs)
    refs = [{}] + _referenced_files(items, run)  # the read stage references no file but its inputs
    ctx = RunContext(device=device, seed=cfg.seed, run_dir=str(run.root.resolve()),
                     results_hash=cfg.results_hash(), shuffle_buckets=cfg.executor.shuffle_buckets,
                     files_hash=hashlib.sha256(json.dumps(refs, sort_keys=True).encode()).hexdigest(),
                     driver_pid=os.getpid())
    read = ReadStage(cfg.input, ctx, inputs, cfg.executor.partitioning(device, input_bytes(inputs)))
    stages = [read] + [build_stage(item, ctx) for item in items]
    dirs = [run.stage(i, s.name) for i, s in enumerate(stages)]
    fingerprint = input_fingerprint(inputs.files)
    keys = [stage_key(fingerprint, read.partitioning,
                      [cfg.input.model_dump(mode="json")] + cfg.stages[:i], cfg.seed, refs[:i + 1])
            for i in range(len(stages))]
    first, notes = first_to_redo(run, dirs, keys, verify_all)
    if first is None and stages[-1].name != "pack" and run.shards.exists():
        first = len(stages)  # nothing to redo, but shards of an earlier config that packed must go
    return RunPlan(ctx, stages, dirs, keys, first, notes)


def first_to_redo(run: RunDir, dirs: list[StageDir], keys: list[str], verify_all: bool = False
                  ) -> tuple[int | None, list[str]]:
    """The first stage to run (None: all complete) and why a completed stage is redone. A stage is complete when
    its marker carries its key and its files are there at the sizes recorded (all of them with `verify_all`: their
    checksums too); the files the run reads on from (the last complete stage's: the next stage's input, or the
    finished run's shards) are checksummed always. A stage that ran fused inside a chain left no parts: the stage
    after it cannot start from it, so the whole chain runs again (resume is per chain)."""
    notes: list[str] = []
    first = None
    for i, (d, k) in enumerate(zip(dirs, keys)):
        marker = run.completed(d.root, k)
        problem = "no marker of this config" if marker is None else run.damage(d.root, marker, verify_all)
        if problem is not None:
            if marker is not None:
                notes.append(f"stage {d.name} is redone: {problem}")
            first = i
            break
    while True:
        while first and run.completed(dirs[first - 1].root, keys[first - 1]).get("parts_kept") is False:
            first -= 1
        last = (len(dirs) if first is None else first) - 1
        if last < 0 or verify_all:
            break
        problem = run.damage(dirs[last].root, run.completed(dirs[last].root, keys[last]), True)
        if problem is None:
            break
        notes.append(f"stage {dirs[last].name} is redone: {problem}")
        first = last
    return first, notes


def _run_locked(cfg: RunConfig, run: RunDir, inputs: Inputs, device: str, stale: int | None,
                progress_factory, remote: RemoteRun | None = None, views=None, verify_all: bool = False,
                driver_retries=None) -> dict[str, Any]:
    plan = plan_run(cfg, run, inputs, device, verify_all)
    stages, dirs = plan.stages, plan.dirs
    with _log_to(run):   # the views' failures are logged too (their tracebacks in the log, never the terminal)
        atomic_write_text(run.config, dump_config(cfg))
        run.drop_stale({d.name for d in dirs})
        log.info("gpupipe %s run: %s stages, device %s, executor %s", __version__, len(stages), device,
                 cfg.executor.kind)
        if stale:
            log.info("run directory was locked by pid %s, which is gone: its lock was stale", stale)
        for note in plan.notes:
            log.warning(note)
        if plan.first_rerun is not None:
            run.invalidate_from([d.root for d in dirs], plan.first_rerun)
        if remote is not None:
            remote.invalidate([d.name for d in dirs], plan.first_rerun)
        if device == "gpu":
            native = [s.name for s in stages if s.gpu_native]
            log.info("frames: %s", f"cuDF on the GPU for GPU-native stages {native}, pandas for the others"
                     if has_cudf() else "pandas (cuDF is not installed): kernels copy their buffers to the GPU")
        t_run, started = time.perf_counter(), _utc_now()
        stage_stats = _execute(cfg, run, plan, inputs, device, progress_factory, remote)
        return _result(cfg, run, plan, stage_stats, device, time.perf_counter() - t_run, remote, views, started,
                       driver_retries)


def _execute(cfg: RunConfig, run: RunDir, plan: RunPlan, inputs: Inputs, device: str, progress_factory,
             remote: RemoteRun | None) -> list[dict[str, Any]]:
    """The loop: stages resumed past, then each group (a fused chain of map stations, or one stage) run, marked
    done and committed. Returns every stage's stats."""
    stages, dirs, keys, first = plan.stages, plan.dirs, plan.keys, plan.first_rerun
    stage_stats: list[dict[str, Any]] = []
    for i in range(first if first is not None else len(stages)):
        log.info("stage %s: already complete, resumed past it", dirs[i].name)
        marker = run.completed(dirs[i].root, keys[i])
        stage_stats.append({**{k: v for k, v in marker.items() if k != "files"}, "resumed": True})
    executor = None
    try:
        if first is not None and first < len(stages):
            executor = make_executor(cfg.executor, device, str(run.log), input_bytes(inputs))
        for group in _groups(stages, first, getattr(executor, "places", False)):
            i = group[0]
            for j in group:
                run.reset(dirs[j].root)
            parts = dirs[i - 1].parts() if i else []
            tasks = len(inputs.files) if i == 0 else len(parts)
            size = (stage_stats[-1]["docs_out"], stage_stats[-1]["bytes_out"]) if i else (None, input_bytes(inputs))
            name = "+".join(stages[j].name for j in group)
            bar = (progress_factory and progress_factory(name, tasks, *size)) or contextlib.nullcontext()
            cpu0 = time.process_time()
            try:
                # retries the driver saw for this group (tasks run again on a fresh pool, driver phases' storage
                # calls), on top of those its tasks counted themselves: the group's first stage's stats
                with bar as b, retries.counting() as retried:
                    progress = b.advance if b is not None else (lambda n: None)
                    if len(group) == 1 and not fusable(stages[i]):
                        t0 = time.perf_counter()
                        total = run_stage(stages[i], executor, parts, dirs[i], dirs[i - 1] if i else None,
                                          progress)
                        done = [total.to_dict(stages[i].name, time.perf_counter() - t0)]
                    else:
                        done = _run_chain(executor, [stages[j] for j in group], [dirs[j] for j in group], parts,
                                          cfg.keep_intermediate, progress)
            except Exception as e:
                if run.vanished():
                    raise _vanished(run.root, e) from e
                if i and (bad := _damaged_part(e, parts)):
                    dirs[i - 1].marker.unlink(missing_ok=True)   # the same command redoes the stage that wrote it
                    raise RunFault(f"stage {name}: the Parquet part {bad} it reads is damaged ({_first_line(e)}); "
                                   f"stage {dirs[i - 1].name} is marked to be redone: run the same command "
                                   f"again") from e
                raise
            interrupt.check()  # a stop request swallowed inside the stage ends the run here, before its marker
            _add_driver_cpu(done, time.process_time() - cpu0)
            retries.add_to(done[0]["extra"], retried)
            if group[0] == 0:   # the read stage: the retries `gpupipe fetch-cc` made downloading its input files
                retries.add_to(done[0]["extra"], {"fetch": fetch_retries(inputs.files)})
            for j, d in zip(group, done):
                d.update(key=keys[j], partitions=len(dirs[j].parts()), resumed=False)
                if why := stages[j].skipped():
                    d["skipped"] = why
                d["extra"] = dict(sorted({**d["extra"], "peak_rss_mb_driver": peak_rss_mb()}.items()))
            # Last stage first: once a chain's first stage shows its marker, all of the chain is marked (an
            # interrupt between two markers leaves the chain's first stage unmarked, so the whole chain reruns).
            run.check_lock(f"marking stage {dirs[group[-1]].name} done")
            for j, d in reversed(list(zip(group, done))):   # the last stage of the run vouches for the shards too
                run.mark_done(dirs[j].root, d, [run.shards] if j == len(stages) - 1 and run.shards.is_dir() else [])
            if remote is not None:   # committed to the bucket in the same order, each stage's marker last
                for j in reversed(group):
                    remote.push_stage(dirs[j].root)
            for j, d in zip(group, done):
                stage_stats.append(d)
                log.info("stage %s: %d in, %d out, removed %s, %.2f s", dirs[j].name, d["docs_in"],
                         d["docs_out"], d["removed"], d["seconds"])
    finally:
        if executor is not None:
            executor.close()
    return stage_stats


def _vanished(root, e: BaseException) -> RunFault:
    return RunFault(f"the run directory {root} was removed while the run was writing it ({type(e).__name__}: "
                    f"{_first_line(e)}); run the same command again to start it afresh")


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _damaged_part(e: BaseException, parts: list[Path]) -> Path | None:
    """The first of `parts` that is not a readable Parquet file, when `e` is Arrow saying one is damaged (a part
    its marker vouched for, damaged after its checksum was taken or while the run read it)."""
    if isinstance(e, FileNotFoundError) or "parquet" not in f"{type(e).__name__} {e}".lower():
        return None
    import pyarrow.parquet as pq

    for part in parts:
        try:
            pq.ParquetFile(part).close()
        except Exception:
            return part
    return None


def _add_driver_cpu(done: list[dict[str, Any]], seconds: float) -> None:
    """The driver's CPU seconds for a group (its own work, and the tasks it ran itself) added to the workers' in
    `extra.cpu_s`, shared over a chain's stages by their seconds: `cpu_s / seconds` is how many cores a
    stage kept busy."""
    wall = sum(d["seconds"] for d in done)
    for d in done:
        share = d["seconds"] / wall if wall else 1 / len(done)
        d["extra"]["cpu_s"] = round(d["extra"].get("cpu_s", 0) + seconds * share, 3)


def _utc_now():
    import datetime

    return datetime.datetime.now(datetime.timezone.utc)


def run_retries(stages: list[dict[str, Any]], driver: dict[str, int] | None = None) -> dict[str, int]:
    """The run's retries by kind (storage, task, judge, ...): the `<kind>_retries` counters of the stages this run
    ran (a resumed stage's were another run's) plus the driver's outside any stage, and their `total`."""
    out: dict[str, int] = dict(driver or {})
    for s in stages:
        if s.get("resumed"):
            continue
        for k, v in s.get("extra", {}).items():
            if k.endswith(retries.SUFFIX):
                kind = k[: -len(retries.SUFFIX)]
                out[kind] = out.get(kind, 0) + int(v)
    return {**dict(sorted(out.items())), "total": sum(out.values())}


def _result(cfg: RunConfig, run: RunDir, plan: RunPlan, stage_stats: list[dict[str, Any]], device: str,
            seconds: float, remote: RemoteRun | None, views=None, started=None, driver_retries=None
            ) -> dict[str, Any]:
    """The run's stats (RUN/stats.json), checked: conservation, an empty result, stages that did nothing."""
    stages, dirs = plan.stages, plan.dirs
    problems = check_conservation(stage_stats)
    skipped = [f"stage {s['name']} did nothing: {s['skipped']}" for s in stage_stats if s.get("skipped")]
    for w in skipped:
        log.warning(w)
    where = (lambda p: remote.url_of(str(p))) if remote is not None else str  # noqa: E731 - the bucket's URLs
    result = {
        "gpupipe_version": __version__,
        "device": device,
        "executor": cfg.executor.kind,
        "workers": cfg.executor.worker_count(input_bytes(stages[0].resolved)),
        "results_hash": cfg.results_hash(),
        "input_records": stage_stats[0]["docs_in"],
        "output_docs": stage_stats[-1]["docs_out"],
        "removed_total": sum(sum(s["removed"].values()) for s in stage_stats),
        # input_records + docs_added_total = output_docs + removed_total (chunk_markdown splits documents)
        "docs_added_total": sum(s.get("extra", {}).get("docs_added", 0) for s in stage_stats),
        "conservation_ok": not problems,
        "seconds": round(seconds, 3),
        # when the run ran (UTC), once per run: the date the dashboards' daily output volume sums by
        "started_at": (started or _utc_now()).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "run_date": _utc_now().strftime("%Y-%m-%d"),
        "retries": run_retries(stage_stats, driver_retries),
        "curated_dir": where(next(d.root for d, s in zip(dirs[::-1], stages[::-1])
                                  if s.name not in ("tokenize", "mixture", "pack"))),
        "shards_dir": where(run.shards) if stages[-1].name == "pack" else None,
        "stages": stage_stats,
    }
    if result["output_docs"] == 0:
        result["empty"] = explain_empty(stage_stats, run)
    if plan.notes or skipped:
        result["warnings"] = plan.notes + skipped
    run.check_lock("writing its stats.json")
    atomic_write_text(run.stats, json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    if views is not None:
        views(run.root, result, cfg.seed)
    if problems:
        raise ConservationError("documents were lost or invented:\n" + "\n".join(problems), result)
    if "empty" in result and not cfg.allow_empty:
        raise EmptyRunError(f"the run yielded no documents: {result['empty']} (set `allow_empty: true` in the "
                            f"config if that is expected)", result)
    return result
