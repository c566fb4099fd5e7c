"""Benchmark decontamination lookups: the ngram_hash kernel (numba, GPU when present) against a plain
Python set of the same n-grams, on real training text.

Index: ~N items from the synthetic benchmark generator (gpupipe/synth/benchmark.py; default 10,000),
or real benchmark files given with --benchmark ([NAME=]FILE[:format[:fields]], as for
`gpupipe decontam-index`). Training text: the `text` field of a JSONL(.gz) corpus, up to --max-mb,
with --plant items copied into random documents so that the hit path runs too.

Rows (MB/s of training text; "x python" = speed over the Python set lookup):
  index build           build_index_from_items (normalize, unit counts, grams, sort): items/s
  python set index      the same n-grams as tuples of units in a Python set
  numba 2 threads       ngram_lookup_cpu with 2 numba threads, mode flags given
  numba all threads     the same with every numba thread
  script counts         the stage's per-document mode choice (numba pass counting CJK/other letters)
  gpu kernel            ngram_lookup_gpu on device buffers (when CuPy sees a device; CUDA events)
  python set            per document: units by regex split (the same separators and ASCII folding),
                        n- and min_n-grams as tuples, `in` the set
Documents with hits must be the same for every method (checked; exit 1 otherwise).

--kernel-only (for profiling/gpu_check.sh: the GPU box has no pydantic or warcio) imports only
gpupipe.kernels: numba vs GPU on a generated corpus (or CORPUS), with a table of the grams of
--index-items random runs of 50 windows: --plant of them from the corpus itself (so hits happen),
the rest from other generated text; exits 1 on any CPU/GPU difference.

Usage:  python profiling/bench_decontam.py CORPUS.jsonl.gz [--index-items 10000] [--max-mb 16]
            [--benchmark SPEC ...] [--plant 200] [--repeat 3]
        python profiling/bench_decontam.py [CORPUS] --kernel-only [--docs 20000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import re
import sys
import tempfile
import time

import numba
import numpy as np
import pyarrow as pa

from gpupipe.kernels import ngram_hash as ng
from gpupipe.kernels.minhash import ASCII_SEPARATORS, UNICODE_SEPARATOR_RANGES
from gpupipe.kernels.text_hash import arrow_buffers

WORD, CHAR = (13, 8), (20, 12)
_SEP_CLASS = "[" + re.escape(ASCII_SEPARATORS.decode()) + "".join(
    f"\\u{lo:04x}-\\u{hi:04x}" for lo, hi in UNICODE_SEPARATOR_RANGES) + "]+"
SEP_RE = re.compile(_SEP_CLASS)
ASCII_LOWER = {c: c + 32 for c in range(65, 91)}


# ---------------------------------------------------------------------------- inputs
def read_corpus(path: str, max_mb: float, seed: int = 0) -> list[str]:
    """Documents drawn at random from the whole file (corpora are often sorted by source or
    language) until max_mb of UTF-8 text, in file order."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        texts = [json.loads(line).get("text") or "" for line in fh]
    order = np.random.default_rng(seed).permutation(len(texts))
    sizes = np.array([len(texts[i].encode()) for i in order])
    take = order[:int(np.searchsorted(np.cumsum(sizes), max_mb * 1e6)) + 1] if max_mb else order
    return [texts[i] for i in sorted(take)]


def benchmark_items(specs: list[str], count: int):
    from gpupipe.stages.filters.decontam import BenchmarkSource
    from gpupipe.synth.benchmark import benchmark_records, write_benchmark

    if specs:
        return [it for spec in specs for it in BenchmarkSource.parse(spec).items()]
    with tempfile.TemporaryDirectory() as tmp:
        path = write_benchmark(os.path.join(tmp, "bench.jsonl"),
                               benchmark_records(gsm8k=max(1, count - 40), mmlu=30, cmath=10))
        return list(BenchmarkSource.parse(path).items())


def plant(texts: list[str], items, count: int, seed: int = 0) -> list[str]:
    """Copies of random items' text inside random documents (the hit path must run too)."""
    rng = random.Random(seed)
    texts = list(texts)
    for _ in range(min(count, len(texts))):
        d, it = rng.randrange(len(texts)), rng.choice(items)
        cut = rng.randint(0, len(texts[d]))
        texts[d] = f"{texts[d][:cut]} {it.text} {texts[d][cut:]}"
    return texts


# ---------------------------------------------------------------------------- the Python baseline
def py_units(text: str, cjk: bool) -> list[str]:
    text = text.translate(ASCII_LOWER)
    if cjk:
        return list(SEP_RE.sub("", text))
    return [u for u in SEP_RE.split(text) if u]


def py_index(items, flags: np.ndarray) -> set:
    from gpupipe.stages.text.normalize import normalize_text

    grams = set()
    for it, c in zip(items, flags):
        full = py_units(normalize_text(it.text), bool(c))
        n, min_n = CHAR if c else WORD
        k = n if len(full) >= n else (min_n if len(full) >= min_n else 0)
        if not k:
            continue
        for p in it.passages:
            u = py_units(normalize_text(p), bool(c))
            grams.update((k, *u[i:i + k]) for i in range(len(u) - k + 1))
    return grams


def py_lookup(texts: list[str], flags: np.ndarray, grams: set) -> np.ndarray:
    hits = np.zeros(len(texts), dtype=np.int64)
    for d, (text, c) in enumerate(zip(texts, flags)):
        u = py_units(text, bool(c))
        for k in set(CHAR if c else WORD):
            hits[d] += sum((k, *u[i:i + k]) in grams for i in range(len(u) - k + 1))
    return hits


# ---------------------------------------------------------------------------- timing
def best_of(fn, repeat: int):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def time_gpu(data, offsets, flags, table, repeat):
    import cupy as cp

    d_data, d_offsets = cp.asarray(data), cp.asarray(offsets)
    out = ng.ngram_lookup_gpu(d_data, d_offsets, flags, table, WORD, CHAR)  # compile + warm up
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(max(repeat, 3)):
        start.record()
        ng.ngram_lookup_gpu(d_data, d_offsets, flags, table, WORD, CHAR)
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return min(times), out.get()


# ---------------------------------------------------------------------------- kernel only (GPU box)
def generated_corpus(n_docs: int, seed: int = 1):
    """English-like (~2 KB) and Chinese-like (~600 B) documents: buffers and mode flags."""
    from bench_minhash_kernel import make_corpus  # a sibling script: same synthetic text

    en, en_off = make_corpus("en", n_docs, 2048, seed=seed)
    zh, zh_off = make_corpus("zh", n_docs, 600, seed=seed + 1)
    data = np.concatenate([en, zh])
    offsets = np.concatenate([en_off, zh_off[1:] + en_off[-1]])
    return data, offsets, np.r_[np.zeros(n_docs), np.ones(n_docs)].astype(np.uint8)


def table_of_runs(data, offsets, cjk, items: int, run: int = 50, seed: int = 0) -> ng.NgramTable:
    """The grams of `items` random runs of `run` consecutive windows of the corpus itself."""
    rng = np.random.default_rng(seed)
    flat, offs = ng.gram_hashes_cpu(data, offsets, cjk, np.where(cjk, CHAR[0], WORD[0]))
    counts = np.diff(offs)
    docs = rng.choice(np.flatnonzero(counts >= run), size=max(1, items))
    starts = offs[docs] + (rng.random(items) * (counts[docs] - run + 1)).astype(np.int64)
    return ng.NgramTable(np.unique(flat[(starts[:, None] + np.arange(run)).ravel()]))


def kernel_bench(args) -> int:
    if args.corpus:
        texts = read_corpus(args.corpus, args.max_mb)
        data, offsets = arrow_buffers(pa.array(texts, pa.large_string()))
        c = ng.script_counts_cpu(data, offsets)
        cjk = (c[:, 0] > 0.5 * (c[:, 0] + c[:, 1])).astype(np.uint8)
    else:
        data, offsets, cjk = generated_corpus(args.docs)
    other = generated_corpus(max(1, args.index_items // 2), seed=7)  # text that is not in the corpus
    planted = min(args.plant, args.index_items)
    table = ng.NgramTable(np.union1d(table_of_runs(data, offsets, cjk, planted).hashes,
                                     table_of_runs(*other, args.index_items - planted).hashes))
    mb, n = data.nbytes / 1e6, offsets.size - 1
    print(f"{n} documents, {mb:.1f} MB ({cjk.mean():.0%} character mode); table {len(table)} hashes "
          f"of {args.index_items} runs of 50 grams, {planted} of them from the corpus")
    ng.ngram_lookup_cpu(data, offsets[:2], cjk[:1], table, WORD, CHAR)  # compile
    threads = numba.get_num_threads()
    results = []
    for t in sorted({min(2, threads), threads}):
        numba.set_num_threads(t)
        secs, hits = best_of(lambda: ng.ngram_lookup_cpu(data, offsets, cjk, table, WORD, CHAR), args.repeat)
        results.append((f"numba {t} threads", secs, f"{hits.pos.size} hits in "
                        f"{int((np.diff(hits.hit_offsets) > 0).sum())} docs"))
    numba.set_num_threads(threads)
    ok = True
    if ng.gpu_available():
        import cupy as cp

        h2d, _ = best_of(lambda: (cp.asarray(data), cp.cuda.Device().synchronize()), args.repeat)
        gsecs, ghits = time_gpu(data, offsets, cjk, table, args.repeat)
        ok = all((getattr(ghits, k) == getattr(hits, k)).all() for k in ("hit_offsets", "pos", "start", "end"))
        results.append(("  host->device copy", h2d, "pageable numpy -> device"))
        results.append(("gpu kernel", gsecs, "bit-identical to CPU" if ok else "MISMATCH vs CPU"))
    else:
        print("no CUDA device: GPU rows skipped")
    base = results[0][1]
    print(f"{'method':<22} {'seconds':>9} {'MB/s':>9} {'docs/s':>11} {'x numba2':>9}  note")
    for method, secs, note in results:
        print(f"{method:<22} {secs:>9.4f} {mb / secs:>9.1f} {n / secs:>11.3g} {base / secs:>8.1f}x  {note}")
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", nargs="?", help="JSONL(.gz) with a `text` field per line")
    ap.add_argument("--kernel-only", action="store_true", help="numba vs GPU only (no pydantic needed)")
    ap.add_argument("--docs", type=int, default=20_000, help="kernel-only: generated documents per language")
    ap.add_argument("--index-items", type=int, default=10_000, help="synthetic benchmark items to index")
    ap.add_argument("--benchmark", nargs="*", default=[], help="real benchmark files instead of synthetic items")
    ap.add_argument("--max-mb", type=float, default=16.0, help="training text to read (0: all)")
    ap.add_argument("--plant", type=int, default=200, help="items copied into random documents")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    ap.add_argument("--python-mb", type=float, default=0.0,
                    help="the Python baseline runs on the first this many MB (0: all)")
    args = ap.parse_args(argv)
    if args.kernel_only:
        print(f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}, "
              f"{os.cpu_count()} CPUs, numba threads {numba.get_num_threads()}")
        return kernel_bench(args)
    if not args.corpus:
        ap.error("a CORPUS is needed unless --kernel-only")
    from gpupipe.stages.filters.decontam import build_index_from_items, cjk_flags
    from gpupipe.stages.text.normalize import normalize_text

    print(f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}, "
          f"{os.cpu_count()} CPUs, numba threads {numba.get_num_threads()}")
    items = benchmark_items(args.benchmark, args.index_items)
    texts = plant(read_corpus(args.corpus, args.max_mb), items, args.plant)
    arr = pa.array(texts, pa.large_string())
    data, offsets = arrow_buffers(arr)
    mb = data.nbytes / 1e6
    print(f"index: {len(items)} items; training text: {len(texts)} documents, {mb:.1f} MB, "
          f"{float(cjk_flags(arr).mean()):.0%} of them CJK (character n-grams)")

    build_index_from_items(items[:50])  # compile outside the timing
    t_index, index = best_of(lambda: build_index_from_items(items), 1)
    flags_secs, flags = best_of(lambda: cjk_flags(arr), args.repeat)
    item_flags = cjk_flags([normalize_text(it.text) for it in items])
    t_pyindex, grams = best_of(lambda: py_index(items, item_flags), 1)
    print(f"unique hashes {len(index.table)}, python set {len(grams)} n-grams")

    header = f"{'method':<22} {'seconds':>9} {'MB/s':>9} {'docs/s':>11} {'x python':>9}  note"
    rows = []

    def row(method, secs, note="", size=mb, docs=len(texts), base=None):
        rows.append((method, secs, size / secs, docs / secs, note, base))

    ng.ngram_lookup_cpu(data, offsets[:2], flags[:1], index.table, WORD, CHAR)  # compile
    threads = numba.get_num_threads()
    numba.set_num_threads(min(2, threads))
    secs2, hits = best_of(lambda: ng.ngram_lookup_cpu(data, offsets, flags, index.table, WORD, CHAR),
                          args.repeat)
    numba.set_num_threads(threads)
    secs_all, hits_all = best_of(lambda: ng.ngram_lookup_cpu(data, offsets, flags, index.table, WORD, CHAR),
                                 args.repeat)
    per_doc = np.diff(hits.hit_offsets)
    ok = bool((np.diff(hits_all.hit_offsets) == per_doc).all())

    # the Python baseline on a prefix (it is slow); MB/s compares like with like
    n_py = len(texts)
    if args.python_mb:
        sizes = np.diff(offsets.astype(np.int64))
        n_py = max(1, int(np.searchsorted(np.cumsum(sizes), args.python_mb * 1e6)) + 1)
        n_py = min(n_py, len(texts))
    py_mb = float(offsets[n_py] - offsets[0]) / 1e6
    py_secs, py_hits = best_of(lambda: py_lookup(texts[:n_py], flags[:n_py], grams), 1)
    same = bool(((py_hits > 0) == (per_doc[:n_py] > 0)).all())
    ok &= same

    py_rate = py_mb / py_secs
    item_mb = sum(len(i.text.encode()) for i in items) / 1e6
    row("index build", t_index, f"{len(items) / t_index:,.0f} items/s", size=item_mb, docs=len(items))
    row("python set index", t_pyindex, f"{len(items) / t_pyindex:,.0f} items/s", size=item_mb,
        docs=len(items))
    row("script counts", flags_secs, "the stage's mode choice, on top of the lookup")
    row("numba 2 threads", secs2, f"{int(hits.pos.size)} hits in {int((per_doc > 0).sum())} docs")
    row(f"numba {threads} threads", secs_all)
    if ng.gpu_available():
        gsecs, ghits = time_gpu(data, offsets, flags, index.table, args.repeat)
        same_gpu = all((getattr(ghits, k) == getattr(hits, k)).all()
                       for k in ("hit_offsets", "pos", "start", "end"))
        ok &= same_gpu
        row("gpu kernel", gsecs, "bit-identical to CPU" if same_gpu else "MISMATCH vs CPU")
    row("python set", py_secs, f"first {py_mb:.1f} MB; docs with hits "
        + ("agree" if same else "DISAGREE"), size=py_mb, docs=n_py)

    print(header)
    print("-" * len(header))
    for method, secs, rate, docs_rate, note, _ in rows:
        ratio = "" if "index" in method else f"{rate / py_rate:>8.1f}x"
        print(f"{method:<22} {secs:>9.3f} {rate:>9.2f} {docs_rate:>11.3g} {ratio:>9}  {note}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
