"""JSONL in blocks, parsed by Arrow: the read stage's fast path for plain, regular JSONL.

`jsonl.iter_jsonl` reads a line at a time in Python (orjson, one dict per record): exact about every odd record, but
bound to one core by the GIL, and most of a run's read time. Most crawl JSONL is regular: UTF-8, one flat object a
line, every record with the same fields. Such a file is parsed here in blocks of about BLOCK_BYTES by Arrow's JSON
reader (C++, the GIL released; one thread a block: the read stage already runs a task per core) into the columns
`text_document` would have made.

A block is taken only when it is certain to give what the line reader gives; anything else raises `Irregular` and the
caller reads the whole file the line-at-a-time way (so one file is never read two ways, and the line reader's
rejections and messages stay the only ones): a blank line, a CR, a BOM, a line over max_doc_bytes or longer than a
block, invalid UTF-8, a lone-surrogate escape, a value Arrow types otherwise than json does (a timestamp-looking
string, a 19-digit integer, a nested value), a field missing or null in some records (pandas would order the columns
otherwise), a text that is not a string, an `html` field, a damaged or cut-off compressed stream.
"""
from __future__ import annotations

import io
import os
import re
import zlib
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from .jsonl import _SURROGATE_ESCAPE, GZIP_MAGIC, UTF8_BOM, ZSTD_MAGIC, _decode
from .records import ReaderError, open_binary, text_encoding

# decompressed bytes a block holds (about: it ends at a line's end); under glibc's largest mmap threshold (32 MiB), so
# a freed block's memory is reused for the next instead of mapped and zeroed anew
BLOCK_BYTES = 8 << 20
_FEED = 1 << 20            # compressed bytes a step: errors need no small feeds here, the line reader redoes the file
# the characters str.strip() removes (str.isspace(), Python 3.10-3.13; a test recomputes them): a text of only these
# is `missing_text` to the line reader
_PY_WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
                  "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
# 19 digits not after a digit or a point: maybe an integer beyond 64 bits, which Arrow reads as a float (a float's
# long fraction is no such integer)
_LONG_INTEGER = re.compile(rb"(?<![0-9.])[0-9]{19}")
_PLAIN = (pa.types.is_string, pa.types.is_int64, pa.types.is_boolean, pa.types.is_float64)


class Irregular(Exception):
    """This file needs the line-at-a-time reader (the message says why: logged at debug level)."""


@dataclass
class Block:
    """Records first_line ... first_line + rows - 1 (1-based line numbers) of a file, as text_document's columns:
    id (the record's own, None where it has none usable), url, text, then its other fields in the file's order."""
    table: pa.Table
    first_line: int
    empty_text: np.ndarray   # bool per row: a text of whitespace only (the line reader's missing_text)


def iter_blocks(path, text_field: str, max_doc_bytes: int) -> Iterator[Block]:
    """The file's records in Blocks; raises Irregular (also mid-file) where the file is not for this reader."""
    try:
        f = open_binary(path)
    except ReaderError as e:   # the line reader counts it as one unreadable_record
        raise Irregular(str(e)) from None
    try:
        first_line = 1
        for data in _line_blocks(_chunks(f)):
            table, empty = _parse(data, text_field, max_doc_bytes)
            yield Block(table, first_line, empty)
            first_line += table.num_rows
    finally:
        f.close()


def _chunks(f) -> Iterator[bytes]:
    magic = f.read(4)
    f.seek(0)
    if magic.startswith(GZIP_MAGIC):
        chunks = _decode(f, lambda: zlib.decompressobj(31), _FEED, capped=True)
    elif magic == ZSTD_MAGIC:
        import zstandard
        chunks = _decode(f, zstandard.ZstdDecompressor().decompressobj, _FEED, capped=False)
    else:
        chunks = iter(lambda: f.read(BLOCK_BYTES), b"")
    try:
        yield from chunks
    except Exception as e:   # zlib.error, EOFError, ZstdError, OSError: the line reader keeps what comes before
        raise Irregular(f"stream breaks: {type(e).__name__}: {e}") from None


def _line_blocks(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Blocks of whole lines, each ending with a newline (the last as the file ends)."""
    pending, held, first = [], 0, True
    for chunk in chunks:
        if first and chunk:
            if text_encoding(chunk[:4].ljust(4, b" ")) != "utf-8":
                raise Irregular("not UTF-8 (a BOM or NULs)")
            first = False
        pending.append(chunk)
        held += len(chunk)
        if held >= BLOCK_BYTES:
            data = b"".join(pending)
            cut = data.rfind(b"\n") + 1
            if not cut:   # a line longer than a block: the line reader bounds its memory by max_doc_bytes
                raise Irregular("a line longer than a block")
            yield data[:cut]
            pending, held = [data[cut:]], len(data) - cut
    data = b"".join(pending)
    if data:
        yield data if data.endswith(b"\n") else data + b"\n"


def _parse(data: bytes, text_field: str, max_doc_bytes: int) -> tuple[pa.Table, np.ndarray]:
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    lengths = np.diff(ends, prepend=-1) - 1
    if lengths.size and int(lengths.min()) <= 0:
        raise Irregular("a blank line")
    if lengths.size and int(lengths.max()) > max_doc_bytes:
        raise Irregular("a line over max_doc_bytes")
    if b"\r" in data or UTF8_BOM in data:
        raise Irregular("a CR or a BOM")
    if b"\\u" in data and _SURROGATE_ESCAPE.search(data):
        raise Irregular("a \\u escape of a surrogate")
    block_size = max(1 << 20, int(lengths.max()) + 2) if lengths.size else 1 << 20
    try:
        table = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(block_size=block_size, use_threads=False),
                             parse_options=pj.ParseOptions(newlines_in_values=False))
        table.validate(full=True)   # Arrow's JSON reader passes invalid UTF-8 through; this finds it
        names = table.column_names
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:   # not an object, duplicate keys, bad JSON, ...
        raise Irregular(f"Arrow's JSON reader: {e}") from None
    except UnicodeDecodeError:   # a field name
        raise Irregular("invalid UTF-8") from None
    if table.num_rows != lengths.size:
        raise Irregular("records and lines differ")
    return _documents(table, names, text_field, data)


def _documents(table: pa.Table, names: list[str], text_field: str, data: bytes) -> tuple[pa.Table, np.ndarray]:
    """text_document's columns: id, url, text, then the other fields in their order."""
    if len(set(names)) != len(names) or "html" in names:
        raise Irregular("repeated column names or an html field")
    if text_field not in names or not pa.types.is_string(table.schema.field(text_field).type):
        raise Irregular("the text field is missing or not a string")
    text = table.column(text_field)
    if text.null_count:
        raise Irregular("a null text")
    own = {"id": None, "url": None}
    for key in own:
        if key in names and key != text_field:
            col = table.column(key)
            ok = pa.types.is_string(col.type) or key == "id" and pa.types.is_int64(col.type)
            if not ok and col.null_count != len(col):
                raise Irregular(f"an {key} that is not a string")
            own[key] = col if ok else None
    ids = own["id"]
    if ids is not None and pa.types.is_int64(ids.type):
        ids = pc.cast(ids, pa.string())
    if ids is not None:   # "" is no id of its own
        ids = pc.if_else(pc.equal(ids, ""), pa.scalar(None, pa.string()), ids)
    url = own["url"]
    if url is not None:
        url = pc.if_else(pc.equal(url, ""), pa.scalar(None, pa.string()), url)
    n = table.num_rows
    columns = {"id": ids if ids is not None else pa.nulls(n, pa.string()),
               "url": url if url is not None else pa.nulls(n, pa.null()),
               "text": text}
    for name in names:
        if name in columns or name == text_field:
            continue
        col = table.column(name)
        if col.null_count or not any(is_type(col.type) for is_type in _PLAIN):
            raise Irregular(f"field {name!r}: null in some records, or a {col.type} value")
        if pa.types.is_float64(col.type) and _LONG_INTEGER.search(data):
            raise Irregular("a long integer, maybe read as a float")
        columns[name] = col
    return pa.table(columns), _whitespace_only(text)


def _whitespace_only(text: pa.ChunkedArray) -> np.ndarray:
    """Per text: empty after str.strip() (only texts starting with such a character are trimmed)."""
    first = pc.utf8_slice_codeunits(text, 0, 1)
    maybe = pc.or_(pc.equal(first, ""), pc.is_in(first, value_set=pa.array(list(_PY_WHITESPACE))))
    empty = maybe.to_numpy(zero_copy_only=False).copy()
    rows = np.flatnonzero(empty)
    if rows.size:
        trimmed = pc.utf8_length(pc.utf8_trim(text.take(rows), characters=_PY_WHITESPACE))
        empty[rows] = pc.equal(trimmed, 0).to_numpy(zero_copy_only=False)
    return empty


def enabled() -> bool:
    """GPUPIPE_JSONL_LINES=1 forces the line reader (a check, and the tests' twin)."""
    return os.environ.get("GPUPIPE_JSONL_LINES", "") != "1"
