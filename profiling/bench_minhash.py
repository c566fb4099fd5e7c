"""MinHash near-dedup benchmark: gpupipe against datasketch, rensa and datatrove, side by side on one corpus.

Usage:  python profiling/bench_minhash.py CORPUS.jsonl[.gz] [--docs N] [--workers 2] [--threshold 0.8]
                                           [--num-perm 128] [--repeat 1] [--skip-dedup]
CORPUS lines are {"id", "lang", "text"}; lang "zh"/"ja"/"ko" is shingled by characters, anything else by words.
--docs N takes the first N documents (0, the default: all of them); every method gets the same documents.
The whole corpus this was written for (118,709 docs, 39 MB, en + zh) runs in about 2.5 minutes on 2 cores
(5 with --repeat 2), so all documents is the default. ours/peer in the tables = peer time / our time.

Phase 1, signatures (text in memory -> MinHash signatures, shingling included, as a user would run each tool):
  ours        gpupipe.kernels.minhash.minhash(..., device="cpu"): numba, parallel over all cores
  datasketch  MinHash.bulk (update_batch under the hood, permutations built once: its fastest path), with
              xxhash's xxh32 as its shingle hash (its best; a second row shows its default sha1-based hash)
              A third row: datasketch as its README shows it (a MinHash per document, update() per shingle): the
              usage the issue's reference figures match; not a peer at its best, so not the target's denominator
  rensa       RMinHash.digest_matrix_from_token_sets (its bulk Rust path)
  datatrove   the MinhashDedupSignature pipeline step itself, run on Document objects: its own text
              normalisation and spaCy word tokenizer (jieba segmenter for zh, so zh n-grams are of jieba words),
              signatures written to bucket files in a temp folder and sorted, as the step does
datasketch and rensa get the same shingles, built in Python with the units of gpupipe's kernel: words split on
ASCII whitespace/punctuation and CJK/full-width punctuation, lowercased; 5-word shingles for en, 3-character
shingles (separators dropped) for zh.
Each method runs in a fresh `spawn` process (1 process, all threads), then in --workers processes on
interleaved halves of the documents (each process limited to cpu_count/workers threads). Imports, numba
compilation and tokenizer loading are warmed up first and not timed; a barrier starts the processes together.
The time is the slowest process's compute time (moving documents between processes is not counted).
A last line splits ours' time: the same run with one permutation (text in, shingling, one pass) against all of
them, and the bound that follows for the ratio to datasketch even if everything but the permutations were free.

Phase 2, whole dedup (signatures -> LSH -> clusters -> documents to remove, keeping the first of each cluster):
  ours        gpupipe.stages.dedup.fuzzy.find_duplicates (its default config: exact Jaccard check of candidates)
  datasketch  best phase-1 signature time + MinHashLSH (insertion session, one query per document) + connected
              components (scipy)
rensa and datatrove are timed for signatures only (datatrove's later steps are separate file-based pipelines).
A method that is not installed is reported as "not available: <ImportError>".

Peers live in their own venv so the main one stays clean (what this benchmark was run with):
  python3 -m venv /tmp/benchvenv
  /tmp/benchvenv/bin/pip install -e .                       # gpupipe itself
  /tmp/benchvenv/bin/pip install datasketch==2.0.0 rensa==0.5.0 datatrove==0.10.1 "xxhash<4" spacy==3.8.18 jieba==0.42.1
  (this brought xxhash 3.8.2 and scipy 1.17.1; spacy and jieba are datatrove's en/zh word tokenizers)
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import os
import platform
import re
import sys
import tempfile
import time
from dataclasses import dataclass, replace

import numpy as np

CJK_LANGS = ("zh", "ja", "ko")
THREAD_VARS = ("NUMBA_NUM_THREADS", "RAYON_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "MKL_NUM_THREADS")

# Separators of gpupipe's MinHash kernel (kernels/minhash.py, step 2): ASCII whitespace and punctuation,
# general punctuation, CJK punctuation, full-width ASCII punctuation.
SEPARATORS = re.compile("[\t\n\x0b\x0c\r !-/:-@\\[-`{-~\u2000-\u206f\u3000-\u303f"
                        "\uff00-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]+")


@dataclass(frozen=True)
class Params:
    num_perm: int = 128
    threshold: float = 0.8
    word_k: int = 5
    char_k: int = 3
    seed: int = 1


# ---------------------------------------------------------------------------------------------------------------
# Corpus and shared shingling
# ---------------------------------------------------------------------------------------------------------------

def load_corpus(path: str, limit: int) -> list[tuple[str, str]]:
    """The first `limit` documents (all when 0) as (text, lang)."""
    opener = gzip.open if path.endswith(".gz") else open
    docs = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            docs.append((rec.get("text") or "", rec.get("lang") or ""))
            if limit and len(docs) >= limit:
                break
    return docs


def shingles(text: str, cjk: bool, p: Params) -> set[str]:
    """Shingle strings with the units of gpupipe's kernel (see the module docstring)."""
    text = text.lower()
    if cjk:
        chars = SEPARATORS.sub("", text)
        k = min(p.char_k, len(chars))
        return {chars[i:i + k] for i in range(len(chars) - k + 1)} if chars else set()
    words = [w for w in SEPARATORS.split(text) if w]
    k = min(p.word_k, len(words))
    return {" ".join(words[i:i + k]) for i in range(len(words) - k + 1)} if words else set()


# ---------------------------------------------------------------------------------------------------------------
# Methods: warm(p) loads and compiles everything outside the timing; run(docs, p) is what is timed;
# signatures(result) turns a run's result into an (n, num_perm) array when the caller needs it.
# ---------------------------------------------------------------------------------------------------------------

WARM_DOCS = [("The quick brown fox jumps over the lazy dog again and again.", "en"),
             ("The quick brown fox jumps over the lazy dog again and again!", "en"),
             ("今天天气很好，我们去公园散步吧。", "zh"), ("", "en")]


def ours_warm(p: Params) -> None:
    ours_run(WARM_DOCS, p)


def ours_run(docs, p: Params):
    import pyarrow as pa

    from gpupipe.kernels.minhash import minhash

    texts = pa.array([t for t, _ in docs], type=pa.large_string())
    cjk = np.fromiter((lang in CJK_LANGS for _, lang in docs), dtype=np.uint8, count=len(docs))
    return minhash(texts, cjk, num_perm=p.num_perm, seed=p.seed, word_k=p.word_k, char_k=p.char_k, device="cpu")


def ours_one_perm_warm(p: Params) -> None:
    ours_one_perm_run(WARM_DOCS, p)


def ours_one_perm_run(docs, p: Params):
    """ours with one permutation: the same shingling, so ours minus this is what the other permutations cost."""
    return ours_run(docs, replace(p, num_perm=1))


def datasketch_warm(p: Params) -> None:
    datasketch_run(WARM_DOCS, p)


def datasketch_run(docs, p: Params, fast_hash: bool = True):
    """MinHash.bulk; by default with xxhash's xxh32 as the shingle hash (1.6x faster than its default sha1-based
    hash on this corpus: its best), else with the default."""
    import xxhash
    from datasketch import MinHash

    sets = ([s.encode() for s in shingles(t, lang in CJK_LANGS, p)] for t, lang in docs)
    kw = {"hashfunc": xxhash.xxh32_intdigest} if fast_hash else {}
    return MinHash.bulk(sets, num_perm=p.num_perm, seed=p.seed, **kw)


def datasketch_sha1_warm(p: Params) -> None:
    datasketch_sha1_run(WARM_DOCS, p)


def datasketch_sha1_run(docs, p: Params):
    return datasketch_run(docs, p, fast_hash=False)


def datasketch_update_warm(p: Params) -> None:
    datasketch_update_run(WARM_DOCS, p)


def datasketch_update_run(docs, p: Params):
    """datasketch as its README shows it: one MinHash per document, update() per shingle (default hash). Not its
    best (bulk above is), but the usage the issue's reference figures (~1.3 MB/s per process) match."""
    from datasketch import MinHash

    out = []
    for t, lang in docs:
        m = MinHash(num_perm=p.num_perm, seed=p.seed)
        for s in shingles(t, lang in CJK_LANGS, p):
            m.update(s.encode("utf8"))
        out.append(m)
    return out


def datasketch_signatures(result) -> np.ndarray:
    return np.stack([m.hashvalues for m in result])


def rensa_warm(p: Params) -> None:
    rensa_run(WARM_DOCS, p)


def rensa_run(docs, p: Params):
    from rensa import RMinHash

    sets = [shingles(t, lang in CJK_LANGS, p) for t, lang in docs]
    return RMinHash.digest_matrix_from_token_sets(sets, p.num_perm, p.seed)


def _datatrove_shape(num_perm: int) -> tuple[int, int]:
    """(num_buckets, hashes_per_bucket) with product num_perm; datatrove's default bucket width is 8."""
    rows = next(r for r in (8, 4, 2, 1) if num_perm % r == 0)
    return num_perm // rows, rows


_DATATROVE_STEPS: dict = {}  # per worker: one step per language, its tokenizer loaded by the warm-up


def _datatrove_step(lang: str, p: Params, folder: str):
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature

    buckets, rows = _datatrove_shape(p.num_perm)
    n_grams = p.char_k if lang == "zh" else p.word_k
    cfg = MinhashConfig(n_grams=n_grams, num_buckets=buckets, hashes_per_bucket=rows, seed=p.seed)
    return MinhashDedupSignature(output_folder=folder, config=cfg, language=lang)


def datatrove_warm(p: Params) -> None:
    import datatrove  # noqa: F401  (first, so that a missing install names datatrove)
    from loguru import logger

    logger.disable("datatrove")  # the step logs per bucket; keep the benchmark's output readable
    out = tempfile.mkdtemp(prefix="datatrove-")  # under main()'s TMPDIR, removed when the benchmark ends
    for lang in ("eng", "zh"):
        step = _datatrove_step(lang, p, os.path.join(out, lang))
        step.get_shingles(WARM_DOCS[2][0])  # spaCy (and jieba's dictionary) load lazily: here, untimed
        _DATATROVE_STEPS[lang] = step


def datatrove_run(docs, p: Params):
    from datatrove.data import Document

    # Documents are what datatrove's reader step would hand over; building them is not the signature step.
    by_lang = {"eng": [], "zh": []}
    for i, (text, lang) in enumerate(docs):
        by_lang["zh" if lang in CJK_LANGS else "eng"].append(Document(text=text, id=str(i)))
    t0 = time.perf_counter()
    for lang, documents in by_lang.items():
        if documents:  # rank 0 in each worker's own folder: a rerun overwrites the same files
            _DATATROVE_STEPS[lang].run(iter(documents), rank=0)
    return time.perf_counter() - t0  # the step's own time, without Document construction


def ours_dedup_warm(p: Params) -> None:
    ours_dedup_run(WARM_DOCS, p)


def ours_dedup_run(docs, p: Params):
    import pyarrow as pa

    from gpupipe.stages.dedup.fuzzy import FuzzyDedupConfig, find_duplicates

    # the frame as the pipeline holds a part: Arrow columns seen through pandas (read_part's to_pandas)
    df = pa.table({"text": pa.array([t for t, _ in docs], type=pa.large_string()),
                   "lang": pa.array([lang for _, lang in docs], type=pa.string()),
                   "doc_index": np.arange(len(docs), dtype=np.int64)}).to_pandas()
    cfg = FuzzyDedupConfig(threshold=p.threshold, num_perm=p.num_perm)
    return find_duplicates(df, cfg, seed=p.seed, device="cpu")


METHODS = {
    # name: (label, warm, run, signatures or None)
    "ours": ("ours: gpupipe minhash (numba)", ours_warm, ours_run, np.asarray),
    "datasketch": ("datasketch MinHash.bulk (xxh32)", datasketch_warm, datasketch_run, datasketch_signatures),
    "datasketch_sha1": ("datasketch MinHash.bulk (default sha1)", datasketch_sha1_warm, datasketch_sha1_run, None),
    "datasketch_update": ("datasketch update() per shingle", datasketch_update_warm, datasketch_update_run,
                          None),
    "rensa": ("rensa RMinHash digest matrix", rensa_warm, rensa_run, None),
    "datatrove": ("datatrove MinhashDedupSignature", datatrove_warm, datatrove_run, None),
    "ours_dedup": ("ours: find_duplicates", ours_dedup_warm, ours_dedup_run, None),
    "ours_one_perm": ("ours, 1 permutation (cost split)", ours_one_perm_warm, ours_one_perm_run, None),
}


# ---------------------------------------------------------------------------------------------------------------
# Process plumbing: fresh spawn workers, warmed up, started together by a barrier
# ---------------------------------------------------------------------------------------------------------------

_WORKER: dict = {}


def _worker_init(method: str, p: Params, barrier) -> None:
    # An exception here would kill the worker and make the pool respawn it forever: keep it for the task.
    _WORKER.update(barrier=barrier, error=None)
    try:
        METHODS[method][1](p)
    except BaseException as e:  # noqa: BLE001 - reported by the task, ImportError included
        _WORKER["error"] = e


def _worker_task(method: str, docs, p: Params, want_result: bool):
    if _WORKER["error"] is not None:
        raise _WORKER["error"]
    _WORKER["barrier"].wait(timeout=900)
    t0 = time.perf_counter()
    result = METHODS[method][2](docs, p)
    elapsed = time.perf_counter() - t0
    if isinstance(result, float):  # datatrove times its own step
        elapsed, result = result, None
    if not want_result:
        return elapsed, None
    convert = METHODS[method][3]
    return elapsed, convert(result) if convert else result


def run_method(method: str, docs, p: Params, procs: int, want_result: bool = False, repeat: int = 1):
    """(seconds of the slowest process, result in document order or None) for `procs` processes.

    With repeat > 1 the same warm workers run it again and the fastest run counts (noise from other load)."""
    ctx = mp.get_context("spawn")
    threads = str(max(1, (os.cpu_count() or 1) // procs))
    saved = {k: os.environ.get(k) for k in THREAD_VARS}
    os.environ.update({k: threads for k in THREAD_VARS})  # inherited by the workers when they are spawned
    try:
        pool = ctx.Pool(procs, _worker_init, (method, p, ctx.Barrier(procs)))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    with pool:
        chunks = [docs[i::procs] for i in range(procs)]  # interleaved: both halves get the same language mix
        seconds = float("inf")
        for _ in range(max(1, repeat)):
            out = pool.starmap(_worker_task, [(method, c, p, want_result) for c in chunks], chunksize=1)
            seconds = min(seconds, max(t for t, _ in out))
    if not want_result:
        return seconds, None
    if procs == 1:
        return seconds, out[0][1]
    merged = np.empty((len(docs), *out[0][1].shape[1:]), dtype=out[0][1].dtype)
    for i, (_, part) in enumerate(out):
        merged[i::procs] = part
    return seconds, merged


def describe_error(e: BaseException) -> str:
    if isinstance(e, ImportError):
        return f"not available: {type(e).__name__}: {e}"
    return f"failed: {type(e).__name__}: {e}"


# ---------------------------------------------------------------------------------------------------------------
# Phases
# ---------------------------------------------------------------------------------------------------------------

def signature_phase(docs, p: Params, workers: int, repeat: int) -> dict:
    """{method: {"times": {procs: s}, "error": str|None, "sigs": array|None}} for the signature methods."""
    results = {}
    for method in ("ours", "datasketch", "datasketch_sha1", "datasketch_update", "rensa", "datatrove"):
        res = {"times": {}, "error": None, "sigs": None}
        for procs in sorted({1, workers}):
            want = method == "datasketch" and procs == 1  # datasketch's LSH needs its signatures
            try:
                seconds, sigs = run_method(method, docs, p, procs, want_result=want, repeat=repeat)
            except Exception as e:  # noqa: BLE001
                res["error"] = describe_error(e)
                break
            res["times"][procs] = seconds
            if want:
                res["sigs"] = sigs
            print(f"  {METHODS[method][0]:<36} {procs} proc: {seconds:8.2f} s   {_load()}", flush=True)
        results[method] = res
    try:  # where ours' time goes: the same run with one permutation (both threads, one process)
        seconds, _ = run_method("ours_one_perm", docs, p, 1, repeat=repeat)
        results["ours_one_perm"] = {"times": {1: seconds}, "error": None, "sigs": None}
    except Exception as e:  # noqa: BLE001
        results["ours_one_perm"] = {"times": {}, "error": describe_error(e), "sigs": None}
    return results


def datasketch_lsh(sigs: np.ndarray, p: Params) -> dict:
    """MinHashLSH over datasketch's own signatures: insert all, query each, connected components."""
    from datasketch import LeanMinHash, MinHash, MinHashLSH
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    scheme = MinHash(num_perm=p.num_perm, seed=p.seed).scheme
    # The signature phase produced MinHash objects; rebuilding them from the arrays is not datasketch's cost.
    mhs = [LeanMinHash(seed=p.seed, hashvalues=h, scheme=scheme) for h in sigs]
    t0 = time.perf_counter()
    lsh = MinHashLSH(threshold=p.threshold, num_perm=p.num_perm)
    with lsh.insertion_session() as session:
        for i, m in enumerate(mhs):
            session.insert(i, m, check_duplication=False)
    u, v = [], []
    for i, m in enumerate(mhs):
        for j in lsh.query(m):
            if j != i:
                u.append(i)
                v.append(j)
    n = len(mhs)
    graph = coo_matrix((np.ones(len(u), dtype=np.int8), (u, v)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    removed = _removed_from_labels(labels)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "removed": removed, "clusters": _cluster_count(labels),
            "shape": (lsh.b, lsh.r)}


def _removed_from_labels(labels: np.ndarray) -> set[int]:
    """Every member of a component of two or more documents except its first (smallest index)."""
    _, first, counts = np.unique(labels, return_index=True, return_counts=True)
    keep = np.zeros(len(labels), dtype=bool)
    keep[first] = True
    in_cluster = counts[labels] > 1
    return set(np.flatnonzero(in_cluster & ~keep).tolist())


def _cluster_count(labels: np.ndarray) -> int:
    return int((np.bincount(labels) > 1).sum())


def dedup_phase(docs, p: Params, sig_results: dict, repeat: int) -> dict:
    out = {}
    try:
        from gpupipe.stages.dedup.fuzzy import FuzzyDedupConfig, lsh_shape

        seconds, members = run_method("ours_dedup", docs, p, 1, want_result=True, repeat=repeat)
        out["ours"] = {"seconds": seconds, "removed": set(members.loc[~members["keep"], "doc_index"].tolist()),
                       "clusters": int(members["cluster"].nunique()),
                       "shape": lsh_shape(FuzzyDedupConfig(threshold=p.threshold, num_perm=p.num_perm))}
        print(f"  {METHODS['ours_dedup'][0]:<36} 1 proc: {seconds:8.2f} s   {_load()}", flush=True)
    except Exception as e:  # noqa: BLE001
        out["ours"] = {"error": describe_error(e)}
    ds = sig_results.get("datasketch", {})
    if ds.get("sigs") is None:
        out["datasketch"] = {"error": ds.get("error") or "no signatures"}
        return out
    try:
        lsh = datasketch_lsh(ds["sigs"], p)
        sig_s = min(ds["times"].values())
        print(f"  {'datasketch MinHashLSH + components':<36} 1 proc: {lsh['seconds']:8.2f} s   {_load()}",
              flush=True)
        out["datasketch"] = {**lsh, "lsh_seconds": lsh["seconds"], "sig_seconds": sig_s,
                             "seconds": sig_s + lsh["seconds"]}
    except Exception as e:  # noqa: BLE001
        out["datasketch"] = {"error": describe_error(e)}
    return out


# ---------------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------------

def _rate(n_docs: int, mb: float, seconds: float) -> str:
    return f"{n_docs / seconds:>10,.0f} {mb / seconds:>8.2f}"


def print_signature_table(results: dict, n_docs: int, mb: float, workers: int, p_num_perm: int) -> None:
    ours = results["ours"]["times"]
    ours_best = min(ours.values()) if ours else None
    cols = sorted({1, workers})
    head = "".join(f"{f'{c} proc s':>10}" for c in cols)
    print(f"\n{'signatures':<36}{head} {'docs/s':>10} {'MB/s':>8} {'ours/peer':>10}   (best of the columns)")
    for method in ("ours", "datasketch", "datasketch_sha1", "datasketch_update", "rensa", "datatrove"):
        res, label = results[method], METHODS[method][0]
        if res["error"] and not res["times"]:
            print(f"{label:<36}  {res['error']}")
            continue
        times = "".join(f"{res['times'][c]:>10.2f}" if c in res["times"] else f"{'-':>10}" for c in cols)
        best = min(res["times"].values())
        ratio = f"{best / ours_best:>9.1f}x" if ours_best else f"{'-':>10}"
        print(f"{label:<36}{times} {_rate(n_docs, mb, best)} {ratio}")
        if res["error"]:
            print(f"{'':<36}  {res['error']}")
    one = results.get("ours_one_perm", {}).get("times", {}).get(1)
    if one and 1 in ours and ours[1] > one and p_num_perm > 1 and results["datasketch"]["times"]:
        rest = ours[1] - one
        ds = min(results["datasketch"]["times"].values())
        print(f"  where ours' 1-proc time goes: {one:.2f} s with 1 permutation (text in, shingling, one permutation); "
              f"the other {p_num_perm - 1} and their output add {rest:.2f} s.\n  Even if text in and shingling "
              f"were free, ours would be at most {ds / rest:.0f}x datasketch (xxh32) on this machine.")


def print_dedup_table(results: dict, n_docs: int, mb: float) -> None:
    ours = results.get("ours", {})
    print(f"\n{'whole dedup':<36}{'b x r':>8} {'seconds':>9} {'docs/s':>10} {'MB/s':>8} {'ours/peer':>10} "
          f"{'clusters':>9} {'removed':>8} {'Jaccard(removed, ours)':>23}")
    for method, label in (("ours", METHODS["ours_dedup"][0]), ("datasketch", "datasketch sig + MinHashLSH")):
        res = results.get(method, {"error": "not run"})
        if "error" in res:
            print(f"{label:<36}  {res['error']}")
            continue
        ratio = f"{res['seconds'] / ours['seconds']:>9.1f}x" if "seconds" in ours else f"{'-':>10}"
        if "removed" in ours:
            a, b = ours["removed"], res["removed"]
            jac = f"{len(a & b) / max(1, len(a | b)):>23.4f}"
        else:
            jac = f"{'-':>23}"
        shape = f"{res['shape'][0]} x {res['shape'][1]}"
        print(f"{label:<36}{shape:>8} {res['seconds']:>9.2f} {_rate(n_docs, mb, res['seconds'])} {ratio} "
              f"{res['clusters']:>9,} {len(res['removed']):>8,} {jac}")
    ds = results.get("datasketch", {})
    if "lsh_seconds" in ds:
        print(f"  datasketch time = {ds['sig_seconds']:.2f} s signatures (best above) + "
              f"{ds['lsh_seconds']:.2f} s MinHashLSH insert/query + components")
    if "removed" in ours and "removed" in ds:
        a, b = ours["removed"], ds["removed"]
        print(f"  removed by both: {len(a & b):,}; only ours: {len(a - b):,}; only datasketch: {len(b - a):,}")


def _load() -> str:
    """Other load on the machine: the 1-minute average lags, so also the threads runnable now (Linux)."""
    text = f"load {os.getloadavg()[0]:.1f}"
    try:
        samples = []
        for _ in range(5):  # the fewest over a quarter second: a lone kernel thread waking is not load
            with open("/proc/stat") as f:
                samples.append(next(int(line.split()[1]) for line in f if line.startswith("procs_running")))
            time.sleep(0.05)
    except (OSError, StopIteration):
        return text
    others = max(0, min(samples) - 1)  # minus this process; the workers have exited
    return f"{text}, {others} other runnable" + ("  (busy machine: times are suspect)" if others else "")


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for pkg in ("numpy", "numba", "datasketch", "rensa", "datatrove", "spacy", "jieba", "xxhash"):
        try:
            parts.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            parts.append(f"{pkg} -")
    return ", ".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", help="JSONL(.gz) with id, lang, text per line")
    ap.add_argument("--docs", type=int, default=0, help="first N documents (default 0: all)")
    ap.add_argument("--workers", type=int, default=2, help="processes for the multi-process run")
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement, fastest kept")
    ap.add_argument("--skip-dedup", action="store_true", help="signatures only")
    args = ap.parse_args(argv)

    p = Params(num_perm=args.num_perm, threshold=args.threshold)
    with tempfile.TemporaryDirectory(prefix="bench-minhash-") as tmp:
        os.environ["TMPDIR"] = tmp  # spawned workers inherit it: their scratch files go where we clean up
        tempfile.tempdir = None
        return run_benchmark(args, p)


def run_benchmark(args, p: Params) -> int:
    t_start = time.perf_counter()
    docs = load_corpus(args.corpus, args.docs)
    mb = sum(len(t.encode("utf-8")) for t, _ in docs) / 1e6
    n_cjk = sum(lang in CJK_LANGS for _, lang in docs)
    print(f"{len(docs):,} documents, {mb:.2f} MB of UTF-8 text ({len(docs) - n_cjk:,} word-shingled, "
          f"{n_cjk:,} character-shingled) from {os.path.basename(args.corpus)}")
    print(f"num_perm {p.num_perm}, threshold {p.threshold}, {p.word_k}-word / {p.char_k}-char shingles; "
          f"{os.cpu_count()} cores, Python {platform.python_version()}; {_versions()}")
    print(f"at start: {_load()}\n")

    sig = signature_phase(docs, p, args.workers, args.repeat)
    dedup = None if args.skip_dedup else dedup_phase(docs, p, sig, args.repeat)
    print_signature_table(sig, len(docs), mb, args.workers, p.num_perm)
    if dedup is not None:
        print_dedup_table(dedup, len(docs), mb)
    print(f"\ntotal benchmark wall time {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
