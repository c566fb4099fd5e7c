"""`gpupipe run`: the stages of a config, one after another, each over all partitions, into a run directory."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Any, Callable

from gpupipe import __version__
from gpupipe.backend import has_cudf, resolve_device
from gpupipe.config import ConfigError, RunConfig, dump_config
from gpupipe.io.parts import atomic_write_text, part_paths
from gpupipe.run.executors import make_executor
from gpupipe.run.rundir import RunDir, input_fingerprint, stage_key
from gpupipe.stages import build_stage
from gpupipe.stages.base import RunContext, StageJob, StageStats
from gpupipe.stages.pack import SHARDS_DIR
from gpupipe.stages.read import ReadStage

log = logging.getLogger("gpupipe")

HTML_FORMATS = {"warc", "html_dir"}


class ConservationError(RuntimeError):
    pass


def _check_plan(read: ReadStage, cfg: RunConfig) -> None:
    """Refuse, before any work, plans that cannot work (HTML input without extraction)."""
    first = next(iter(cfg.stages[0])) if cfg.stages else None
    html = [f for f, fmt in zip(read.files, read.formats) if fmt in HTML_FORMATS]
    if html and first != "extract":
        raise ConfigError(f"input {html[0]} holds HTML ({read.formats[read.files.index(html[0])]}): "
                          f"the first stage must be 'extract'")
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


def _log_to(run: RunDir) -> logging.Handler:
    handler = logging.FileHandler(run.root / "logs" / "run.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return handler


def run_pipeline(cfg: RunConfig, progress_factory: Callable[[str, int], Any] | None = None) -> dict[str, Any]:
    """Run (or resume) a config; returns the run stats, also written to RUN/stats.json.

    progress_factory(stage_name, total_tasks) returns a context manager with an `advance(n)` method, for
    progress display; None shows nothing.
    """
    device = resolve_device(cfg.device)
    ctx0 = RunContext(device=device, seed=cfg.seed, results_hash=cfg.results_hash(),
                      shuffle_buckets=cfg.executor.shuffle_buckets)
    read = ReadStage(cfg.input, ctx0, cfg.executor.partition_docs)
    _check_plan(read, cfg)

    run = RunDir(cfg.output)
    ctx = RunContext(device=device, seed=cfg.seed, run_dir=str(run.root.resolve()),
                     results_hash=cfg.results_hash(), shuffle_buckets=cfg.executor.shuffle_buckets)
    read.ctx = ctx
    stages = [read] + [build_stage(item, ctx) for item in cfg.stages]
    handler = _log_to(run)
    atomic_write_text(run.root / "config.resolved.yaml", dump_config(cfg))
    folders = [run.stage_dir(i, s.name) for i, s in enumerate(stages)]
    run.drop_stale({f.name for f in folders})
    fingerprint = input_fingerprint(read.files)
    log.info("gpupipe %s run: %s stages, device %s, executor %s", __version__, len(stages), device,
             cfg.executor.kind)
    if device == "gpu":
        native = [s.name for s in stages if s.gpu_native]
        log.info("frames: %s", f"cuDF on the GPU for GPU-native stages {native}, pandas for the others"
                 if has_cudf() else "pandas (cuDF is not installed): kernels copy their buffers to the GPU")

    executor = None
    stage_stats: list[dict[str, Any]] = []
    rerun = False  # once a stage runs again, every later one does too
    t_run = time.perf_counter()
    try:
        for i, (stage, folder) in enumerate(zip(stages, folders)):
            key = stage_key(fingerprint, cfg.executor.partition_docs,
                            [cfg.input.model_dump(mode="json")] + cfg.stages[:i], cfg.seed)
            done = None if rerun else run.completed(folder, key)
            if done is not None:
                log.info("stage %s: already complete, resumed past it", folder.name)
                done["resumed"] = True
                stage_stats.append(done)
                continue
            rerun = True
            executor = executor or make_executor(cfg.executor, device)
            run.reset(folder)
            inputs = part_paths(folders[i - 1]) if i else []
            tasks = len(read.files) if i == 0 else len(inputs)
            size = ((stage_stats[-1]["docs_out"], stage_stats[-1]["bytes_out"]) if i else
                    (None, sum(map(os.path.getsize, read.files)) if all(map(os.path.isfile, read.files)) else None))
            bar = (progress_factory and progress_factory(stage.name, tasks, *size)) or contextlib.nullcontext()
            with bar as b:
                job = StageJob(executor, folders[i - 1] if i else None, inputs, folder, ctx,
                               progress=(b.advance if b is not None else lambda n: None))
                t0 = time.perf_counter()
                stats: StageStats = stage.execute(job)
                seconds = time.perf_counter() - t0
            d = stats.to_dict(stage.name, seconds)
            d.update(key=key, partitions=len(part_paths(folder)), resumed=False)
            run.mark_done(folder, d)
            stage_stats.append(d)
            log.info("stage %s: %d in, %d out, removed %s, %.2f s", folder.name, d["docs_in"], d["docs_out"],
                     d["removed"], seconds)
    finally:
        if executor is not None:
            executor.close()
        log.removeHandler(handler)
        handler.close()

    problems = check_conservation(stage_stats)
    result = {
        "gpupipe_version": __version__,
        "device": device,
        "executor": cfg.executor.kind,
        "workers": cfg.executor.workers if cfg.executor.kind == "dask" else 1,
        "results_hash": cfg.results_hash(),
        "input_records": stage_stats[0]["docs_in"],
        "output_docs": stage_stats[-1]["docs_out"],
        "removed_total": sum(sum(s["removed"].values()) for s in stage_stats),
        # input_records + docs_added_total = output_docs + removed_total (chunk_markdown splits documents)
        "docs_added_total": sum(s.get("extra", {}).get("docs_added", 0) for s in stage_stats),
        "conservation_ok": not problems,
        "seconds": round(time.perf_counter() - t_run, 3),
        "curated_dir": str(next(f for f, s in zip(folders[::-1], stages[::-1])
                                if s.name not in ("tokenize", "mixture", "pack"))),
        "shards_dir": str(run.root / SHARDS_DIR) if stages[-1].name == "pack" else None,
        "stages": stage_stats,
    }
    run.write_json("stats.json", result)
    try:
        from gpupipe.report import write_report

        write_report(run.root)
    except Exception:  # the report is a view of the run: never let it fail a run whose outputs are written
        log.exception("could not write %s", run.root / "report.html")
    if problems:
        raise ConservationError("documents were lost or invented:\n" + "\n".join(problems))
    return result
