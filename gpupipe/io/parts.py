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
    """Atomically (temp name, then rename), zstd-compressed."""
    with atomic_output(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_part(path: str | os.PathLike) -> pd.DataFrame:
    return pq.read_table(path).to_pandas()


def part_paths(folder: str | os.PathLike) -> list[Path]:
    """The parts of a stage in input order (their names sort in input order)."""
    return sorted(Path(folder).glob("part-*.parquet"))


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
