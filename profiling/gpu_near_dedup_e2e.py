"""Near dedup end to end at scale: Parquet files in → clusters out, on the GPU (or the CPU twin), with a per-GB
breakdown and TB/GPU-hour. The line #16 asks of profiling/gpu_check.sh.

  1. make the corpus (not timed): --gb of text as --parts Parquet files, made here from a sentence pool with a
     seeded generator (no data needs to travel): documents of 25 sentences, English (words drawn from a Zipf
     vocabulary) and Chinese (characters drawn the same way), then planted duplicates: --exact share exact
     copies of an earlier document and --near share near copies (one sentence of 25 replaced: Jaccard ~0.85)
  2. timed: read the Parquet files (pyarrow, all threads) → kernels/near_dedup.py's chain (copy in, MinHash,
     band fold, star edges, Jaccard check, components), twice on the GPU: overlapped (the headline figure) and
     step by step (the breakdown)
  3. check: the share of planted copies found in their source's cluster (recall), and clusters among documents
     that were never copied (false merges)

Usage:  python profiling/gpu_near_dedup_e2e.py [--gb 10] [--parts 16] [--device gpu|cpu] [--out DIR]
                                                [--exact 0.05] [--near 0.05] [--zh 0.2] [--seed 0]
Memory: about 3x --gb on the host (text, its Arrow copy, the Parquet pages) and 1.5x --gb on the device.
Exit status 1 when recall < 0.95 or a false merge is found (the chain is then wrong, whatever its speed).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SENTENCES_PER_DOC = 25
ZIPF = 1.15


def _pool(rng: np.random.Generator, count: int, zh: bool):
    """(data, offsets) of `count` sentences: English words of a 40,000-word Zipf vocabulary, or Chinese
    characters of 3,500 common ones, each sentence ended by '. ' or '。'."""
    if zh:
        chars = np.array([chr(c).encode() for c in range(0x4E00, 0x4E00 + 3500)], dtype=object)
        lens = rng.integers(12, 40, count)
        ids = np.minimum(rng.zipf(ZIPF, lens.sum()) - 1, 3499)
        pieces, end = chars[ids], "。".encode()
    else:
        letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", np.uint8)
        weights = np.linspace(2.0, 0.1, 26)
        wl = rng.integers(2, 10, 40000)
        vocab = np.array([bytes(rng.choice(letters, n, p=weights / weights.sum())) + b" " for n in wl], dtype=object)
        lens = rng.integers(8, 24, count)
        ids = np.minimum(rng.zipf(ZIPF, lens.sum()) - 1, 39999)
        pieces, end = vocab[ids], b". "
    cuts = np.concatenate([[0], np.cumsum(lens)])
    sentences = [b"".join(pieces[cuts[i]:cuts[i + 1]]) + end for i in range(count)]
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum([len(s) for s in sentences], out=offsets[1:])
    return np.frombuffer(b"".join(sentences), np.uint8), offsets


def make_corpus(out: Path, gb: float, parts: int, exact: float, near: float, zh_share: float, seed: int) -> dict:
    """Writes part-NNNNN.parquet (text, lang) and returns the planted copies {copy doc: source doc}."""
    from gpupipe.kernels.near_dedup import _gather_rows

    rng = np.random.default_rng(seed)
    pools = {lang: _pool(rng, 200_000 if lang == "en" else 60_000, lang == "zh") for lang in ("en", "zh")}
    mean = {lang: float(np.diff(p[1]).mean()) * SENTENCES_PER_DOC for lang, p in pools.items()}
    n = max(200, int(gb * 1e9 / (mean["en"] * (1 - zh_share) + mean["zh"] * zh_share)))
    zh = rng.random(n) < zh_share
    ids = np.empty((n, SENTENCES_PER_DOC), np.int64)
    for lang, mask in (("en", ~zh), ("zh", zh)):
        ids[mask] = rng.integers(0, pools[lang][1].shape[0] - 1, (int(mask.sum()), SENTENCES_PER_DOC))
    # planted copies: each of a source earlier in the corpus, of the same language, never itself a copy
    kind = rng.random(n)
    copies = np.flatnonzero((kind < exact + near) & (np.arange(n) > 100))
    planted = {}
    originals = np.setdiff1d(np.arange(n), copies)
    for lang_zh in (False, True):
        pick = copies[zh[copies] == lang_zh]
        pool_docs = originals[zh[originals] == lang_zh]
        before = np.searchsorted(pool_docs, pick)     # originals of the language earlier than each copy
        pick, before = pick[before > 0], before[before > 0]
        src = pool_docs[(rng.random(pick.shape[0]) * before).astype(np.int64)]
        ids[pick] = ids[src]
        edit = pick[kind[pick] >= exact]
        ids[edit, rng.integers(0, SENTENCES_PER_DOC, edit.shape[0])] = \
            rng.integers(0, pools["zh" if lang_zh else "en"][1].shape[0] - 1, edit.shape[0])
        planted.update(zip(pick.tolist(), src.tolist()))
    out.mkdir(parents=True, exist_ok=True)
    # one pool (Chinese sentence ids after the English ones), so each part is one gather in document order
    data = np.concatenate([pools["en"][0], pools["zh"][0]])
    offs = np.concatenate([pools["en"][1], pools["zh"][1][1:] + pools["en"][1][-1]])
    ids[zh] += pools["en"][1].shape[0] - 1
    bounds = np.linspace(0, n, parts + 1).astype(np.int64)

    def write_part(p: int) -> None:
        d0, d1 = int(bounds[p]), int(bounds[p + 1])
        rows = ids[d0:d1].reshape(-1)
        sent_offsets = np.zeros(rows.shape[0] + 1, np.int64)
        np.cumsum(offs[rows + 1] - offs[rows], out=sent_offsets[1:])
        buf = np.empty(int(sent_offsets[-1]), np.uint8)
        _gather_rows(data, offs, rows, sent_offsets, buf)
        doc_offsets = np.ascontiguousarray(sent_offsets[::SENTENCES_PER_DOC])
        text = pa.LargeStringArray.from_buffers(d1 - d0, pa.py_buffer(doc_offsets), pa.py_buffer(buf))
        table = pa.table({"doc_index": np.arange(d0, d1, dtype=np.int64), "text": text,
                          "lang": pa.array(np.where(zh[d0:d1], "zh", "en"))})
        pq.write_table(table, out / f"part-{p:05d}.parquet", compression="none", row_group_size=1 << 16)

    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:   # the gather and the writer release the GIL
        list(pool.map(write_part, range(parts)))
    return planted


def read_corpus(folder: Path):
    """(data, offsets, cjk, doc) of every part, as one Arrow large_string buffer."""
    table = pq.read_table(sorted(folder.glob("part-*.parquet")), columns=["doc_index", "text", "lang"],
                          use_threads=True)
    text = table.column("text").combine_chunks()
    if text.type != pa.large_string():
        text = text.cast(pa.large_string())
    _, offsets_buf, data_buf = text.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64)[text.offset:text.offset + len(text) + 1]
    data = np.frombuffer(data_buf, np.uint8)
    cjk = (table.column("lang").to_numpy(zero_copy_only=False) == "zh").astype(np.uint8)
    return data, offsets, cjk, table.column("doc_index").to_numpy()


def check(nodes: np.ndarray, cluster: np.ndarray, planted: dict) -> tuple[float, int]:
    """(recall of planted copies, documents clustered that are neither a copy nor a copy's source)."""
    of = dict(zip(nodes.tolist(), cluster.tolist()))
    found = sum(1 for c, s in planted.items() if c in of and of.get(s) == of[c])
    involved = set(planted) | set(planted.values())
    stray = sum(1 for d in of if d not in involved)
    return found / max(1, len(planted)), stray


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=10.0)
    ap.add_argument("--parts", type=int, default=16)
    ap.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    ap.add_argument("--exact", type=float, default=0.05)
    ap.add_argument("--near", type=float, default=0.05)
    ap.add_argument("--zh", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="folder for the corpus (default: a temp folder, removed after)")
    args = ap.parse_args()
    from gpupipe.kernels.near_dedup import ChainParams, near_duplicate_clusters
    from gpupipe.kernels.text_hash import gpu_available

    if args.device == "gpu" and not gpu_available():
        print("SKIP: CuPy sees no CUDA device (--device cpu runs the CPU twin)")
        return 0
    folder = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpupipe-e2e-"))
    try:
        t0 = time.perf_counter()
        planted = make_corpus(folder, args.gb, args.parts, args.exact, args.near, args.zh, args.seed)
        size = sum(f.stat().st_size for f in folder.glob("part-*.parquet"))
        print(f"corpus: {size / 1e9:.2f} GB of Parquet in {args.parts} parts, {len(planted)} planted copies, "
              f"made in {time.perf_counter() - t0:.1f} s", flush=True)
        params = ChainParams(bands=12, rows=10, seed=args.seed)   # the stage's defaults at threshold 0.8
        # warm-up: NVRTC compiles / numba loads, on a small slice
        data, offsets, cjk, doc = read_corpus(folder)
        k = min(2000, doc.shape[0])
        near_duplicate_clusters(data, offsets[:k + 1], cjk[:k], doc[:k], params, args.device)
        gb = float(offsets[-1] - offsets[0]) / 1e9
        del data, offsets
        rows = []
        for overlap in ([True, False] if args.device == "gpu" else [True]):
            steps = defaultdict(float)

            @contextlib.contextmanager
            def timer(step):
                t = time.perf_counter()
                yield
                if args.device == "gpu":
                    import cupy

                    cupy.cuda.Device().synchronize()
                steps[step] += time.perf_counter() - t

            t_all = time.perf_counter()
            with timer("Parquet read"):
                data, offsets, cjk, doc = read_corpus(folder)
            nodes, cluster, counts = near_duplicate_clusters(data, offsets, cjk, doc, params, args.device, timer,
                                                             overlap=overlap)
            total = time.perf_counter() - t_all
            recall, stray = check(nodes, cluster, planted)
            rows.append((overlap, dict(steps), total, counts, recall, stray))
            del data, offsets
        print(f"\n{gb:.2f} GB of text, {doc.shape[0]:,} documents, device {args.device}")
        status = 0
        for overlap, steps, total, counts, recall, stray in rows:
            label = args.device if args.device == "cpu" else ("overlapped" if overlap else "step by step")
            per_hour = "TB/GPU-hour" if args.device == "gpu" else "TB/hour on this machine"
            print(f"\n[{label}] total {total:.2f} s = {gb / total:.3f} GB/s = {gb / 1e3 / total * 3600:.3f} {per_hour}")
            print(f"  {'step':<46} {'s':>8} {'s/GB':>8} {'share':>6}")
            for step, s in steps.items():
                print(f"  {step:<46} {s:8.3f} {s / gb:8.3f} {s / total:6.1%}")
            print(f"  candidate edges {counts['candidate_edges']:,}, kept {counts['verified_edges']:,}; "
                  f"planted copies found {recall:.4f}; stray documents clustered {stray}")
            if recall < 0.95 or stray:
                print("  FAIL: the chain missed planted copies or merged unrelated documents")
                status = 1
        return status
    finally:
        if not args.out:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
