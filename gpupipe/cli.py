"""The `gpupipe` command line: run, synth, verify."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console()
if not console.is_terminal:  # CI logs and pipes: wide enough for the funnel table
    console = Console(width=160)
errors = Console(stderr=True)


def _progress_factory(stage: str, total: int, docs: int | None = None, nbytes: int | None = None):
    """A live bar per stage on a terminal; nothing in CI or when piped. Given the stage's input size (documents
    and bytes the previous stage gave; input file bytes for read) it also shows docs/s and MB/s, estimated from the
    share of partitions done (each holds partition_docs documents, but the last of each input file)."""
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
    for col in ("stage", "docs in", "docs out", "removed (by reason)", "MB in", "MB out", "seconds", "docs/s"):
        t.add_column(col, justify="left" if col in ("stage", "removed (by reason)") else "right")
    for s in stats["stages"]:
        removed = "\n".join(f"{k} {v}" for k, v in sorted(s["removed"].items(), key=lambda kv: -kv[1])) or "-"
        rate = f"{s['docs_in'] / s['seconds']:,.0f}" if s["seconds"] and not s.get("resumed") else "-"
        t.add_row(s["name"] + (" (resumed)" if s.get("resumed") else ""), f"{s['docs_in']:,}",
                  f"{s['docs_out']:,}", removed, f"{s['bytes_in'] / 1e6:.2f}", f"{s['bytes_out'] / 1e6:.2f}",
                  f"{s['seconds']:.2f}", rate)
    return t


def cmd_run(args: argparse.Namespace) -> int:
    from gpupipe.backend import DeviceError
    from gpupipe.config import ConfigError, load_config
    from gpupipe.run.pipeline import run_pipeline

    overrides: dict[str, Any] = {}
    if args.input:
        overrides["input.path"] = args.input
    for flag, key in (("output", "output"), ("device", "device"), ("executor", "executor.kind"),
                      ("workers", "executor.workers"), ("partition_docs", "executor.partition_docs")):
        if getattr(args, flag) is not None:
            overrides[key] = getattr(args, flag)
    try:
        cfg = load_config(args.config, overrides)
        stats = run_pipeline(cfg, _progress_factory)
    except (ConfigError, DeviceError) as e:
        errors.print(f"[red]error:[/red] {e}", markup=True, highlight=False)
        return 2
    console.print(funnel_table(stats))
    console.print(f"run directory: {cfg.output}  (stats.json, config.resolved.yaml, stages/, logs/)")
    console.print(f"curated documents: {stats['curated_dir']}")
    report = Path(cfg.output) / "report.html"
    if report.is_file():
        console.print(f"report: {report}  (audit samples: gpupipe audit {cfg.output} --stage NAME)")
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


def cmd_verify(args: argparse.Namespace) -> int:
    from gpupipe.tokens.manifest import read_manifest
    from gpupipe.tokens.verify import verify_shards

    try:
        problems = verify_shards(args.shard_dir)
    except (OSError, ValueError) as e:
        errors.print(f"error: cannot verify {args.shard_dir}: {e}", highlight=False)
        return 2
    if problems:
        for p in problems:
            errors.print(f"FAIL: {p}", highlight=False)
        return 1
    m = read_manifest(args.shard_dir)
    console.print(f"OK: {len(m['shards'])} shards, {m['sequences']} sequences of {m['seq_len']} tokens, "
                  f"{m['documents_packed']} documents, dropped remainder {m['dropped_remainder_tokens']} tokens")
    return 0


def cmd_minhash_params(args: argparse.Namespace) -> int:
    from gpupipe.stages.lsh import format_params_report, optimal_params

    if args.bands and args.rows:
        bands, rows = args.bands, args.rows
    else:
        bands, rows = optimal_params(args.threshold, args.num_perm, args.fp_weight, args.fn_weight)
    console.print(format_params_report(args.threshold, args.num_perm, bands, rows), highlight=False)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpupipe", description="Web crawl → curated documents → packed token shards.")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run (or resume) a pipeline config", description=(
        "Run the stages of CONFIG into its run directory; a re-run resumes after the last completed stage."))
    r.add_argument("config", help="YAML config (see configs/)")
    r.add_argument("--input", nargs="+", help="input file(s), folder(s) or glob(s); overrides input.path")
    r.add_argument("--output", help="run directory; overrides output")
    r.add_argument("--device", choices=["auto", "cpu", "gpu"], help="overrides device")
    r.add_argument("--executor", choices=["local", "dask"], help="overrides executor.kind")
    r.add_argument("--workers", type=int, help="Dask workers; overrides executor.workers")
    r.add_argument("--partition-docs", dest="partition_docs", type=int,
                   help="documents per partition; overrides executor.partition_docs")
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

    m = sub.add_parser("minhash-params", help="choose LSH bands x rows for a Jaccard threshold", description=(
        "Choose bands x rows minimising the weighted false-positive + false-negative areas under the LSH S-curve "
        "1-(1-s^r)^b, and print the candidate probability at a few similarities."))
    m.add_argument("--threshold", type=float, default=0.8, help="Jaccard similarity threshold (default 0.8)")
    m.add_argument("--num-perm", dest="num_perm", type=int, default=128, help="MinHash permutations (default 128)")
    m.add_argument("--fp-weight", dest="fp_weight", type=float, default=0.5)
    m.add_argument("--fn-weight", dest="fn_weight", type=float, default=0.5)
    m.add_argument("--bands", type=int, help="evaluate these bands (with --rows) instead of choosing")
    m.add_argument("--rows", type=int)
    m.set_defaults(fn=cmd_minhash_params)

    from gpupipe.stages.decontam import add_decontam_index_parser

    add_decontam_index_parser(sub)

    from gpupipe.stages.model_quality import add_train_quality_parser

    add_train_quality_parser(sub)

    from gpupipe.report import add_audit_parser, add_report_parser

    add_report_parser(sub)
    add_audit_parser(sub)

    from gpupipe.stages.chunk_markdown import add_chunk_markdown_parser

    add_chunk_markdown_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
