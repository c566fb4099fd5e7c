"""`gpupipe warmup`: compile every CPU kernel the stations use once, so no real run pays for it.

numba compiles a kernel on its first call for each signature and caches the machine code on disk (dropped when
gpupipe's sources change, see `_numba_cache`); in a fresh install that first call costs 10-30 s per stage, which a
user would read as throughput. The warm-up runs every station with a kernel on a small synthetic crawl in a
temporary folder, twice: the full pipeline from WARC (configs/full.yaml's stations, paragraph-level language ID),
then the JSONL-style pipeline of `profiling/bench_pipeline.py` (document-level language ID, default quality rules)
on the first run's extracted text. With a config, its own stations alone (with its parameters), on the same
crawl: `make demo`'s install warms configs/default.yaml's stations only (`gpupipe warmup CONFIG`), a
third of the full warm-up's compiling. Every run also reports compile time apart from stage time
(`extra.numba_compile_s`), so throughput figures never include it.

Where the runs will use a GPU (`device` auto or gpu, and CuPy sees one), a last run takes the device stations
(`resources = DEVICE`) through `device: gpu` on the same crawl, so that CuPy compiles their CUDA kernels and its own
(NVRTC, seconds each) into its disk cache (`CUPY_CACHE_DIR`, default ~/.cupy/kernel_cache). On an H200 a fresh
machine's first gpu run spent 7.1 s in exact and 13.0 s in near dedup on 2,083 documents, compiling (session 15).
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
            {"exact_dedup": {}}, {"fuzzy_dedup": {}}, {"simhash_dedup": {}},
            {"substring_dedup": {"min_length": 50}}, {"decontaminate": {"index": index, "policy": "cut"}}, {"tokenize": {"vocab_size": 512}},
            {"pack": {"seq_len": 128, "megatron": True}}]


_JSONL_STAGES: list[dict[str, Any]] = [
    {"normalize": {}}, {"langid": {"keep": ["en", "zh"]}}, {"quality": {}}, {"exact_dedup": {}},
    {"fuzzy_dedup": {}}, {"tokenize": {"vocab_size": 512}}, {"pack": {"seq_len": 128}}]

# CPU seconds of compiling each station's kernels on a cold cache (profiling/numba_compile_profile.py, 2-core VM);
# the other stations have none. Only their ratios matter: they balance the warm-up's processes.
# simhash_dedup: 20 s cold alone (#35), about half of it the shingle kernels fuzzy_dedup compiles too.
_COMPILE_COST = {"quality": 40, "fuzzy_dedup": 25, "langid": 20, "decontaminate": 10, "simhash_dedup": 10,
                 "substring_dedup": 6, "exact_dedup": 3, "url_dedup": 2}


def _name(stage: dict[str, Any]) -> str:
    return next(iter(stage))


def _groups(stages: list[dict[str, Any]], k: int) -> list[list[dict[str, Any]]]:
    """The stages split into at most k pipelines, each with every station that has no kernel and a share of those
    that do, balanced by compile cost (largest first, to the least loaded). A station left out changes which rows
    reach the next and adds no column the kernels read (fuzzy dedup shingles by script when langid is absent:
    the same uint8 mask), so each kernel compiles for the types the whole pipeline gives it."""
    heavy = sorted((s for s in stages if _name(s) in _COMPILE_COST), key=lambda s: -_COMPILE_COST[_name(s)])
    bins: list[list[str]] = [[] for _ in range(max(1, min(k, len(heavy))))]
    load = [0] * len(bins)
    for s in heavy:
        i = load.index(min(load))
        bins[i].append(_name(s))
        load[i] += _COMPILE_COST[_name(s)]
    return [[s for s in stages if _name(s) not in _COMPILE_COST or _name(s) in b] for b in bins]


def _run(source: str, output: str, stages: list[dict[str, Any]], label: str,
         device: str = "cpu") -> list[dict[str, Any]]:
    from gpupipe.config import validate_config
    from gpupipe.run.pipeline import run_pipeline

    cfg = validate_config({"input": {"path": source}, "output": output, "device": device, "executor": {"kind": "local", "workers": 1},
                           "keep_intermediate": True, "allow_empty": True, "stages": stages}, f"warm-up ({label})")
    stats = run_pipeline(cfg)
    return [{"run": label, "stage": s["name"], "seconds": s["seconds"],
             "compile_s": s["extra"].get("numba_compile_s", 0.0)} for s in stats["stages"]]


def _device_stages(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """extract, then the stations with a GPU kernel or model (their class declares DEVICE), each once."""
    from gpupipe.stages import STAGES

    out: dict[str, dict[str, Any]] = {}
    for s in stages:
        if STAGES[_name(s)].resources.device:
            out.setdefault(_name(s), s)   # the first of each
    extract = next((s for s in stages if _name(s) == "extract"), {"extract": {}})
    return [extract, *out.values()] if out else []


def warm_up(docs: int = WARMUP_DOCS, work: str | Path | None = None, config: str | Path | None = None,
            stations: list[str] | None = None, processes: int = 1, device: str = "auto") -> list[dict[str, Any]]:
    """Run the warm-up pipelines; per stage of each: {run, stage, seconds, compile_s}. `config`: a config whose
    stations read a WARC crawl: run those instead; `stations`: keep only these of the full warm-up's (and extract;
    for profiling). `processes` > 1: the WARC pipeline's stations with kernels are shared out among that many
    processes (numba compiles one kernel at a time in a process; its disk cache is shared), each running them with
    the stations without kernels; the JSONL pipeline then runs on the first one's extracted text. `device` (a
    config's own, when it names one): unless cpu, where a GPU is usable, the device stations run once more on it."""
    import yaml

    from gpupipe.synth import write_synthetic_crawl

    with tempfile.TemporaryDirectory(prefix="gpupipe-warmup-", dir=work) as tmp:
        root = Path(tmp)
        crawl = write_synthetic_crawl(root / "crawl.warc.gz", docs=docs, seed=0)
        if config is not None:
            loaded = yaml.safe_load(Path(config).read_text(encoding="utf-8"))
            warc, jsonl = loaded["stages"], []
            device = loaded.get("device") or device   # a cpu config never touches the GPU
        else:
            index = root / "benchmark.index.parquet"
            warc, jsonl = _full_stages(str(index)), _JSONL_STAGES
            if stations is not None:
                warc, jsonl = [s for s in warc if _name(s) in {"extract", *stations}], []
        if any(_name(s) == "decontaminate" for s in warc):
            from gpupipe.stages.filters.decontam import build_index

            build_index([crawl["benchmark"]]).save(str(root / "benchmark.index.parquet"))
        groups = _groups(warc, processes)
        jobs = [(crawl["warc"], str(root / f"run-warc-{i}"), g, "warc" if len(groups) == 1 else f"warc/{i + 1}")
                for i, g in enumerate(groups)]
        if len(jobs) == 1:
            rows = _run(*jobs[0])
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(len(jobs), mp_context=multiprocessing.get_context("spawn")) as pool:
                rows = [r for part in pool.map(_run, *zip(*jobs)) for r in part]
        if jsonl:
            from gpupipe.run.rundir import RunLayout

            extracted = RunLayout(root / "run-warc-0").stage(1, "extract").root
            rows += _run(str(extracted), str(root / "run-jsonl"), jsonl, "jsonl")
        on_gpu = _device_stages(warc + jsonl)
        if on_gpu and device != "cpu":
            from gpupipe.backend import gpu_status

            if gpu_status()[0]:   # a gpu config warmed where no GPU is (a build machine) keeps its CPU warm-up
                rows += _run(crawl["warc"], str(root / "run-gpu"), on_gpu, "gpu", device="gpu")
    return rows
