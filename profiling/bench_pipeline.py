"""End to end: the same JSONL corpus through `gpupipe run` and through datatrove's equivalent pipeline, side by side
on the same cores, plus a gpupipe scale series (time per MB at 1×, 4×, 16× the corpus).

Usage:  python profiling/bench_pipeline.py CORPUS.jsonl[.gz] [--scale 1,4,16] [--peer-scales 1] [--dask-scales 1]
                                            [--work DIR] [--shards 2] [--peer-python PYTHON] [--sample K] [--no-save]
                                            [--small-partitions 32MiB]
CORPUS lines are {"id", "lang", "text"[, "source"]}. Every size is written to --work (default: a folder under the
system temp dir; kept and reused by later runs) as --shards interleaved .jsonl.gz files (gzip level 6); both
tools read those same files. --sample K keeps every K-th document first (a quick check; results are not saved).
The table goes to stdout and, for a full-corpus run (no --sample, no --no-save), to
profiling/results/pipeline_bench_<date>.txt (_2, _3, ... for a later run of the same day).

gpupipe  `gpupipe run cfg.yaml` in a fresh process (the `gpupipe` next to this interpreter), stages
         normalize → langid {keep: [en, zh]} → quality → exact_dedup → fuzzy_dedup →
         tokenize {vocab_size: 4096} (trains a byte-level BPE) → pack {seq_len: 2048}, device cpu, executor
         settings at their defaults (`local`: one process, numba's threads on every core). Row `dask` adds
         `--executor dask --workers 2`.
         Numba compiles on first use and caches on disk: a warm-up run on every 20th document of each size (at
         1× with an edited copy of each, so that near duplicates get verified) goes before that size's timed
         runs; the first one's wall time is printed as "warm-up". gpupipe keys that cache by a digest of its
         sources, so the runs get a numba cache of their own (NUMBA_CACHE_DIR=WORK/numba-cache), emptied and
         warmed again whenever the sources change (others may be editing the checkout); a row during which the
         sources changed or numba compiled anything (a type signature the warm-up did not need) is run once
         more (--retries): that first run is printed as "first run", and a row still affected is marked "*".
Every timed run first waits (up to --wait-idle s, default 300) for other processes to use < --idle-cores (0.3).
datatrove (0.10.1) in --peer-python (a venv of its own, below), LocalPipelineExecutor(tasks=2, workers=2) per step,
         each step its own executor chained with depends= and run in order (timed one by one):
           1 filter   JsonlReader → LanguageFilter(["en", "zh"]) (ft176 backend pointed at the lid.176.ftz that
                      gpupipe ships (gpupipe/data/lid.176.ftz): the model gpupipe's langid uses; datatrove would fetch
                      lid.176.bin from the network) → GopherRepetitionFilter → GopherQualityFilter →
                      C4QualityFilter → FineWebQualityFilter (all at their defaults) → JsonlWriter →
                      ExactDedupSignature (document text, finder_workers=2)
           2 exact    ExactFindDedups (2 tasks)
           3 mh-sig   JsonlReader → ExactDedupFilter → JsonlWriter → MinhashDedupSignature
           4 mh-buck  MinhashDedupBuckets (tasks = num_buckets = 12, 2 workers)
           5 mh-clus  MinhashDedupCluster (1 task)
           6 tokens   JsonlReader → MinhashDedupFilter → DocumentTokenizer (gpupipe's tokenizer.json from the run of
                      the same size, eos <|endoftext|>, its defaults: documents shuffled per file)
         MinhashConfig(n_grams=5, num_buckets=12, hashes_per_bucket=10): gpupipe's default LSH shape (12 bands ×
         10 rows of 128 permutations, chosen from threshold 0.8), datatrove's default is 14 × 8. Differences that
         stay: datatrove's word tokenizer is spaCy's English one for every document (gpupipe: 3-character shingles
         for zh) and it has no exact-Jaccard check of candidates; its English quality filters judge zh documents
         too (gpupipe exempts CJK documents from English-only rules and runs its zh rules), so the two keep
         different documents ("docs out"); datatrove has no normalize step, and DocumentTokenizer loads a
         tokenizer where gpupipe's tokenize trains one (inside gpupipe's time) and then packs.
Rows:
  wall s       the command's wall clock, process start to exit (imports, report, everything a user waits for)
  MB/s         MB of UTF-8 text (the `text` fields; not the gzip size) / wall s
  peak RSS     sampled every 50 ms over the process and all its descendants (psutil): "tree" is the largest sum of
               their RSS (shared pages count in each process), "largest" the largest single process (per worker)
  stages       gpupipe: RUN/stats.json `stages[i].seconds` (its own wall time per stage, read stage included);
               datatrove: wall s of each step's executor.run(), and from its stats the block times summed over
               tasks (task-seconds: ~2× wall when both tasks run at once)
  CPU s        user + system seconds of the process tree (sampled with the RSS)
  others       cores' worth of CPU that other processes on the machine used during the run (system busy time
               minus ours, / wall): above ~0.1 the machine was shared and the times are slower than on an idle one
  ratio        datatrove wall / gpupipe wall on the same input (> 1: gpupipe faster)
  near dedup   the 1× run's fuzzy_dedup stage seconds against `find_duplicates` in memory (this process, best of 3)
               on the texts that stage was given: what the exchange, files and tasks add
  sources      a stamp of gpupipe's Python sources (path, size, mtime) when the row started
Scale series (gpupipe, and datatrove at --peer-scales): the k× corpus is the corpus itself plus k-1 edited copies.
Each copy of a document gets a new id (`<id>~c<k>`) and seeded edits at its own rate drawn uniformly from 0.5–8 %
of its words (characters for zh/ja/ko): half substitutions by another word of the same document, 30 % deletions,
20 % insertions; each copy's documents are shuffled (seeded). Copies with low rates stay near duplicates of their
original (fuzzy_dedup removes them), the rest become distinct documents; short documents that draw no edit stay
exact duplicates. Printed per size: seconds, seconds per MB, the ratio to 1×, peak RSS, removals.

Peers live in their own venv so the main one stays clean (what this benchmark was run with):
  python3 -m venv /tmp/benchvenv
  /tmp/benchvenv/bin/pip install 'datatrove[processing]==0.10.1' "xxhash>=3,<4" spacy==3.8.18 jieba==0.42.1 orjson
  (gpupipe itself is not needed there: this script runs its datatrove half under --peer-python, default
   $GPUPIPE_BENCH_PYTHON, else /tmp/benchvenv/bin/python; `processing` brings fasttext-numpy2-wheel for the
   LanguageFilter; with `pip install -e '.[bench]'` add fasttext-numpy2-wheel)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "profiling" / "results"
CJK_LANGS = ("zh", "ja", "ko")
EOS = "<|endoftext|>"
STAGES = """\
  - normalize: {}
  - langid: {keep: [en, zh]}
  - quality: {}
  - exact_dedup: {}
  - fuzzy_dedup: {}
  - tokenize: {vocab_size: 4096}
  - pack: {seq_len: 2048}
"""
BANDS, ROWS, NGRAMS = 12, 10, 5          # gpupipe fuzzy_dedup defaults (threshold 0.8 → 12 × 10 of 128)
EDIT_RATE = (0.005, 0.08)
GZIP_LEVEL = 6
NUMBA_CACHE = "numba-cache"   # NUMBA_CACHE_DIR of the gpupipe runs, under --work


def new_result_path(prefix: str) -> Path:
    """RESULTS/PREFIX_DATE.txt, or PREFIX_DATE_2.txt, _3, ... when a run of the same day wrote one already (a second
    run must not overwrite the first's figures)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = f"{datetime.date.today():%Y-%m-%d}"
    dest, k = RESULTS / f"{prefix}_{stamp}.txt", 2
    while dest.exists():
        dest, k = RESULTS / f"{prefix}_{stamp}_{k}.txt", k + 1
    return dest


# ---------------------------------------------------------------------------------------------------------------
# Corpora


def read_corpus(path: str, sample: int) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    docs = []
    with opener(path, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if line.strip() and i % sample == 0:
                docs.append(json.loads(line))
    return docs


SPLIT = re.compile(r"(\s+)")


def edit_text(text: str, cjk: bool, rate: float, rng) -> str:
    """Seeded substitutions / deletions / insertions at `rate` of the words (characters for CJK)."""
    if cjk:
        n = len(text)
        k = int(rng.binomial(n, rate)) if n else 0
        if not k:
            return text
        pos = sorted(set(rng.integers(0, n, k).tolist()))
        ops = rng.random(len(pos))
        other = rng.integers(0, n, len(pos))
        out, last = [], 0
        for p, o, q in zip(pos, ops, other):
            out.append(text[last:p])
            out.append(text[q] if o < 0.5 else "" if o < 0.8 else text[p] + text[q])
            last = p + 1
        out.append(text[last:])
        return "".join(out)
    toks = SPLIT.split(text)
    words = len(toks) // 2 + 1          # even indices are words (maybe empty at the ends), odd ones separators
    k = int(rng.binomial(words, rate))
    if not k:
        return text
    pos = rng.integers(0, words, k) * 2
    ops = rng.random(k)
    other = rng.integers(0, words, k) * 2
    for p, o, q in zip(pos.tolist(), ops.tolist(), other.tolist()):
        if p >= len(toks):
            continue
        toks[p] = toks[q] if o < 0.5 else "" if o < 0.8 else f"{toks[p]} {toks[q]}"
    return "".join(toks)


def scaled_docs(docs: list[dict], scale: int, seed: int):
    """The corpus, then scale-1 edited, shuffled copies (a generator: 16× does not sit in memory twice)."""
    import numpy as np

    yield from docs
    for k in range(1, scale):
        rng = np.random.default_rng([seed, k])
        order = rng.permutation(len(docs))
        rates = rng.uniform(*EDIT_RATE, len(docs))
        for i in order.tolist():
            d = docs[i]
            cjk = str(d.get("lang", "")) in CJK_LANGS
            nd = dict(d)
            nd["id"] = f"{d.get('id', i)}~c{k}"
            nd["text"] = edit_text(d.get("text") or "", cjk, float(rates[i]), rng)
            yield nd


def write_scaled(docs: list[dict], scale: int, shards: int, seed: int, folder: Path, key: dict) -> dict:
    """Shard files of the scale× corpus in `folder` (reused when its meta.json matches `key`)."""
    meta_path = folder / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("key") == key and all(Path(p).exists() for p in meta["files"]):
            return meta
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    files = [folder / f"part-{i:05d}.jsonl.gz" for i in range(shards)]
    n, text_bytes = 0, 0
    with contextlib.ExitStack() as stack:
        outs = [stack.enter_context(gzip.open(p, "wt", encoding="utf-8", compresslevel=GZIP_LEVEL)) for p in files]
        for i, d in enumerate(scaled_docs(docs, scale, seed)):
            outs[i % shards].write(json.dumps(d, ensure_ascii=False) + "\n")
            n += 1
            text_bytes += len((d.get("text") or "").encode("utf-8"))
    meta = {"key": key, "files": [str(p) for p in files], "docs": n, "text_bytes": text_bytes,
            "file_bytes": sum(p.stat().st_size for p in files), "seconds_to_make": round(time.perf_counter() - t0, 1)}
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


# ---------------------------------------------------------------------------------------------------------------
# Measuring a command


class PeakRSS:
    """Samples the RSS of a process and all its descendants every `interval` seconds (psutil)."""

    def __init__(self, pid: int, interval: float = 0.05):
        import psutil

        self.psutil, self.root, self.interval = psutil, psutil.Process(pid), interval
        self.tree = self.largest = 0
        self.procs = 0
        self.cpu: dict[int, float] = {}   # last seen user + system seconds of each process of the tree
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        ps = self.psutil
        while not self._stop.is_set():
            try:
                procs = [self.root] + self.root.children(recursive=True)
            except ps.Error:
                break
            total = 0
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    t = p.cpu_times()
                except ps.Error:
                    continue
                self.cpu[p.pid] = t.user + t.system
                total += rss
                self.largest = max(self.largest, rss)
            self.tree = max(self.tree, total)
            self.procs = max(self.procs, len(procs))
            self._stop.wait(self.interval)

    def stop(self):
        self._stop.set()
        self._thread.join()


def _busy() -> float:
    import psutil

    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def measured(cmd: list[str], log: Path, env: dict | None = None, cwd: str | None = None) -> dict:
    """Wall time, peak RSS, and the CPU the command used against what the whole machine used meanwhile: `others`
    is the cores' worth of CPU that other processes on the machine took during the run (contention)."""
    busy0 = _busy()
    t0 = time.perf_counter()
    with open(log, "wb") as lf:
        proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        sampler = PeakRSS(proc.pid)
        rc = proc.wait()
    wall = time.perf_counter() - t0
    busy = _busy() - busy0
    sampler.stop()
    ours = sum(sampler.cpu.values())
    if rc != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(cmd)} failed ({rc}); log {log}:\n{tail}")
    return {"wall": wall, "rss_tree": sampler.tree, "rss_largest": sampler.largest, "procs": sampler.procs,
            "cpu_s": ours, "others": max(busy - ours, 0.0) / wall}


def wait_quiet(max_wait: float, cores: float) -> None:
    """Wait (up to max_wait s) until the machine's other processes use less than `cores` cores over 3 s."""
    t0 = time.perf_counter()
    while True:
        b0 = _busy()
        time.sleep(3)
        used = (_busy() - b0) / 3
        if used < cores or time.perf_counter() - t0 > max_wait:
            if time.perf_counter() - t0 > 4:
                print(f"  waited {time.perf_counter() - t0:.0f} s for a quiet machine (now {used:.2f} cores busy)",
                      flush=True)
            return


def numba_cache_state(work: Path) -> set:
    """(path, mtime, size) of the files in the runs' private numba cache: changes when a run compiled something."""
    root = work / NUMBA_CACHE
    return {(str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*") if p.is_file()} \
        if root.exists() else set()


def sources_stamp() -> str:
    """(path, size, mtime) of gpupipe's Python sources: changes when someone edits the checkout."""
    h = hashlib.sha256()
    for root in (REPO / "gpupipe", REPO / "kernels"):
        for p in sorted(root.rglob("*.py")):
            st = p.stat()
            h.update(f"{p.relative_to(REPO)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:12]


def gpupipe_command() -> list[str]:
    exe = Path(sys.executable).with_name("gpupipe")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "gpupipe"]


def in_memory_near_dedup(run: Path) -> dict:
    """`find_duplicates` (in memory, this process, numba warm) on the texts the run's fuzzy_dedup stage was given
    (the exact_dedup stage's parts), best of 3: what the stage's exchange, files and tasks cost on top of it."""
    import pandas as pd

    from gpupipe.stages.dedup.fuzzy import FuzzyDedupConfig, find_duplicates

    parts = sorted(next(run.glob("stages/*-exact_dedup")).glob("part-*.parquet"))
    df = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    find_duplicates(df.head(200), FuzzyDedupConfig(), seed=0)      # compile or load the kernels first
    times, removed = [], 0
    for _ in range(3):
        t0 = time.perf_counter()
        removed = int((~find_duplicates(df, FuzzyDedupConfig(), seed=0)["keep"]).sum())
        times.append(time.perf_counter() - t0)
    return {"seconds": min(times), "docs": len(df), "removed": removed}


def run_gpupipe(files: list[str], out: Path, work: Path, name: str, extra: list[str] = ()) -> dict:
    if out.exists():
        shutil.rmtree(out)
    cfg = work / f"{name}.yaml"
    cfg.write_text(f"input:\n  path: {json.dumps(files)}\noutput: {json.dumps(str(out))}\ndevice: cpu\n"
                   f"stages:\n{STAGES}")
    before, cache0 = sources_stamp(), numba_cache_state(work)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(work / NUMBA_CACHE))
    m = measured([*gpupipe_command(), "run", str(cfg), *extra], work / f"{name}.log", env=env)
    m["sources_changed"] = sources_stamp() != before
    m["stamp"] = before
    m["compiled"] = numba_cache_state(work) != cache0
    stats = json.loads((out / "stats.json").read_text())
    m["stats_seconds"] = stats["seconds"]
    m["docs_out"] = stats["output_docs"]
    m["stages"] = [{"name": s["name"], "seconds": s["seconds"], "docs_in": s["docs_in"], "docs_out": s["docs_out"],
                    "removed": s.get("removed", {}),
                    "peak_driver": s.get("extra", {}).get("peak_rss_mb_driver"),
                    "peak_worker": s.get("extra", {}).get("peak_rss_mb_worker")} for s in stats["stages"]]
    m["tokens"] = next((s.get("extra", {}).get("tokens") for s in stats["stages"] if s["name"] == "tokenize"), None)
    tok = sorted(out.glob("stages/*-tokenize/tokenizer.json"))
    m["tokenizer"] = str(tok[0]) if tok else None
    return m


# ---------------------------------------------------------------------------------------------------------------
# datatrove half (runs under --peer-python; imports nothing of gpupipe)


def _doc_text(doc) -> str:
    return doc.text


def datatrove_main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    work = Path(spec["work"])
    os.environ["HF_ASSETS_CACHE"] = str(work / "hf_assets")   # where datatrove "downloads" the local lid model
    os.environ.setdefault("TQDM_DISABLE", "1")
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import (
        ExactDedupConfig,
        ExactDedupFilter,
        ExactDedupSignature,
        ExactFindDedups,
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
        LanguageFilter,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.writers import JsonlWriter

    tasks, workers = spec["tasks"], spec["workers"]
    d = {k: str(work / k) for k in ("filtered", "exact_sigs", "exact_dups", "exact_kept", "mh_sigs", "mh_buckets",
                                    "mh_remove", "tokens", "logs")}
    lid = LanguageFilter(languages=["en", "zh"])
    lid.model.MODEL_URL = spec["lid_model"]      # FT176LID fetches MODEL_URL through fsspec: a local path works
    exact_cfg = ExactDedupConfig(content_getter=_doc_text)
    mh_cfg = MinhashConfig(n_grams=spec["ngrams"], num_buckets=spec["bands"], hashes_per_bucket=spec["rows"])
    reader = lambda folder: JsonlReader(folder, glob_pattern="*.jsonl.gz")
    steps = [
        ("1 filter: read, LanguageFilter, Gopher rep + quality, C4, FineWeb, write, exact sig", [
            reader(spec["input_dir"]), lid, GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(),
            FineWebQualityFilter(), JsonlWriter(d["filtered"]),
            ExactDedupSignature(d["exact_sigs"], config=exact_cfg, finder_workers=tasks)], tasks),
        ("2 exact: ExactFindDedups", [ExactFindDedups(d["exact_sigs"], d["exact_dups"], config=exact_cfg)], tasks),
        ("3 mh-sig: read, ExactDedupFilter, write, MinhashDedupSignature", [
            reader(d["filtered"]), ExactDedupFilter(d["exact_dups"], config=exact_cfg), JsonlWriter(d["exact_kept"]),
            MinhashDedupSignature(d["mh_sigs"], config=mh_cfg)], tasks),
        ("4 mh-buckets: MinhashDedupBuckets", [MinhashDedupBuckets(d["mh_sigs"], d["mh_buckets"], config=mh_cfg)],
         mh_cfg.num_buckets),
        ("5 mh-cluster: MinhashDedupCluster", [MinhashDedupCluster(d["mh_buckets"], d["mh_remove"], config=mh_cfg)],
         1),
        ("6 tokens: read, MinhashDedupFilter, DocumentTokenizer", [
            reader(d["exact_kept"]), MinhashDedupFilter(d["mh_remove"]),
            DocumentTokenizer(d["tokens"], tokenizer_name_or_path=spec["tokenizer"], eos_token=spec["eos"])], tasks),
    ]
    results, prev = [], None
    for i, (name, pipeline, n_tasks) in enumerate(steps):
        ex = LocalPipelineExecutor(pipeline, tasks=n_tasks, workers=min(workers, n_tasks), depends=prev,
                                   logging_dir=f"{d['logs']}/{i + 1}")
        t0 = time.perf_counter()
        stats = ex.run()
        seconds = time.perf_counter() - t0
        blocks = []
        for st in (stats.stats if stats else []):
            counts = {k: (v.total if hasattr(v, "total") else v) for k, v in st.stats.items()
                      if k in ("total", "forwarded", "dropped", "tokens", "total_matches", "to_remove")}
            blocks.append({"name": st.name, "task_seconds": st.time_stats.total, **counts})
        results.append({"name": name, "seconds": seconds, "tasks": n_tasks, "blocks": blocks})
        print(f"[datatrove] {name}: {seconds:.1f} s", flush=True)
        prev = ex
    Path(spec["out"]).write_text(json.dumps(results, indent=1))


def run_datatrove(peer_python: str, input_dir: Path, tokenizer: str, work: Path, name: str) -> dict:
    dt_work = work / name
    if dt_work.exists():
        shutil.rmtree(dt_work)
    dt_work.mkdir(parents=True)
    from gpupipe.stages.filters.langid import default_model_path  # the lid.176.ftz gpupipe ships (gpupipe/data)

    lid_model = default_model_path()
    spec = {"work": str(dt_work), "input_dir": str(input_dir), "tokenizer": tokenizer, "eos": EOS,
            "lid_model": lid_model, "tasks": 2, "workers": 2, "bands": BANDS, "rows": ROWS, "ngrams": NGRAMS,
            "out": str(dt_work / "steps.json")}
    (dt_work / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, TQDM_DISABLE="1")
    m = measured([peer_python, str(Path(__file__).resolve()), "--_datatrove", str(dt_work / "spec.json")],
                 work / f"{name}.log", env=env, cwd=str(dt_work))
    m["steps"] = json.loads((dt_work / "steps.json").read_text())
    last = m["steps"][-1]["blocks"]
    m["docs_out"] = next((b.get("forwarded") for b in last if "Minhash" in b["name"] or "MinHash" in b["name"]
                          or "stage 4" in b["name"]), None)
    m["tokens"] = next((b.get("tokens") for b in last if "tokens" in b), None)
    m["filter_kept"] = next((b.get("forwarded") for b in m["steps"][0]["blocks"] if "FineWeb" in b["name"]), None)
    return m


def peer_versions(peer_python: str) -> str:
    code = ("import importlib.metadata as m\nout=[]\n"
            "for p in ('datatrove','spacy','xxhash','fasttext-numpy2-wheel','tokenizers'):\n"
            "    try: out.append(f'{p} {m.version(p)}')\n    except Exception: pass\nprint(', '.join(out))")
    r = subprocess.run([peer_python, "-c", code], capture_output=True, text=True, check=False)
    return r.stdout.strip() or f"(could not ask {peer_python}: {r.stderr.strip()[-200:]})"


# ---------------------------------------------------------------------------------------------------------------
# Report


def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def git_state() -> list[str]:
    def git(*a):
        r = subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True, check=False)
        return r.stdout.strip()

    status = git("status", "--short").splitlines()
    lines = [f"gpupipe checkout: {git('log', '--oneline', '-1')[:110]}"]
    lines.append(f"  working tree: {len(status)} changed/untracked paths" + (": " + ", ".join(
        s.strip() for s in status[:8]) + (" ..." if len(status) > 8 else "") if status else ""))
    return lines


def gp_note(m: dict) -> str:
    notes = []
    if m.get("cold"):
        c = m["cold"]
        notes.append(f"first run {c['wall']:.1f} s ({'sources changed' if c['sources_changed'] else 'compiled'})")
    if m.get("sources_changed"):
        notes.append("sources changed during the run")
    if m.get("compiled"):
        notes.append("numba compiled during the run")
    return "; ".join(notes)


def gp_label(m: dict, base: str) -> str:
    return base + (" *" if gp_note(m) else "")


def report(args, meta1: dict, runs: dict, peer: dict, scale_rows: list, warm: dict | None, versions: str) -> str:
    L = []
    now = datetime.datetime.now()
    L.append(f"bench_pipeline.py — {now:%Y-%m-%d %H:%M}, {os.cpu_count()} cores, Python {platform.python_version()}")
    L += git_state()
    L.append(f"peer: {versions}")
    L.append(f"corpus: {args.corpus} (every {args.sample}th doc)" if args.sample > 1 else f"corpus: {args.corpus}")
    L.append(f"1×: {meta1['docs']:,} docs, {meta1['text_bytes'] / 1e6:.1f} MB of text, {args.shards} .jsonl.gz shards "
             f"({meta1['file_bytes'] / 1e6:.1f} MB gzip)")
    if warm:
        L.append(f"gpupipe warm-up (every 20th doc of 1×, numba compiles or loads its cache): {warm['wall']:.1f} s "
                 "wall")
    L.append("")
    text_mb = meta1["text_bytes"] / 1e6
    L.append(f"End to end at 1× ({text_mb:.1f} MB text)")
    L.append(f"  {'tool':<38} {'wall s':>8} {'MB/s':>7} {'docs out':>9} {'tokens':>11} {'RSS tree':>9} "
             f"{'largest':>9} {'procs':>5} {'CPU s':>7} {'others':>6}")
    dt = peer.get(1)
    rows = [(gp_label(runs["local"], "gpupipe (executor local)"), runs["local"])]
    if "dask" in runs:
        rows.append((gp_label(runs["dask"], "gpupipe (--executor dask --workers 2)"), runs["dask"]))
    if dt:
        rows.append(("datatrove (tasks 2, workers 2)", dt))
    for label, m in rows:
        tok = f"{m['tokens']:,}" if m.get("tokens") else "-"
        docs = f"{m['docs_out']:,}" if m.get("docs_out") is not None else "-"
        L.append(f"  {label:<38} {m['wall']:>8.1f} {text_mb / m['wall']:>7.2f} {docs:>9} {tok:>11} "
                 f"{mb(m['rss_tree']):>9} {mb(m['rss_largest']):>9} {m['procs']:>5} {m['cpu_s']:>7.1f} "
                 f"{m['others']:>6.2f}")
    for key in ("local", "dask"):
        if key in runs and gp_note(runs[key]):
            L.append(f"  * gpupipe {key}: {gp_note(runs[key])}")
    if dt:
        for key, label in (("local", "local"), ("dask", "dask")):
            if key in runs:
                L.append(f"  ratio datatrove / gpupipe ({label}): {dt['wall'] / runs[key]['wall']:.2f}× "
                         f"(gpupipe's own stage total {runs[key]['stats_seconds']:.1f} s: "
                         f"{dt['wall'] / runs[key]['stats_seconds']:.2f}×)")
        mem = runs["local"].get("in_memory")
        fz = next((s for s in runs["local"]["stages"] if s["name"] == "fuzzy_dedup"), None)
        if mem and fz:
            L.append(f"  near dedup: the fuzzy_dedup stage {fz['seconds']:.2f} s vs in-memory find_duplicates "
                     f"{mem['seconds']:.2f} s on the same {mem['docs']:,} texts ({fz['seconds'] / mem['seconds']:.1f}×;"
                     f" removed {fz['docs_in'] - fz['docs_out']:,} vs {mem['removed']:,})")
        q = next((s["docs_out"] for s in runs["local"]["stages"] if s["name"] == "quality"), None)
        if q is not None and dt.get("filter_kept") is not None:
            L.append(f"  documents left after the quality filters: gpupipe {q:,}, datatrove {dt['filter_kept']:,} "
                     f"(its English filters judge zh documents too): the dedup and tokenize steps after them see "
                     f"{dt['filter_kept'] / max(q, 1):.2f}× gpupipe's documents")
    L.append("")
    L.append("gpupipe stages at 1× (stats.json seconds)")
    cols = [k for k in ("local", "dask") if k in runs]
    L.append(f"  {'stage':<13} {'docs in':>9} {'docs out':>9} " + " ".join(f"{c + ' s':>9}" for c in cols)
             + "  removed (local)")
    for i, s in enumerate(runs["local"]["stages"]):
        secs = " ".join(f"{runs[c]['stages'][i]['seconds']:>9.2f}" for c in cols)
        rem = ", ".join(f"{k} {v:,}" for k, v in sorted(s["removed"].items(), key=lambda kv: -kv[1])[:4])
        L.append(f"  {s['name']:<13} {s['docs_in']:>9,} {s['docs_out']:>9,} {secs}  {rem}")
    L.append(f"  {'sum':<13} {'':>9} {'':>9} " + " ".join(f"{runs[c]['stats_seconds']:>9.2f}" for c in cols)
             + "  (wall minus this: process start, imports, report)")
    if dt:
        L.append("")
        L.append("datatrove steps at 1× (wall s per executor.run(); blocks: task-seconds summed over tasks, docs)")
        for st in dt["steps"]:
            L.append(f"  {st['name']:<86} {st['seconds']:>8.1f} s  ({st['tasks']} tasks)")
            for b in st["blocks"]:
                counts = ", ".join(f"{k} {v:,}" for k, v in b.items() if k not in ("name", "task_seconds") and v)
                L.append(f"      {b['name']:<40} {b['task_seconds']:>8.1f} task-s  {counts}")
        L.append(f"  {'sum of steps':<86} {sum(s['seconds'] for s in dt['steps']):>8.1f} s  "
                 f"(wall {dt['wall']:.1f} s)")
        # The same work grouped by function, side by side.
        g = {s["name"]: s["seconds"] for s in runs["local"]["stages"]}
        ds = [s["seconds"] for s in dt["steps"]]
        L.append("")
        L.append("By function at 1× (wall s; datatrove steps combine blocks, so the split is approximate)")
        filters = sum(g.get(k, 0) for k in ("read", "normalize", "langid", "quality"))
        groups = [("read → langid → quality filters", filters, ds[0],
                   "gpupipe read+normalize+langid+quality | datatrove step 1 (incl. writer, exact sig)"),
                  ("exact dedup", g.get("exact_dedup", 0), ds[1], "exact_dedup | step 2 (the filter is in step 3)"),
                  ("near dedup (MinHash)", g.get("fuzzy_dedup", 0), ds[2] + ds[3] + ds[4],
                   "fuzzy_dedup | steps 3-5 (step 3 also reads, exact-filters, writes)"),
                  ("tokenize + pack", g.get("tokenize", 0) + g.get("pack", 0), ds[5],
                   "tokenize (trains BPE) + pack | step 6 (incl. read, MinhashDedupFilter)")]
        L.append(f"  {'function':<34} {'gpupipe':>8} {'datatrove':>10} {'ratio':>7}  what")
        for name, a, b, what in groups:
            L.append(f"  {name:<34} {a:>8.1f} {b:>10.1f} {b / a if a else float('nan'):>6.1f}×  {what}")
    if scale_rows:
        L.append("")
        L.append("Scale series (gpupipe executor local; k× = corpus + k-1 edited copies)")
        L.append(f"  {'scale':>5} {'docs':>10} {'MB text':>8} {'wall s':>8} {'s/MB':>7} {'vs 1×':>6} {'MB/s':>6} "
                 f"{'RSS tree':>9} {'largest':>9} {'docs out':>9} {'exact dup':>9} {'near dup':>9} {'others':>6} "
                 f"{'sources':>7}  note")
        base = None
        for r in scale_rows:
            m, meta = r["gp"], r["meta"]
            spm = m["wall"] / (meta["text_bytes"] / 1e6)
            base = base or spm
            rem = {}
            for s in m["stages"]:
                for k, v in s["removed"].items():
                    rem[k] = rem.get(k, 0) + v
            L.append(f"  {str(r['scale']) + '×':>5} {meta['docs']:>10,} {meta['text_bytes'] / 1e6:>8.1f} "
                     f"{m['wall']:>8.1f} {spm:>7.3f} {spm / base:>5.2f}× {meta['text_bytes'] / 1e6 / m['wall']:>6.2f} "
                     f"{mb(m['rss_tree']):>9} {mb(m['rss_largest']):>9} {m['docs_out']:>9,} "
                     f"{rem.get('exact_duplicate', 0):>9,} {rem.get('near_duplicate', 0):>9,} {m['others']:>6.2f} "
                     f"{m.get('stamp', '')[:7]:>7}  "
                     + gp_note(m))
            if r.get("small"):
                sm = r["small"]
                L.append(f"  {'':>5} {'partition_bytes ' + args.small_partitions:>27} {sm['wall']:>8.1f} "
                         f"{sm['wall'] / (meta['text_bytes'] / 1e6):>7.3f} {'':>6} "
                         f"{meta['text_bytes'] / 1e6 / sm['wall']:>6.2f} {mb(sm['rss_tree']):>9} "
                         f"{mb(sm['rss_largest']):>9} {sm['docs_out']:>9,}  (same documents out: "
                         f"{'yes' if sm['docs_out'] == m['docs_out'] else 'NO'})")
            if r.get("dt"):
                d = r["dt"]
                dspm = d["wall"] / (meta["text_bytes"] / 1e6)
                L.append(f"  {'':>5} {'datatrove':>10} {'':>8} {d['wall']:>8.1f} {dspm:>7.3f} {'':>6} "
                         f"{meta['text_bytes'] / 1e6 / d['wall']:>6.2f} {mb(d['rss_tree']):>9} "
                         f"{mb(d['rss_largest']):>9} {d['docs_out'] or 0:>9,}  ratio {d['wall'] / m['wall']:.2f}×")
        L.append("  per-stage seconds: " + " | ".join(
            f"{r['scale']}×: " + ", ".join(f"{s['name']} {s['seconds']:.1f}" for s in r["gp"]["stages"])
            for r in scale_rows))
        for r in scale_rows:
            for key, what in (("gp", ""), ("small", f", --partition-bytes {args.small_partitions}")):
                if not r.get(key):
                    continue
                peaks = [(st["name"], st.get("peak_driver"), st.get("peak_worker")) for st in r[key]["stages"]]
                if any(d or w for _, d, w in peaks):
                    L.append(f"  gpupipe's own peak RSS after each stage at {r['scale']}×{what} (stats.json "
                             "peak_rss_mb_driver / _worker, MB): " + ", ".join(
                                 f"{n} {d or 0:,.0f}" + (f"/{w:,.0f}" if w else "") for n, d, w in peaks))
        stamps = {r["gp"].get("stamp") for r in scale_rows}
        if len(stamps) > 1:
            L.append(f"  NOTE: gpupipe's sources changed during the series ({len(stamps)} states, column `sources`): "
                     "the sizes did not all run the same code")
        if len(scale_rows) > 1:
            first, last = scale_rows[0], scale_rows[-1]
            a = first["gp"]["wall"] / (first["meta"]["text_bytes"] / 1e6)
            b = last["gp"]["wall"] / (last["meta"]["text_bytes"] / 1e6)
            L.append(f"  time per MB {last['scale']}× / {first['scale']}×: {b / a:.2f}")
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------------------------------------------------------


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--_datatrove":
        datatrove_main(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", help="CORPUS.jsonl[.gz] with id, lang, text")
    ap.add_argument("--scale", default="1,4,16", help="gpupipe sizes, multiples of the corpus (default 1,4,16)")
    ap.add_argument("--peer-scales", default="1", help="sizes datatrove runs at (default 1; '' for none)")
    ap.add_argument("--dask-scales", default="1", help="sizes with an extra `--executor dask --workers 2` run")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "gpupipe_bench_pipeline"),
                    help="corpora, runs, logs (kept; corpora reused)")
    ap.add_argument("--shards", type=int, default=2, help="input files per size (default 2: one per datatrove task)")
    ap.add_argument("--sample", type=int, default=1, help="keep every K-th document (quick check, not saved)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peer-python", default=os.environ.get("GPUPIPE_BENCH_PYTHON", "/tmp/benchvenv/bin/python"))
    ap.add_argument("--keep-runs", action="store_true", help="keep gpupipe run folders (default: deleted after use)")
    ap.add_argument("--no-save", action="store_true", help="do not write profiling/results/")
    ap.add_argument("--wait-idle", type=float, default=300,
                    help="before each timed run, wait up to this many seconds for the machine to be quiet")
    ap.add_argument("--idle-cores", type=float, default=0.3,
                    help="quiet: other processes use less than this many cores (over 3 s)")
    ap.add_argument("--retries", type=int, default=1, help="reruns of a gpupipe row whose sources changed meanwhile")
    ap.add_argument("--small-partitions", default="32MiB",
                    help="the largest size runs once more with this --partition-bytes: peak RSS follows the "
                         "partition, not the corpus ('' to skip)")
    args = ap.parse_args()
    ints = lambda s: [int(x) for x in s.split(",") if x.strip()]
    scales, peer_scales, dask_scales = ints(args.scale), ints(args.peer_scales), ints(args.dask_scales)
    if 1 not in scales:
        scales = [1] + scales
    if peer_scales and not Path(args.peer_python).exists():
        print(f"datatrove: not available: {args.peer_python} not found (see --help for the peer venv)")
        peer_scales = []
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    versions = peer_versions(args.peer_python) if peer_scales else "(datatrove not run)"

    t0 = time.perf_counter()
    docs = read_corpus(args.corpus, args.sample)
    st = Path(args.corpus).stat()
    src_key = {"corpus": str(Path(args.corpus).resolve()), "size": st.st_size, "mtime": st.st_mtime_ns,
               "sample": args.sample, "seed": args.seed, "shards": args.shards, "edit_rate": list(EDIT_RATE),
               "gzip": GZIP_LEVEL, "version": 1}
    print(f"corpus: {len(docs):,} docs read in {time.perf_counter() - t0:.1f} s", flush=True)

    metas = {}
    for s in scales:
        metas[s] = write_scaled(docs, s, args.shards, args.seed, work / f"corpus-{s}x", {**src_key, "scale": s})
        print(f"{s}× corpus: {metas[s]['docs']:,} docs, {metas[s]['text_bytes'] / 1e6:.1f} MB text "
              f"({metas[s]['seconds_to_make']} s to make)", flush=True)
    del docs

    # Warm-up: numba compiles (or loads its cache) in a first run on every 20th document of each size, before that
    # size's timed runs; all over again whenever gpupipe's sources changed (its cache is then rebuilt).
    warmed = {"stamp": None, "scales": set(), "first": None}

    def warm_up(scale: int) -> None:
        stamp = sources_stamp()
        if stamp != warmed["stamp"]:
            shutil.rmtree(work / NUMBA_CACHE, ignore_errors=True)   # as gpupipe drops its cache on a change
            warmed["stamp"], warmed["scales"] = stamp, set()
        if scale in warmed["scales"]:
            return
        sample = [d for f in metas[scale]["files"] for d in read_corpus(f, 20)]
        copies = 1 if scale > 1 else 2    # near duplicates in it: fuzzy_dedup's verify path compiles too
        wm = write_scaled(sample, copies, args.shards, args.seed, work / f"corpus-warm-{scale}x",
                          {**src_key, "scale": f"warm-{scale}", "copies": copies})
        m = run_gpupipe(wm["files"], work / "run-warm", work, f"gpupipe-warm-{scale}x")
        shutil.rmtree(work / "run-warm", ignore_errors=True)
        print(f"gpupipe warm-up for {scale}× (every 20th doc, sources {stamp}): {m['wall']:.1f} s", flush=True)
        warmed["scales"].add(scale)
        warmed["first"] = warmed["first"] or m

    def timed_gpupipe(scale, files, out, name, extra=()) -> dict:
        """A warm, quiet-machine run; once more if gpupipe's sources changed while it ran or numba compiled
        something in it (a signature the warm-up did not need): such a first run is kept as `cold`."""
        cold = None
        for attempt in range(args.retries + 1):
            warm_up(scale)
            wait_quiet(args.wait_idle, args.idle_cores)
            m = run_gpupipe(files, out, work, name, extra)
            if not m["sources_changed"] and not m["compiled"]:
                break
            why = "gpupipe's sources changed" if m["sources_changed"] else "numba compiled"
            print(f"  {name}: {why} during the run ({m['wall']:.1f} s; attempt {attempt + 1})", flush=True)
            cold = cold or m
        if cold is not None:
            m["cold"] = {k: cold[k] for k in ("wall", "stats_seconds", "sources_changed", "compiled")}
        return m


    runs, peer, scale_rows = {}, {}, []
    dest = None   # this run's results file, made on the first size written
    for s in scales:
        meta = metas[s]
        out = work / f"run-{s}x"
        gp = timed_gpupipe(s, meta["files"], out, f"gpupipe-{s}x")
        print(f"gpupipe {s}×: {gp['wall']:.1f} s wall, stages {gp['stats_seconds']:.1f} s, "
              f"peak RSS {mb(gp['rss_tree'])}", flush=True)
        row = {"scale": s, "meta": meta, "gp": gp}
        if s == 1:
            runs["local"] = gp
            gp["in_memory"] = in_memory_near_dedup(out)
        if s in dask_scales:
            dout = work / f"run-{s}x-dask"
            dg = timed_gpupipe(s, meta["files"], dout, f"gpupipe-{s}x-dask",
                               ["--executor", "dask", "--workers", "2"])
            print(f"gpupipe dask {s}×: {dg['wall']:.1f} s wall, peak RSS {mb(dg['rss_tree'])}", flush=True)
            if s == 1:
                runs["dask"] = dg
            if not args.keep_runs:
                shutil.rmtree(dout, ignore_errors=True)
        if args.small_partitions and s == scales[-1] and len(scales) > 1:
            sout = work / f"run-{s}x-small"
            sm = timed_gpupipe(s, meta["files"], sout, f"gpupipe-{s}x-small",
                               ["--partition-bytes", args.small_partitions])
            print(f"gpupipe {s}× with --partition-bytes {args.small_partitions}: {sm['wall']:.1f} s wall, "
                  f"largest process {mb(sm['rss_largest'])}", flush=True)
            row["small"] = sm
            if not args.keep_runs:
                shutil.rmtree(sout, ignore_errors=True)
        if s in peer_scales:
            if not gp["tokenizer"]:
                raise RuntimeError(f"no tokenizer.json under {out}/stages")
            tok = work / f"tokenizer-{s}x.json"
            shutil.copyfile(gp["tokenizer"], tok)
            wait_quiet(args.wait_idle, args.idle_cores)
            dt = run_datatrove(args.peer_python, Path(meta["files"][0]).parent, str(tok), work, f"datatrove-{s}x")
            print(f"datatrove {s}×: {dt['wall']:.1f} s wall, peak RSS {mb(dt['rss_tree'])}", flush=True)
            peer[s] = dt
            row["dt"] = dt
            if not args.keep_runs:
                shutil.rmtree(work / f"datatrove-{s}x", ignore_errors=True)
        scale_rows.append(row)
        if not args.keep_runs:
            shutil.rmtree(out, ignore_errors=True)
        # Written after every size, so that an interrupted series keeps the sizes done (marked as partial).
        partial = s != scales[-1]
        text = report(args, metas[1], runs, peer, scale_rows if len(scales) > 1 else [], warmed["first"], versions)
        if partial:
            done = ", ".join(f"{r['scale']}×" for r in scale_rows)
            text += f"(partial: sizes {done} of {args.scale} done)\n"
        (work / "last_report.txt").write_text(text)
        (work / "last_results.json").write_text(json.dumps({"runs": runs, "peer": peer, "scales": scale_rows,
                                                            "warm": warmed["first"]}, indent=1, default=str))
        if args.sample == 1 and not args.no_save:
            dest = dest or new_result_path("pipeline_bench")
            dest.write_text(text)
    print()
    print(text)
    if args.sample == 1 and not args.no_save:
        print(f"written: {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
