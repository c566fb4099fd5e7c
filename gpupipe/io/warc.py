"""Robust WARC reader: yields one HTML document or one Rejected per WARC record.

warcio and FastWARC stop at the first corrupt gzip member or truncated record; a crawl
shard with one bad byte would lose everything after it. This reader counts the damage,
record by record, and goes on:

* gzip layer (``_gzip_events``): decompresses member by member with
  ``zlib.decompressobj(wbits=31)``. A zlib error, a bad CRC or a member cut off by EOF
  becomes one ``unreadable_record``; we then resynchronise at the next ``1f 8b 08`` whose
  decompression starts with ``WARC/``. Every gzip header skipped on the way that does not
  decompress (damaged deflate data, or a damaged magic) is one more ``unreadable_record``:
  six damaged members count as six. Works for per-record gzip (Common Crawl) and for one
  gzip stream holding the whole file (output is streamed, never held whole).
* record layer (``_Splitter``): cuts records out of the (decompressed) byte stream with
  ``Content-Length``, and checks that the next record (or the end) follows the block. A
  Content-Length that lies never costs a neighbour: a gzip member that starts with
  ``WARC/`` ends the record before it (per-record gzip: the member is the truth); else the
  record is resynchronised on the next line starting with ``WARC/0.x``/``WARC/1.x`` and the
  bytes up to there are one damaged record. Garbage and malformed headers are skipped the
  same way.
* digests (``_digest_problem``): ``WARC-Block-Digest`` (else ``WARC-Payload-Digest``) is
  checked; a mismatch is an ``unreadable_record``.
* HTTP layer (``_document``): status line, headers, chunked transfer-encoding,
  gzip/deflate(/br) content-encoding, charset decoding.

Positions are byte offsets: of the record in an uncompressed file, of the gzip member the
record starts in for ``.warc.gz`` (the offset a CDX index would give).
"""
from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import os
import re
import zlib
from collections import deque
from dataclasses import dataclass
from typing import Iterator

from .storage import file_size
from .charset import DecodeError, charset_from_content_type, decode_html
from .records import IdAllocator, Item, Rejected, ReaderError, open_binary

CHUNK_SIZE = 1 << 20  # bytes per read()
FEED = 64 << 10  # compressed bytes per zlib call
MAX_INFLATE = 4 << 20  # decompressed bytes per zlib call: bounds memory on single-stream files
MAX_HEADER = 64 << 10  # a WARC header block longer than this is garbage
MAX_BLOCK = 64 << 20  # record blocks above this are skipped while streaming, never buffered
MAX_BODY = 64 << 20  # decompressed HTTP body limit (Content-Encoding bombs)
MAX_PADDING = 1 << 20  # whitespace/NULs after a block beyond which we stop waiting for more
HOLD_LIMIT = 16 << 20  # unverified bytes we hold back before judging them anyway
PROBE = 64 << 10  # compressed bytes tried when checking a resync candidate
OVERSIZE_PREFIX = 16 << 10  # block bytes kept from a skipped record, to classify it
QUOTE = 16  # bytes after a block quoted when its Content-Length is wrong
CHECK_DIGESTS = True  # verify WARC-Block-Digest / WARC-Payload-Digest when present

GZIP_MAGIC = b"\x1f\x8b\x08"
HTML_TYPES = ("text/html", "application/xhtml+xml")

_VERSION_LINE = re.compile(r"WARC/[01]\.[0-9]+")
_RESYNC = re.compile(rb"\nWARC/[01]\.\d+\r?\n")  # a record start after garbage
_HEADER_END = re.compile(rb"\r?\n\r?\n")
_TERMINATORS = (b"\r\n\r\n", b"\n\n")  # what ends every WARC record (bare LFs: old writers)
_PADDING = re.compile(rb"[\r\n\t \x00]*")  # between records and at the end of files
_STATUS_LINE = re.compile(r"HTTP/[0-9]+(?:\.[0-9]+)?[ \t]+([0-9]{3})(?:[ \t]|$)")
_HEX = re.compile(rb"[0-9A-Fa-f]+")
_LOOKS_HTML = re.compile(rb"<(?:!doctype\s+html|html|head|body|meta|title)[\s>]", re.I)
# A gzip header (magic, then FLG with its reserved bits clear), at most one magic byte damaged.
_GZIP_HEADER = re.compile(rb"(?:\x1f\x8b.|\x1f.\x08|.\x8b\x08)[\x00-\x1f]", re.S)
# The same, found fast: (pattern, where the header starts before the match).
_HEADER_HINTS = ((re.compile(rb"\x1f(?:\x8b.|.\x08)[\x00-\x1f]", re.S), 0),
                 (re.compile(rb"\x8b\x08[\x00-\x1f]"), 1))


def iter_warc(path) -> Iterator[Item]:
    """Yield a document dict or a Rejected for every record of a .warc / .warc.gz file."""
    f = open_binary(path)
    try:
        magic = f.read(2)
        f.seek(0)
        size = file_size(f)
    except OSError as e:
        f.close()
        raise ReaderError(f"cannot read input {os.fspath(path)!r}: {e}") from e
    # Sniff rather than trust the extension: mis-named uncompressed WARCs do occur.
    return _items(os.fspath(path), f, gz=magic == b"\x1f\x8b", size=size)


# ----------------------------------------------------------------------------- byte layer
# Event stream: ("member", file_offset) a gzip member starts; ("data", bytes, verified)
# decompressed bytes (verified: the member's CRC has been checked, so the bytes are
# trustworthy); ("error", file_offset, message) a member or region could not be read.


def _plain_events(f, start: int = 0):
    f.seek(start)
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


def _gzip_events(f, start: int = 0, discard: int = 0):
    """Events of the gzip members from file offset `start`; the first `discard` output
    bytes are dropped (a rewind into the middle of a member already announced)."""
    inp = _Input(f)
    inp.seek(start)
    while True:
        offset = inp.offset
        head = inp.peek(len(GZIP_MAGIC))
        if not head:
            return
        if head != GZIP_MAGIC:
            if _rest_is_padding(inp):
                return
            damaged = _classify_header(f, offset) == "damaged"
            yield ("error", offset, "gzip member with a damaged header" if damaged
                   else "bytes that are not a gzip member")
        else:
            if not discard:
                yield ("member", offset)
            try:
                yield from _inflate_member(inp, discard)
                discard = 0
                continue
            except zlib.error as e:
                yield ("error", offset, f"corrupt gzip member ({e})")
            except _Truncated:
                yield ("error", offset, "gzip member cut off by end of file")
                return
        discard = 0
        found, damaged = _find_member(f, offset + 1)
        for at in damaged:
            yield ("error", at, "corrupt gzip member (does not decompress)")
        if found is None:
            return
        inp.seek(found)


def _inflate_member(inp: _Input, discard: int = 0):
    d = zlib.decompressobj(31)
    while True:
        data = inp.peek(FEED)
        if not data:
            raise _Truncated
        out = d.decompress(data, MAX_INFLATE)
        if discard:
            out, discard = out[discard:], max(0, discard - len(out))
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


def _find_member(f, start: int) -> tuple[int | None, list[int]]:
    """(offset of the next gzip member at or after `start` that decompresses to 'WARC/',
    offsets of the damaged members skipped on the way)."""
    found = _next_warc_member(f, start)
    end = found if found is not None else file_size(f)
    return found, [at for at in _header_candidates(f, start, end) if _classify_header(f, at) == "damaged"]


def _next_warc_member(f, start: int) -> int | None:
    pos = start
    while True:
        f.seek(pos)
        buf = f.read(CHUNK_SIZE + 2)  # +2: a magic straddling two scans is still seen
        i = buf.find(GZIP_MAGIC)
        while i != -1:
            if _classify_header(f, pos + i) == "warc":
                return pos + i
            i = buf.find(GZIP_MAGIC, i + 1)
        if len(buf) < CHUNK_SIZE + 2:
            return None
        pos += CHUNK_SIZE


def _header_candidates(f, start: int, end: int) -> Iterator[int]:
    """Offsets in [start, end) of what looks like a gzip header, damaged magic included
    (only scanned between a broken member and the next good one)."""
    pos = start
    while pos < end:
        f.seek(pos)
        stop = min(CHUNK_SIZE, end - pos)
        buf = f.read(stop + 16)  # +16: a header straddling two scans is still seen
        hits = set()
        for pattern, back in _HEADER_HINTS:  # literal-prefixed patterns: searched at GB/s
            i = 0
            while (m := pattern.search(buf, i)) and m.start() - back < stop:
                hits.add(m.start() - back)
                i = m.start() + 1
        yield from (pos + i for i in sorted(hits) if i >= 0)
        pos += stop


def _classify_header(f, offset: int) -> str:
    """What the gzip header at `offset` (perhaps with one magic byte damaged) starts:
    'warc': a readable member starting a WARC record; 'damaged': a member starting a WARC
    record that cannot be read; '': anything else (a member continuing a record, or bytes
    that only look like a header)."""
    f.seek(offset)
    data = f.read(PROBE)
    head = data[:10]
    # XFL and OS must be values writers use: random compressed bytes rarely pass this.
    if len(head) < 10 or not _GZIP_HEADER.match(head) or head[8] not in (0, 2, 4) \
            or not (head[9] <= 13 or head[9] == 255):
        return ""
    intact = head[:3] == GZIP_MAGIC
    try:
        out = zlib.decompressobj(31).decompress(data if intact else GZIP_MAGIC + data[3:], 16)
    except zlib.error:
        # An intact header that does not inflate is a damaged member (by chance, this header
        # pattern turns up once in ~1e11 bytes); a damaged magic must prove itself below.
        return "damaged" if intact else ""
    if not out.startswith(b"WARC/"):
        return ""
    return "warc" if intact else "damaged"


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
    emitted once the next record has begun (or the member is verified), and garbage,
    malformed headers and wrong Content-Lengths are reported only on verified bytes. That
    way a corrupt gzip member yields exactly one Rejected (from the error), not a
    half-parsed record plus one.

    Record starts: a line ``WARC/x.y`` after a newline, or a gzip member whose output
    begins with ``WARC/`` (``starts``; ``pending`` holds member starts not yet seen 5 bytes
    into). A block must be followed by padding and then a record start or the end; one that
    is not has a lying Content-Length, and its record ends at the next record start.
    """

    def __init__(self, members: bool, limit: int | None = None):
        self.buf = bytearray()
        self.members = members  # gzip input: the stream is cut into members
        self.base = 0  # stream offset of buf[0]
        self.limit = limit  # stream length, when known (plain files)
        self.verified_end = 0  # stream offset up to which bytes are CRC-verified
        self.head = None  # (headers, problem, header_len, content_length) of the record at buf[0]
        self.skip_left = 0  # bytes of an oversized block still to discard
        self.skipped: _Record | None = None  # the oversized record, emitted once skipped
        self.skip_block = 0  # stream offset of the skipped record's block
        self.in_garbage = False  # garbage already reported; skip silently to the next record
        self.pending: deque[int] = deque()  # gzip member starts not yet classified
        self.starts: deque[int] = deque()  # gzip member starts whose output begins "WARC/"
        self.rewind_to: int | None = None  # stream offset the caller must read again from
        self.may_rewind = True
        self.stream_end = "stream"  # what a block cut off at the end of the bytes is cut off by

    @property
    def end(self) -> int:
        return self.base + len(self.buf)

    @property
    def anchor(self) -> int:
        """Earliest stream offset a rewind may go back to."""
        return self.skipped.start if self.skipped else self.base

    def feed(self, data: bytes, verified: bool) -> None:
        self.buf += data
        if verified:
            self.verified_end = self.base + len(self.buf)
        if self.pending:  # (one per member: classified as soon as 5 bytes of it are here)
            self._classify_members()

    def member(self) -> None:
        """A gzip member starts at the current end of the stream."""
        self.pending.append(self.base + len(self.buf))

    def pull(self, final: bool = False) -> Iterator[_Record | _Bad]:
        while (item := self._step(final)) is not _WAIT:
            if item is not _AGAIN:
                yield item

    def flush(self, where: str) -> Iterator[_Record | _Bad]:
        """The stream breaks here (`where`: what ends): settle what the verified bytes hold, drop the rest."""
        end = self.end
        start = self.skipped.start if self.skipped else self.base
        if start < self.verified_end:  # else all pending bytes are unverified: the error covers them
            del self.buf[max(0, self.verified_end - self.base):]
            self.head = None  # parsed again from what is left
            self.may_rewind, self.stream_end = False, where  # the bytes after the break cannot be read again
            yield from self.pull(final=True)
            self.may_rewind, self.stream_end = True, "stream"
        self.buf.clear()
        self.base = self.verified_end = end  # later members continue after the dropped bytes
        self.head, self.skip_left, self.skipped, self.in_garbage = None, 0, None, False
        self.pending.clear()
        self.starts.clear()

    def restart(self) -> int:
        """Forget everything from the rewind offset on; the caller feeds it again."""
        to, self.rewind_to = self.rewind_to, None
        self.buf.clear()
        self.base = self.verified_end = to
        self.head, self.skip_left, self.skipped = None, 0, None
        self.in_garbage = True  # the damaged record was reported: skip to the next start
        self.pending = deque(b for b in self.pending if b < to)
        self.starts = deque(b for b in self.starts if b < to)
        return to

    def _consume(self, n: int) -> None:
        del self.buf[:n]  # bytearray front-deletion is amortised O(1) in CPython
        self.base += n

    def _judge(self, final: bool, upto: int | None = None) -> bool:
        """May buf[:upto] be judged (it is verified, or we cannot wait any longer)?"""
        upto = len(self.buf) if upto is None else upto
        return final or self.verified_end >= self.base + upto or len(self.buf) > HOLD_LIMIT

    def _step(self, final: bool):
        if self.rewind_to is not None:
            return _WAIT
        if self.skip_left or self.skipped:
            return self._skip(final)
        if self.head is None:
            lead = _PADDING.match(self.buf).end()
            if lead:
                self._consume(lead)
            if not self.buf:
                return _WAIT
            if not self.buf.startswith(b"WARC/"):
                if not final and len(self.buf) < 5 and b"WARC/".startswith(self.buf):
                    return _WAIT
                return self._garbage(final) if self._judge(final) or self.in_garbage else _WAIT
            result = self._parse_head(final)
            if result is not None:
                return result
        return self._take_block(final)

    # -- record starts

    def _classify_members(self) -> None:
        base, pending, starts = self.base, self.pending, self.starts
        end = base + len(self.buf)
        while pending and (pending[0] + 5 <= end or pending[0] < base):
            at = pending.popleft()
            if at >= base and self.buf.startswith(b"WARC/", at - base):
                starts.append(at)
        while starts and starts[0] < base:
            starts.popleft()

    def _member_start(self, lo: int, hi: int) -> int | None:
        """Buffer offset of the first WARC member start in buf[lo:hi], if any."""
        for at in self.starts:
            rel = at - self.base
            if rel >= hi:
                break
            if rel >= lo:
                return rel
        return None

    def _next_start(self, lo: int) -> int | None:
        """Buffer offset of the first record start at or after buf[lo], if buffered."""
        m = _RESYNC.search(self.buf, max(lo - 1, 0))
        line = m.start() + 1 if m else None
        member = self._member_start(lo, line if line is not None else len(self.buf))
        return member if member is not None else line

    def _at_member_start(self, rel: int) -> bool:
        at = self.base + rel
        return at in self.starts or at in self.pending

    # -- headers

    def _parse_head(self, final: bool):
        m = _HEADER_END.search(self.buf, 0, MAX_HEADER)
        if m is None:
            if final and len(self.buf) < MAX_HEADER:
                start = self.base
                self._consume(len(self.buf))
                return _Bad(start, "WARC header cut off by end of file")
            if len(self.buf) < MAX_HEADER or not self._judge(final):
                return _WAIT
            return self._malformed("no end of WARC header within 64 KiB")
        cut = self._member_start(1, m.end()) if self.starts and self.starts[-1] > self.base else None
        if cut is not None:  # the next gzip member starts inside this header
            start = self.base
            self._consume(cut)
            return _Bad(start, "WARC header cut off by the end of its gzip member")
        headers, problem, length = _parse_warc_header(bytes(self.buf[:m.start()]))
        if length is None:
            return self._malformed(problem) if self._judge(final) else _WAIT
        self.head = (headers, problem, m.end(), length)
        self.in_garbage = False
        return None

    # -- blocks

    def _take_block(self, final: bool):
        headers, problem, hlen, length = self.head
        end = hlen + length
        cut = self._member_start(hlen, end) if self.starts and self.starts[-1] >= self.base + hlen else None
        if cut is not None:  # per-record gzip: the member is the truth
            return self._damaged(cut, _cut_off("its gzip member", length, cut - hlen))
        if self.limit is not None and self.base + end > self.limit:
            have = self.limit - self.base - hlen
            return self._resync(hlen, end, _cut_off("file", length, have))
        if length > MAX_BLOCK:
            return self._start_skip(final)
        if len(self.buf) < end or (self.pending and self.pending[0] < self.base + end):
            if not final:
                return _WAIT
            if len(self.buf) < end:
                have = len(self.buf) - hlen
                return self._resync(hlen, end, _cut_off(self.stream_end, length, have))
        trailer = self._trailer(end, final)
        if trailer is _WAIT:
            return _WAIT
        if not trailer:
            return self._resync(hlen, end, self._wrong_length(length, end))
        block = bytes(self.buf[hlen:end])
        if CHECK_DIGESTS and (wrong := _digest_problem(headers, block)):
            # Damaged, or a Content-Length too long by whole records: then the next record
            # starts inside the block, and _resync goes on from there.
            return self._resync(hlen, end, wrong)
        start = self.base
        self._consume(end)
        self.head = None
        return _Record(start, headers, block, b"", length, problem)

    def _trailer(self, end: int, final: bool):
        """Does a record start (or the end) follow the block ending at buf[end]? _WAIT: unknown yet."""
        pad = _PADDING.match(self.buf, end).end()
        if pad == len(self.buf):
            # In gzip input only a member's last piece is verified: verified to here = member end,
            # and what follows is the next member's.
            at_member_end = self.members and self.verified_end == self.base + pad
            return final or at_member_end or pad - end > MAX_PADDING or _WAIT
        if self.buf.startswith(b"WARC/", pad) or self._at_member_start(pad):
            return True  # (a member start: the next member is judged on its own)
        if not final and len(self.buf) - pad < 5 and b"WARC/".startswith(self.buf[pad:]):
            return _WAIT
        # Junk here may be what a corrupt gzip member decompressed to: judge verified bytes only.
        # Wait for the bytes the message quotes, too, so it is the same for any buffer size.
        upto = max(pad + 1, end + QUOTE)
        if not final and (len(self.buf) < upto or not self._judge(final, upto)):
            return _WAIT
        # The block's own CRLF CRLF, then junk: the junk is reported on its own (_garbage).
        return self.buf.startswith(_TERMINATORS, end)

    def _wrong_length(self, length: int, end: int) -> str:
        follows = bytes(self.buf[end:end + QUOTE])
        return f"Content-Length {length} is wrong: the block is followed by {follows!r}, not by the next record"

    def _resync(self, hlen: int, end: int, message: str):
        """The Content-Length lied: this record runs to the next record start after its header."""
        nxt = self._next_start(hlen)
        if nxt is not None:
            if nxt < end <= len(self.buf):  # (said only when the whole block is here: stable output)
                message += f"; the next record starts {nxt - hlen} bytes into the block"
            return self._damaged(nxt, message)
        bad = self._damaged(hlen, message)
        self.in_garbage = True  # the rest of the block is this record's: skip it silently
        return bad

    def _damaged(self, upto: int, message: str) -> _Bad:
        start = self.base
        self._consume(upto)
        self.head = None
        return _Bad(start, message)

    def _start_skip(self, final: bool):
        headers, problem, hlen, length = self.head
        keep = min(OVERSIZE_PREFIX, length)
        if len(self.buf) < hlen + keep and not final:
            return _WAIT
        prefix = bytes(self.buf[hlen:hlen + keep])
        self.skipped = _Record(self.base, headers, None, prefix, length, problem)
        self.skip_block = self.base + hlen
        self.skip_left = hlen + length
        self.head = None
        return _AGAIN

    def _skip(self, final: bool):
        rec = self.skipped
        while self.skip_left:
            if self.base > rec.start:  # per-record gzip: the member is the truth
                if self.pending and self.pending[0] == self.base and not final:
                    return _WAIT  # see whether this member starts a record before skipping it
                if self._member_start(0, 1) == 0:
                    self.skipped, self.skip_left = None, 0
                    return _Bad(rec.start, _cut_off("its gzip member", rec.length, self.base - self.skip_block))
            n = min(self.skip_left, len(self.buf), self._next_member(self.base + 1) - self.base)
            if n == 0:
                if not final:
                    return _WAIT
                self.skipped, self.skip_left = None, 0
                return self._skip_lied(rec, _cut_off(self.stream_end, rec.length, self.base - self.skip_block))
            self._consume(n)
            self.skip_left -= n
        trailer = self._trailer(0, final)
        if trailer is _WAIT:
            return _WAIT
        self.skipped = None
        return rec if trailer else self._skip_lied(rec, self._wrong_length(rec.length, 0))

    def _next_member(self, lo: int) -> int:
        """Stream offset of the first member start (classified or not) at or after `lo`."""
        firsts = [next((at for at in q if at >= lo), self.end) for q in (self.pending, self.starts)]
        return min(firsts)

    def _skip_lied(self, rec: _Record, message: str) -> _Bad:
        """An oversized block whose Content-Length lied: read again from its start."""
        if self.may_rewind:
            self.rewind_to = self.skip_block
        return _Bad(rec.start, message)

    def _garbage(self, final: bool):
        """Skip to the next record start; report the region once."""
        start, reported = self.base, self.in_garbage
        nxt = self._next_start(0)
        if nxt is not None:
            self._consume(nxt)
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


def _cut_off(where: str, length: int, have: int) -> str:
    return f"record block cut off by end of {where}: Content-Length {length}, {have} bytes there"


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

    def member_at(self, stream_offset: int) -> tuple[int, int]:
        """(stream offset, file offset) of the member holding `stream_offset`."""
        i = max(bisect.bisect_right(self.starts, stream_offset) - 1, 0)
        return self.starts[i], self.offsets[i]

    def forget_before(self, stream_offset: int) -> None:
        drop = bisect.bisect_right(self.starts, stream_offset) - 1
        if drop > 0:
            del self.starts[:drop], self.offsets[:drop]

    def forget_from(self, stream_offset: int) -> None:
        keep = bisect.bisect_left(self.starts, stream_offset)
        del self.starts[keep:], self.offsets[keep:]


def _items(path: str, f, gz: bool, size: int) -> Iterator[Item]:
    splitter = _Splitter(members=gz, limit=None if gz else size)
    loc, ids, name = _Locator(), IdAllocator(), os.path.basename(path)
    crawl: dict[str, str] = {}   # the file's warcinfo `isPartOf` (Common Crawl: "CC-MAIN-2024-51")

    def emit(piece):
        pos = loc.position(piece.start)
        if isinstance(piece, _Bad):
            return Rejected("unreadable_record", f"{path} at byte {pos}: {piece.message}", pos)
        if piece.headers.get("warc-type", "").lower() == "warcinfo" and piece.block is not None:
            crawl.update(_warcinfo_crawl(piece.block))
        item = _item(piece, pos, path, name, ids)
        if isinstance(item, dict):
            item["crawl_id"] = crawl.get("crawl_id")
        return item

    with f:
        events = _gzip_events(f) if gz else _plain_events(f)
        while True:
            try:
                yield from _read(events, splitter, loc, emit, path)
            finally:
                events.close()
            if splitter.rewind_to is None:
                return
            # A skipped block's Content-Length lied: read again from its start, whose
            # records were skipped with it.
            to = splitter.restart()
            if not gz:
                events = _plain_events(f, to)
                continue
            member, file_offset = loc.member_at(to)
            loc.forget_from(to if to == member else to + 1)  # (a member starting at `to` is announced again)
            events = _gzip_events(f, file_offset, discard=to - member)


def _warcinfo_crawl(block: bytes) -> dict[str, str]:
    """{"crawl_id": the `isPartOf` field of a warcinfo record's `key: value` lines} (or {})."""
    for line in block.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "ispartof" and value.strip():
            return {"crawl_id": value.strip()}
    return {}


def _read(events, splitter: _Splitter, loc: _Locator, emit, path: str) -> Iterator[Item]:
    """Items of one pass over `events`; returns early when the splitter asks for a rewind."""
    last = 0
    try:
        for ev in events:
            if ev[0] == "member":
                loc.mark(splitter.end, ev[1])
                splitter.member()
                last = ev[1]
            elif ev[0] == "data":
                splitter.feed(ev[1], ev[2])
                for piece in splitter.pull():
                    yield emit(piece)
                if splitter.rewind_to is not None:
                    return
                if len(loc.starts) > 64:  # (amortised)
                    loc.forget_before(splitter.anchor)
            else:  # error: what the verified bytes hold is settled, the broken region is one record
                for piece in splitter.flush("its gzip member"):
                    yield emit(piece)
                yield Rejected("unreadable_record", f"{path} at byte {ev[1]}: {ev[2]}", ev[1])
    except OSError as e:
        for piece in splitter.flush("the readable data"):
            yield emit(piece)
        yield Rejected("unreadable_record", f"{path}: read error after byte {last}: {e}", last)
        return
    for piece in splitter.pull(final=True):
        yield emit(piece)


# ----------------------------------------------------------------------------- digests

_HASHES = {"sha1": hashlib.sha1, "sha256": hashlib.sha256, "sha512": hashlib.sha512, "md5": hashlib.md5}
_ALGORITHMS = {**{name: name for name in _HASHES}, "sha-1": "sha1", "sha-256": "sha256", "sha-512": "sha512"}
# name -> (digest bytes, length in base32 / hex / base64 digits, without "=" padding)
_LENGTHS = {name: (n, -(-n * 8 // 5), 2 * n, -(-n * 4 // 3))
            for name, n in ((name, new().digest_size) for name, new in _HASHES.items())}
# RFC 4648 base32 digits -> the digits int(text, 32) reads, anything else -> "!" (int() then
# refuses it): base32 decoded at C speed, where base64.b32decode costs as much as the hash.
_BASE32 = {c: "!" for c in range(128)} | str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567abcdefghijklmnopqrstuvwxyz",
    "0123456789abcdefghijklmnopqrstuv0123456789abcdefghijklmnop")


def _digest_problem(h: dict, block: bytes) -> str:
    """'' when the record's digest matches or cannot be checked, else what is wrong.

    WARC-Block-Digest covers the whole block and is checked when present. Otherwise the
    WARC-Payload-Digest of a response or resource. For HTTP that is the entity body, which
    the WARC spec defines with any chunked transfer-encoding removed (iipc/warc-specifications
    #22), while warcio, wpull and older wget and Heritrix hash the body as stored: both are
    accepted, and so is the block's digest (ClueWeb09 wrote that as the payload digest).
    Revisits and truncated records carry the digest of a payload they do not hold: not
    checked.
    """
    declared = h.get("warc-block-digest")
    if declared:
        return _mismatch("block", declared, (block,))
    declared = h.get("warc-payload-digest")
    wtype = h.get("warc-type", "").lower()
    if not declared or h.get("warc-truncated") or wtype not in ("response", "resource"):
        return ""
    candidates = [block]
    message = block.lstrip(b"\r\n")
    if wtype == "response" and message[:5] == b"HTTP/":
        m = _HEADER_END.search(message)
        body = message[m.end():] if m else b""
        candidates.insert(0, body)
        if b"chunked" in message[:m.start() if m else 0].lower():
            try:
                candidates.append(_dechunk(body))
            except _Reject:
                pass
    return _mismatch("payload", declared, tuple(candidates))


def _mismatch(kind: str, declared: str, candidates: tuple[bytes, ...]) -> str:
    parsed = _parse_digest(declared)
    if parsed is None:
        return ""  # an algorithm or encoding we do not know: not checked
    algorithm, want = parsed
    new = _HASHES[algorithm]
    for data in candidates:
        if new(data).digest() == want:
            return ""
    actual = base64.b32encode(new(candidates[0]).digest()).decode()
    return f"{kind} digest mismatch: header {declared.strip()[:80]!r}, content hashes to {algorithm}:{actual}"


def _parse_digest(value: str) -> tuple[str, bytes] | None:
    """('sha1', raw digest) from 'sha1:BASE32' (or hex, or base64), None if not understood."""
    label, _, text = value.partition(":")
    algorithm = _ALGORITHMS.get(label) or _ALGORITHMS.get(label.strip().lower())
    if algorithm is None:
        return None
    size, base32, hexa, base64_ = _LENGTHS[algorithm]
    text = text.strip().rstrip("=")
    try:
        if len(text) == base32 and text.isascii():
            spare = base32 * 5 - size * 8  # the last digit's unused low bits
            return algorithm, (int(text.translate(_BASE32), 32) >> spare).to_bytes(size, "big")
        if len(text) == hexa:
            return algorithm, bytes.fromhex(text)
        if len(text) == base64_:
            return algorithm, base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (ValueError, OverflowError, binascii.Error):
        pass
    return None


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
        decoded = decode_html(body, charset_from_content_type(content_type))
    except DecodeError as e:
        raise _Reject("decode_error", str(e)) from None
    url = h.get("warc-target-uri", "").strip().strip("<>")
    return {
        "id": ids.claim(h.get("warc-record-id"), f"{name}:{pos}"),
        "url": url or None,
        "html": decoded.text,
        "warc_date": h.get("warc-date", ""),
        "content_type": mime or "text/html",
        "charset": decoded.charset,
        "charset_source": decoded.source,
        "mojibake_suspect": decoded.suspect,
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
