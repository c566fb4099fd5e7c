"""Shards on object storage (or any fsspec URL) for ShardDataset: blocks read by ranged requests, through a local
cache bounded in bytes.

A request fetches a *chunk*: `chunk_blocks` consecutive blocks of one shard (one HTTP range). The epoch's order
(sampler.py) walks the shards' blocks in windows of `buffer_size` consecutive blocks, permuted within the window,
so a chunk as large as the window serves every block of that window from one request. Chunks are kept in memory,
least recently used dropped first once `max_bytes` would be exceeded; each process (each DataLoader worker) has
its own cache, so a loader holds at most num_workers × max_bytes. The bytes are the same as a memmap of the local
file would give, so the order, the items and the resume state do not depend on where the shards are.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from gpupipe.io import storage


class ChunkCache:
    """LRU of (url, chunk) → array of blocks, bounded by the bytes it holds (always at least one chunk)."""

    def __init__(self, max_bytes: int):
        if max_bytes < 1:
            raise ValueError(f"cache_bytes must be >= 1, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self.held = 0
        self.requests = 0   # ranged reads made (tests, tuning)
        self._chunks: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()

    def get(self, url: str, index: int, fetch) -> np.ndarray:
        key = (url, index)
        arr = self._chunks.get(key)
        if arr is not None:
            self._chunks.move_to_end(key)
            return arr
        arr = fetch()
        self.requests += 1
        while self._chunks and self.held + arr.nbytes > self.max_bytes:
            _, old = self._chunks.popitem(last=False)
            self.held -= old.nbytes
        self._chunks[key] = arr
        self.held += arr.nbytes
        return arr


class RemoteShard:
    """A shard file at a URL, indexed like the (blocks, seq_len) memmap of a local one."""

    def __init__(self, url: str, blocks: int, seq_len: int, dtype: np.dtype, chunk_blocks: int,
                 cache: ChunkCache):
        self.url, self.blocks, self.seq_len, self.dtype = url, int(blocks), int(seq_len), np.dtype(dtype)
        self.chunk_blocks, self.cache = max(1, int(chunk_blocks)), cache

    def _fetch(self, c: int) -> np.ndarray:
        first = c * self.chunk_blocks
        n = min(self.chunk_blocks, self.blocks - first)
        row = self.seq_len * self.dtype.itemsize
        data = storage.read_bytes(self.url, first * row, (first + n) * row)
        if len(data) != n * row:
            raise OSError(f"{self.url}: read {len(data)} bytes at {first * row}, expected {n * row}")
        # a writable copy: torch.from_numpy neither copies nor warns, as with the local copy-on-write map
        return np.frombuffer(bytearray(data), dtype=self.dtype).reshape(n, self.seq_len)

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < self.blocks:
            raise IndexError(f"block {i} of {self.url} out of range [0, {self.blocks})")
        c = i // self.chunk_blocks
        return self.cache.get(self.url, c, lambda: self._fetch(c))[i - c * self.chunk_blocks]
