"""What one node does with the default text pipeline, and what bigger nodes would do: `gpupipe run` with the local
executor's pool at several worker counts and corpus sizes, measured from outside, and a model built from those runs
that predicts MB/s and TB/day for 16/64/128 cores, with and without GPUs.

Usage:  python profiling/bench_node.py CORPUS.jsonl[.gz] [--scale 1,4,16] [--workers 1,2,<cores>] [--sample K]
                                        [--gpu-rates FILE] [--model-cores 16,64,128] [--model-gpus 1,8]
                                        [--check-against node_bench_DATE.json] [--work DIR] [--corpora DIR]
                                        [--shards N] [--no-pin] [--retries 2] [--no-save]
CORPUS lines are {"id", "lang", "text"}. The k× corpus is the corpus plus k-1 edited, shuffled copies, made as
profiling/bench_pipeline.py makes them (its functions): reused from its work folder (--corpora, default
TMP/gpupipe_bench_pipeline) when one there was made from the same corpus, sample, seed and shard count, else written
to --work (default TMP/gpupipe_bench_node) as --shards .jsonl.gz files (default: the largest worker count, at least
2: the read stage is one task per input file, so fewer files than workers would idle the pool while reading).
--sample K keeps every K-th document first (a quick check; nothing is saved then).

Each run  `gpupipe run cfg.yaml` in a fresh process (the `gpupipe` next to this interpreter), device cpu (--device),
          `executor: {kind: local, workers: N}`, stages normalize → langid {keep: [en, zh]} → quality →
          exact_dedup → fuzzy_dedup → tokenize {vocab_size: 4096} → pack {seq_len: 2048} (bench_pipeline's gpupipe
          row). workers 1 runs in the driver process; it is pinned to one core (sched_setaffinity, and
          NUMBA_NUM_THREADS=1) so that it measures what one core does, the pool's unit: a pool worker runs numba
          with one thread. --no-pin leaves it free (numba's kernels then use every core).
          Before each run the script waits (up to --wait-idle s) for other processes to use < --idle-cores.
          numba compiles on first use and caches on disk: the runs get a cache of their own
          (NUMBA_CACHE_DIR=WORK/numba-cache), warmed by a run on every 20th document of the 1× corpus plus an edited
          copy of them (so fuzzy_dedup's verify path compiles too) once per digest of gpupipe's sources (emptied and
          warmed again when they change: others may be editing the checkout). A run during which the sources changed
          or numba compiled (stats.json `numba_compile_s`, or files added to the cache), or CuPy compiled a kernel
          (files added to WORK/cupy-cache, the runs' CUPY_CACHE_DIR), is run again (--retries); the first run's wall
          is in the row's note, and a row still affected is marked "*".
          --device gpu (on a machine with CuPy and a CUDA device): the same runs with `device: gpu`, the pool one
          worker smaller (the driver feeds the GPU the device stations, as `workers: auto` leaves it a core); the
          GPU's busy share over the run is sampled through NVML (pynvml) every 50 ms: profiling/gpu_check.sh's
          whole-pipeline section runs `--device cpu,gpu` on the lent node, --check-against the model saved here.
Columns (runs):
  wall s       process start to exit, measured here (imports, pool start, report: all a user waits for)
  MB/s         MB (1e6 bytes) of UTF-8 text of the input (the `text` fields, not the gzip size) / wall s
  CPU s        user + system seconds of the driver and all its worker processes: this process's RUSAGE_CHILDREN
               delta over the run. The driver comes with the workers it waited for (os.wait4); workers it leaves
               behind are re-parented to this script (a subreaper, PR_SET_CHILD_SUBREAPER), reaped, and terminated
               if still alive 1 s after the driver's exit: the row's note says how many (a pool that outlives
               `gpupipe run`'s exit holds its memory until then)
  CPU-s/MB     CPU s / input text MB: the work a MB costs, whatever the parallelism
  busy         CPU s / wall s: cores kept busy on average
  worker/driver peak RSS: the largest `extra.peak_rss_mb_worker` / `extra.peak_rss_mb_driver` over the stages of
               stats.json (MB); largest: ru_maxrss of the largest process of the tree (os.wait4)
  stages s     sum of stats.json `stages[].seconds`; wall minus it is the fixed cost of a run (start, report)
  parts        partitions the read stage cut (the pool's unit of work)
  others       cores' worth of CPU other processes used during the run (system busy time minus ours / wall):
               above ~0.1 the machine was shared and the row is slower than an idle machine's
Columns (stages, per size): seconds (stats.json), MB/s of the stage's own input (`bytes_in`: the text it received;
  read: the input files' bytes, gzip), share of the run's wall time; numba compile seconds noted where non-zero.

The node model (printed with its assumptions; also written as JSON next to the text so that a later run can be
compared with it, --check-against):
  * From the largest size that has both a workers=1 run and a pool run. Per stage, from the workers=1 run (one
    core), net of numba compile: its seconds per MB of pipeline input, split by phase (stats.json `phase_*_s`) into
    driver phases (run once in the driver: tokenizer training, pack, the dedup stages' candidates/cluster/count;
    plus a stage's seconds no phase accounts for), bucket phases (one task per exchange bucket:
    `executor.shuffle_buckets`, default 8) and partition phases (one task per partition, file or batch; map
    stages are all partition work). "MB/s per core" is the stage's bytes_in over its net seconds.
  * Parallel efficiency per stage from the pool run with the most workers N: eff = (bucket + partition seconds at
    1 core) / (N × the same at N workers), clamped to [0.05, 1]; the whole run's (wall 1 / wall N) / N is printed
    beside it. Held constant from N up to 128 cores: with N = 2 this is the assumption to check first.
  * At C host cores a stage takes driver + bucket / (min(C, buckets) × eff) + partition / (C × eff) per input MB;
    stages run one after another (the engine's barrier), so the pipeline's seconds per MB is their sum and MB/s its
    inverse; TB/day = MB/s × 86,400 / 1e6. A run's fixed cost (wall minus stage seconds) is left out: on a node's
    input (TB) it is nothing. Enough input files and partitions for C workers are assumed (the 39 MB corpus itself
    cannot feed 128).
  * With G GPUs: the device stations (`resources = DEVICE`: here exact_dedup, fuzzy_dedup) take a whole-stage GPU
    rate from --gpu-rates (JSON {"stage": MB/s of the stage's own input, ...}; keys starting with "_" are comments),
    × G (8 GPUs need a Dask cluster with a worker per GPU: the local executor feeds one GPU from the driver); their
    driver and bucket phases are taken to be inside that rate. Host stations get C - G cores (a feeder process per
    GPU, as `workers: auto` leaves one core to the GPU's feeder). A device station without a figure keeps its CPU
    time, with the note "no GPU figures". Kernel-only figures (profiling/gpu_check.sh's benchmark rows) leave out
    Parquet I/O and the exchange: they give an upper bound, not a stage rate; gpu_near_dedup_e2e.py's TB/GPU-hour
    (× 1e6 / 3600 = MB/s) is closer to one for fuzzy_dedup.
  * Memory: C × the largest worker peak + the driver's peak, at this run's partition size (parts of MB text / parts);
    on a big input the read stage cuts 128 MiB partitions (Resources.partition_memory = 4 × that per task).
--check-against FILE.json (an earlier node_bench JSON): its model's prediction at each worker count measured here,
  against the measured stage-time MB/s (and wall MB/s): on a 16-core node, how the prediction made on 2 held up.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_pipeline as bp  # noqa: E402  (the sibling script: corpora, idle-wait, numba cache state, git state)

REPO = bp.REPO
RESULTS = bp.RESULTS
NUMBA_CACHE = bp.NUMBA_CACHE          # "numba-cache" under --work, as bench_pipeline
PIPELINE_WORK = Path(tempfile.gettempdir()) / "gpupipe_bench_pipeline"
WORK = Path(tempfile.gettempdir()) / "gpupipe_bench_node"
FALLBACK_DRIVER_PHASES = {"read": {"skipped"}}   # stages not in gpupipe.stages.STAGES (read is built by the engine)
DEFAULT_BUCKETS = 8
DEFAULT_WORKERS = 0   # --workers default: no executor in the config


# ---------------------------------------------------------------------------------------------------------------
# Inputs


def sources_digest() -> str:
    """Digest of the contents of gpupipe's Python sources (gpupipe/, kernels/), as gpupipe keys its numba cache."""
    h = hashlib.sha256()
    for root in (REPO / "gpupipe", REPO / "kernels"):
        for p in sorted(root.rglob("*.py")):
            h.update(str(p.relative_to(REPO)).encode())
            try:
                h.update(p.read_bytes())
            except OSError:     # removed meanwhile
                pass
    return h.hexdigest()[:12]


def parse_workers(spec: str, cores: int) -> list[int]:
    out: list[int] = []
    for x in spec.split(","):
        x = x.strip()
        if not x:
            continue
        # "default": the config names no executor, as a user's run (`workers: auto` decides: in-process threads or
        # the pool, by the input's size); kept as 0
        n = DEFAULT_WORKERS if x == "default" else cores if x in ("<cores>", "cores", "auto") else int(x)
        if n < 1 and n != DEFAULT_WORKERS:
            raise SystemExit(f"--workers: {x!r} is not a worker count")
        if n not in out:
            out.append(n)
    return sorted(out)


def corpus_for(scale: int, docs_of, key: dict, args, work: Path) -> dict:
    """The scale× corpus: bench_pipeline's copy when its meta.json has the same key, else ours (made if needed)."""
    for folder in (Path(args.corpora) / f"corpus-{scale}x", work / f"corpus-{scale}x"):
        meta_path = folder / "meta.json"
        if meta_path.exists():
            try:
                meta = json.loads(meta_path.read_text())
            except ValueError:
                continue
            if meta.get("key") == key and all(Path(p).exists() for p in meta["files"]):
                return {**meta, "where": str(folder)}
    meta = bp.write_scaled(docs_of(), scale, args.shards, args.seed, work / f"corpus-{scale}x", key)
    return {**meta, "where": str(work / f"corpus-{scale}x")}


# ---------------------------------------------------------------------------------------------------------------
# One run


def config_text(files: list[str], out: Path, workers: int, device: str = "cpu") -> str:
    executor = "" if workers == DEFAULT_WORKERS else f"executor: {{kind: local, workers: {workers}}}\n"
    return (f"input:\n  path: {json.dumps(files)}\noutput: {json.dumps(str(out))}\ndevice: {device}\n"
            f"{executor}stages:\n{bp.STAGES}")


def stage_rows(stats: dict) -> list[dict]:
    rows = []
    for s in stats["stages"]:
        extra = s.get("extra", {})
        rows.append({"name": s["name"], "seconds": s["seconds"], "docs_in": s["docs_in"], "docs_out": s["docs_out"],
                     "bytes_in": s["bytes_in"], "partitions": s.get("partitions", 0),
                     "compile_s": extra.get("numba_compile_s", 0.0) or 0.0,
                     "phases": {k[len("phase_"):-2]: v for k, v in extra.items()
                                if k.startswith("phase_") and k.endswith("_s")},
                     "peak_worker": extra.get("peak_rss_mb_worker"), "peak_driver": extra.get("peak_rss_mb_driver"),
                     "p50": s.get("partition_seconds_p50"), "p99": s.get("partition_seconds_p99")})
    return rows


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphaned descendants (pool workers whose driver exited without waiting for them) are re-parented to this
    process instead of init, so that they can be reaped here and their CPU counted (Linux)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_leftovers(grace: float) -> dict:
    """After the driver's exit: wait up to `grace` s for the processes it left (re-parented here), then terminate
    those still alive (SIGTERM, then SIGKILL after 10 s) and reap them all; their count and rusage."""
    import psutil

    me = psutil.Process()
    out = {"left": 0, "cpu": 0.0, "maxrss_mb": 0.0}
    t0, killed = time.perf_counter(), None
    while True:
        try:
            pid, _, ru = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return out
        if pid:
            out["cpu"] += ru.ru_utime + ru.ru_stime
            out["maxrss_mb"] = max(out["maxrss_mb"], ru.ru_maxrss / 1024)
            continue
        now = time.perf_counter()
        if killed is None and now - t0 > grace:
            kids = me.children()
            out["left"] = len(kids)
            for k in kids:
                with contextlib.suppress(psutil.Error):
                    k.terminate()
            killed = now
        elif killed is not None and now - killed > 10:
            for k in me.children():
                with contextlib.suppress(psutil.Error):
                    k.kill()
            killed = now
        time.sleep(0.02)


class GpuBusy:
    """GPU busy share over a run, from NVML (nvidia-ml-py's pynvml) sampled every 50 ms in a thread: the mean of
    `utilization.gpu` (the share of the last sample period in which a kernel ran) and the peak device memory used.
    Without pynvml or a device: None."""

    def __init__(self):
        import threading

        self.samples: list[int] = []
        self.mem_peak = 0
        self._stop = threading.Event()
        self._thread = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml, self._handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:   # no pynvml, no driver, no device: no figure
            self._nvml = None

    def __enter__(self):
        import threading

        if self._nvml is not None:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.05):
            with contextlib.suppress(Exception):
                self.samples.append(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
                self.mem_peak = max(self.mem_peak, self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def result(self) -> dict:
        if not self.samples:
            return {"gpu_busy": None, "gpu_mem_mb": None}
        return {"gpu_busy": sum(self.samples) / len(self.samples) / 100, "gpu_mem_mb": self.mem_peak / 2**20}


def run_gpupipe(files: list[str], out: Path, work: Path, name: str, workers: int, pin: bool,
                grace: float = 1.0, device: str = "cpu") -> dict:
    """`gpupipe run` in a fresh process: wall, CPU of the whole process tree (the driver by os.wait4, workers it
    left behind reaped here as a subreaper: RUSAGE_CHILDREN's delta covers both), stats.json's stages; with device
    gpu, the GPU's busy share (NVML) over the run."""
    if out.exists():
        shutil.rmtree(out)
    cfg = work / f"{name}.yaml"
    cfg.write_text(config_text(files, out, workers, device))
    # CuPy's kernel cache here too: a file added during a row is a kernel NVRTC compiled in it (device gpu)
    cupy_cache = work / "cupy-cache"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(work / NUMBA_CACHE), CUPY_CACHE_DIR=str(cupy_cache))
    cupy0 = _files_in(cupy_cache)
    preexec = None
    if pin:
        cpu = min(os.sched_getaffinity(0))
        env["NUMBA_NUM_THREADS"] = "1"
        preexec = lambda: os.sched_setaffinity(0, {cpu})  # noqa: E731
    cmd = [*bp.gpupipe_command(), "run", str(cfg)]
    digest0, cache0 = sources_digest(), bp.numba_cache_state(work)
    log = work / f"{name}.log"
    reap_leftovers(0)                       # nothing of an earlier run may count in this one's delta
    busy0 = bp._busy()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log, "wb") as lf, (GpuBusy() if device == "gpu" else contextlib.nullcontext()) as gpu:
        proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, preexec_fn=preexec)
        _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    busy = bp._busy() - busy0
    rc = os.waitstatus_to_exitcode(status)
    proc.returncode = rc        # reaped here: Popen must not wait for it again
    left = reap_leftovers(grace)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({rc}); log {log}:\n{log.read_text(errors='replace')[-3000:]}")
    cpu_driver = ru.ru_utime + ru.ru_stime          # the driver and the children it waited for
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    stats = json.loads((out / "stats.json").read_text())
    stages = stage_rows(stats)
    compile_s = sum(s["compile_s"] for s in stages)
    gpu_figures = gpu.result() if gpu is not None else {"gpu_busy": None, "gpu_mem_mb": None}
    return {"workers": workers, "pinned": pin, "device": device, **gpu_figures, "wall": wall, "cpu_s": cpu,
            "cpu_driver_tree": cpu_driver,
            "cpu_left": left["cpu"], "left_behind": left["left"],
            "maxrss_mb": max(ru.ru_maxrss / 1024, left["maxrss_mb"]),
            "others": max(busy - cpu, 0.0) / wall, "stats_seconds": stats["seconds"],
            "docs_out": stats["output_docs"], "stats_workers": stats.get("workers"), "stages": stages,
            "compile_s": compile_s, "compiled": bool(compile_s) or bp.numba_cache_state(work) != cache0,
            "cupy_compiled": _files_in(cupy_cache) - cupy0,
            "sources_changed": sources_digest() != digest0, "digest": digest0,
            "partitions": max((s["partitions"] for s in stages if s["name"] != "read"), default=0),
            "peak_worker": max((s["peak_worker"] or 0 for s in stages), default=0),
            "peak_driver": max((s["peak_driver"] or 0 for s in stages), default=0)}


def _files_in(folder: Path) -> int:
    return sum(1 for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0


# ---------------------------------------------------------------------------------------------------------------
# The model


def phase_kinds() -> dict[str, dict[str, str]]:
    """stage name → {phase key in stats.json (phase_<key>_s): driver | buckets | partitions}, from the stations'
    own phase lists (gpupipe.stages.STAGES, with bench_pipeline's parameters)."""
    import yaml

    from gpupipe.stages import STAGES
    from gpupipe.stages.base import RunContext
    from gpupipe.stages.phases import BUCKETS, DRIVER, PhasedStage

    kinds: dict[str, dict[str, str]] = {"read": {"read": "partitions", "skipped": "driver"}}
    for item in yaml.safe_load(bp.STAGES):
        (name, params), = item.items()
        cls = STAGES[name]
        stage = cls(cls.Config.model_validate(params or {}), RunContext())
        if not isinstance(stage, PhasedStage):
            continue
        k = {}
        for ph in stage.phases():
            key = ph.name.split("-")[0] if ph.name[-1].isdigit() else ph.name
            k[key] = "driver" if ph.over == DRIVER else "buckets" if ph.over == BUCKETS else "partitions"
        kinds[name] = k
    return kinds


def device_stages() -> set[str]:
    import yaml

    from gpupipe.stages import STAGES

    return {name for item in yaml.safe_load(bp.STAGES) for name in item if STAGES[name].resources.device}


def split_stage(s: dict, kinds: dict[str, str] | None, workers: int) -> dict:
    """A stage's net seconds (numba compile out: all of it in-process, / workers in a pool where each worker
    compiles at once) as driver / buckets / partitions."""
    comp = s["compile_s"] / (1 if workers == 1 else workers)
    net = max(s["seconds"] - comp, 0.0)
    if kinds is None:         # a map stage (fused chain): one task per partition
        return {"net": net, "driver": 0.0, "buckets": 0.0, "partitions": net}
    parts = {"driver": 0.0, "buckets": 0.0, "partitions": 0.0}
    for key, secs in s["phases"].items():
        parts[kinds.get(key, "driver")] += secs
    scale = min(1.0, net / sum(parts.values())) if sum(parts.values()) else 1.0
    parts = {k: v * scale for k, v in parts.items()}            # compile came off the phases pro rata
    parts["driver"] += max(net - sum(parts.values()), 0.0)     # what no phase accounts for: bookkeeping, serial
    return {"net": net, **parts}


def build_model(sizes: list[tuple[dict, dict, int]], buckets: int) -> dict:
    """sizes: [(workers=1 run, pool run, input text bytes)] of one size, or of two sizes with the same pool worker
    count: then every per-MB cost is the difference between the sizes over the difference of their MB, which
    leaves out what a run costs whatever its size (the pool's start, each worker's imports and numba cache loads)."""
    kinds, dev = phase_kinds(), device_stages()

    def comps(run: dict) -> list[dict]:
        return [split_stage(s, kinds.get(s["name"]), run["workers"]) for s in run["stages"]]

    one, pool, tb = sizes[-1]
    n = pool["workers"]
    c1, cn = comps(one), comps(pool)
    bytes_in = [s["bytes_in"] for s in one["stages"]]
    mb = tb / 1e6
    intercept = None
    if len(sizes) == 2:
        one0, pool0, tb0 = sizes[0]
        c1_0, cn_0 = comps(one0), comps(pool0)
        mb = (tb - tb0) / 1e6
        slope1 = sum(a["net"] - b["net"] for a, b in zip(c1, c1_0)) / mb
        slopen = sum(a["net"] - b["net"] for a, b in zip(cn, cn_0)) / mb
        intercept = {"one": sum(a["net"] for a in c1_0) - slope1 * tb0 / 1e6,
                     "pool": sum(a["net"] for a in cn_0) - slopen * tb0 / 1e6}
        diff = lambda a, b: {k: max(a[k] - b[k], 0.0) for k in a}  # noqa: E731
        c1 = [diff(a, b) for a, b in zip(c1, c1_0)]
        cn = [diff(a, b) for a, b in zip(cn, cn_0)]
        bytes_in = [b - b0 for b, b0 in zip(bytes_in, (s["bytes_in"] for s in one0["stages"]))]
    stages = []
    for s1, sn, a, b, bi in zip(one["stages"], pool["stages"], c1, cn, bytes_in):
        par1 = a["buckets"] + a["partitions"]
        parn = b["buckets"] + b["partitions"]
        ideal = a["partitions"] / n + a["buckets"] / min(n, buckets)   # that work at n workers, perfectly spread
        raw = ideal / parn if parn > 0 and par1 > 0 else 1.0
        net1 = a["driver"] + a["buckets"] + a["partitions"]
        stages.append({"name": s1["name"], "device": s1["name"] in dev,
                       "bytes_per_input_byte": bi / (mb * 1e6) if mb else 0.0,
                       "mb_s_core": (bi / 1e6) / net1 if net1 > 0 and bi > 0 else None,
                       "driver": a["driver"] / mb, "buckets": a["buckets"] / mb, "partitions": a["partitions"] / mb,
                       "eff_raw": raw, "eff": min(max(raw, 0.05), 1.0),
                       "parts_at_n": sn["partitions"] or (pool["partitions"] if kinds.get(sn["name"]) is None else 0),
                       "compile_1": s1["compile_s"], "compile_n": sn["compile_s"]})
    return {"basis": f"{sizes[-1][2] / 1e6:.1f} MB" if len(sizes) == 1 else
            f"{sizes[-1][2] / 1e6:.1f} MB minus {sizes[0][2] / 1e6:.1f} MB",
            "n": n, "buckets": buckets, "stages": stages, "whole_eff": (one["wall"] / pool["wall"]) / n,
            "fixed_s": one["wall"] - one["stats_seconds"], "intercept": intercept}


def choose_model(rows: list[dict], buckets: int) -> tuple[dict | None, dict | None, list]:
    """The model from the runs so far: the largest pool worker count N that ran at a size that also has a workers=1
    run; with two or more such sizes, the difference of the two largest (and the largest alone, to compare)."""
    pairs: dict[int, list] = {}
    # the model is the host's, from explicit worker counts
    rows = [r for r in rows if r["m"].get("device", "cpu") == "cpu" and r["m"]["workers"] != DEFAULT_WORKERS]
    for r in rows:
        if r["m"]["workers"] == 1:
            continue
        one = next((o for o in rows if o["scale"] == r["scale"] and o["m"]["workers"] == 1), None)
        if one:
            pairs.setdefault(r["m"]["workers"], []).append((one, r))
    if not pairs:
        return None, None, []
    n = max(pairs)
    sizes = sorted(pairs[n], key=lambda p: p[0]["meta"]["text_bytes"])
    as_tuple = lambda p: (p[0]["m"], p[1]["m"], p[0]["meta"]["text_bytes"])  # noqa: E731
    single = build_model([as_tuple(sizes[-1])], buckets)
    model = build_model([as_tuple(sizes[-2]), as_tuple(sizes[-1])], buckets) if len(sizes) > 1 else single
    pools = [p[1]["m"] for p in sizes]
    for m in (model, single):
        m["peak_worker"] = max(p["peak_worker"] for p in pools)
        m["peak_driver"] = max(p["peak_driver"] for p in pools)
        m["part_mb"] = (sizes[-1][0]["meta"]["text_bytes"] / 1e6) / max(sizes[-1][1]["m"]["partitions"], 1)
        m["scales"] = [p[0]["scale"] for p in sizes[-2:]] if m is model and len(sizes) > 1 else [sizes[-1][0]["scale"]]
    return model, (single if model is not single else None), []


def stage_time(st: dict, cores: int, buckets: int) -> float:
    """Seconds per input MB of one host stage on `cores` cores."""
    c = max(cores, 1)
    return st["driver"] + st["buckets"] / (min(c, buckets) * st["eff"]) + st["partitions"] / (c * st["eff"])


def predict(model: dict, cores: int, gpus: int, gpu_rates: dict) -> dict:
    host = cores - gpus if gpus else cores
    per, notes = {}, set()
    for st in model["stages"]:
        if gpus and st["device"]:
            rate = gpu_rates.get(st["name"])
            if rate:
                per[st["name"]] = st["bytes_per_input_byte"] / (rate * gpus)
                continue
            notes.add(f"{st['name']}: no GPU figures (CPU time kept)")
        per[st["name"]] = stage_time(st, host, model["buckets"])
    total = sum(per.values())
    mbs = 1 / total if total else float("inf")
    top = max(per, key=per.get)
    return {"cores": cores, "gpus": gpus, "host_cores": host, "s_per_mb": total, "mb_s": mbs,
            "tb_day": mbs * 86400 / 1e6, "per_stage": per, "bottleneck": top, "bottleneck_share": per[top] / total,
            "notes": sorted(notes)}


# ---------------------------------------------------------------------------------------------------------------
# Report


def git_state() -> list[str]:
    return bp.git_state()


def note_of(m: dict) -> str:
    notes = []
    if m.get("cold"):
        c = m["cold"]
        why = ("sources changed" if c["sources_changed"] else "compiled" if c["compiled"]
               else f"CuPy compiled {c.get('cupy_compiled')} kernels")
        notes.append(f"first run {c['wall']:.1f} s ({why})")
    if m["sources_changed"]:
        notes.append("sources changed during the run")
    if m["compiled"]:
        notes.append(f"numba compiled ({m['compile_s']:.1f} s)")
    if m.get("cupy_compiled"):
        notes.append(f"CuPy compiled {m['cupy_compiled']} kernels")
    if m.get("left_behind"):
        notes.append(f"{m['left_behind']} processes outlived the driver ({m['cpu_left']:.1f} CPU s; "
                     "terminated here)")
    return "; ".join(notes)


def run_label(m: dict) -> str:
    """Workers, "p" when pinned to one core, "+gpu" with device gpu (the driver then feeds the GPU)."""
    n = "default" if m["workers"] == DEFAULT_WORKERS else m["workers"]
    return f"{n}{'p' if m['pinned'] else ''}{'+gpu' if m.get('device') == 'gpu' else ''}"


def fmt_rate(x) -> str:
    return "-" if x is None else f"{x:,.2f}" if x < 100 else f"{x:,.0f}"


def report(args, metas: dict, rows: list[dict], warm: dict | None, model: dict | None, preds: list[dict],
           gpu_rates: dict, check: list[str]) -> str:
    L = []
    now = datetime.datetime.now()
    cores = bp_cores()
    L.append(f"bench_node.py — {now:%Y-%m-%d %H:%M}, {cores} cores (affinity; os.cpu_count {os.cpu_count()}), "
             f"Python {platform.python_version()}")
    L += git_state()
    digests = sorted({r["m"]["digest"] for r in rows})
    L.append(f"gpupipe sources digest: {', '.join(digests) or '-'}"
             + (" (CHANGED during the series: the rows did not all run the same code)" if len(digests) > 1 else ""))
    L.append(f"corpus: {args.corpus}" + (f" (every {args.sample}th doc)" if args.sample > 1 else ""))
    for s, meta in metas.items():
        L.append(f"  {s}×: {meta['docs']:,} docs, {meta['text_bytes'] / 1e6:.1f} MB text, {len(meta['files'])} "
                 f".jsonl.gz files ({meta['file_bytes'] / 1e6:.1f} MB gzip) in {meta['where']}")
    if warm:
        L.append(f"numba warm-up (every 20th doc of 1× + an edited copy, workers 1): {warm['wall']:.1f} s wall")
    L.append("config: normalize → langid {keep: [en, zh]} → quality → exact_dedup → fuzzy_dedup → "
             "tokenize {vocab_size: 4096} → pack {seq_len: 2048}; device " + args.device.replace(",", " / ")
             + "; executor {kind: local, workers: N} (workers \"default\": no executor in the config)"
             + ("" if args.no_pin else "; workers 1 pinned to one core (NUMBA_NUM_THREADS=1)"))
    L.append("")
    L.append("Runs (wall and CPU measured from outside: os.wait4 of `gpupipe run` and RUSAGE_CHILDREN, its workers "
             "included" + ("" if args.subreaper else "; NOT workers that outlived the driver: no subreaper") + ")")
    L.append(f"  {'scale':>5} {'workers':>7} {'wall s':>8} {'MB/s':>7} {'CPU s':>8} {'CPU-s/MB':>8} {'busy':>5} "
             f"{'worker MB':>9} {'driver MB':>9} {'largest':>8} {'stages s':>8} {'parts':>5} {'docs out':>9} "
             f"{'others':>6} {'GPU busy':>8}  note")
    for r in rows:
        m, mb_text = r["m"], r["meta"]["text_bytes"] / 1e6
        w = run_label(m)
        L.append(f"  {str(r['scale']) + '×':>5} {w:>7} {m['wall']:>8.1f} {mb_text / m['wall']:>7.3f} "
                 f"{m['cpu_s']:>8.1f} {m['cpu_s'] / mb_text:>8.3f} {m['cpu_s'] / m['wall']:>5.2f} "
                 f"{m['peak_worker']:>9,.0f} {m['peak_driver']:>9,.0f} {m['maxrss_mb']:>8,.0f} "
                 f"{m['stats_seconds']:>8.1f} {m['partitions']:>5} {m['docs_out']:>9,} {m['others']:>6.2f} "
                 f"{'-' if m.get('gpu_busy') is None else format(m['gpu_busy'], '.1%'):>8}  "
                 + ("* " if note_of(m) else "") + note_of(m))
    if any(r["m"]["pinned"] for r in rows):
        L.append("  workers \"1p\": pinned to one core")
    if any(r["m"].get("device") == "gpu" for r in rows):
        L.append("  workers \"N+gpu\": device gpu, N pool workers for the host stations and the driver feeding the "
                 "GPU the device stations; GPU busy: NVML utilization.gpu sampled every 50 ms over the run (the "
                 "share of time a kernel ran), peak device memory "
                 + ", ".join(f"{r['m']['gpu_mem_mb']:,.0f} MB" for r in rows if r["m"].get("gpu_mem_mb")))
    for s in metas:
        these = [r for r in rows if r["scale"] == s]
        if not these:
            continue
        L.append("")
        L.append(f"Stages at {s}× (stats.json seconds; MB/s of the stage's own bytes_in; share of the run's wall)")
        head = f"  {'stage':<12} {'MB in':>8}"
        for r in these:
            label = f"w={run_label(r['m'])}"
            head += f" | {label + ' s':>9} {'MB/s':>8} {'share':>6}"
        L.append(head)
        base = these[0]["m"]["stages"]
        for i, st in enumerate(base):
            line = f"  {st['name']:<12} {st['bytes_in'] / 1e6:>8.1f}"
            for r in these:
                x = r["m"]["stages"][i]
                rate = (x["bytes_in"] / 1e6) / x["seconds"] if x["seconds"] > 0 and x["bytes_in"] else None
                line += f" | {x['seconds']:>9.2f} {fmt_rate(rate):>8} {x['seconds'] / r['m']['wall']:>6.1%}"
            L.append(line)
        line = f"  {'run fixed':<12} {'':>8}"
        for r in these:
            fx = r["m"]["wall"] - r["m"]["stats_seconds"]
            line += f" | {fx:>9.2f} {'':>8} {fx / r['m']['wall']:>6.1%}"
        L.append(line + "   (wall minus the stages: start, imports, report)")
        comp = [f"w={run_label(r['m'])}: " + ", ".join(f"{x['name']} {x['compile_s']:.1f}" for x in r["m"]["stages"]
                                                    if x["compile_s"]) for r in these
                if any(x["compile_s"] for x in r["m"]["stages"])]
        if comp:
            L.append("  numba compile s inside the stage times: " + " | ".join(comp))
        pq = [f"w={run_label(r['m'])}: "
              + ", ".join(f"{x['name']} {x['p50']:.2f}/{x['p99']:.2f}"
                                                   for x in r["m"]["stages"] if x.get("p50") is not None)
              for r in these]
        L.append("  partition seconds p50/p99: " + " | ".join(pq))
    if len({r["scale"] for r in rows}) > 1:
        L.append("")
        L.append("Scale: CPU-s per MB and wall s per MB by size (per worker count; vs the smallest size)")
        for w in sorted({r["m"]["workers"] for r in rows}):
            these = [r for r in rows if r["m"]["workers"] == w]
            b = these[0]
            bc, bw = b["m"]["cpu_s"] / b["meta"]["text_bytes"], b["m"]["wall"] / b["meta"]["text_bytes"]
            L.append(f"  workers {w}: " + ", ".join(
                f"{r['scale']}× {r['m']['cpu_s'] / (r['meta']['text_bytes'] / 1e6):.3f} CPU-s/MB "
                f"({r['m']['cpu_s'] / r['meta']['text_bytes'] / bc:.2f}×), "
                f"{r['m']['wall'] / (r['meta']['text_bytes'] / 1e6):.3f} s/MB "
                f"({r['m']['wall'] / r['meta']['text_bytes'] / bw:.2f}×)" for r in these))
    if model:
        L += model_lines(model, preds, gpu_rates, args)
    if check:
        L.append("")
        L += check
    return "\n".join(L) + "\n"


def bp_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def model_lines(model: dict, preds: list[dict], gpu_rates: dict, args) -> list[str]:
    L = [""]
    n, buckets = model["n"], model["buckets"]
    sc = " and ".join(f"{x}×" for x in model["scales"])
    how = (f"per MB of the difference between the sizes ({model['basis']}): what a run costs whatever its size is "
           "left out" if len(model["scales"]) > 1 else f"per MB of {model['basis']}")
    L.append(f"Node model (from the {sc} runs: workers 1 → per-core cost, workers {n} → parallel efficiency; "
             f"{how})")
    L.append(f"  {'stage':<12} {'kind':<6} {'MB/s/core':>9} {'MB in/MB':>8} {'driver':>7} {'buckets':>7} "
             f"{'parts':>7} {'eff@' + str(n):>7} {'parts@' + str(n):>8}  | s per GB of input at "
             + " / ".join(f"{c}" for c in args.model_cores_list) + " cores")
    for st in model["stages"]:
        at = " / ".join(f"{stage_time(st, c, buckets) * 1000:.1f}" for c in args.model_cores_list)
        eff = f"{st['eff']:.2f}" + ("!" if st["eff_raw"] > 1.0 or st["eff_raw"] < 0.05 else "")
        L.append(f"  {st['name']:<12} {'device' if st['device'] else 'host':<6} {fmt_rate(st['mb_s_core']):>9} "
                 f"{st['bytes_per_input_byte']:>8.2f} {st['driver'] * 1000:>7.1f} {st['buckets'] * 1000:>7.1f} "
                 f"{st['partitions'] * 1000:>7.1f} {eff:>7} {st['parts_at_n']:>8}  | {at}")
    one = sum(st["driver"] + st["buckets"] + st["partitions"] for st in model["stages"])
    L.append(f"  {'sum':<12} {'':<6} {1 / one if one else 0:>9.2f} {'':>8} "
             f"{sum(s['driver'] for s in model['stages']) * 1000:>7.1f} "
             f"{sum(s['buckets'] for s in model['stages']) * 1000:>7.1f} "
             f"{sum(s['partitions'] for s in model['stages']) * 1000:>7.1f}")
    L.append("  (driver / buckets / parts: seconds per GB of pipeline input on one core, numba compile out; "
             "MB in/MB: the stage's bytes_in per input text byte; eff '!': the measured value was clamped to "
             "[0.05, 1])")
    L.append(f"  whole-run efficiency at {n} workers (largest size): (wall 1 / wall {n}) / {n} = "
             f"{model['whole_eff']:.2f}; fixed cost of a run (wall minus stages, 1 worker): {model['fixed_s']:.1f} s, "
             "left out below")
    if model.get("intercept"):
        ic = model["intercept"]
        L.append(f"  stage time that does not grow with the input (intercept of the two sizes): workers 1 "
                 f"{ic['one']:.1f} s, workers {n} {ic['pool']:.1f} s (the pool's start, each worker's imports and "
                 "numba cache loads, per-stage bookkeeping); left out below")
    if model.get("single_16") is not None:
        L.append(f"  (the largest size alone, fixed costs in, would predict {model['single_16']:.1f} MB/s at 16 cores)")
    L.append("")
    L.append("Predicted node throughput (pipeline input text; stages one after another; fixed cost left out)")
    L.append(f"  {'node':<22} {'host cores':>10} {'MB/s':>9} {'TB/day':>8}  {'slowest stage':<28} note")
    for p in preds:
        slowest = f"{p['bottleneck']} ({p['bottleneck_share']:.0%})"
        node = f"{p['cores']} cores" + (f" + {p['gpus']} GPU{'s' if p['gpus'] > 1 else ''}" if p["gpus"] else "")
        L.append(f"  {node:<22} {p['host_cores']:>10} {p['mb_s']:>9.1f} {p['tb_day']:>8.2f}  "
                 f"{slowest:<28} "
                 + "; ".join(p["notes"]))
    L.append("")
    L.append("Assumptions of the model (check them on a bigger node: --check-against the JSON saved with this file)")
    L.append(f"  - per-core cost: the workers=1 runs at {sc} on one core (pinned: "
             f"{'no' if args.no_pin else 'yes'}), numba compile subtracted; per-MB costs taken as independent of the "
             "input size (the scale series above says how far that holds)")
    L.append(f"  - parallel efficiency per stage measured at {n} workers and held constant up to 128 cores"
             + (" (measured on 2 cores only: the first thing to check)" if n <= 2 else ""))
    L.append("  - driver phases (tokenizer training, pack, dedup candidates/cluster/count, unattributed stage time) "
             f"do not scale; bucket phases (reduce, edges) scale to executor.shuffle_buckets = {buckets} tasks at most "
             "(raise it on a bigger node); partition phases scale with cores × efficiency")
    L.append("  - enough input files (read: one task per file) and partitions (≥ cores) to keep every worker busy; "
             "the read stage's gzip decoding counted at its measured rate")
    L.append("  - stages run one after another (the engine's barrier between stages): the node's time per MB is the "
             "sum of the stages'")
    if gpu_rates:
        L.append("  - GPU rates (whole stage, MB/s of its own input per GPU, × the GPUs, from "
                 f"{args.gpu_rates}): " + ", ".join(f"{k} {v:,.0f}" for k, v in gpu_rates.items()))
    else:
        L.append("  - no GPU figures (--gpu-rates): with GPUs the device stations keep their CPU time on the "
                 "remaining cores, so the GPU rows show only the cores the feeders take")
    L.append("  - with G GPUs the host stations get cores - G (one feeder process per GPU); more than one GPU needs "
             "a Dask cluster with a worker per GPU (the local executor feeds one)")
    mem = [f"{c} cores ≈ {(c * model['peak_worker'] + model['peak_driver']) / 1e3:,.1f} GB"
           for c in args.model_cores_list]
    L.append(f"  - host memory at this run's partition size (~{model['part_mb']:.1f} MB text; a big input gets "
             f"128 MiB partitions): cores × worker peak {model['peak_worker']:,.0f} MB + driver "
             f"{model['peak_driver']:,.0f} MB: " + ", ".join(mem))
    return L


def check_lines(path: str, rows: list[dict], gpu_rates: dict) -> list[str]:
    old = json.loads(Path(path).read_text())
    model = old["model"]
    L = [f"Check against {path} (model from {old.get('date', '?')}, {old.get('cores', '?')} cores, "
         f"sources {old.get('digest', '?')}): predicted vs measured MB/s (measured: input MB / stage seconds; "
         "wall in brackets; both include what a run costs whatever its size, the prediction does not: compare at a "
         "large size)"]
    for r in rows:
        m = r["m"]
        if m["workers"] == 1:
            continue
        gpus = 1 if m.get("device") == "gpu" else 0      # the feeder's core comes on top of the pool's workers
        cores = bp_cores() if m["workers"] == DEFAULT_WORKERS else m["workers"] + gpus
        p = predict(model, cores, gpus, gpu_rates)
        mb_text = r["meta"]["text_bytes"] / 1e6
        got = mb_text / m["stats_seconds"]
        L.append(f"  {r['scale']}× workers {run_label(m)}: predicted {p['mb_s']:.2f}, measured {got:.2f} "
                 f"({mb_text / m['wall']:.2f}): {got / p['mb_s']:.2f}× the prediction")
        for st in model["stages"]:
            x = next((s for s in m["stages"] if s["name"] == st["name"]), None)
            if x:
                want = stage_time(st, cores - gpus, model["buckets"]) * mb_text
                L.append(f"      {st['name']:<12} predicted {want:>8.2f} s, measured {x['seconds']:>8.2f} s")
    return L


# ---------------------------------------------------------------------------------------------------------------


def main() -> int:
    cores = bp_cores()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", help="CORPUS.jsonl[.gz] with id, lang, text")
    ap.add_argument("--scale", default="1,4,16", help="sizes, multiples of the corpus (default 1,4,16)")
    ap.add_argument("--workers", default="1,2,<cores>",
                    help=f"worker counts (default 1,2,<cores>; here <cores> = {cores}; deduplicated); 'default': "
                         "the config names no executor, as a user's run (workers: auto chooses)")
    ap.add_argument("--device", default="cpu",
                    help="cpu, gpu or cpu,gpu: each worker count runs on each; a gpu run's pool gets one worker "
                         "fewer (the driver feeds the GPU, as `workers: auto` leaves it a core) and its GPU busy "
                         "share is sampled (NVML)")
    ap.add_argument("--sample", type=int, default=1, help="keep every K-th document (quick check, not saved)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=0,
                    help="input files per size (default: the largest worker count, at least 2)")
    ap.add_argument("--work", default=str(WORK), help="runs, logs, numba cache, corpora made here")
    ap.add_argument("--corpora", default=str(PIPELINE_WORK),
                    help="bench_pipeline's work folder: its corpora are reused when made the same way")
    ap.add_argument("--gpu-rates", default="", help="JSON {stage: MB/s per GPU} for the device stations")
    ap.add_argument("--model-cores", default="16,64,128", help="node sizes to predict (default 16,64,128)")
    ap.add_argument("--model-gpus", default="1,8", help="GPUs per node to predict (default 1,8)")
    ap.add_argument("--buckets", type=int, default=DEFAULT_BUCKETS,
                    help="executor.shuffle_buckets assumed for the model (default 8, the config's default)")
    ap.add_argument("--check-against", default="", help="an earlier node_bench_*.json: its prediction vs these runs")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the workers=1 run to one core")
    ap.add_argument("--retries", type=int, default=2, help="reruns of a row during which numba or CuPy "
                    "compiled or the sources changed")
    ap.add_argument("--wait-idle", type=float, default=300,
                    help="before each timed run, wait up to this many seconds for the machine to be quiet")
    ap.add_argument("--idle-cores", type=float, default=0.3,
                    help="quiet: other processes use less than this many cores (over 3 s)")
    ap.add_argument("--keep-runs", action="store_true", help="keep the run folders (default: deleted after use)")
    ap.add_argument("--no-save", action="store_true", help="do not write profiling/results/")
    args = ap.parse_args()
    ints = lambda s: [int(x) for x in s.split(",") if x.strip()]  # noqa: E731
    scales = ints(args.scale)
    workers = parse_workers(args.workers, cores)
    devices = [d.strip() for d in args.device.split(",") if d.strip()]
    if not devices or set(devices) - {"cpu", "gpu"}:
        raise SystemExit(f"--device: {args.device!r}: expected cpu, gpu or cpu,gpu")
    args.model_cores_list, model_gpus = ints(args.model_cores), ints(args.model_gpus)
    args.shards = args.shards or max(2, max(workers))
    gpu_rates = {}
    if args.gpu_rates:
        gpu_rates = {k: float(v) for k, v in json.loads(Path(args.gpu_rates).read_text()).items()
                     if not k.startswith("_")}
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    args.subreaper = become_subreaper()
    if not args.subreaper:
        print("note: not a subreaper here: workers that outlive their driver are not counted", flush=True)
    save = args.sample == 1 and not args.no_save

    st = Path(args.corpus).stat()
    key = {"corpus": str(Path(args.corpus).resolve()), "size": st.st_size, "mtime": st.st_mtime_ns,
           "sample": args.sample, "seed": args.seed, "shards": args.shards, "edit_rate": list(bp.EDIT_RATE),
           "gzip": bp.GZIP_LEVEL, "version": 1}     # bench_pipeline's key: its corpora are ours when it matches
    cache: dict = {}

    def docs_of():
        if "docs" not in cache:
            t0 = time.perf_counter()
            cache["docs"] = bp.read_corpus(args.corpus, args.sample)
            print(f"corpus: {len(cache['docs']):,} docs read in {time.perf_counter() - t0:.1f} s", flush=True)
        return cache["docs"]

    metas = {}
    for s in sorted(set([1] + scales)):   # 1× always: the warm-up's sample comes from it
        metas[s] = corpus_for(s, docs_of, {**key, "scale": s}, args, work)
        print(f"{s}× corpus: {metas[s]['docs']:,} docs, {metas[s]['text_bytes'] / 1e6:.1f} MB text in "
              f"{metas[s]['where']}", flush=True)
    cache.clear()
    metas = {s: metas[s] for s in scales}

    warmed = {"digest": None, "first": None}

    def warm_up() -> None:
        for _ in range(3):      # again if the sources changed while it ran (gpupipe then dropped the cache)
            digest = sources_digest()
            if digest == warmed["digest"]:
                return
            warm_once(digest)

    def warm_once(digest: str) -> None:
        shutil.rmtree(work / NUMBA_CACHE, ignore_errors=True)    # as gpupipe drops its cache on a change
        one = corpus_for(1, docs_of, {**key, "scale": 1}, args, work)
        sample = [d for f in one["files"] for d in bp.read_corpus(f, 20)]
        wm = bp.write_scaled(sample, 2, args.shards, args.seed, work / "corpus-warm",
                             {**key, "scale": "warm", "copies": 2})
        for d in devices:     # device gpu: CuPy's kernels are compiled (NVRTC) and cached too
            m = run_gpupipe(wm["files"], work / "run-warm", work, f"gpupipe-warm-{d}", 1, False, device=d)
            shutil.rmtree(work / "run-warm", ignore_errors=True)
            print(f"warm-up, device {d} (sources {digest}): {m['wall']:.1f} s"
                  + (f", CuPy compiled {m['cupy_compiled']} kernels" if m["cupy_compiled"] else ""), flush=True)
        warmed["digest"] = digest if not m["sources_changed"] else None
        warmed["first"] = warmed["first"] or m

    def timed(scale: int, n: int, device: str) -> dict:
        cold = None
        out = work / f"run-{scale}x-w{n}-{device}"
        for attempt in range(args.retries + 1):
            warm_up()
            bp.wait_quiet(args.wait_idle, args.idle_cores)
            warm_up()       # the sources may have changed while waiting: gpupipe would drop the cache
            m = run_gpupipe(metas[scale]["files"], out, work, f"gpupipe-{scale}x-w{n}-{device}", n,
                            n == 1 and device == "cpu" and not args.no_pin, device=device)
            if not m["sources_changed"] and not m["compiled"] and not m["cupy_compiled"]:
                break
            why = ("gpupipe's sources changed" if m["sources_changed"] else "numba compiled" if m["compiled"]
                   else f"CuPy compiled {m['cupy_compiled']} kernels")
            print(f"  {scale}× workers {n} {device}: {why} during the run ({m['wall']:.1f} s; attempt {attempt + 1})",
                  flush=True)
            cold = cold or m
        if cold is not None:
            m["cold"] = {k: cold[k] for k in ("wall", "sources_changed", "compiled", "cupy_compiled")}
        if not args.keep_runs:
            shutil.rmtree(out, ignore_errors=True)
        return m

    rows: list[dict] = []
    text = ""
    dest = bp.new_result_path("node_bench")
    runs = [(s, d, n - 1 if d == "gpu" and n > 1 else n) for s in scales for d in devices for n in workers]
    for s, d, n in runs:
        m = timed(s, n, d)
        mb_text = metas[s]["text_bytes"] / 1e6
        busy_gpu = "" if m["gpu_busy"] is None else f", GPU busy {m['gpu_busy']:.1%}"
        print(f"{s}× workers {run_label(m)}: {m['wall']:.1f} s wall, "
              f"{mb_text / m['wall']:.2f} MB/s, CPU {m['cpu_s']:.1f} s ({m['cpu_s'] / m['wall']:.2f} busy)"
              + busy_gpu, flush=True)
        rows.append({"scale": s, "meta": metas[s], "m": m})
        model, single, preds = choose_model(rows, args.buckets)
        if model:
            for c in args.model_cores_list:
                preds.append(predict(model, c, 0, gpu_rates))
                for g in model_gpus:
                    if g < c:
                        preds.append(predict(model, c, g, gpu_rates))
        check = check_lines(args.check_against, rows, gpu_rates) if args.check_against else []
        if model and single:
            model["single_16"] = predict(single, 16, 0, gpu_rates)["mb_s"]
        text = report(args, metas, rows, warmed["first"], model, preds, gpu_rates, check)
        done = len(rows) == len(runs)
        if not done:
            text += f"(partial: {len(rows)} of {len(runs)} runs done)\n"
        result = {"date": f"{datetime.datetime.now():%Y-%m-%d %H:%M}", "cores": cores,
                  "digest": sorted({r['m']['digest'] for r in rows}), "corpus": args.corpus,
                  "sample": args.sample, "rows": [{"scale": r["scale"], "text_bytes": r["meta"]["text_bytes"],
                                                   **r["m"]} for r in rows],
                  "model": model, "predictions": preds, "gpu_rates": gpu_rates}
        (work / "last_report.txt").write_text(text)
        (work / "last_results.json").write_text(json.dumps(result, indent=1, default=str))
        if save:
            RESULTS.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
            dest.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str))
    print()
    print(text)
    if save:
        print(f"written: {dest} (and {dest.with_suffix('.json').name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
