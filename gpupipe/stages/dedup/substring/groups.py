"""Partition groups: consecutive partitions holding up to `group_bytes` of text, each one suffix array."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpupipe.columns import text_array


def _text_bytes_on_disk(path: Path) -> int:
    """Uncompressed size of the `text` column from Parquet metadata: a cheap estimate for grouping."""
    meta = pq.ParquetFile(path).metadata
    cols = [meta.schema.column(j).path for j in range(meta.num_columns)]
    j = cols.index("text")
    return sum(meta.row_group(i).column(j).total_uncompressed_size for i in range(meta.num_row_groups))


def partition_groups(paths: list[Path], group_bytes: int) -> list[list[int]]:
    """Consecutive partitions up to group_bytes of text each (a larger partition is a group of its own)."""
    groups: list[list[int]] = []
    size = 0
    for i, p in enumerate(paths):
        b = _text_bytes_on_disk(p)
        if not groups or size + b > group_bytes:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += b
    return groups


def read_group(paths: list[Path], parts: list[int]) -> pa.Table:
    """doc_index, part, text of a group's partitions, in doc_index order."""
    tables = [pq.read_table(p, columns=["doc_index", "text"]).append_column(
        "part", pa.array(np.full(pq.ParquetFile(p).metadata.num_rows, part, dtype=np.int64)))
        for p, part in zip(paths, parts)]
    t = pa.concat_tables(tables)
    di = t["doc_index"].to_numpy()
    if len(di) > 1 and np.any(di[1:] < di[:-1]):
        t = t.take(np.argsort(di, kind="stable"))
    return t.set_column(t.schema.get_field_index("text"), "text", text_array(t["text"])).combine_chunks()
