"""Parquet reader: one document or Rejected per row.

Row groups are read one at a time so a corrupt one costs only its own rows: each of its
rows not yet yielded becomes an ``unreadable_record`` (the count comes from the footer
metadata), and reading continues with the next row group. A text over ``max_doc_bytes`` is a ``doc_too_large``
rejection (Parquet stores a value whole, so a batch holds it while it is read: the bound is on what goes on).
"""
from __future__ import annotations

import os
from typing import Iterator

from .storage import file_size, is_url
from .records import (MAX_DOC_BYTES, IdAllocator, Item, Rejected, ReaderError, missing_text_detail, open_binary, own_id,
                      text_document)

BATCH_ROWS = 4096  # bounds memory: a batch of long documents can be large


def iter_parquet(path, text_field: str = "text", max_doc_bytes: int = MAX_DOC_BYTES) -> Iterator[Item]:
    """Yield a document dict or Rejected for every row of a Parquet file."""
    import pyarrow.parquet as pq

    f = open_binary(path)  # a missing/unreadable file gets the same message as other formats
    if file_size(f) == 0:
        f.close()
        raise ReaderError(f"cannot open {os.fspath(path)!r} as Parquet: empty file (0 bytes)")
    try:
        # A local file by name (pyarrow's own reader); a URL through the streamed file: ranged reads of the footer
        # and of one row group at a time. ParquetFile closes neither, so `f` is closed with it (_closing).
        pf = pq.ParquetFile(f if is_url(os.fspath(path)) else os.fspath(path))
    except Exception as e:  # ArrowInvalid for "not a parquet file", OSError, ...
        f.close()
        raise ReaderError(f"cannot open {os.fspath(path)!r} as Parquet: {e}") from e
    if not is_url(os.fspath(path)):
        f.close()
        f = None
    if text_field not in pf.schema_arrow.names:
        return _closing(_no_text_column(pf, os.fspath(path), text_field), f)
    return _closing(_items(pf, os.fspath(path), text_field, max_doc_bytes), f)


def _closing(items: Iterator[Item], f) -> Iterator[Item]:
    try:
        yield from items
    finally:
        if f is not None:
            f.close()


def _no_text_column(pf, path: str, text_field: str) -> Iterator[Rejected]:
    """Every row is missing_text, counted from the footer without reading the data; the detail lists the columns."""
    detail = missing_text_detail(None, text_field, pf.schema_arrow.names)
    with pf:
        for row in range(pf.metadata.num_rows):
            yield Rejected("missing_text", f"{path} row {row}: {detail}", row)


def _items(pf, path: str, text_field: str, limit: int) -> Iterator[Item]:
    ids, name, row = IdAllocator(), os.path.basename(path), 0
    with pf:
        for rg in range(pf.metadata.num_row_groups):
            expected = pf.metadata.row_group(rg).num_rows
            done = 0
            batches = pf.iter_batches(batch_size=BATCH_ROWS, row_groups=[rg])
            while True:
                try:
                    batch = next(batches, None)
                    rows = _rows(batch) if batch is not None else None
                except Exception as e:  # corrupt pages, bad encodings, invalid UTF-8 in strings
                    yield from _lost_rows(path, rg, row + done, expected - done, e)
                    break
                if rows is None:
                    break
                for record in rows:
                    yield _item(record, row + done, path, name, ids, text_field, limit)
                    done += 1
            row += max(done, expected)


def _rows(batch) -> list[dict]:
    columns = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
    return [{k: col[j] for k, col in columns.items()} for j in range(batch.num_rows)]


def _lost_rows(path: str, rg: int, first_row: int, count: int, err: Exception) -> Iterator[Rejected]:
    detail = f"row group {rg} unreadable ({type(err).__name__}: {str(err)[:200]})"
    for k in range(max(count, 1)):  # one per row when the footer tells us how many
        yield Rejected("unreadable_record", f"{path} row {first_row + k}: {detail}", first_row + k)


def _item(record: dict, row: int, path: str, name: str, ids: IdAllocator, text_field: str,
          limit: int = MAX_DOC_BYTES) -> Item:
    text = record.get(text_field)
    if isinstance(text, (bytes, bytearray)):  # a binary text column
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            return Rejected("decode_error", f"{path} row {row}: field {text_field!r} is not valid UTF-8 "
                                            f"(byte {e.start})", row)
    if not isinstance(text, str) or not text.strip():
        return Rejected("missing_text", f"{path} row {row}: {missing_text_detail(text, text_field, record)}", row)
    if len(text) * 4 > limit and (size := len(text.encode("utf-8", "surrogatepass"))) > limit:
        return Rejected("doc_too_large", f"{path} row {row}: text of {size} bytes, more than max_doc_bytes ({limit})",
                        row)
    rid = ids.claim(own_id(record.get("id")), f"{name}:{row}")
    return text_document(record, text, rid, text_field)
