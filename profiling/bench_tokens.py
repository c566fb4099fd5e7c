"""Tokenize + pack throughput: gpupipe's path side by side with Megatron-LM's preprocess path.

  gpupipe        encode_batch + StreamPacker (EOS stream → fixed blocks → shard files); also with best-fit packing
                 and with the Megatron writer. encode_batch runs tiktoken's Rust BPE on the tokenizer's merges
                 (gpupipe.tokens.fast_bpe: the same ids as HF tokenizers, checked when it loads; documents spread
                 over --workers threads); the row "tokenizers encode_batch_fast" is the same stream path with HF
                 tokenizers' own batch encoder (--workers rayon threads) instead, as before the fast path
  megatron       what Megatron-LM's tools/preprocess_data.py does (it is not in megatron-core, so re-enacted here):
                 per-document `tokenizer.encode` (+ EOS) in a multiprocessing Pool of --workers processes,
                 imap chunksize 32, and megatron-core's IndexedDatasetBuilder add_document/finalize in the main
                 process; run in a subprocess (--megatron-python, default this interpreter)
  megatron-1p    the same per-document loop in one process (the "plain loop")
Where megatron-core is not importable, the peer's writer is a plain numpy .bin/.idx writer and says so.

Same tokenizer file, same texts, same EOS (the token counts must agree); reading the corpus, training the
tokenizer and loading it (for gpupipe: building and checking the fast encoder, printed) are not timed, and every
path's tokenizer is warmed on the first 2000 documents. --repeat rounds run
every path once each, so outside load hits all alike; each path's best round is reported: wall and CPU seconds,
tokens/s, MB/s of UTF-8 text, and the ratio of its time to gpupipe stream's.

Usage:  python profiling/bench_tokens.py CORPUS.jsonl[.gz] [--docs N] [--workers 2] [--tokenizer tokenizer.json]
        [--megatron-python PYTHON]   (default: $GPUPIPE_MEGATRON_PYTHON, else this interpreter)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEER = r"""
import json, resource, sys, time, warnings
warnings.simplefilter("ignore")
from multiprocessing import Pool

import numpy as np
from tokenizers import Tokenizer

tok_path, texts_path, out_prefix, workers, eos_token = sys.argv[1:6]
workers = int(workers)
texts = [json.loads(line)["text"] for line in open(texts_path, encoding="utf-8")]
TOK = Tokenizer.from_file(tok_path)
TOK.encode_special_tokens = True
EOS = TOK.token_to_id(eos_token)

def encode(text):  # preprocess_data.py's Encoder.encode: one document, EOS appended
    ids = TOK.encode(text, add_special_tokens=False).ids
    ids.append(EOS)
    return ids, len(text.encode("utf-8"))

try:
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    writer = "megatron-core IndexedDatasetBuilder"
except Exception:
    IndexedDatasetBuilder = None
    writer = "numpy (megatron-core not importable)"

class NumpyBuilder:  # the same .bin/.idx content, written with plain numpy
    def __init__(self, path, dtype):
        self.f, self.dtype, self.lengths = open(path, "wb"), dtype, []
    def add_document(self, ids, lengths):
        self.f.write(np.asarray(ids, dtype=self.dtype).tobytes())
        self.lengths.extend(lengths)
    def finalize(self, idx_path):
        self.f.close()
        np.save(idx_path, np.asarray(self.lengths, dtype=np.int32))

def run():
    dtype = np.uint16 if TOK.get_vocab_size() < 65500 else np.int32
    builder = (IndexedDatasetBuilder(out_prefix + ".bin", dtype=dtype) if IndexedDatasetBuilder
               else NumpyBuilder(out_prefix + ".bin", dtype))
    tokens = 0
    t0, c0 = time.perf_counter(), time.process_time()
    if workers > 0:
        pool = Pool(workers)
        docs = pool.imap(encode, texts, 32)
    else:
        docs = map(encode, texts)
    for ids, _ in docs:
        builder.add_document(ids, [len(ids)])
        tokens += len(ids)
    builder.finalize(out_prefix + ".idx")
    seconds = time.perf_counter() - t0
    if workers > 0:
        pool.close(); pool.join()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the pool's workers, joined above
    return seconds, time.process_time() - c0 + children.ru_utime + children.ru_stime, tokens

for text in texts[:2000]:  # warm the tokenizer's word cache, as gpupipe's rows are warmed
    encode(text)
seconds, cpu, tokens = run()
print(json.dumps({"seconds": seconds, "cpu": cpu, "tokens": tokens, "writer": writer}))
"""


def read_texts(path: str, limit: int | None) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    texts = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if limit is not None and len(texts) >= limit:
                break
            text = json.loads(line).get("text")
            if text:
                texts.append(text)
    return texts


def ours(tok, texts: list[str], batch: int, out: Path, mode: str, eos: int,
         pad: int | None, fast: bool = True) -> tuple[float, float, int, list[str]]:
    """encode_batch per partition-sized batch + a packer, as the tokenize and pack stages do; returns wall and CPU
    seconds, stream tokens and the shards' sha256s."""
    from gpupipe.tokens.bestfit import BestFitPacker
    from gpupipe.tokens.megatron import MegatronWriter
    from gpupipe.tokens.packing import StreamPacker
    from gpupipe.tokens.tokenizer import encode_batch, token_dtype

    dtype = token_dtype(tok.get_vocab_size())
    t0, c0 = time.perf_counter(), time.process_time()
    if mode == "bestfit":
        packer = BestFitPacker(out, 2048, eos, pad, dtype)
    else:
        packer = StreamPacker(out, 2048, eos, dtype)
    mega = MegatronWriter(out / "megatron", dtype, eos) if mode == "megatron" else None
    for start in range(0, len(texts), batch):
        docs = [d for d in encode_batch(tok, texts[start:start + batch], fast=fast) if d.size]
        packer.add_many(docs, "bench")
        if mega is not None:
            mega.add_many(docs)
    summary = packer.finish()
    if mega is not None:
        mega.finish()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return seconds, cpu, summary["stream_tokens"], [s["sha256"] for s in summary["shards"]]


def peer(python: str, tok_path: Path, texts: list[str], workers: int, tmp: Path) -> dict:
    """One timed run of the peer in a fresh process (after a warm-up of its tokenizer's cache)."""
    texts_path = tmp / "texts.jsonl"
    if not texts_path.exists():
        with open(texts_path, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    from gpupipe.tokens.tokenizer import EOS_TOKEN

    cmd = [python, "-c", PEER, str(tok_path), str(texts_path), str(tmp / f"peer{workers}"), str(workers), EOS_TOKEN]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"peer failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def get_tokenizer(args, texts: list[str], tmp: Path):
    from gpupipe.tokens.bestfit import PAD_TOKEN
    from gpupipe.tokens.tokenizer import EOS_TOKEN, load_tokenizer, save_tokenizer, train_byte_level_bpe

    if args.tokenizer:
        return load_tokenizer(args.tokenizer), Path(args.tokenizer)
    t0 = time.perf_counter()
    tok = train_byte_level_bpe(texts[:args.train_docs], args.vocab_size, (EOS_TOKEN, PAD_TOKEN))
    path = tmp / "tokenizer.json"
    save_tokenizer(tok, path)
    print(f"trained a byte-level BPE ({tok.get_vocab_size()} ids) on {min(len(texts), args.train_docs)} docs "
          f"in {time.perf_counter() - t0:.1f} s (not timed below)")
    return tok, path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus")
    ap.add_argument("--docs", type=int, default=None, help="first N documents (default: all)")
    ap.add_argument("--workers", type=int, default=2, help="threads for us, processes for the peer (2 = CI size)")
    ap.add_argument("--batch", type=int, default=500, help="documents per encode_batch call (a partition)")
    ap.add_argument("--tokenizer", help="a tokenizer.json to use; default: train one (not timed)")
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--train-docs", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--megatron-python", default=os.environ.get("GPUPIPE_MEGATRON_PYTHON", sys.executable),
                    help="the interpreter with megatron-core and tokenizers for the peer "
                         "(default: $GPUPIPE_MEGATRON_PYTHON, else this one)")
    args = ap.parse_args()
    os.environ["RAYON_NUM_THREADS"] = str(args.workers)  # read when the tokenizers thread pool starts

    from gpupipe.tokens.bestfit import PAD_TOKEN
    from gpupipe.tokens.tokenizer import encode_batch, encoder_info, eos_id

    texts = read_texts(args.corpus, args.docs)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    print(f"{len(texts)} docs, {mb:.1f} MB of UTF-8 text; {args.workers} workers, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        tok, tok_path = get_tokenizer(args, texts, tmp)
        eos, pad = eos_id(tok), tok.token_to_id(PAD_TOKEN)
        labels = {"stream": "gpupipe stream", "bestfit": "gpupipe best-fit",
                  "megatron": "gpupipe stream + megatron .bin/.idx",
                  "stream-hf": "gpupipe stream, tokenizers encode_batch_fast",
                  "peer": f"megatron preprocess ({args.workers} proc)", "peer1": "megatron plain loop (1 proc)"}
        if pad is None:
            del labels["bestfit"]
        t0 = time.perf_counter()
        info = encoder_info(tok)  # builds and checks the fast encoder once per tokenizer
        print(f"gpupipe encoder: {info} (ready in {time.perf_counter() - t0:.2f} s, not timed below)")
        encode_batch(tok, texts[:2000])  # warm the tokenizer's word cache, as the peer does
        encode_batch(tok, texts[:2000], fast=False)
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in labels}
        tokens: dict[str, int] = {}
        shards: dict[str, list[str]] = {}
        # Rounds go through every path in turn, so load from elsewhere on the machine hits all paths alike;
        # each path keeps its best round.
        for _ in range(args.repeat):
            for mode in labels:
                if mode.startswith("peer"):
                    r = peer(args.megatron_python, tok_path, texts, args.workers if mode == "peer" else 0, tmp)
                    labels[mode] = labels[mode].split(" [")[0] + f" [{r['writer']}]"
                    seconds, cpu, tokens[mode] = r["seconds"], r["cpu"], r["tokens"]
                else:
                    seconds, cpu, tokens[mode], shards[mode] = ours(tok, texts, args.batch, tmp / f"ours-{mode}",
                                                                    mode.removesuffix("-hf"), eos, pad,
                                                                    fast=mode != "stream-hf")
                times[mode].append((seconds, cpu))
        rows = [(labels[m], *min(times[m]), tokens[m]) for m in labels]

    base = rows[0][1]
    print(f"\n{'path':<66} {'seconds':>7} {'cpu s':>6} {'tokens':>9} {'Mtok/s':>6} {'MB/s':>5} {'ratio':>5}")
    for label, seconds, cpu, n in rows:
        print(f"{label:<66} {seconds:7.2f} {cpu:6.2f} {n:9d} {n / seconds / 1e6:6.2f} {mb / seconds:5.1f} "
              f"{seconds / base:5.2f}")
    if len(set(tokens.values())) > 1:
        print(f"\nWARNING: the paths disagree on the token count: {tokens}")
    same = shards["stream"] == shards["stream-hf"]
    print(f"\nshards of gpupipe stream with the fast encoder and with tokenizers' encoder: "
          f"{'byte-identical' if same else 'DIFFERENT'} ({len(shards['stream'])} shards, sha256 compared)")
    print("ratio = this path's time / gpupipe stream's time: above 1, gpupipe stream is that many times faster "
          "(target: >= 2 against the peer on 2 cores);\ncpu s = CPU seconds of all threads and processes: "
          "wall time near cpu time means the run got one core, not two (a busy machine)")


if __name__ == "__main__":
    main()
