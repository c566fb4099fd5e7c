"""Loader throughput: ShardDataset through torch's DataLoader vs a plain numpy memmap reader.

Rows (tokens/s; every row reads the same blocks, int64 out, page cache warm):
  memmap      plain numpy: each shard's memmap read sequentially, B blocks at a time, .astype(int64)
  dataset     ShardDataset (shuffled order) in the main process, DataLoader(batch_size=B,
              num_workers=0): what ONE worker can produce, collation included
  +fields     the same with position_ids and loss_mask
  loader      ResumableLoader with --workers worker processes: end to end, IPC included
The ratio is against the memmap row. Target (issue 6): >= 10M tokens/s per worker.

Usage:  python profiling/bench_loader.py [SHARD_DIR] [--workers 2] [--batch-size 32]
Without SHARD_DIR, synthesizes --tokens tokens (default 64M) of seq_len --seq-len in a temp dir.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import numpy as np


def synthesize(out_dir: str, tokens: int, seq_len: int, seed: int = 0) -> str:
    from gpupipe.tokens import StreamPacker, write_manifest

    rng = np.random.default_rng(seed)
    packer = StreamPacker(out_dir, seq_len, 0, np.uint16)
    made = 0
    while made < tokens:  # ~16M tokens at a time keeps memory low
        lengths = rng.integers(50, 2000, 16_000)
        flat = rng.integers(1, 50_000, int(lengths.sum()), dtype=np.uint16)
        packer.add_many(np.split(flat, np.cumsum(lengths)[:-1]))
        made += flat.size + lengths.size
    summary = packer.finish()
    write_manifest(out_dir, summary, seq_len=seq_len, dtype=np.uint16, vocab_size=50_000, eos_id=0,
                   tokenizer_sha256="0" * 64, tokenizer_file="tokenizer.json", config_hash="bench")
    return out_dir


def memmap_reader(shard_dir: str, batch: int) -> int:
    """The baseline: sequential reads of every block, shard by shard."""
    from gpupipe.tokens import read_manifest

    m = read_manifest(shard_dir)
    seq_len, n = m["seq_len"], 0
    for s in m["shards"]:
        mm = np.memmap(os.path.join(shard_dir, s["file"]), dtype=np.dtype(m["dtype"]).newbyteorder("<"),
                       mode="r", shape=(s["sequences"], seq_len))
        for i in range(0, s["sequences"], batch):
            n += mm[i:i + batch].astype(np.int64).size
    return n


def through_loader(loader) -> int:
    return sum(b["input_ids"].numel() for b in loader)


def timed(fn) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = fn()
    return time.perf_counter() - t0, n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shard_dir", nargs="?", help="a gpupipe shard directory (default: synthesize one)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64_000_000, help="tokens to synthesize")
    ap.add_argument("--seq-len", type=int, default=2048, help="seq_len of synthesized shards")
    args = ap.parse_args(argv)

    import torch
    from torch.utils.data import DataLoader

    from gpupipe.loader import ResumableLoader, ShardDataset

    tmp = None
    shard_dir = args.shard_dir
    if shard_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_loader_")
        t0 = time.perf_counter()
        shard_dir = synthesize(tmp.name, args.tokens, args.seq_len)
        print(f"synthesized {args.tokens / 1e6:.0f}M tokens in {time.perf_counter() - t0:.1f}s")

    B = args.batch_size
    probe = ShardDataset(shard_dir, rank=0, world_size=1)
    print(f"python {platform.python_version()} | torch {torch.__version__} | {os.cpu_count()} CPUs | "
          f"{probe.num_blocks} blocks x {probe.seq_len} tokens ({probe.dtype.name}) in {len(probe.files)} "
          f"shards | batch {B}")
    memmap_reader(shard_dir, B)  # warm the page cache: every row then reads from memory

    def dataset(**kw):
        return ShardDataset(shard_dir, seed=1, rank=0, world_size=1, **kw)

    rows = [
        ("memmap", 1, lambda: memmap_reader(shard_dir, B)),
        ("dataset", 1, lambda: through_loader(DataLoader(dataset(batch_size=B), batch_size=B))),
        ("+fields", 1, lambda: through_loader(DataLoader(
            dataset(batch_size=B, return_positions=True, return_loss_mask=True), batch_size=B))),
        ("loader", args.workers, lambda: through_loader(
            ResumableLoader(dataset(), batch_size=B, num_workers=args.workers))),
    ]
    print(f"{'reader':<9} {'workers':>7} {'seconds':>8} {'Mtok/s':>9} {'per worker':>11} {'vs memmap':>10}")
    base, per_worker = None, {}
    for name, workers, fn in rows:
        secs, n = timed(fn)
        rate = n / secs
        base = base or rate
        per_worker[name] = rate / max(workers, 1)
        print(f"{name:<9} {workers:>7} {secs:>8.2f} {rate / 1e6:>9.1f} {per_worker[name] / 1e6:>11.1f} "
              f"{rate / base:>9.2f}x")
    ok = per_worker["dataset"] >= 10e6
    print(f"target >= 10M tokens/s per worker: {'met' if ok else 'NOT met'} "
          f"({per_worker['dataset'] / 1e6:.1f}M in one worker)")
    if tmp is not None:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
