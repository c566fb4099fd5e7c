"""`gpupipe warmup`: compile every CPU kernel the stations use once, so no real run pays for it.

numba compiles a kernel on its first call for each signature and caches the machine code on disk (dropped when
gpupipe's sources change, see `_numba_cache`); in a fresh install that first call costs 10-30 s per stage, which a
user would read as throughput. The warm-up runs every station with a kernel on a small synthetic crawl in a
temporary folder, twice: the full pipeline from WARC (configs/full.yaml's stations, paragraph-level language ID),
then the JSONL-style pipeline of `profiling/bench_pipeline.py` (document-level language ID, default quality rules)
on the first run's extracted text. With a config, its own stations alone (with its parameters), on the same
crawl: `make demo`'s install warms configs/default.yaml's stations only (`python -m gpupipe.warmup CONFIG`), a
third of the full warm-up's compiling. Every run also reports compile time apart from stage time
(`extra.numba_compile_s`), so throughput figures never include it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

WARMUP_DOCS = 300


def _full_stages(index: str) -> list[dict[str, Any]]:
    return [{"extract": {}}, {"url_filter": {}}, {"line_filter": {}}, {"normalize": {"keep_paragraphs": True}},
            {"langid": {"keep": ["en", "zh"], "level": "paragraph", "min_score": 0.3}}, {"doc_filter": {}},
            {"quality": {"gopher_repetition": {"apply_to_cjk": False}}}, {"pii": {}}, {"url_dedup": {}},
            {"exact_dedup": {}}, {"fuzzy_dedup": {}}, {"substring_dedup": {"min_length": 50}},
            {"decontaminate": {"index": index, "policy": "cut"}}, {"tokenize": {"vocab_size": 512}},
            {"pack": {"seq_len": 128, "megatron": True}}]


_JSONL_STAGES: list[dict[str, Any]] = [
    {"normalize": {}}, {"langid": {"keep": ["en", "zh"]}}, {"quality": {}}, {"exact_dedup": {}},
    {"fuzzy_dedup": {}}, {"tokenize": {"vocab_size": 512}}, {"pack": {"seq_len": 128}}]


def warm_up(docs: int = WARMUP_DOCS, work: str | Path | None = None, config: str | Path | None = None,
            stations: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the two warm-up pipelines; per stage of each: {run, stage, seconds, compile_s}. `config`: a config
    whose stations read a WARC crawl: run those instead; `stations`: keep only these of the full warm-up's (their
    inputs' stations run too, e.g. extract; for profiling)."""
    import yaml

    from gpupipe.config import validate_config
    from gpupipe.run.pipeline import run_pipeline
    from gpupipe.stages.decontam import build_index
    from gpupipe.synth import write_synthetic_crawl

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gpupipe-warmup-", dir=work) as tmp:
        root = Path(tmp)
        crawl = write_synthetic_crawl(root / "crawl.warc.gz", docs=docs, seed=0)
        index = root / "benchmark.index.parquet"
        build_index([crawl["benchmark"]]).save(str(index))
        runs = [("warc", crawl["warc"], _full_stages(str(index))),
                ("jsonl", str(root / "run-warc" / "stages" / "01-extract"), _JSONL_STAGES)]
        if config is not None:
            runs = [("warc", crawl["warc"], yaml.safe_load(Path(config).read_text(encoding="utf-8"))["stages"])]
        elif stations is not None:
            keep = {"extract", *stations}
            runs = [(n, src, [s for s in st if next(iter(s)) in keep]) for n, src, st in runs[:1]]
        for name, source, stages in runs:
            cfg = validate_config({"input": {"path": source}, "output": str(root / f"run-{name}"), "device": "cpu",
                                   "executor": {"kind": "local"}, "keep_intermediate": True, "allow_empty": True,
                                   "stages": stages}, f"warm-up ({name})")
            stats = run_pipeline(cfg)
            rows += [{"run": name, "stage": s["name"], "seconds": s["seconds"],
                      "compile_s": s["extra"].get("numba_compile_s", 0.0)} for s in stats["stages"]]
    return rows



def main(argv: list[str] | None = None) -> int:
    """`python -m gpupipe.warmup [CONFIG]`: the warm-up (of CONFIG's stations only, if given), compile seconds
    printed apart from the rest."""
    import argparse
    import time

    ap = argparse.ArgumentParser(prog="python -m gpupipe.warmup", description=main.__doc__)
    ap.add_argument("config", nargs="?", help="warm only this config's stations (it must read a WARC crawl)")
    ap.add_argument("--docs", type=int, default=WARMUP_DOCS)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = warm_up(args.docs, config=args.config)
    compiled = [r for r in rows if r["compile_s"] > 0]
    for r in compiled:
        print(f"  {r['run']:<6} {r['stage']:<16} {r['compile_s']:6.1f} s compiling of {r['seconds']:6.1f} s")
    total = sum(r["compile_s"] for r in rows)
    print(f"warm-up{' of ' + args.config if args.config else ''}: {time.perf_counter() - t0:.1f} s, {total:.1f} s "
          f"of it numba compiling (cached on disk: later runs load the kernels)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
