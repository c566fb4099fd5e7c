"""Partition files: every stage's output is a folder of Parquet parts (zstd), written under a temp name then renamed,
so a crash never leaves a half file that looks whole."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside `path`; on success rename it to `path`, on any failure (disk full, interrupt)
    remove it. A file under its real name is always whole, and a failed write leaves nothing behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_part(df: pd.DataFrame, path: str | os.PathLike) -> None:
    write_table(pa.Table.from_pandas(df, preserve_index=False), path)


def write_table(table: pa.Table, path: str | os.PathLike) -> None:
    """Atomically (temp name, then rename), zstd-compressed.

    Long values (texts, token lists, URLs) are written without dictionary encoding and min/max statistics: they
    are nearly all distinct, so Parquet would build a dictionary only to abandon it, and reading it back costs
    twice as much (a 25 MB part of texts: written in 0.07 s instead of 0.10, read in 0.03 s instead of 0.13)."""
    plain = _long_value_columns(table)
    keep = [name for name in table.column_names if name not in plain]
    with atomic_output(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", use_dictionary=keep, write_statistics=keep)


def _long_value_columns(table: pa.Table, mean_bytes: int = 32) -> set[str]:
    """Names of the string, binary and list columns whose values average more than `mean_bytes`."""
    out = set()
    for name, col in zip(table.column_names, table.columns):
        t = col.type
        if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t) or pa.types.is_list(t) or pa.types.is_large_list(t)):
            if len(col) and col.nbytes > mean_bytes * len(col):
                out.add(name)
    return out


def read_part(path: str | os.PathLike, columns: list[str] | None = None) -> pd.DataFrame:
    """A part as pandas; `columns`: only those of them the part has (None: all)."""
    return pq.read_table(path, columns=part_columns(path, columns)).to_pandas()


def part_columns(path: str | os.PathLike, columns: list[str] | None) -> list[str] | None:
    """The names of `columns` the part at `path` has, in its order (None: all of them)."""
    if columns is None:
        return None
    wanted = set(columns)
    return [name for name in pq.read_schema(path).names if name in wanted]


def part_paths(folder: str | os.PathLike) -> list[Path]:
    """The parts of a stage in input order (their names sort in input order)."""
    return sorted(Path(folder).glob("part-*.parquet"))


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
