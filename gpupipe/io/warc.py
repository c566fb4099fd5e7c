"""Robust WARC reader: yields one HTML document or one Rejected per WARC record.

warcio and FastWARC stop at the first corrupt gzip member or truncated record; a crawl
shard with one bad byte would lose everything after it. This reader counts the damage
and goes on:

* gzip layer (``_gzip_events``): decompresses member by member with
  ``zlib.decompressobj(wbits=31)``. A zlib error, a bad CRC or a member cut off by EOF
  becomes one ``unreadable_record``; we then resynchronise at the next ``1f 8b 08`` whose
  decompression starts with ``WARC/``. Works for per-record gzip (Common Crawl) and for
  one gzip stream holding the whole file (output is streamed, never held whole).
* record layer (``_Splitter``): cuts records out of the (decompressed) byte stream with
  ``Content-Length``; garbage and malformed headers are skipped up to the next line
  starting with ``WARC/0.x`` or ``WARC/1.x``.
* HTTP layer (``_document``): status line, headers, chunked transfer-encoding,
  gzip/deflate(/br) content-encoding, charset decoding.

Positions are byte offsets: of the record in an uncompressed file, of the gzip member the
record starts in for ``.warc.gz`` (the offset a CDX index would give).
"""
from __future__ import annotations

import bisect
import os
import re
import zlib
from dataclasses import dataclass
from typing import Iterator

from .readers import (DecodeError, IdAllocator, Item, Rejected, ReaderError,
                      charset_from_content_type, decode_html, open_binary)

CHUNK_SIZE = 1 << 20  # bytes per read()
FEED = 64 << 10  # compressed bytes per zlib call
MAX_INFLATE = 4 << 20  # decompressed bytes per zlib call: bounds memory on single-stream files
MAX_HEADER = 64 << 10  # a WARC header block longer than this is garbage
MAX_BLOCK = 64 << 20  # record blocks above this are skipped while streaming, never buffered
MAX_BODY = 64 << 20  # decompressed HTTP body limit (Content-Encoding bombs)
HOLD_LIMIT = 16 << 20  # unverified bytes we hold back before judging them anyway
PROBE = 64 << 10  # compressed bytes tried when checking a resync candidate
OVERSIZE_PREFIX = 16 << 10  # block bytes kept from a skipped record, to classify it

GZIP_MAGIC = b"\x1f\x8b\x08"
HTML_TYPES = ("text/html", "application/xhtml+xml")

_VERSION_LINE = re.compile(r"WARC/[01]\.[0-9]+")
_RESYNC = re.compile(rb"\nWARC/[01]\.\d+\r?\n")  # a record start after garbage
_HEADER_END = re.compile(rb"\r?\n\r?\n")
_PADDING = re.compile(rb"[\r\n\t \x00]*")  # between records and at the end of files
_STATUS_LINE = re.compile(r"HTTP/[0-9]+(?:\.[0-9]+)?[ \t]+([0-9]{3})(?:[ \t]|$)")
_HEX = re.compile(rb"[0-9A-Fa-f]+")
_LOOKS_HTML = re.compile(rb"<(?:!doctype\s+html|html|head|body|meta|title)[\s>]", re.I)


def iter_warc(path) -> Iterator[Item]:
    """Yield a document dict or a Rejected for every record of a .warc / .warc.gz file."""
    f = open_binary(path)
    try:
        magic = f.read(2)
        f.seek(0)
    except OSError as e:
        f.close()
        raise ReaderError(f"cannot read input {os.fspath(path)!r}: {e}") from e
    # Sniff rather than trust the extension: mis-named uncompressed WARCs do occur.
    events = _gzip_events(f) if magic == b"\x1f\x8b" else _plain_events(f)
    return _items(events, os.fspath(path), f)


# ----------------------------------------------------------------------------- byte layer
# Event stream: ("member", file_offset) a gzip member starts; ("data", bytes, verified)
# decompressed bytes (verified: the member's CRC has been checked, so the bytes are
# trustworthy); ("error", file_offset, message) a member or region could not be read.


def _plain_events(f):
    while chunk := f.read(CHUNK_SIZE):
        yield ("data", chunk, True)


class _Truncated(Exception):
    pass


class _Input:
    """File bytes addressed by absolute offset, handed out as zero-copy slices.

    zlib copies every byte it is given but does not use into ``unused_data``; feeding it
    small windows (FEED) instead of whole chunks keeps that copy small per gzip member.
    """

    def __init__(self, f):
        self.f, self.buf, self.start, self.pos = f, b"", 0, 0

    @property
    def offset(self) -> int:
        return self.start + self.pos

    def peek(self, n: int) -> memoryview:
        """Up to n bytes from the current offset (fewer only at end of file)."""
        if len(self.buf) - self.pos < n:
            self.buf = self.buf[self.pos:] + self.f.read(max(CHUNK_SIZE, n))
            self.start += self.pos
            self.pos = 0
        return memoryview(self.buf)[self.pos:self.pos + n]

    def advance(self, n: int) -> None:
        self.pos += n

    def seek(self, offset: int) -> None:
        self.f.seek(offset)
        self.buf, self.start, self.pos = b"", offset, 0


def _gzip_events(f):
    inp = _Input(f)
    while True:
        offset = inp.offset
        head = inp.peek(len(GZIP_MAGIC))
        if not head:
            return
        if head != GZIP_MAGIC:
            if _rest_is_padding(inp):
                return
            yield ("error", offset, "bytes that are not a gzip member")
        else:
            yield ("member", offset)
            try:
                yield from _inflate_member(inp)
                continue
            except zlib.error as e:
                yield ("error", offset, f"corrupt gzip member ({e})")
            except _Truncated:
                yield ("error", offset, "gzip member cut off by end of file")
                return
        found = _find_member(f, offset + 1)
        if found is None:
            return
        inp.seek(found)


def _inflate_member(inp: _Input):
    d = zlib.decompressobj(31)
    while True:
        data = inp.peek(FEED)
        if not data:
            raise _Truncated
        out = d.decompress(data, MAX_INFLATE)
        if d.eof:  # CRC and length verified by zlib
            inp.advance(len(data) - len(d.unused_data))
            yield ("data", out, True)
            return
        inp.advance(len(data) - len(d.unconsumed_tail))
        if out:
            yield ("data", out, False)


def _rest_is_padding(inp: _Input) -> bool:
    """True if everything from the current offset to end of file is NULs/whitespace."""
    while data := inp.peek(CHUNK_SIZE):
        if _PADDING.match(data).end() != len(data):
            return False
        inp.advance(len(data))
    return True


def _find_member(f, start: int) -> int | None:
    """Offset of the next gzip member at or after `start` that decompresses to 'WARC/'."""
    pos = start
    while True:
        f.seek(pos)
        buf = f.read(CHUNK_SIZE + 2)  # +2: a magic straddling two scans is still seen
        i = buf.find(GZIP_MAGIC)
        while i != -1:
            if _starts_warc_member(f, pos + i):
                return pos + i
            i = buf.find(GZIP_MAGIC, i + 1)
        if len(buf) < CHUNK_SIZE + 2:
            return None
        pos += CHUNK_SIZE


def _starts_warc_member(f, offset: int) -> bool:
    f.seek(offset)
    try:
        out = zlib.decompressobj(31).decompress(f.read(PROBE), 16)
    except zlib.error:
        return False
    return out.startswith(b"WARC/")


# ----------------------------------------------------------------------------- record layer


@dataclass
class _Record:
    start: int  # stream offset of the record's first byte
    headers: dict  # WARC header names lower-cased
    block: bytes | None  # None when the block was too big to buffer
    prefix: bytes  # first bytes of a skipped block (to classify it)
    length: int  # Content-Length
    problem: str = ""  # framed fine, but the header is malformed


@dataclass
class _Bad:
    start: int
    message: str


_WAIT = object()  # need more bytes
_AGAIN = object()  # made progress, nothing to emit


class _Splitter:
    """Incrementally cuts WARC records out of a byte stream.

    Bytes that are not yet CRC-verified are judged only when safe: a complete record is
    emitted once the next record has begun (or the member is verified), and garbage or
    malformed headers are reported only on verified bytes. That way a corrupt gzip member
    yields exactly one Rejected (from `abort`), not a half-parsed record plus one.
    """

    def __init__(self):
        self.buf = bytearray()
        self.base = 0  # stream offset of buf[0]
        self.head = None  # (headers, problem, header_len, content_length) of the record at buf[0]
        self.skip_left = 0  # bytes of an oversized block still to discard
        self.skipped: _Record | None = None  # the oversized record, emitted once skipped
        self.in_garbage = False  # garbage already reported; skip silently to the next record

    @property
    def end(self) -> int:
        return self.base + len(self.buf)

    def feed(self, data: bytes) -> None:
        self.buf += data

    def pull(self, verified: bool, final: bool = False) -> Iterator[_Record | _Bad]:
        while (item := self._step(verified, final)) is not _WAIT:
            if item is not _AGAIN:
                yield item

    def abort(self) -> None:
        """Drop everything pending (the stream is broken here); the caller reports it."""
        self.base += len(self.buf)
        self.buf.clear()
        self.head, self.skip_left, self.skipped, self.in_garbage = None, 0, None, False

    def _consume(self, n: int) -> None:
        del self.buf[:n]  # bytearray front-deletion is amortised O(1) in CPython
        self.base += n

    def _step(self, verified: bool, final: bool):
        if self.skip_left or self.skipped:
            return self._skip(final)
        if self.head is None:
            lead = _PADDING.match(self.buf).end()
            if lead:
                self._consume(lead)
            if not self.buf:
                return _WAIT
            judge = verified or final or len(self.buf) > HOLD_LIMIT
            if not self.buf.startswith(b"WARC/"):
                if not final and len(self.buf) < 5 and b"WARC/".startswith(self.buf):
                    return _WAIT
                return self._garbage(final) if judge or self.in_garbage else _WAIT
            result = self._parse_head(judge, final)
            if result is not None:
                return result
        return self._take_block(verified, final)

    def _parse_head(self, judge: bool, final: bool):
        m = _HEADER_END.search(self.buf, 0, MAX_HEADER)
        if m is None:
            if final and len(self.buf) < MAX_HEADER:
                start = self.base
                self._consume(len(self.buf))
                return _Bad(start, "WARC header cut off by end of file")
            if len(self.buf) < MAX_HEADER or not judge:
                return _WAIT
            return self._malformed("no end of WARC header within 64 KiB")
        headers, problem, length = _parse_warc_header(bytes(self.buf[:m.start()]))
        if length is None:
            return self._malformed(problem) if judge else _WAIT
        self.head = (headers, problem, m.end(), length)
        self.in_garbage = False
        return None

    def _take_block(self, verified: bool, final: bool):
        headers, problem, hlen, length = self.head
        start = self.base
        if length > MAX_BLOCK:
            return self._start_skip(final)
        end = hlen + length
        if len(self.buf) < end:
            if not final:
                return _WAIT
            have = len(self.buf) - hlen
            self._consume(len(self.buf))
            self.head = None
            return _Bad(start, f"record block cut off by end of stream ({have} of {length} bytes)")
        # Unverified: emit only once the next record has begun, so a CRC error still to come
        # in this member cannot turn one record into a document *and* a rejection.
        if not (verified or final or len(self.buf) > HOLD_LIMIT):
            if _PADDING.match(self.buf, end).end() == len(self.buf):
                return _WAIT
        block = bytes(self.buf[hlen:end])
        self._consume(end)
        self.head = None
        return _Record(start, headers, block, b"", length, problem)

    def _start_skip(self, final: bool):
        headers, problem, hlen, length = self.head
        keep = min(OVERSIZE_PREFIX, length)
        if len(self.buf) < hlen + keep and not final:
            return _WAIT
        prefix = bytes(self.buf[hlen:hlen + keep])
        self.skipped = _Record(self.base, headers, None, prefix, length, problem)
        self.skip_left = hlen + length
        self.head = None
        return _AGAIN

    def _skip(self, final: bool):
        n = min(self.skip_left, len(self.buf))
        self._consume(n)
        self.skip_left -= n
        if self.skip_left:
            if final:
                rec, self.skipped, self.skip_left = self.skipped, None, 0
                return _Bad(rec.start, f"record block cut off by end of stream ({rec.length} bytes declared)")
            return _WAIT
        rec, self.skipped = self.skipped, None
        return rec

    def _garbage(self, final: bool):
        """Skip to the next line starting with WARC/x.y; report the region once."""
        start, reported = self.base, self.in_garbage
        m = _RESYNC.search(self.buf)
        if m:
            self._consume(m.start() + 1)
            self.in_garbage = False
        else:
            n = len(self.buf) if final else len(self.buf) - 16  # keep a possibly split marker
            if n <= 0:
                return _WAIT
            self._consume(n)
            self.in_garbage = True
        return _AGAIN if reported else _Bad(start, "bytes that are not a WARC record; skipped to the next 'WARC/' line")

    def _malformed(self, message: str):
        start = self.base
        self._consume(1)  # step past this "WARC/" so the resync scan finds the next one
        self.in_garbage = True
        return _Bad(start, f"malformed WARC header: {message}")


def _parse_warc_header(raw: bytes) -> tuple[dict, str, int | None]:
    """(headers, problem, content_length); content_length None means the record can't be framed."""
    lines = _text(raw).split("\n")
    version = lines[0].rstrip("\r")
    if not _VERSION_LINE.fullmatch(version):
        return {}, f"bad version line {version[:40]!r}", None
    headers, problem = _header_fields(lines[1:])
    length = headers.get("content-length", "")
    if not (length.isascii() and length.isdigit()):
        return headers, f"missing or invalid Content-Length {length[:20]!r}", None
    return headers, problem, int(length)


def _header_fields(lines: list[str]) -> tuple[dict, str]:
    """Name: value lines (names lower-cased, folded lines joined); the first malformed line."""
    headers, problem, name = {}, "", None
    for line in lines:
        line = line.rstrip("\r")
        if line[:1] in (" ", "\t") and name:  # folded continuation line
            headers[name] += " " + line.strip()
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or not key:
            problem = problem or f"header line without a name: {line[:60]!r}"
            continue
        name = key.lower()
        headers[name] = value.strip()
    return headers, problem


def _text(b: bytes) -> str:
    # WARC 1.1 headers are UTF-8; older writers used Latin-1 for URLs.
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b.decode("latin-1")


class _Locator:
    """Maps stream offsets to reported positions (the offset of the containing gzip member)."""

    def __init__(self):
        self.starts: list[int] = []  # stream offset where each member's output begins
        self.offsets: list[int] = []  # that member's file offset

    def mark(self, stream_offset: int, file_offset: int) -> None:
        self.starts.append(stream_offset)
        self.offsets.append(file_offset)

    def position(self, stream_offset: int) -> int:
        if not self.starts:
            return stream_offset  # uncompressed file: stream offset is the file offset
        i = bisect.bisect_right(self.starts, stream_offset) - 1
        return self.offsets[max(i, 0)]

    def forget_before(self, stream_offset: int) -> None:
        drop = bisect.bisect_right(self.starts, stream_offset) - 1
        if drop > 0:
            del self.starts[:drop], self.offsets[:drop]


def _items(events, path: str, f) -> Iterator[Item]:
    splitter, loc, ids = _Splitter(), _Locator(), IdAllocator()
    name = os.path.basename(path)

    def emit(piece):
        pos = loc.position(piece.start)
        if isinstance(piece, _Bad):
            return Rejected("unreadable_record", f"{path} at byte {pos}: {piece.message}", pos)
        return _item(piece, pos, path, name, ids)

    last = 0
    try:
        with f:
            try:
                for ev in events:
                    if ev[0] == "member":
                        loc.mark(splitter.end, ev[1])
                        last = ev[1]
                    elif ev[0] == "data":
                        splitter.feed(ev[1])
                        for piece in splitter.pull(verified=ev[2]):
                            yield emit(piece)
                        loc.forget_before(splitter.base)
                    else:  # error: whatever was pending in the broken region is one lost record
                        splitter.abort()
                        yield Rejected("unreadable_record", f"{path} at byte {ev[1]}: {ev[2]}", ev[1])
            except OSError as e:
                splitter.abort()
                yield Rejected("unreadable_record", f"{path}: read error after byte {last}: {e}", last)
                return
            for piece in splitter.pull(verified=True, final=True):
                yield emit(piece)
    finally:
        events.close()


# ----------------------------------------------------------------------------- HTTP layer


class _Reject(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _item(rec: _Record, pos: int, path: str, name: str, ids: IdAllocator) -> Item:
    try:
        return _document(rec, pos, name, ids)
    except _Reject as e:
        return Rejected(e.reason, f"{path} at byte {pos}: {e}", pos)
    except Exception as e:  # an input quirk we did not foresee must not stop a whole shard
        return Rejected("unreadable_record", f"{path} at byte {pos}: {type(e).__name__}: {e}", pos)


def _document(rec: _Record, pos: int, name: str, ids: IdAllocator) -> dict:
    h = rec.headers
    wtype = h.get("warc-type", "").lower()
    if rec.problem or not wtype:
        raise _Reject("unreadable_record", f"malformed WARC header: {rec.problem or 'no WARC-Type'}")
    if wtype != "response":
        raise _Reject("not_response", f"{wtype} record")
    block = rec.block if rec.block is not None else rec.prefix
    warc_type = h.get("content-type", "").lower()
    if warc_type.startswith("application/http") or block.lstrip(b"\r\n")[:5] == b"HTTP/":
        status, http, body = _split_http(block)
    else:  # a response record holding the payload itself (dns:, ftp:, bare documents)
        status, http, body = 200, {"content-type": h.get("content-type", "")}, block
    if status != 200:
        raise _Reject("http_status", f"HTTP status {status}")
    content_type = http.get("content-type", "")
    mime = content_type.split(";")[0].strip().lower()
    if mime and mime not in HTML_TYPES:
        raise _Reject("not_html", f"Content-Type {mime!r}")
    if rec.block is None:
        raise _Reject("unreadable_record", f"HTML response of {rec.length} bytes is over the "
                                           f"{MAX_BLOCK}-byte record limit")
    body = _decode_body(body, http)
    if not mime and not _LOOKS_HTML.search(body, 0, 1024):
        raise _Reject("not_html", "no Content-Type and the body does not look like HTML")
    if not body.strip():
        raise _Reject("missing_text", "empty HTML body")
    try:
        html, charset = decode_html(body, charset_from_content_type(content_type))
    except DecodeError as e:
        raise _Reject("decode_error", str(e)) from None
    url = h.get("warc-target-uri", "").strip().strip("<>")
    return {
        "id": ids.claim(h.get("warc-record-id"), f"{name}:{pos}"),
        "url": url or None,
        "html": html,
        "warc_date": h.get("warc-date", ""),
        "content_type": mime or "text/html",
        "charset": charset,
    }


def _split_http(block: bytes) -> tuple[int, dict, bytes]:
    """(status, headers lower-cased, body) of an HTTP response message."""
    block = block.lstrip(b"\r\n")
    m = _HEADER_END.search(block)
    # No blank line: a header-only message (HEAD, redirect) or cut off; the body is empty.
    head, body = (block[:m.start()], block[m.end():]) if m else (block, b"")
    lines = head.decode("latin-1").split("\n")  # HTTP/1.1 header bytes are Latin-1
    status = _STATUS_LINE.match(lines[0].rstrip("\r"))
    if not status:
        raise _Reject("unreadable_record", f"malformed HTTP status line {lines[0][:60]!r}")
    return int(status.group(1)), _header_fields(lines[1:])[0], body


def _decode_body(body: bytes, headers: dict) -> bytes:
    """Undo Transfer-Encoding: chunked and Content-Encoding gzip/deflate/br."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _dechunk(body)
    codings = [c.strip().lower() for c in headers.get("content-encoding", "").split(",")]
    for coding in reversed([c for c in codings if c and c != "identity"]):
        try:
            body = _decompress(body, coding)
        except _Reject:
            # Crawlers (ClueWeb, some wget setups) often store the decoded body but keep the
            # header; a body that already looks like HTML is taken as it is.
            if not _LOOKS_HTML.search(body, 0, 1024):
                raise
    return body


def _dechunk(body: bytes) -> bytes:
    pos, out = 0, []
    while True:
        eol = body.find(b"\n", pos)
        if eol == -1:
            break  # cut off mid-stream (WARC-Truncated): keep what we have
        size = body[pos:eol].split(b";")[0].strip()
        if not _HEX.fullmatch(size):
            if pos == 0:
                return body  # the crawler stored it already de-chunked
            raise _Reject("unreadable_record", f"malformed chunk size {size[:20]!r} at body byte {pos}")
        n = int(size, 16)
        if n == 0:
            break
        out.append(body[eol + 1:eol + 1 + n])
        pos = eol + 1 + n
        pos += 2 if body.startswith(b"\r\n", pos) else 1 if body.startswith(b"\n", pos) else 0
    return b"".join(out)


def _decompress(body: bytes, coding: str) -> bytes:
    if coding in ("gzip", "x-gzip"):
        return _inflate(body, 47, coding)  # 32+15: gzip or zlib header, auto-detected
    if coding == "deflate":
        try:
            return _inflate(body, 15, coding)  # the spec says zlib-wrapped ...
        except _Reject:
            return _inflate(body, -15, coding)  # ... many servers send raw deflate
    if coding == "br":
        try:
            import brotli
        except ImportError:
            raise _Reject("unreadable_record", "Content-Encoding br but brotli is not installed") from None
        try:
            return brotli.decompress(body)
        except Exception as e:  # brotli.error
            raise _Reject("unreadable_record", f"cannot decode Content-Encoding br: {e}") from None
    raise _Reject("unreadable_record", f"unsupported Content-Encoding {coding!r}")


def _inflate(body: bytes, wbits: int, coding: str) -> bytes:
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(body, MAX_BODY + 1)
    except zlib.error as e:
        raise _Reject("unreadable_record", f"cannot decode Content-Encoding {coding}: {e}") from None
    if len(out) > MAX_BODY:
        raise _Reject("unreadable_record", f"Content-Encoding {coding} expands past {MAX_BODY} bytes")
    if not out and body:
        raise _Reject("unreadable_record", f"Content-Encoding {coding} body decodes to nothing")
    return out  # a body cut off mid-stream (WARC-Truncated) yields what could be decoded
