"""`gpupipe plan`: the resources a curation run needs for a token target (CPU core-hours, GPU-hours, storage).

From a finished run (its RUN/stats.json, shard manifest and Parquet files) the plan scales every measured figure
by one factor, `scale = target tokens / tokens the run produced`, since every stage's work and output grow with its
input and each stage's input is a fixed share of the raw crawl (the run's survival rates):

    CPU core-hours of a stage  = its CPU seconds (driver and workers) x scale / 3600; for a run that did not measure
                                 them, its seconds x the workers that ran it
    GPU-hours of a stage       = the same on a `device: gpu` run (one GPU per worker); a CPU run measured no GPU
                                 time, so it gets no GPU estimate (null), not a claim of 0 GPU-hours
    temporary storage          = the Parquet files of the stage's folder (parts, rejects, side tables) x scale
    final storage              = the shard files in the manifest (and Megatron .bin/.idx) x scale
    raw crawl                  = the read stage's input bytes x scale; input records likewise

The tokens a run produced: the packed stream (documents + one EOS each: manifest `stream_tokens`), else the tokenize
stage's tokens plus one EOS per document. With `--cpus N` / `--gpus M` it also gives the wall-clock hours
(core-hours / N, GPU-hours / M). A target more than MAX_RELIABLE_SCALE times the run's tokens gets a warning: so
small a run's times are mostly start-up, which does not grow with the data. Without a run it scales the user's reference
reference table (per 1T tokens) instead. Stages are summed into the seed's five rows (采集与提取, 基础过滤, 去重,
质量过滤, 后处理与打包: PII redaction is post-processing, the transformer classifier and semantic dedup are quality, as
seed 002 groups them); `--json` has every stage. The cost is core-hours x $/core-hour + GPU-hours x $/GPU-hour
(`--usd-per-core-hour`, `--usd-per-gpu-hour`; defaults USD_PER_CORE_HOUR and USD_PER_GPU_HOUR, named in the
output). RUN_DIR may be a URL (s3://...): its files are read and listed there.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from gpupipe.io import storage

GROUPS = [  # the reference table's rows and the stages each one sums, as seed 002's five stages group them
    ("采集与提取 (collection, extraction)", {"read", "extract", "chunk_markdown"}),
    ("基础过滤 (basic filters)", {"normalize", "langid", "url_filter", "nsfw_filter", "line_filter", "doc_filter"}),
    ("去重 (dedup)", {"url_dedup", "exact_dedup", "fuzzy_dedup", "simhash_dedup", "substring_dedup"}),
    # seed 002 Stage 4: PPL, the quality classifier (a transformer: `classifier`), educational value; semantic
    # dedup runs the same encoders on the GPU
    ("质量过滤 (quality)", {"quality", "quality_classifier", "classifier", "semantic_dedup", "perplexity",
                           "llm_judge", "decontaminate"}),
    # seed 002 Stage 5: PII redaction, tokenize + statistics, packing
    ("后处理与打包 (PII, tokenize, pack)", {"pii", "tokenize", "mixture", "pack"}),
]
OTHER_GROUP = GROUPS[-1][0]
# the reference table, per 1T tokens: CPU core-hours, GPU-hours (A100), storage TB; raw crawl not in the
# table: the extraction row's 20 TB is taken for it
BUILTIN_PER_T = [(50_000, 0, 20), (10_000, 0, 15), (100_000, 0, 30), (20_000, 2_000, 10), (10_000, 0, 5)]
BUILTIN_RAW_TB = 20
TB = 1e12
# What an hour costs, in US dollars (`gpupipe plan --usd-per-core-hour/--usd-per-gpu-hour`). The defaults price
# seed 002's reference table (~190K core-hours, ~2K A100 GPU-hours per 1T tokens) at $3,900, inside its "$2,000-5,000"
# estimate: a preemptible/spot vCPU-hour (~$0.01) and an A100 spot hour (~$1.00).
USD_PER_CORE_HOUR = 0.01
USD_PER_GPU_HOUR = 1.00
MAX_RELIABLE_SCALE = 1000   # a run scaled further than this is too small to extrapolate from (a warning says so)
_SUFFIX = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}


def parse_tokens(text: str) -> int:
    """'1T' → 10**12, '500B', '2.5M', '10k', '123' (decimal suffixes)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kKmMbBgGtTpP]?)\s*", str(text))
    if not m:
        raise ValueError(f"not a token count: {text!r} (e.g. 1T, 500B, 2.5M)")
    n = int(round(float(m.group(1)) * _SUFFIX[m.group(2).upper()]))
    if n <= 0:
        raise ValueError(f"the token target must be positive, got {text!r}")
    return n


def group_of(stage: str) -> str:
    return next((g for g, names in GROUPS if stage in names), OTHER_GROUP)


def _file_sizes(location: str) -> dict[str, int]:
    """Every file under a run directory (relative name → bytes): os.walk on disk, one listing of a bucket."""
    if not storage.is_url(location):
        return {os.path.relpath(os.path.join(d, f), location).replace(os.sep, "/"): os.path.getsize(os.path.join(d, f))
                for d, _, files in os.walk(location) for f in files}
    fs, path = storage.filesystem(location)
    root = path.rstrip("/") + "/"
    return {p[len(root):]: int(info.get("size") or 0) for p, info in fs.find(path, detail=True).items()
            if p.startswith(root)}


def _final_bytes(sizes: dict[str, int], manifest: dict | None) -> int:
    from gpupipe.run.rundir import NAMES

    if not manifest:
        return 0
    files = [(NAMES.shards / s["file"]).as_posix() for s in manifest["shards"]]
    if "megatron" in manifest:
        prefix = (NAMES.shards / manifest["megatron"]["prefix"]).as_posix()
        files += [f"{prefix}.bin", f"{prefix}.idx"]
    return sum(sizes.get(f, 0) for f in files)


def run_tokens(stats: dict[str, Any], manifest: dict | None) -> int:
    if manifest:
        return int(manifest["stream_tokens"])
    tok = [s for s in stats["stages"] if s["name"] == "tokenize"]
    if not tok:
        raise ValueError("the run has no tokenize stage: its token output is unknown, so it cannot be scaled to a "
                         "token target")
    return int(tok[-1]["extra"].get("tokens", 0)) + tok[-1]["docs_out"]


def plan_from_run(run_dir: str | os.PathLike, target_tokens: int, cpus: int | None = None,
                  gpus: int | None = None) -> dict[str, Any]:
    """run_dir: a finished run directory, a path or a URL (s3://bucket/runs/r1)."""
    from gpupipe.run.rundir import NAMES, at

    root = run_dir.rstrip("/") if storage.is_url(run_dir) else os.fspath(run_dir)
    stats_path = at(root, NAMES.stats)
    if not storage.isfile(stats_path):
        raise ValueError(f"{root} is not a finished run directory (no {NAMES.stats})")
    stats = json.loads(storage.read_text(stats_path))
    man_path = at(root, NAMES.manifest)
    manifest = json.loads(storage.read_text(man_path)) if storage.isfile(man_path) else None
    measured = run_tokens(stats, manifest)
    if measured <= 0:
        raise ValueError(f"{root} produced no tokens: nothing to scale")
    sizes = _file_sizes(root)
    scale = target_tokens / measured
    cores = int(stats.get("workers") or 1)
    gpu = stats.get("device") == "gpu"
    first_in = stats["stages"][0]["docs_in"] or 1
    stages = []
    for i, s in enumerate(stats["stages"]):
        # the CPU time the stage used (driver and workers, `extra.cpu_s`); runs before it was measured: the
        # stage's wall time on every worker
        cpu = s.get("extra", {}).get("cpu_s")
        core_h = (cpu if cpu is not None else s["seconds"] * cores) * scale / 3600
        folder = NAMES.relative(NAMES.stage_of(stats, i).root) + "/"
        stages.append({
            "name": s["name"], "group": group_of(s["name"]),
            "seconds": s["seconds"], "docs_in": s["docs_in"], "docs_out": s["docs_out"],
            "survival": round(s["docs_out"] / s["docs_in"], 6) if s["docs_in"] else None,
            "share_of_input": round(s["docs_in"] / first_in, 6),
            "docs_per_second_per_core": (round(s["docs_in"] / (s["seconds"] * cores), 3) if s["seconds"] else None),
            "target_docs_in": round(s["docs_in"] * scale),
            "cpu_core_hours": core_h,
            # a run on the CPU measured no GPU time: no GPU estimate (None), rather than a claim of 0 GPU-hours
            "gpu_hours": core_h if gpu else None,
            "temp_bytes": sum(n for f, n in sizes.items() if f.startswith(folder) and f.endswith(".parquet")) * scale,
        })
    warnings = []
    if scale > MAX_RELIABLE_SCALE:
        warnings.append(f"the run measured packed only {measured:,} tokens, {scale:,.4g}x short of the target: "
                        f"so small a run's times are mostly start-up (numba compiling, tokenizer training, process "
                        f"start), so this linear extrapolation is unreliable; measure a run of at least "
                        f"{human(target_tokens / MAX_RELIABLE_SCALE)} tokens")
    final = _final_bytes(sizes, manifest) * scale
    return _finish({"basis": "run", "run_dir": root, "target_tokens": target_tokens, "measured_tokens": measured,
                    "scale": scale, "cores_measured": cores, "device": stats.get("device"),
                    "gpu_measured": gpu, "warnings": warnings,
                    "raw_crawl_bytes": stats["stages"][0]["bytes_in"] * scale,
                    "input_records": round(stats["input_records"] * scale), "final_bytes": final,
                    "stages": stages}, cpus, gpus)


def plan_builtin(target_tokens: int, cpus: int | None = None, gpus: int | None = None) -> dict[str, Any]:
    k = target_tokens / 1e12
    rows = [{"name": g, "group": g, "cpu_core_hours": c * k, "gpu_hours": gp * k, "temp_bytes": tb * TB * k}
            for (g, _), (c, gp, tb) in zip(GROUPS, BUILTIN_PER_T)]
    return _finish({"basis": "builtin (the reference resource table, per 1T tokens)", "target_tokens": target_tokens,
                    "scale": k, "gpu_measured": True, "warnings": [], "raw_crawl_bytes": BUILTIN_RAW_TB * TB * k,
                    "final_bytes": 0.0, "stages": rows},
                   cpus, gpus)


def _finish(plan: dict[str, Any], cpus: int | None, gpus: int | None) -> dict[str, Any]:
    groups = {g: {"group": g, "stages": [], "cpu_core_hours": 0.0, "gpu_hours": 0.0, "storage_bytes": 0.0}
              for g, _ in GROUPS}
    for s in plan["stages"]:
        g = groups[s["group"]]
        if s["name"] != s["group"]:
            g["stages"].append(s["name"])
        g["cpu_core_hours"] += s["cpu_core_hours"]
        g["gpu_hours"] += s["gpu_hours"] or 0.0
        g["storage_bytes"] += s["temp_bytes"]
    groups[OTHER_GROUP]["storage_bytes"] += plan["final_bytes"]
    plan["groups"] = list(groups.values())
    total = {k: sum(g[k] for g in plan["groups"]) for k in ("cpu_core_hours", "gpu_hours", "storage_bytes")}
    if not plan["gpu_measured"]:   # nothing measured on a GPU: no GPU figure at all
        total["gpu_hours"] = None
        for g in plan["groups"]:
            g["gpu_hours"] = None
    total["temp_bytes"] = sum(s["temp_bytes"] for s in plan["stages"])
    total["final_bytes"] = plan["final_bytes"]
    total["raw_crawl_bytes"] = plan["raw_crawl_bytes"]
    if cpus:
        total["wall_hours_cpu"] = total["cpu_core_hours"] / cpus
    if gpus and total["gpu_hours"] is not None:
        total["wall_hours_gpu"] = total["gpu_hours"] / gpus
    plan.update(cpus=cpus, gpus=gpus, total=total)
    return plan


def add_cost(plan: dict[str, Any], usd_per_core_hour: float | None = None,
             usd_per_gpu_hour: float | None = None) -> dict[str, Any]:
    """The plan's cost in US dollars, per group and in total: core-hours x $/core-hour + GPU-hours x $/GPU-hour
    (None: the defaults, USD_PER_CORE_HOUR and USD_PER_GPU_HOUR). No GPU figure (a CPU run): no GPU cost (null)."""
    core = USD_PER_CORE_HOUR if usd_per_core_hour is None else float(usd_per_core_hour)
    gpu = USD_PER_GPU_HOUR if usd_per_gpu_hour is None else float(usd_per_gpu_hour)
    if core < 0 or gpu < 0:
        raise ValueError("prices per hour must be >= 0")

    def cost(row: dict[str, Any]) -> dict[str, Any]:
        cpu_usd = row["cpu_core_hours"] * core
        gpu_usd = None if row["gpu_hours"] is None else row["gpu_hours"] * gpu
        return {"cpu_usd": cpu_usd, "gpu_usd": gpu_usd, "usd": cpu_usd + (gpu_usd or 0.0)}

    for g in plan["groups"]:
        g["cost"] = cost(g)
    plan["cost"] = {"usd_per_core_hour": core, "usd_per_gpu_hour": gpu,
                    "defaults": {"usd_per_core_hour": usd_per_core_hour is None,
                                 "usd_per_gpu_hour": usd_per_gpu_hour is None},
                    **cost(plan["total"])}
    return plan


def human(n: float) -> str:
    """The seed's style: 50K, 1.2M, 2K; under 10 with two significant digits."""
    for unit, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            v = n / size
            return f"{v:.0f}{unit}" if v >= 10 else f"{v:.1f}{unit}"
    return f"{n:.0f}" if abs(n) >= 10 else f"{n:.2g}"


def plan_table(plan: dict[str, Any]):
    """The resource table (rich): one row per group of stages, then the total."""
    from rich.table import Table

    t = Table(title=f"resources for {human(plan['target_tokens'])} tokens ({plan['basis']}"
                    + (f": {plan['run_dir']}, {plan['measured_tokens']:,} tokens, x{plan['scale']:,.4g})"
                       if plan["basis"] == "run" else ")"))
    priced = "cost" in plan
    for col in ("阶段 stage", "CPU 核·时 core-hours", "GPU 核·时 GPU-hours", "存储 (TB) storage",
                *(("成本 cost (USD)",) if priced else ())):
        t.add_column(col, justify="left" if col.startswith("阶段") else "right")
    for g in plan["groups"]:
        label = g["group"] + (f"\n  {', '.join(g['stages'])}" if g["stages"] else "")
        t.add_row(label, human(g["cpu_core_hours"]), _gpu(g["gpu_hours"]), f"{g['storage_bytes'] / TB:,.2f}",
                  *((_usd(g["cost"]["usd"]),) if priced else ()))
    tot = plan["total"]
    t.add_row("总计 total", f"~{human(tot['cpu_core_hours'])}", _gpu(tot["gpu_hours"], "~"),
              f"~{tot['storage_bytes'] / TB:,.2f}", *((f"~{_usd(plan['cost']['usd'])}",) if priced else ()))
    return t


def _usd(v: float) -> str:
    return f"${v:,.0f}" if v >= 10 else f"${v:,.2f}"


def _gpu(hours: float | None, prefix: str = "") -> str:
    return "- (CPU run)" if hours is None else prefix + human(hours)


def plan_summary(plan: dict[str, Any]) -> list[str]:
    tot = plan["total"]
    lines = [f"raw crawl needed: {tot['raw_crawl_bytes'] / TB:,.2f} TB"
             + (f" ({plan['input_records']:,} records)" if "input_records" in plan else "")
             + f"; temporary {tot['temp_bytes'] / TB:,.2f} TB, final {tot['final_bytes'] / TB:,.2f} TB"]
    if not plan["gpu_measured"]:
        lines.append(f"measured on the CPU (device {plan.get('device')}): no GPU-hours estimated; the CPU "
                     f"core-hours are the whole estimate")
    if "cost" in plan:
        c = plan["cost"]
        said = lambda key: " (default)" if c["defaults"][key] else ""   # noqa: E731
        lines.append(f"cost: {_usd(c['usd'])} = {human(tot['cpu_core_hours'])} core-hours x "
                     f"${c['usd_per_core_hour']:g}/core-hour{said('usd_per_core_hour')}"
                     + (f" + {human(tot['gpu_hours'])} GPU-hours x ${c['usd_per_gpu_hour']:g}/GPU-hour"
                        f"{said('usd_per_gpu_hour')}" if tot["gpu_hours"] is not None else
                        " (no GPU-hours estimated: no GPU cost)")
                     + "; set the prices with --usd-per-core-hour and --usd-per-gpu-hour")
    if plan.get("cpus"):
        lines.append(f"wall clock on {plan['cpus']} CPU cores: {tot['wall_hours_cpu']:,.1f} h")
    if plan.get("gpus") and "wall_hours_gpu" in tot:
        lines.append(f"wall clock on {plan['gpus']} GPUs: {tot['wall_hours_gpu']:,.1f} h")
    elif plan.get("gpus"):
        lines.append(f"wall clock on {plan['gpus']} GPUs: not estimated, the run measured used no GPU")
    return lines


__all__ = ["GROUPS", "USD_PER_CORE_HOUR", "USD_PER_GPU_HOUR", "add_cost", "parse_tokens", "plan_builtin",
           "plan_from_run", "plan_summary", "plan_table"]
