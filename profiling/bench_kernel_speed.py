"""Run-time speed of the CPU kernels whose compile options #28 changed, on synthetic text (six languages).

Each kernel runs once to compile (or load from numba's cache), then --repeat times; the best time is printed in
CPU seconds of the process and in wall seconds, with a digest of its output so two versions of the kernels can be
compared for identical results as well as speed. --threads sets numba's threads (default 1: the least noisy on a
shared machine).

    python profiling/bench_kernel_speed.py [--docs 4000] [--repeat 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import resource
import time


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _texts(n: int) -> list[str]:
    from gpupipe.synth.text import LANGUAGES, article

    rng = random.Random(0)
    langs = list(LANGUAGES.values())
    out = []
    for i in range(n):
        title, paragraphs = article(langs[i % len(langs)], rng)
        out.append(title + "\n\n" + "\n\n".join(paragraphs))
    for i in range(0, n, 7):  # some near and exact duplicates, some URLs and numbers
        out[i] = out[i - 3][: len(out[i - 3]) // 2] + " see https://example.com/a?b=1 at 10:30, 3.5km " + out[i]
    return out


def _digest(result) -> str:
    import numpy as np

    h = hashlib.sha256()
    for a in result if isinstance(result, tuple) else (result,):
        h.update(np.ascontiguousarray(np.asarray(a)).tobytes())
    return h.hexdigest()[:12]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", help="comma-separated kernels of the table (default: all)")
    args = ap.parse_args()
    import numba
    import numpy as np
    import pyarrow as pa

    from gpupipe.kernels import (fasttext_model, minhash, ngram_hash, repetition, script_share, symbol_counts,
                                 text_hash, whitespace)
    from gpupipe.kernels.strings import arrow_buffers
    from gpupipe.stages.filters.langid import default_model_path

    numba.set_num_threads(args.threads)
    texts = _texts(args.docs)
    data, offsets = arrow_buffers(pa.array(texts, pa.large_string()))
    cjk = np.array([any("\u4e00" <= c <= "\u9fff" for c in t[:50]) for t in texts], np.uint8)
    mb = data.nbytes / 1e6
    a, b = minhash.minhash_permutations(128, 0)
    model = fasttext_model.load_model(default_model_path())
    from gpupipe.kernels.near_dedup import ChainParams, near_duplicate_clusters
    from gpupipe.stages.filters.lang_script import N_CLASSES, script_table

    doc = np.arange(len(texts), dtype=np.int64)
    cases = {
        "quality_counts": lambda: repetition.quality_counts(data, offsets),
        "symbol_counts": lambda: symbol_counts.symbol_counts(data, offsets),
        "clean_whitespace": lambda: whitespace.clean_whitespace(data, offsets),
        "fasttext predict": lambda: model.predict_buffers(data, offsets, newline_is_space=True),
        "text_hash": lambda: text_hash.text_hash_cpu(data, offsets),
        "script_counts": lambda: ngram_hash.script_counts_cpu(data, offsets),
        "script_share": lambda: script_share.script_counts(data, offsets, script_table(), N_CLASSES),
        "minhash": lambda: minhash.minhash_cpu(data, offsets, cjk, a, b),
        "minhash bands": lambda: minhash.minhash_cpu(data, offsets, cjk, a, b, bands=16, rows=8),
        "shingle_hashes": lambda: minhash.shingle_hashes_cpu(data, offsets, cjk),
        "gram_hashes": lambda: ngram_hash.gram_hashes_cpu(data, offsets, cjk, 13),
        "near_dup clusters": lambda: near_duplicate_clusters(data, offsets, cjk, doc, ChainParams(16, 8))[:2],
    }
    print(f"{args.docs} documents, {mb:.1f} MB, numba threads {args.threads}")
    print(f"{'kernel':<18} {'first s':>8} {'best CPU s':>10} {'best wall s':>11} {'MB/s':>7}  digest")
    for name, fn in cases.items():
        if args.only and name not in args.only.split(","):
            continue
        t0 = time.perf_counter()
        result = fn()
        first = time.perf_counter() - t0
        cpu, wall = [], []
        for _ in range(args.repeat):
            w0, c0 = time.perf_counter(), _cpu()
            fn()
            wall.append(time.perf_counter() - w0)
            cpu.append(_cpu() - c0)
        print(f"{name:<18} {first:8.2f} {min(cpu):10.3f} {min(wall):11.3f} {mb / min(wall):7.1f}  {_digest(result)}")


if __name__ == "__main__":
    main()
