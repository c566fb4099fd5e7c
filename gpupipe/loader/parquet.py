"""Format B shards (`pack: {format: parquet}`, manifest `shard_format: parquet`) for ShardDataset.

A shard-NNNNN.parquet holds one row per block, column `input_ids` a fixed-size list of `seq_len` ids
(gpupipe.tokens.packing.parquet_schema). Parquet is compressed, so it cannot be memory-mapped: a block is served
from its row group, decoded whole on first use and kept in the loader's ChunkCache (bounded in bytes, per
process). The epoch's order walks windows of consecutive blocks (sampler.py), so one decoded row group serves many
blocks in a row. The blocks are the same ids as the .bin shards of the same run: items, order and resume state do
not depend on the shard format.
"""
from __future__ import annotations

import numpy as np

from gpupipe.io import storage
from gpupipe.tokens.packing import parquet_schema

from .remote import ChunkCache


def open_parquet(location: str):
    """pyarrow's reader: a local file by name, a URL through a streamed file (ranged reads)."""
    import pyarrow.parquet as pq  # not at import time: only Parquet shards need it

    return pq.ParquetFile(storage.open_input(location) if storage.is_url(location) else location)


def check_parquet_shard(location: str, name: str, blocks: int, seq_len: int, dtype: str) -> None:
    """Raise ValueError unless the file has the Format B schema for (dtype, seq_len) and `blocks` rows."""
    pf = open_parquet(location)
    want, got = parquet_schema(dtype, seq_len), pf.schema_arrow.remove_metadata()
    if not got.equals(want):
        raise ValueError(f"{name}: Parquet schema {got} is not the packed-shard schema {want}")
    if pf.metadata.num_rows != blocks:
        raise ValueError(f"{name}: {pf.metadata.num_rows} rows, manifest says {blocks} blocks")


class ParquetShard:
    """A Parquet shard indexed like the (blocks, seq_len) memmap of a .bin one."""

    def __init__(self, location: str, blocks: int, seq_len: int, dtype: np.dtype, cache: ChunkCache):
        self.location, self.blocks, self.seq_len, self.dtype = location, int(blocks), int(seq_len), np.dtype(dtype)
        self.cache = cache
        self._pf = None
        self._first_row: np.ndarray | None = None   # first block of each row group, then the total

    def _file(self):
        if self._pf is None:
            self._pf = open_parquet(self.location)
            md = self._pf.metadata
            self._first_row = np.cumsum([0] + [md.row_group(g).num_rows for g in range(md.num_row_groups)])
        return self._pf

    def _read(self, g: int) -> np.ndarray:
        col = self._file().read_row_group(g, columns=["input_ids"]).column(0).combine_chunks()
        # a writable copy in the shard's little-endian dtype: torch.from_numpy neither copies nor warns, as with
        # the copy-on-write map of a .bin shard
        return np.array(col.flatten().to_numpy(zero_copy_only=False), dtype=self.dtype).reshape(-1, self.seq_len)

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < self.blocks:
            raise IndexError(f"block {i} of {self.location} out of range [0, {self.blocks})")
        self._file()
        g = int(np.searchsorted(self._first_row, i, side="right")) - 1
        return self.cache.get(self.location, g, lambda: self._read(g))[i - int(self._first_row[g])]
