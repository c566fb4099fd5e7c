"""The exchange between the phases of a global stage: files under one folder (`StageDir.exchange`).

Two kinds of files, each kind in a folder named for what it holds:

  shuffle   `NAME/from-PPPPPP.arrow`: everything producer P (a partition, a bucket, a group) sends, in ONE file,
            its rows grouped by destination (a bucket, a partition, a batch), each destination's rows in record
            batches of their own; the schema's metadata maps destination → batches. A consumer reads destination d
            from every producer's file, in producer order, batch by batch (random access into the file). So a
            shuffle of n producers into b destinations is n files, not n × b.
  keyed     `NAME/KKKKKK.arrow`: one table per key (a partition's band hashes, a bucket's edges).

The files are Arrow IPC, uncompressed, read through a memory map: they live for one attempt of one stage and are
read back on the same file system, so Parquet's encoding and compression would cost on both sides without paying
back (most of what moves is hashes, which do not compress). Files are written atomically
(`io.parts.atomic_output`), so a file under its real name is whole. The folder belongs to one attempt of the
stage: `reset` at its start, `remove` at its end; a run resumed after a kill starts the stage's phases again from
the first (`docs/design.md`, global stages).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from gpupipe.io.parts import atomic_output

SUFFIX = ".arrow"
META_KEY = b"gpupipe.exchange"
ROWS_PER_GROUP = 1 << 20    # a destination with more rows gets several record batches


def _write(path: Path, table: pa.Table, pieces: list[tuple[int, int]] | None = None) -> None:
    """`table` as an Arrow IPC file, atomically: one record batch per (start, end) piece, else as it is chunked."""
    with atomic_output(path) as tmp:
        with pa.ipc.new_file(tmp, table.schema) as w:
            if pieces is None:
                w.write_table(table)
            for s, e in pieces or []:
                w.write_table(table.slice(s, e - s), max_chunksize=max(e - s, 1))


def _open(path: Path) -> pa.ipc.RecordBatchFileReader:
    return pa.ipc.open_file(pa.memory_map(str(path)))


def _table(rows: pa.Table | pd.DataFrame) -> pa.Table:
    return rows if isinstance(rows, pa.Table) else pa.Table.from_pandas(rows, preserve_index=False)


class Exchange:
    """One global stage's exchange folder. Picklable (a path): tasks on any worker open the same files."""

    def __init__(self, root: str | Path):
        self.root = Path(root)   # the stage's exchange folder (run/rundir.py StageDir.exchange)

    def __repr__(self) -> str:
        return f"Exchange({self.root})"

    def reset(self) -> None:
        """Start empty: never mix in files of an interrupted attempt."""
        shutil.rmtree(self.root, ignore_errors=True)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # -- shuffles ------------------------------------------------------------------------------------------------
    def send(self, name: str, producer: int, rows: pa.Table | pd.DataFrame, dest) -> Path:
        """Write producer's rows, routed by `dest` (a destination number per row), as one file."""
        table = _table(rows)
        dest = np.asarray(dest, dtype=np.int64)
        if len(dest) != table.num_rows:
            raise ValueError(f"exchange {name}: {table.num_rows} rows but {len(dest)} destinations")
        order = np.argsort(dest, kind="stable")   # rows keep their order within a destination
        # one chunk, so that each piece below is exactly one record batch (the metadata counts batches)
        table, dest = table.take(pa.array(order, pa.int64())).combine_chunks(), dest[order]
        bounds = np.flatnonzero(np.r_[True, dest[1:] != dest[:-1]]) if len(dest) else np.zeros(0, np.int64)
        ends = np.r_[bounds[1:], len(dest)]
        groups: dict[str, list[int]] = {}
        pieces = []
        for a, b in zip(bounds.tolist(), ends.tolist()):
            first = len(pieces)
            pieces += [(s, min(s + ROWS_PER_GROUP, b)) for s in range(a, b, ROWS_PER_GROUP)]
            groups[str(int(dest[a]))] = [first, len(pieces) - first]
        meta = dict(table.schema.metadata or {})
        meta[META_KEY] = json.dumps({"producer": producer, "destinations": groups}).encode()
        table = table.replace_schema_metadata(meta)
        path = self.root / name / f"from-{producer:06d}{SUFFIX}"
        _write(path, table, pieces)
        return path

    def producer_files(self, name: str) -> list[Path]:
        return sorted((self.root / name).glob(f"from-*{SUFFIX}"))

    @staticmethod
    def _groups(f: pa.ipc.RecordBatchFileReader) -> dict[int, tuple[int, int]]:
        meta = json.loads(f.schema.metadata[META_KEY])
        return {int(d): (a, n) for d, (a, n) in meta["destinations"].items()}

    def destinations(self, name: str) -> list[int]:
        """Every destination some producer sent rows to, ascending."""
        out: set[int] = set()
        for p in self.producer_files(name):
            out.update(self._groups(_open(p)))
        return sorted(out)

    def receive_tables(self, name: str, dest: int, columns: list[str] | None = None) -> list[tuple[int, pa.Table]]:
        """(producer, its rows for `dest`) for each producer that sent `dest` any, in producer order. The tables
        are views of the memory-mapped files (no copy)."""
        out = []
        for p in self.producer_files(name):
            f = _open(p)
            span = self._groups(f).get(dest)
            if span is None:
                continue
            a, n = span
            t = pa.Table.from_batches([f.get_batch(i) for i in range(a, a + n)], schema=f.schema)
            out.append((int(p.stem.split("-")[1]), t.select(columns) if columns is not None else t))
        return out

    def receive(self, name: str, dest: int, columns: list[str] | None = None,
                producer_column: str | None = None) -> pd.DataFrame | None:
        """All rows sent to `dest` as one pandas frame (producer order), or None when no producer sent any.
        `producer_column` adds the producer's number as a column of that name."""
        frames = [t.to_pandas() if producer_column is None else t.to_pandas().assign(**{producer_column: p})
                  for p, t in self.receive_tables(name, dest, columns)]
        return pd.concat(frames, ignore_index=True) if frames else None

    # -- keyed files ---------------------------------------------------------------------------------------------
    def put(self, name: str, key: int, rows: pa.Table | pd.DataFrame) -> Path:
        path = self.root / name / f"{key:06d}{SUFFIX}"
        _write(path, _table(rows))
        return path

    def keys(self, name: str) -> list[int]:
        return sorted(int(p.stem) for p in (self.root / name).glob(f"[0-9]*{SUFFIX}"))

    def get_table(self, name: str, key: int, columns: list[str] | None = None) -> pa.Table | None:
        """The table put under `key` (a view of the memory-mapped file), or None."""
        path = self.root / name / f"{key:06d}{SUFFIX}"
        if not path.exists():
            return None
        t = _open(path).read_all()
        return t.select(columns) if columns is not None else t

    def get(self, name: str, key: int, columns: list[str] | None = None) -> pd.DataFrame | None:
        t = self.get_table(name, key, columns)
        return None if t is None else t.to_pandas()

    def files(self) -> list[Path]:
        """Every file in the exchange (for tests and the file-count bound): its own, and the side tables a phase's
        partition runner writes into it (Parquet parts)."""
        return sorted(p for p in self.root.rglob("*") if p.is_file() and p.suffix in (SUFFIX, ".parquet"))


__all__ = ["Exchange", "ROWS_PER_GROUP"]
