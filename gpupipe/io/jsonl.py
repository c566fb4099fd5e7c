"""JSONL reader (plain, gzip, zstd; UTF-8, UTF-16 or UTF-32): one document or Rejected per non-blank line.

Compression is sniffed from the magic bytes, not the extension, and the encoding from the first decompressed bytes
(a BOM, else the NUL pattern of the first character, as RFC 4627 does); UTF-16/32 is transcoded to UTF-8 as it
streams. A UTF-8 BOM is dropped at the start of any line (files concatenated with `cat`). Lines are split in bytes
so an invalid UTF-8 line is one ``decode_error`` instead of a crash of the text layer. A compressed stream that
breaks mid-file yields one ``unreadable_record`` standing for the rest of the file (its line count is unknowable),
and the file ends there.

Memory is bounded by ``max_doc_bytes``, not by the input: a line longer than that is skipped as it streams (one
``doc_too_large``), decompression yields at most STEP bytes per call (a 4 MB gzip of 4 GB of NULs is read in 1 MiB
steps; zstd at most 4 MiB a step), so the reader holds about 2 * max_doc_bytes + five steps at most.
"""
from __future__ import annotations

import codecs
import json
import os
import re
import zlib
from typing import Iterator

import orjson

from .records import (MAX_DOC_BYTES, IdAllocator, Item, Rejected, ReaderError, missing_text_detail, open_binary,
                      own_id, text_document, text_encoding)

CHUNK_SIZE = 1 << 20
FEED = 16 << 10  # compressed bytes per decompression step: a corrupt spot loses little
# zstd's streaming object takes no output cap, and its densest block (RLE: 4 bytes for 128 KiB) inflates 32768-fold:
# fed 128 bytes at a time, it yields at most 4 MiB a step (56 MB of JSONL text: ~0.35 s of CPU to decompress instead
# of ~0.2 s with 16 KiB feeds, on a busy 2-core machine; parsing the lines costs far more)
ZSTD_FEED = 128
STEP = 1 << 20  # decompressed bytes per zlib call at most (its output cap): a gzip bomb inflates step by step
LAG = 64 << 10  # decompressed bytes held back until later data decodes (see _decode)
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
UTF8_BOM = b"\xef\xbb\xbf"
# A \uD800-\uDFFF escape: json.loads accepts lone surrogates, but they cannot be written
# back as UTF-8, so such lines are checked (cheap pre-filter: rarely present).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONG_DIGITS = re.compile(rb"[0-9]{19}")
_FLAT = (str, int, bool, type(None))  # values orjson reads as json does: no float, list or object


def iter_jsonl(path, text_field: str = "text", max_doc_bytes: int = MAX_DOC_BYTES) -> Iterator[Item]:
    """Yield a document dict or Rejected for every non-blank line of a JSONL file."""
    f = open_binary(path)
    try:
        chunks = _decompressed(f)
    except OSError as e:
        f.close()
        raise ReaderError(f"cannot read input {os.fspath(path)!r}: {e}") from e
    return _items(f, _utf8(chunks), os.fspath(path), text_field, max_doc_bytes)


def _decompressed(f):
    """An iterator of decompressed chunks, chosen by magic bytes; raises where the stream breaks."""
    magic = f.read(4)
    f.seek(0)
    if magic.startswith(GZIP_MAGIC):
        return _decode(f, lambda: zlib.decompressobj(31), FEED, capped=True)
    if magic == ZSTD_MAGIC:
        import zstandard
        return _decode(f, zstandard.ZstdDecompressor().decompressobj, ZSTD_FEED, capped=False)
    return iter(lambda: f.read(CHUNK_SIZE), b"")


def _decode(f, new_decoder, feed: int, capped: bool):
    """Decompressed chunks of a (multi-member) gzip or (multi-frame) zstd file.

    Small feeds, not gzip.GzipFile: lines before a damaged spot still come out. The last
    LAG bytes are held back until the member/frame ends cleanly or more data decodes after
    them: damaged data usually decodes to some garbage before the decoder notices, and that
    garbage should be part of the one "rest of file" rejection, not a run of bogus lines.
    A stream that is merely cut off decoded correctly up to the cut, so it is released.
    capped: the decoder takes an output cap (zlib: at most STEP bytes a call, the input left over kept in
    `unconsumed_tail`); zstd's takes none, so its feeds are small.
    """
    d, fed, held = new_decoder(), False, b""
    while data := f.read(feed):
        while True:
            fed = True
            out = d.decompress(data, STEP) if capped else d.decompress(data)  # raises on damage: `held` dropped
            held += out
            if d.eof:  # member/frame complete, checksum verified
                if held:
                    yield held
                held = b""
                data = d.unused_data.lstrip(b"\0")  # next member/frame; NUL padding dropped
                d, fed = new_decoder(), False
                if data:
                    continue
                break
            if len(held) > LAG:
                yield held[:-LAG]
                held = held[-LAG:]
            data = d.unconsumed_tail if capped else b""
            if not data and len(out) < STEP or not capped:  # all fed, and no output left waiting
                break
    if held:
        yield held
    if fed:
        raise EOFError("compressed stream cut off before its end")


def _utf8(chunks):
    """The chunks as UTF-8: passed through when they are, transcoded as they stream when UTF-16/32."""
    head = b""
    for chunk in chunks:
        head += chunk
        if len(head) >= 4:
            break
    if not head:
        return
    yield from _transcoded(text_encoding(head), head, chunks)


def _transcoded(encoding: str, head: bytes, chunks):
    if encoding == "utf-8":
        yield head
        yield from chunks
        return
    # a lone surrogate decodes as itself and becomes invalid UTF-8 on its line: that line is one decode_error
    decoder = codecs.getincrementaldecoder(encoding)("surrogatepass")
    for chunk in _chained(head, chunks):
        try:
            yield decoder.decode(chunk).encode("utf-8", "surrogatepass")
        except UnicodeError as e:
            raise ValueError(f"not valid {encoding.upper()}: {e.reason}") from None
    try:
        decoder.decode(b"", final=True)
    except UnicodeError as e:
        raise ValueError(f"not valid {encoding.upper()} at its end: {e.reason}") from None


def _chained(first: bytes, rest):
    yield first
    yield from rest


class _TooLarge:
    """A line longer than max_doc_bytes, skipped as it streamed."""

    def __init__(self, size: int):
        self.size = size


def _lines(chunks, broken: list, limit: int) -> Iterator[bytes | _TooLarge]:
    """Yield raw lines (a _TooLarge for a line over `limit` bytes, whose bytes are dropped as they come: at most
    `limit` bytes plus a chunk are held); on a decompression/read error, record it in `broken` and stop."""
    buf = bytearray()
    skipped = 0  # bytes dropped so far of a line over the limit (0: not in one)
    while True:
        try:
            chunk = next(chunks, b"")
        except Exception as e:  # zlib.error, EOFError, zstandard.ZstdError, OSError, ValueError (encoding)
            broken.append(f"{type(e).__name__}: {e}")
            return
        if not chunk:
            break
        if skipped:
            nl = chunk.find(b"\n")
            if nl == -1:
                skipped += len(chunk)
                continue
            yield _TooLarge(skipped + nl)
            skipped, chunk = 0, chunk[nl + 1:]
        scan_from = len(buf)  # a long line is scanned once, not once per chunk
        buf += chunk
        start = 0
        while (nl := buf.find(b"\n", max(start, scan_from))) != -1:
            yield _TooLarge(nl - start) if nl - start > limit else bytes(buf[start:nl])
            start = nl + 1
        del buf[:start]
        if len(buf) > limit:  # a line already over the limit, its end not yet read
            skipped = len(buf)
            buf.clear()
    if skipped:
        yield _TooLarge(skipped)
    elif buf:
        yield bytes(buf)  # last line without a trailing newline


def _items(f, chunks, path: str, text_field: str, limit: int = MAX_DOC_BYTES) -> Iterator[Item]:
    ids, name, broken = IdAllocator(), os.path.basename(path), []
    lineno = 0
    with f:
        for raw in _lines(chunks, broken, limit):
            lineno += 1
            if isinstance(raw, _TooLarge):
                yield Rejected("doc_too_large", f"{path}:{lineno}: line of {raw.size} bytes, more than "
                                                f"max_doc_bytes ({limit}); skipped unread", lineno)
                continue
            line = raw.strip()
            if line.startswith(UTF8_BOM):  # at any line: two files with BOMs concatenated
                line = line[len(UTF8_BOM):].strip()
            if line:  # blank lines are not records
                yield _item(line, lineno, path, name, ids, text_field)
        if broken:
            yield Rejected("unreadable_record",
                           f"{path}:{lineno + 1}: stream unreadable from here on, "
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
