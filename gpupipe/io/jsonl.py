"""JSONL reader (plain, gzip, zstd): one document or Rejected per non-blank line.

Compression is sniffed from the magic bytes, not the extension. Lines are split in bytes
so an invalid UTF-8 line is one ``decode_error`` instead of a crash of the text layer. A
compressed stream that breaks mid-file yields one ``unreadable_record`` standing for the
rest of the file (its line count is unknowable), and the file ends there.
"""
from __future__ import annotations

import json
import os
import re
import zlib
from typing import Iterator

import orjson

from .records import (IdAllocator, Item, Rejected, ReaderError, missing_text_detail, open_binary, own_id,
                      text_document)

CHUNK_SIZE = 1 << 20
FEED = 16 << 10  # compressed bytes per decompression step: a corrupt spot loses little
LAG = 64 << 10  # decompressed bytes held back until later data decodes (see _decode)
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
UTF8_BOM = b"\xef\xbb\xbf"
# A \uD800-\uDFFF escape: json.loads accepts lone surrogates, but they cannot be written
# back as UTF-8, so such lines are checked (cheap pre-filter: rarely present).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONG_DIGITS = re.compile(rb"[0-9]{19}")
_FLAT = (str, int, bool, type(None))  # values orjson reads as json does: no float, list or object


def iter_jsonl(path, text_field: str = "text") -> Iterator[Item]:
    """Yield a document dict or Rejected for every non-blank line of a JSONL file."""
    f = open_binary(path)
    try:
        chunks = _decompressed(f)
    except OSError as e:
        f.close()
        raise ReaderError(f"cannot read input {os.fspath(path)!r}: {e}") from e
    return _items(f, chunks, os.fspath(path), text_field)


def _decompressed(f):
    """An iterator of decompressed chunks, chosen by magic bytes; raises where the stream breaks."""
    magic = f.read(4)
    f.seek(0)
    if magic.startswith(GZIP_MAGIC):
        return _decode(f, lambda: zlib.decompressobj(31))
    if magic == ZSTD_MAGIC:
        import zstandard
        return _decode(f, zstandard.ZstdDecompressor().decompressobj)
    return iter(lambda: f.read(CHUNK_SIZE), b"")


def _decode(f, new_decoder):
    """Decompressed chunks of a (multi-member) gzip or (multi-frame) zstd file.

    Small feeds, not gzip.GzipFile: lines before a damaged spot still come out. The last
    LAG bytes are held back until the member/frame ends cleanly or more data decodes after
    them: damaged data usually decodes to some garbage before the decoder notices, and that
    garbage should be part of the one "rest of file" rejection, not a run of bogus lines.
    A stream that is merely cut off decoded correctly up to the cut, so it is released.
    """
    d, fed, held = new_decoder(), False, b""
    while data := f.read(FEED):
        while data:
            fed = True
            held += d.decompress(data)  # raises on damage: `held` is dropped with it
            if d.eof:  # member/frame complete, checksum verified
                if held:
                    yield held
                held = b""
                data = d.unused_data.lstrip(b"\0")  # next member/frame; NUL padding dropped
                d, fed = new_decoder(), False
            else:
                data = b""
                if len(held) > LAG:
                    yield held[:-LAG]
                    held = held[-LAG:]
    if held:
        yield held
    if fed:
        raise EOFError("compressed stream cut off before its end")


def _lines(chunks, broken: list) -> Iterator[bytes]:
    """Yield raw lines; on a decompression/read error, record it in `broken` and stop."""
    buf = bytearray()
    while True:
        try:
            chunk = next(chunks, b"")
        except Exception as e:  # zlib.error, EOFError, zstandard.ZstdError, OSError
            broken.append(f"{type(e).__name__}: {e}")
            return
        if not chunk:
            break
        scan_from = len(buf)  # a long line is scanned once, not once per chunk
        buf += chunk
        start = 0
        while (nl := buf.find(b"\n", max(start, scan_from))) != -1:
            yield bytes(buf[start:nl])
            start = nl + 1
        del buf[:start]
    if buf:
        yield bytes(buf)  # last line without a trailing newline


def _items(f, chunks, path: str, text_field: str) -> Iterator[Item]:
    ids, name, broken = IdAllocator(), os.path.basename(path), []
    lineno = 0
    with f:
        for raw in _lines(chunks, broken):
            lineno += 1
            line = raw.strip()
            if lineno == 1 and line.startswith(UTF8_BOM):
                line = line[len(UTF8_BOM):].strip()
            if line:  # blank lines are not records
                yield _item(line, lineno, path, name, ids, text_field)
        if broken:
            yield Rejected("unreadable_record",
                           f"{path}:{lineno + 1}: compressed stream unreadable from here on, "
                           f"rest of file skipped ({broken[0]})", lineno + 1)


def _item(line: bytes, lineno: int, path: str, name: str, ids: IdAllocator, text_field: str) -> Item:
    where = f"{path}:{lineno}"
    try:
        # orjson is stricter than json (invalid UTF-8, lone surrogates, NaN and Infinity, deep nesting all raise),
        # so what it accepts json reads the same way, but for integers beyond 64 bits, which it turns into floats:
        # a record with a float or a nested value, whose line has 19 digits in a row, takes the standard path, as
        # does whatever orjson refuses (that path says what is wrong, or accepts what json accepts).
        record = orjson.loads(line)
        if isinstance(record, dict) and not all(type(v) in _FLAT for v in record.values()) \
                and _LONG_DIGITS.search(line):
            raise orjson.JSONDecodeError("long integer", "", 0)
    except orjson.JSONDecodeError:
        try:
            s = line.decode("utf-8")
        except UnicodeDecodeError as e:
            return Rejected("decode_error", f"{where}: invalid UTF-8 at byte {e.start} of the line", lineno)
        try:
            record = json.loads(s)
        except (ValueError, RecursionError) as e:
            return Rejected("unreadable_record", f"{where}: invalid JSON: {str(e)[:200]}", lineno)
        if _SURROGATE_ESCAPE.search(line) and _has_lone_surrogate(record):
            return Rejected("decode_error", f"{where}: \\u escape of a lone UTF-16 surrogate", lineno)
    if not isinstance(record, dict):
        return Rejected("unreadable_record", f"{where}: JSON {type(record).__name__}, not an object", lineno)
    text = record.get(text_field)
    if not isinstance(text, str) or not text.strip():
        return Rejected("missing_text", f"{where}: {missing_text_detail(text, text_field, record)}", lineno)
    rid = ids.claim(own_id(record.get("id")), f"{name}:{lineno}")
    return text_document(record, text, rid, text_field)


def _has_lone_surrogate(record: dict) -> bool:
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
