"""The `gpupipe` command line: run, synth, verify, and the tools' subcommands.

Messages go to the terminal with rich's markup off: a message quoting `pip install 'gpupipe[gpu]'` or a path with
brackets must print as written. User errors and faults (storage unreachable, a read-only or vanished run directory,
a lost Dask scheduler, ...) end in one line on stderr and an exit code, never a traceback; `--debug` shows it.
"""

from __future__ import annotations

import argparse
import errno
import os
import shlex
import signal
import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(markup=False, highlight=False)
if not console.is_terminal:  # CI logs and pipes: wide enough for the funnel table
    console = Console(width=160, markup=False, highlight=False)
errors = Console(stderr=True, markup=False, highlight=False, soft_wrap=True)  # messages unwrapped: grep-able

# Disk full and its kin: the run stops with a message and resumes after the last completed stage once fixed.
SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def fail(message: str, code: int) -> int:
    errors.print(f"error: {message}", style="red")
    return code


def _progress_factory(stage: str, total: int, docs: int | None = None, nbytes: int | None = None):
    """A live bar per stage on a terminal; nothing in CI or when piped. Given the stage's input size (documents
    and bytes the previous stage gave; input file bytes for read) it also shows docs/s and MB/s, estimated from the
    share of partitions done (each about partition_bytes, but the last of each input file)."""
    if not console.is_terminal:
        return None

    class Bar:
        def __enter__(self):
            self.t0 = time.perf_counter()
            self.p = Progress(TextColumn(f"[bold]{stage:<12}"), BarColumn(), MofNCompleteColumn(),
                              TextColumn("partitions"), TimeElapsedColumn(), TextColumn("{task.fields[rate]}"),
                              console=console, transient=True)
            self.p.__enter__()
            self.task = self.p.add_task(stage, total=total, rate="")
            return self

        def advance(self, n: int) -> None:
            self.p.advance(self.task, n)
            if total and (docs is not None or nbytes is not None):
                share = self.p.tasks[0].completed / total
                dt = max(time.perf_counter() - self.t0, 1e-9)
                rate = [f"{share * docs / dt:,.0f} docs/s"] if docs is not None else []
                rate += [f"{share * nbytes / 1e6 / dt:,.1f} MB/s"] if nbytes is not None else []
                self.p.update(self.task, rate=" · ".join(rate))

        def __exit__(self, *exc):
            return self.p.__exit__(*exc)

    return Bar()


def funnel_table(stats: dict[str, Any]) -> Table:
    t = Table(title=f"gpupipe funnel: {stats['input_records']} input records → {stats['output_docs']} documents")
    compiled = any(s.get("extra", {}).get("numba_compile_s") for s in stats["stages"] if not s.get("resumed"))
    cols = ("stage", "docs in", "docs out", "removed (by reason)", "MB in", "MB out", "seconds",
            *(("compiling s",) if compiled else ()), "docs/s", "cores")
    for col in cols:
        t.add_column(col, justify="left" if col in ("stage", "removed (by reason)") else "right")
    for s in stats["stages"]:
        removed = "\n".join(f"{k} {v}" for k, v in sorted(s["removed"].items(), key=lambda kv: -kv[1])) or "-"
        # numba's first calls compile its kernels (cached on disk afterwards): not part of the throughput
        comp = s.get("extra", {}).get("numba_compile_s", 0.0)
        busy = s["seconds"] - comp
        rate = f"{s['docs_in'] / busy:,.0f}" if busy > 0 and not s.get("resumed") and not s.get("skipped") else "-"
        state = " (skipped: did nothing)" if s.get("skipped") else " (resumed)" if s.get("resumed") else ""
        # cores kept busy: CPU seconds (driver and workers) over wall seconds
        cpu = s.get("extra", {}).get("cpu_s")
        cores = f"{cpu / s['seconds']:.1f}" if cpu is not None and s["seconds"] > 0 and not s.get("resumed") else "-"
        t.add_row(s["name"] + state, f"{s['docs_in']:,}",
                  f"{s['docs_out']:,}", removed, f"{s['bytes_in'] / 1e6:.2f}", f"{s['bytes_out'] / 1e6:.2f}",
                  f"{s['seconds']:.2f}", *((f"{comp:.2f}",) if compiled else ()), rate, cores)
    if compiled:
        t.caption = ("compiling s: numba compiling kernels on their first use (cached on disk afterwards; "
                     "`gpupipe warmup` does it once); docs/s leaves it out. cores: CPU time over wall time")
    return t


def _workers(v: str) -> int | str:
    if v == "auto":
        return v
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a number of workers (1 or more) or auto, got {v!r}")
    return n


def _quiet_dask() -> None:
    """Dask's loggers print errors with tracebacks on the terminal (a scheduler that went away: reconnect attempts,
    cancelled futures); without --debug only critical ones."""
    import logging

    import distributed  # noqa: F401 - its import configures its loggers (levels per logger): set them after

    for name in ["distributed", *logging.root.manager.loggerDict]:
        if name.split(".")[0] == "distributed":
            logging.getLogger(name).setLevel(logging.CRITICAL)


def cmd_run(args: argparse.Namespace) -> int:
    from gpupipe._numba_cache import skip_numba_extensions
    from gpupipe.backend import DeviceError
    from gpupipe.config import load_config
    from gpupipe.config_base import ConfigError
    from gpupipe.run import interrupt
    from gpupipe.report.views import write_views
    from gpupipe.run.pipeline import ConservationError, EmptyRunError, run_pipeline
    from gpupipe.run.rundir import CONFIG_FILE, LOGS_DIR, NAMES, STAGES_DIR, STATS_FILE, RunDirBusy, RunFault, at

    skip_numba_extensions()
    overrides: dict[str, Any] = {}
    if args.input:
        overrides["input.path"] = args.input
    for flag, key in (("output", "output"), ("device", "device"), ("executor", "executor.kind"),
                      ("workers", "executor.workers"), ("partition_docs", "executor.partition_docs"),
                      ("partition_bytes", "executor.partition_bytes")):
        if getattr(args, flag) is not None:
            overrides[key] = getattr(args, flag)
    if args.scheduler_address:
        overrides.update({"executor.kind": "dask", "executor.scheduler_address": args.scheduler_address})
    try:
        cfg = load_config(args.config, overrides)
    except ConfigError as e:
        return fail(str(e), 2)
    from gpupipe.io import storage

    if cfg.executor.kind == "dask" and not args.debug:   # Dask's error logs (a lost scheduler): one line says it
        _quiet_dask()
    for location in [*cfg.input.path, cfg.output]:   # the config's URLs too (main() checked the flags')
        storage.require(location)
    try:
        with interrupt.stop_on_signals():
            stats = run_pipeline(cfg, _progress_factory, views=write_views, verify_resume=args.verify_resume)
    except (ConfigError, DeviceError, RunDirBusy) as e:
        return fail(str(e), 2)
    except RunFault as e:
        return fail(str(e), 1)
    except (EmptyRunError, ConservationError) as e:
        return fail(f"{e}\n(stats: {at(cfg.output.rstrip('/'), NAMES.stats)})", 1)
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", signal.SIGINT)
        return fail(f"interrupted ({signal.Signals(signum).name}); run the same command again to resume after "
                    f"the last completed stage ({cfg.output})", 128 + signum)
    except OSError as e:
        if e.errno not in SPACE_ERRNOS:
            raise
        return fail(f"{e.strerror or e} while writing {e.filename or cfg.output}: the run stopped and left no "
                    f"partial file; free space and run the same command again to resume after the last "
                    f"completed stage", 1)
    for w in stats.get("warnings", []):
        errors.print(f"warning: {w}", style="yellow")
    console.print(funnel_table(stats))
    console.print(f"run directory: {cfg.output}  ({STATS_FILE}, {CONFIG_FILE}, {STAGES_DIR}/, {LOGS_DIR}/)")
    console.print(f"curated documents: {stats['curated_dir']}")
    from gpupipe.io import storage

    report = at(cfg.output, NAMES.report)
    if storage.isfile(report):
        local = cfg.output
        if storage.is_url(cfg.output):   # audit and report work on the run's local copy (run/remote.py)
            from gpupipe.run.remote import default_work_dir

            local = cfg.storage.work_dir or str(default_work_dir(cfg.output))
            console.print(f"local copy of the run directory: {local}")
        console.print(f"report: {report}  (audit samples: gpupipe audit {local} --stage NAME)")
    if stats["shards_dir"]:
        console.print(f"token shards: {stats['shards_dir']}  (check them: gpupipe verify {stats['shards_dir']})")
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    from gpupipe.synth import write_synthetic_crawl

    summary = write_synthetic_crawl(args.out, docs=args.docs, seed=args.seed)
    console.print(f"wrote {summary['warc']} ({summary['records']} WARC records, {summary['pages']} HTML pages) "
                  f"and ground truth {summary['truth']}")
    console.print(f"kinds: {summary['by_kind']}")
    console.print(f"languages: {summary['by_lang']}")
    console.print(f"benchmark items for decontamination: {summary['benchmark']} "
                  f"({summary['leaks']} planted leaks, {summary['syndicated']} pages with a syndicated paragraph)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from gpupipe.export import ExportError, curated_stage, export_jsonl

    try:
        n = export_jsonl(args.run_dir, args.out)
    except ExportError as e:
        return fail(f"export: {e}", 2)
    console.print(f"{n} documents of {curated_stage(args.run_dir).name} written to {args.out} (seed 002 JSON Lines)")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from gpupipe.tokens.manifest import read_manifest
    from gpupipe.tokens.verify import verify_shards

    try:
        problems = verify_shards(args.shard_dir)
    except (OSError, ValueError) as e:
        return fail(f"cannot verify {args.shard_dir}: {e}", 2)
    if problems:
        for p in problems:
            errors.print(f"FAIL: {p}")
        return 1
    m = read_manifest(args.shard_dir)
    mega = m.get("megatron")
    console.print(f"OK: {len(m['shards'])} shards, {m['sequences']} sequences of {m['seq_len']} tokens, "
                  f"{m['documents_packed']} documents, dropped remainder {m['dropped_remainder_tokens']} tokens"
                  + (f"; Megatron {mega['prefix']}.bin/.idx: {mega['documents']} documents, {mega['tokens']} tokens"
                     if mega else ""))
    return 0


def cmd_fetch_cc(args: argparse.Namespace) -> int:
    from gpupipe.acquire.commoncrawl import FetchError, FetchOptions, fetch_crawl

    opts = FetchOptions(base_url=args.base_url, concurrency=args.concurrency, retries=args.retries,
                        backoff=args.backoff, timeout=args.timeout)
    bar = Progress(TextColumn("[bold]fetch-cc"), BarColumn(), MofNCompleteColumn(), TextColumn("files"),
                   TextColumn("{task.fields[mb]}"), TimeElapsedColumn(), console=console, transient=True,
                   disable=not console.is_terminal)
    state = {"task": None, "bytes": 0}

    def on_plan(names, total):
        state["task"] = bar.add_task("fetch", total=len(names), mb="")

    def on_bytes(n):
        state["bytes"] += n
        bar.update(state["task"], mb=f"{state['bytes'] / 1e6:,.1f} MB")

    def on_file(name, what):
        bar.advance(state["task"])
        if not console.is_terminal:
            console.print(f"{what}: {name}")

    try:
        with bar:
            s = fetch_crawl(args.crawl, args.segments, args.out, opts, max_files=args.max_files,
                            on_file=on_file, on_bytes=on_bytes, on_plan=on_plan)
    except (FetchError, ValueError) as e:
        return fail(f"fetch-cc: {e}", 1 if isinstance(e, FetchError) else 2)
    console.print(f"{len(s.selected)} WARC files of {args.crawl} in {args.out}: {len(s.fetched)} fetched "
                  f"({s.bytes_fetched / 1e6:,.1f} MB), {len(s.skipped)} already complete; {s.retries} retries, "
                  f"{s.resumed} resumed by range request")
    return 0


def cmd_warmup(args: argparse.Namespace) -> int:
    import time

    from gpupipe._numba_cache import skip_numba_extensions
    from gpupipe.warmup import warm_up

    skip_numba_extensions()
    t0 = time.perf_counter()
    rows = warm_up(args.docs, config=args.config, processes=args.processes)
    t = Table(title="gpupipe warm-up: numba kernels compiled (or loaded from the cache) per stage; run gpu: the "
                    "device stations on the GPU (CuPy compiles its kernels into its disk cache)")
    for col in ("run", "stage", "seconds", "compiling s"):
        t.add_column(col, justify="left" if col in ("run", "stage") else "right")
    for r in rows:
        t.add_row(r["run"], r["stage"], f"{r['seconds']:.2f}", f"{r['compile_s']:.2f}")
    console.print(t)
    console.print(f"warm-up{' of ' + args.config if args.config else ''} done in {time.perf_counter() - t0:.1f} s "
                  f"(wall); numba compiling {sum(r['compile_s'] for r in rows):.1f} s, summed over {args.processes} "
                  f"process(es); later runs load the kernels from numba's cache")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    import json

    from gpupipe.plan import add_cost, parse_tokens, plan_builtin, plan_from_run, plan_summary, plan_table

    try:
        target = parse_tokens(args.tokens)
        plan = (plan_from_run(args.run_dir, target, args.cpus, args.gpus) if args.run_dir   # a path or a URL
                else plan_builtin(target, args.cpus, args.gpus))
        add_cost(plan, args.usd_per_core_hour, args.usd_per_gpu_hour)
    except (ValueError, OSError) as e:
        return fail(f"plan: {e}", 2)
    for w in plan["warnings"]:
        errors.print(f"warning: {w}", style="yellow")
    if args.json:
        print(json.dumps(plan, indent=2, ensure_ascii=False))
        return 0
    console.print(plan_table(plan))
    for line in plan_summary(plan):
        console.print(line)
    return 0


def cmd_minhash_params(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from gpupipe.config_base import format_error
    from gpupipe.stages.dedup.fuzzy import FuzzyDedupConfig, lsh_shape

    from gpupipe.stages.dedup.lsh import format_params_report

    given = {k: getattr(args, k) for k in ("threshold", "num_perm", "fp_weight", "fn_weight", "bands", "rows")
             if getattr(args, k) is not None}
    try:  # the stage's own config and its choice: what `fuzzy_dedup` with these parameters would use
        cfg = FuzzyDedupConfig(**given)
        bands, rows = lsh_shape(cfg)
    except ValidationError as e:
        return fail(format_error(e, "minhash-params"), 2)
    except ValueError as e:
        return fail(f"minhash-params: {e}", 2)
    if args.at_least or args.at_most or args.exercise:
        return _minhash_search(args, cfg)
    console.print(format_params_report(cfg.threshold, cfg.num_perm, bands, rows))
    return 0


def _constraint(text: str) -> tuple[float, float]:
    """'0.8:0.95' → (0.8, 0.95): a similarity and a probability, both in [0, 1]."""
    try:
        sim, prob = (float(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write SIMILARITY:PROBABILITY, e.g. 0.8:0.95") from None
    if not (0 <= sim <= 1 and 0 <= prob <= 1):
        raise argparse.ArgumentTypeError(f"{text!r}: similarity and probability must both be in [0, 1]")
    return sim, prob


def _minhash_search(args: argparse.Namespace, cfg) -> int:
    """`minhash-params --at-least S:P --at-most S:P`: every b x r within --num-perm meeting the constraints, the
    one the stage's FP/FN weighting prefers among them reported; or, when none does, a clear no with the closest
    pair and the fewest permutations that would do."""
    import numpy as np

    from gpupipe.stages.dedup.lsh import (_areas, candidate_probability, closest_params, describe_constraints,
                                          format_params_report, search_params, smallest_budget)

    at_least = list(args.at_least or []) + ([(0.8, 0.95)] if args.exercise else [])
    at_most = list(args.at_most or []) + ([(0.5, 0.05)] if args.exercise else [])
    want = describe_constraints(at_least, at_most)
    found = search_params(cfg.num_perm, at_least, at_most)
    if not found:
        b, r = closest_params(cfg.num_perm, at_least, at_most)
        print(f"no bands x rows with b*r <= {cfg.num_perm} permutations satisfies {want}")
        print(f"closest within {cfg.num_perm}: {b} x {r}, "
              + ", ".join(f"P({s:g}) = {float(candidate_probability(s, b, r)):.4f}" for s, _ in at_least + at_most))
        smallest = smallest_budget(at_least, at_most)
        print(f"fewest permutations that satisfy it: {smallest[0]} ({smallest[1][0]} x {smallest[1][1]}); "
              f"rerun with --num-perm {smallest[0]} or more" if smallest else
              "no b x r within 4096 permutations satisfies it either: loosen the constraints")
        return 1
    bands = np.array([b for b, _ in found])
    rows = np.array([r for _, r in found])
    fp, fn = _areas(cfg.threshold, bands, rows)
    i = int(np.argmin(cfg.fp_weight * fp + cfg.fn_weight * fn))
    print(f"{len(found)} bands x rows within {cfg.num_perm} permutations satisfy {want}: "
          + ", ".join(f"{b}x{r}" for b, r in found[:20]) + (" ..." if len(found) > 20 else ""))
    print(f"chosen among them by the weighted FP/FN areas at threshold {cfg.threshold:g}:")
    print(format_params_report(cfg.threshold, cfg.num_perm, int(bands[i]), int(rows[i])))
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """gpupipe's parser. With `command` (main passes the subcommand its argv names), the subcommands whose set-up
    imports gpupipe's stations or pandas (1-2.5 s on a small VM) are set up only if named: `gpupipe plan`, `synth`
    or `verify` do not wait for what only `run` needs. A name that is no subcommand gets the whole parser (its
    error lists them all)."""
    from gpupipe import __version__

    def wanted(*names: str) -> bool:
        return command is None or command in names

    p = argparse.ArgumentParser(prog="gpupipe", description="Web crawl → curated documents → packed token shards.")
    p.add_argument("--version", action="version", version=f"gpupipe {__version__}")
    p.add_argument("--debug", action="store_true", help="show the traceback of a failure (else one line)")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run (or resume) a pipeline config", description=(
        "Run the stages of CONFIG into its run directory; a re-run resumes after the last completed stage."),
        epilog=_stages_epilog() if wanted("run") else None)
    r.add_argument("config", help="YAML config (see configs/)")
    r.add_argument("--input", nargs="+", help="input file(s), folder(s) or glob(s); overrides input.path")
    r.add_argument("--output", help="run directory; overrides output")
    r.add_argument("--device", choices=["auto", "cpu", "gpu"], help="overrides device")
    r.add_argument("--executor", choices=["local", "dask"], help="overrides executor.kind")
    r.add_argument("--scheduler-address", dest="scheduler_address",
                   help="a running Dask scheduler, e.g. tcp://HEAD:8786 (its workers run the tasks); sets executor "
                        "kind dask and executor.scheduler_address")
    r.add_argument("--workers", type=_workers, help="worker processes (local: a pool on this machine, 1 runs in this "
                   "process; dask: the LocalCluster's), or auto (one per core, the default); overrides "
                   "executor.workers")
    r.add_argument("--partition-bytes", dest="partition_bytes",
                   help="text (HTML) bytes per partition, e.g. 128MiB; overrides executor.partition_bytes")
    r.add_argument("--partition-docs", dest="partition_docs", type=int,
                   help="at most this many documents per partition; overrides executor.partition_docs")
    r.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the traceback of a failure (else one line)")
    r.add_argument("--verify-resume", dest="verify_resume", action="store_true",
                   help="before resuming, check the checksum of every file the completed stages' markers vouch for "
                        "(default: sizes of all, checksums of the files the run reads on from)")
    r.set_defaults(fn=cmd_run)

    s = sub.add_parser("synth", help="write the synthetic crawl (WARC + ground truth)", description=(
        "Write a deterministic synthetic web crawl as a real .warc.gz plus a .truth.jsonl ground-truth file."))
    s.add_argument("--out", required=True, help="output .warc.gz path")
    s.add_argument("--docs", type=int, default=400, help="number of HTML pages (default 400)")
    s.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    s.set_defaults(fn=cmd_synth)

    v = sub.add_parser("verify", help="check token shards against their manifest", description=(
        "Recompute every shard's sha256 and token count and check the packing invariants; exit 1 on a mismatch."))
    v.add_argument("shard_dir", help="folder with manifest.json and shard-NNNNN.bin")
    v.set_defaults(fn=cmd_verify)

    e = sub.add_parser("export", help="write a run's curated documents as seed 002's JSON Lines", description=(
        "Write the curated documents (the parts of the last stage before tokenize) as seed 002 §1.3's JSON Lines: "
        "id, text, url, source, crawl_id, language, metadata {content_length, extracted_at}; FILE.gz compresses."))
    e.add_argument("run_dir", help="a run directory")
    e.add_argument("--format", choices=["jsonl"], default="jsonl", help="jsonl (seed 002 §1.3)")
    e.add_argument("--out", required=True, help="the file to write (.jsonl or .jsonl.gz)")
    e.set_defaults(fn=cmd_export)

    if wanted("doremi"):
        from gpupipe.doremi import add_parser as add_doremi   # gpupipe doremi: mixture weights from a proxy model

        add_doremi(sub)

    from gpupipe.acquire.commoncrawl import DEFAULT_BASE_URL

    f = sub.add_parser("fetch-cc", help="download WARC files of a Common Crawl crawl", description=(
        "Read the crawl's warc.paths.gz and download the WARC files of its first N segments (in the listing's "
        "order, which is sorted) into OUT, each under its own name, with bounded concurrency, retries with "
        "backoff and resume: a file already complete (its size equals the server's) is not fetched again, a "
        "partial download (OUT/.NAME.part) continues with an HTTP Range request."))
    f.add_argument("--crawl", required=True, help="crawl name, e.g. CC-MAIN-2024-51")
    f.add_argument("--segments", type=int, required=True,
                   help="fetch every WARC file of the first N segments listed in warc.paths.gz (a segment holds "
                        "several hundred ~1 GB files; --max-files caps the count)")
    f.add_argument("--max-files", dest="max_files", type=int,
                   help="at most this many files: the first ones of the selected segments, in listing order")
    f.add_argument("--out", required=True, help="output folder, or a bucket URL such as s3://bucket/cc/ (files are "
                   "staged locally and uploaded once whole); it also keeps the crawl's warc.paths.gz")
    f.add_argument("--base-url", dest="base_url", default=DEFAULT_BASE_URL,
                   help=f"where crawl-data/ lives (default {DEFAULT_BASE_URL})")
    f.add_argument("--concurrency", type=int, default=4, help="files downloaded at once (default 4)")
    f.add_argument("--retries", type=int, default=5,
                   help="failed attempts in a row per file before it counts as failed (default 5)")
    f.add_argument("--backoff", type=float, default=1.0,
                   help="seconds before the first retry, doubled for each further one (default 1)")
    f.add_argument("--timeout", type=float, default=60.0, help="socket timeout per request in seconds (default 60)")
    f.set_defaults(fn=cmd_fetch_cc)

    w = sub.add_parser("warmup", help="compile the kernels once (make install runs it)", description=(
        "Run every station with a numba kernel on a small synthetic crawl in a temporary folder, so that numba "
        "compiles the kernels and caches them on disk, and print the seconds spent compiling per stage. Later "
        "runs load them from the cache (until gpupipe's sources change). Where a GPU is usable (and the config's "
        "device is not cpu), the device stations then run once on it, so CuPy compiles their CUDA kernels too."))
    w.add_argument("config", nargs="?", help="warm only this config's stations (a config that reads a WARC crawl, "
                   "e.g. configs/default.yaml); default: every station")
    w.add_argument("--docs", type=int, default=300, help="HTML pages of the synthetic crawl (default 300)")
    w.add_argument("--processes", type=int, default=min(2, os.cpu_count() or 1),
                   help="compile in this many processes at once (numba compiles one kernel at a time in a process; "
                   "its disk cache is shared); default 2, or 1 on one core")
    w.set_defaults(fn=cmd_warmup)

    pl = sub.add_parser("plan", help="estimate CPU/GPU hours and storage for a token target (a reference table)",
                        description=(
        "Scale a finished run's measured stage times, survival rates and file sizes (or, without RUN_DIR, seed "
        "002's reference table per 1T tokens) to a token target: CPU core-hours, GPU-hours, temporary and final "
        "storage per stage, and the raw crawl needed (gpupipe/plan.py says how)."))
    pl.add_argument("run_dir", nargs="?",
                    help="a finished run to scale, a path or a URL (default: the built-in table per 1T tokens)")
    pl.add_argument("--tokens", required=True, help="token target, e.g. 1T, 500B, 2.5M")
    pl.add_argument("--cpus", type=int, help="CPU cores available: also print the wall-clock hours")
    pl.add_argument("--gpus", type=int, help="GPUs available: also print the wall-clock hours")
    pl.add_argument("--usd-per-core-hour", type=float, metavar="USD",
                    help="price of a CPU core-hour for the cost (default 0.01: a spot vCPU-hour)")
    pl.add_argument("--usd-per-gpu-hour", type=float, metavar="USD",
                    help="price of a GPU-hour for the cost (default 1.00: an A100 spot hour)")
    pl.add_argument("--json", action="store_true", help="print the plan as JSON (every stage)")
    pl.set_defaults(fn=cmd_plan)

    if wanted("minhash-params"):
        _add_minhash_params(sub)

    from gpupipe.config_convert import add_config_parser

    add_config_parser(sub)

    if wanted("decontam-index"):
        from gpupipe.stages.filters.decontam import add_decontam_index_parser

        add_decontam_index_parser(sub)
    if wanted("train-quality"):
        from gpupipe.stages.filters.model_quality import add_train_quality_parser

        add_train_quality_parser(sub)

    from gpupipe.models.train import add_train_classifier_parser

    add_train_classifier_parser(sub)

    if wanted("report", "audit"):
        from gpupipe.report import add_audit_parser, add_report_parser

        add_report_parser(sub)
        add_audit_parser(sub)
    if wanted("chunk-markdown"):
        from gpupipe.stages.text.chunk_markdown import add_chunk_markdown_parser

        add_chunk_markdown_parser(sub)
    if command is not None and command not in sub.choices:
        return build_parser()
    return p


def _stages_epilog() -> str:
    from gpupipe.stages import STAGES

    return ("stages (each config item is {name: {parameters}}; every default is written to "
            "RUN/config.resolved.yaml): " + ", ".join(STAGES))


def _add_minhash_params(sub) -> None:
    from gpupipe.stages.dedup.fuzzy import FuzzyDedupConfig

    m = sub.add_parser("minhash-params", help="choose LSH bands x rows for a Jaccard threshold", description=(
        "Choose bands x rows minimising the weighted false-positive + false-negative areas under the LSH S-curve "
        "1-(1-s^r)^b, and print the candidate probability at a few similarities."))
    d = FuzzyDedupConfig()
    m.add_argument("--threshold", type=float, help=f"Jaccard similarity threshold (default {d.threshold})")
    m.add_argument("--num-perm", dest="num_perm", type=int, help=f"MinHash permutations (default {d.num_perm})")
    m.add_argument("--fp-weight", dest="fp_weight", type=float,
                   help=f"weight of the false-positive area (default {d.fp_weight}, the fuzzy_dedup stage's)")
    m.add_argument("--fn-weight", dest="fn_weight", type=float,
                   help=f"weight of the false-negative area (default {d.fn_weight}, the fuzzy_dedup stage's)")
    m.add_argument("--bands", type=int, help="evaluate these bands (with --rows) instead of choosing")
    m.add_argument("--rows", type=int)
    m.add_argument("--at-least", dest="at_least", type=_constraint, action="append", metavar="SIM:PROB",
                   help="search every b x r within --num-perm with P(candidate | SIM) >= PROB (repeatable)")
    m.add_argument("--at-most", dest="at_most", type=_constraint, action="append", metavar="SIM:PROB",
                   help="... and P(candidate | SIM) <= PROB (repeatable); exit 1 when no b x r satisfies them")
    m.add_argument("--exercise", action="store_true",
                   help="seed 001's exercise 1: --at-least 0.8:0.95 --at-most 0.5:0.05")
    m.set_defaults(fn=cmd_minhash_params)


def _named_command(argv: list[str]) -> str | None:
    """The subcommand argv names (its first word that is not an option: gpupipe's own options take no value), or
    None where the top-level parser answers (help, version, no subcommand)."""
    for a in argv:
        if a in ("-h", "--help", "--version"):
            return None
        if not a.startswith("-"):
            return a
    return None


_SERVER_ARGS = ("base_url", "scheduler_address")   # URLs of servers, not of files or folders


def _again(argv: list[str]) -> str:
    return f"run the same command again to resume after the last completed stage: gpupipe {shlex.join(argv)}"


def describe_fault(e: BaseException, argv: list[str]) -> tuple[str, int] | None:
    """One line and an exit code for a fault that is not gpupipe's bug (None: an unexpected error): storage or a
    Dask scheduler that does not answer, a run directory that cannot be written or vanished."""
    from gpupipe.io.storage import StorageUnreachable, unreachable

    name = type(e).__name__
    # botocore's, by name: importing it here would load the cloud stack for every command
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return (f"{e} for an s3:// path: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), "
                f"or storage: {{options: {{s3: {{key: ..., secret: ...}}}}}} in the config", 2)
    first = (str(e).strip().splitlines() or [""])[0]
    dask = type(e).__module__.partition(".")[0] == "distributed" or "tcp://" in first or name in (
        "CommClosedError", "FutureCancelledError", "KilledWorker")
    if dask and not isinstance(e, StorageUnreachable):
        return f"the Dask scheduler cannot be reached or was lost ({name}: {first}); {_again(argv)}", 1
    if unreachable(e):
        return (first if isinstance(e, StorageUnreachable) else f"storage unreachable: {name}: {first}") \
            + f"; {_again(argv)}", 1
    if isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"cannot write {e.filename or ''}: {e.strerror}; choose a writable output", 1
    return None


def main(argv: list[str] | None = None) -> int:
    from gpupipe.io.storage import StorageUnavailable, require

    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_named_command(argv)).parse_args(argv)
    try:
        for key, value in vars(args).items():   # a URL without its filesystem package: say so before any work
            for v in (value if isinstance(value, list) else [value]):
                if key not in _SERVER_ARGS and isinstance(v, str):
                    require(v)
        return args.fn(args)
    except StorageUnavailable as e:   # raised wherever a URL is opened; the message names the install command
        return fail(str(e), 2)
    except Exception as e:
        if args.debug:
            raise
        said = describe_fault(e, argv)
        if said is not None:
            return fail(*said)
        return fail(f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]} (an unexpected error: "
                    f"gpupipe --debug {shlex.join(argv)} shows where)", 1)
    except KeyboardInterrupt:
        return fail("interrupted", 130)


def entry() -> None:
    """The `gpupipe` console script: `main`, then the process ends without tearing the interpreter down. Every
    output is written and closed by then (run files are atomic, the log handler is closed, a Dask cluster is shut
    down in `run_pipeline`, the local pool's workers are stopped here); freeing the modules and objects of a large
    run one by one costs up to a second that a user would wait for."""
    code = main()
    if "gpupipe.run.executors" in sys.modules:   # a local run's worker processes: stopped, not left behind
        sys.modules["gpupipe.run.executors"].shutdown_pools()
    # multiprocessing's own exit work that os._exit skips: the pool's named semaphores unlinked (else its resource
    # tracker prints "There appear to be N leaked semaphore objects" after every run that used a pool)
    run_finalizers = getattr(sys.modules.get("multiprocessing.util"), "_run_finalizers", None)
    if run_finalizers is not None:
        run_finalizers(0)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
