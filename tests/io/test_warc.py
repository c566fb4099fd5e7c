"""WARC damage is counted per record, and never costs a neighbour (issue #14, item 2).

Every file here is written by the test itself: records by hand (or with warcio's
WARCWriter), then damaged on disk: a lying Content-Length (too long, too short, absurd,
not a number), damaged gzip members, wrong digests. Each damaged record must be exactly
one ``unreadable_record`` at its own position; every other record must come out exactly as
written, and no document may contain another record's WARC header.
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import io
from pathlib import Path

import pytest

from gpupipe.io import warc as warc_mod
from gpupipe.io.readers import iter_records
from gpupipe.io.records import Rejected
from tests.helpers import ROOT

REAL_WARCS = ROOT.parent / "shared" / "data" / "warc"
N = 12  # records per test file

# ----------------------------------------------------------------------------- building files


def rid(n: int) -> str:
    return f"<urn:uuid:00000000-0000-4000-8000-{n:012d}>"


def url(n: int) -> str:
    return f"http://example.com/page/{n}"


def html(n: int) -> str:
    # Filler that varies per record, so each gzip member has real deflate data to damage.
    filler = " ".join(f"w{(i * 7919 + n * 104729) % 100003}" for i in range(400))
    return f"<!doctype html><html><head><title>page {n}</title></head><body><p>{filler}</p></body></html>"


def http_block(n: int) -> bytes:
    body = html(n).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


def record(n: int, block: bytes | None = None, length: str | None = None, extra: tuple = ()) -> bytes:
    """One WARC/1.1 record; `length` overrides the (true) Content-Length."""
    block = http_block(n) if block is None else block
    lines = ["WARC/1.1", "WARC-Type: response", "WARC-Date: 2024-05-18T01:58:10Z", f"WARC-Record-ID: {rid(n)}",
             f"WARC-Target-URI: {url(n)}", "Content-Type: application/http; msgtype=response", *extra,
             f"Content-Length: {len(block) if length is None else length}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + block + b"\r\n\r\n"


def write(path: Path, records: list[bytes], layout: str) -> list[int]:
    """Per-record gzip ("members"), one gzip stream ("single") or "plain"; returns each
    record's expected position (member offset, byte offset, or 0 in a single stream)."""
    out, positions = bytearray(), []
    for rec in records:
        positions.append(0 if layout == "single" else len(out))
        out += gzip.compress(rec) if layout == "members" else rec
    path.write_bytes(gzip.compress(bytes(out)) if layout == "single" else bytes(out))
    return positions


def suffix(layout: str) -> str:
    return ".warc" if layout == "plain" else ".warc.gz"


def read(path) -> list:
    return list(iter_records(path))


def check(items: list, damaged: set[int], positions: list[int], n: int = N, detail: str = "") -> None:
    """Exactly one item per record; the damaged ones rejected at their own position, the
    others exactly as written, no document holding another record's header."""
    assert len(items) == n, [i if isinstance(i, Rejected) else i["url"] for i in items]
    for k, item in enumerate(items):
        if k in damaged:
            assert isinstance(item, Rejected) and item.reason == "unreadable_record", (k, item)
            assert item.position == positions[k], (k, item)
            assert detail in item.detail, (k, item.detail)
        else:
            assert isinstance(item, dict), (k, item)
            assert (item["id"], item["url"], item["html"]) == (rid(k), url(k), html(k))
            assert "WARC/1." not in item["html"] and "WARC-Type" not in item["html"]


@pytest.fixture(params=[False, True], ids=["buffers", "tiny-buffers"])
def tiny(request, monkeypatch):
    """Tiny read/inflate buffers: records and members straddle every read boundary."""
    if request.param:
        monkeypatch.setattr(warc_mod, "CHUNK_SIZE", 97)
        monkeypatch.setattr(warc_mod, "FEED", 13)
        monkeypatch.setattr(warc_mod, "MAX_INFLATE", 61)
    return request.param


# ----------------------------------------------------------------------------- Content-Length


def lie(kind: str, k: int) -> str:
    true = len(http_block(k))
    return {"too_long": str(true + 100),
            "much_too_long": str(true + 3 * len(record(k + 1)) + 50),  # swallows three neighbours
            "too_short": str(true - 100),
            "zero": "0",
            "absurd": str(10 ** 15),
            "not_a_number": "12x4"}[kind]


LIES = ["too_long", "much_too_long", "too_short", "zero", "absurd", "not_a_number"]


@pytest.mark.parametrize("layout", ["members", "single", "plain"])
@pytest.mark.parametrize("kind", LIES)
def test_lying_content_length_costs_only_its_record(tmp_path, layout, kind, tiny):
    k = 4
    records = [record(n, length=lie(kind, n) if n == k else None) for n in range(N)]
    path = tmp_path / f"lie{suffix(layout)}"
    positions = write(path, records, layout)
    check(read(path), {k}, positions, detail="Content-Length")


@pytest.mark.parametrize("layout", ["members", "single", "plain"])
def test_six_lying_records_count_as_six(tmp_path, layout, tiny):
    """Lies of every kind in one file, two of them back to back: six rejections."""
    lies = {1: "too_long", 2: "absurd", 5: "too_short", 7: "much_too_long", 10: "zero", 11: "too_long"}
    records = [record(n, length=lie(lies[n], n) if n in lies else None) for n in range(N)]
    path = tmp_path / f"six{suffix(layout)}"
    positions = write(path, records, layout)
    check(read(path), set(lies), positions)


@pytest.mark.parametrize("layout", ["single", "plain"])
def test_oversized_lie_is_read_again_from_its_block(tmp_path, monkeypatch, layout, tiny):
    """A Content-Length over MAX_BLOCK is skipped while streaming, not buffered; when what
    follows the skipped block is not a record, the reader goes back and finds the records
    the lie would have swallowed."""
    monkeypatch.setattr(warc_mod, "MAX_BLOCK", 5000)  # pages are ~3 KB
    k = 3
    records = [record(n, length=lie("much_too_long", n) if n == k else None) for n in range(N)]
    path = tmp_path / f"big{suffix(layout)}"
    positions = write(path, records, layout)
    check(read(path), {k}, positions, detail="Content-Length")


def test_genuine_oversized_record_still_skipped(tmp_path, monkeypatch):
    """An honest Content-Length over MAX_BLOCK: skipped and classified, neighbours intact."""
    monkeypatch.setattr(warc_mod, "MAX_BLOCK", 5000)  # pages are ~3 KB
    png = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n\r\n" + bytes(range(256)) * 40
    records = [record(0), record(1, block=png), record(2)]
    for layout in ("members", "single", "plain"):
        path = tmp_path / f"png{suffix(layout)}"
        write(path, records, layout)
        items = read(path)
        assert [i["url"] if isinstance(i, dict) else i.reason for i in items] == [url(0), "not_html", url(2)]


def test_truncated_last_record_in_plain_file(tmp_path):
    records = [record(n) for n in range(4)]
    path = tmp_path / "cut.warc"
    positions = write(path, records, "plain")
    path.write_bytes(path.read_bytes()[:positions[3] + 700])
    check(read(path), {3}, positions, n=4, detail="cut off")


def test_member_holding_part_of_a_header(tmp_path):
    """A member cut mid-header (then gzip'd on its own) ends there: the next member is a record."""
    records = [record(n) for n in range(4)]
    records[1] = records[1][:60]  # "WARC/1.1\r\nWARC-Type: response\r\nWARC-Date: ..."
    path = tmp_path / "head.warc.gz"
    positions = write(path, records, "members")
    check(read(path), {1}, positions, n=4)


# ----------------------------------------------------------------------------- gzip members


def damage_member(data: bytearray, start: int, end: int, where: str) -> None:
    if where == "magic":
        data[start + 1] ^= 0xFF  # 8b: the member no longer looks like gzip
    elif where == "first_magic":
        data[start] ^= 0xFF  # 1f
    elif where == "deflate_start":
        for i in range(start + 10, start + 14):  # right after the 10-byte gzip header
            data[i] ^= 0xFF
    elif where == "middle":
        mid = (start + end) // 2
        for i in range(mid, mid + 4):
            data[i] ^= 0xFF
    elif where == "crc":
        data[end - 6] ^= 0xFF  # the CRC32 in the trailer
    else:
        raise ValueError(where)


@pytest.mark.parametrize("where", ["magic", "first_magic", "deflate_start", "middle", "crc", "mixed"])
def test_six_damaged_members_count_as_six(tmp_path, where, tiny):
    records = [record(n) for n in range(N)]
    path = tmp_path / "members.warc.gz"
    positions = write(path, records, "members")
    ends = positions[1:] + [path.stat().st_size]
    data = bytearray(path.read_bytes())
    bad = [2, 3, 4, 5, 6, 9]  # five back to back, one further on
    kinds = ["magic", "deflate_start", "middle", "crc", "first_magic", "deflate_start"] if where == "mixed" \
        else [where] * 6
    for k, kind in zip(bad, kinds):
        damage_member(data, positions[k], ends[k], kind)
    path.write_bytes(data)
    check(read(path), set(bad), positions)


def test_damaged_member_and_lying_neighbour(tmp_path):
    """A record whose Content-Length runs into a corrupt member: two records, two rejections."""
    records = [record(n, length=lie("too_long", n) if n == 3 else None) for n in range(8)]
    path = tmp_path / "both.warc.gz"
    positions = write(path, records, "members")
    data = bytearray(path.read_bytes())
    damage_member(data, positions[4], positions[5], "deflate_start")
    path.write_bytes(data)
    check(read(path), {3, 4}, positions, n=8)


# ----------------------------------------------------------------------------- digests


def b32(algorithm: str, data: bytes) -> str:
    return base64.b32encode(hashlib.new(algorithm, data).digest()).decode()


def payload(block: bytes) -> bytes:
    return block[block.index(b"\r\n\r\n") + 4:]


def chunked_block(n: int) -> bytes:
    body = html(n).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 500]), body[i:i + 500]) for i in range(0, len(body), 500))
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"


def digest_records() -> tuple[list[bytes], set[int]]:
    """(records, the ones whose digest is wrong)."""
    blocks = [http_block(n) for n in range(N)]
    blocks[5] = chunked_block(5)
    blocks[6] = chunked_block(6)
    wrong = http_block(99)  # digests of other content
    digests = {
        0: [f"WARC-Block-Digest: sha1:{b32('sha1', blocks[0])}"],
        1: [f"WARC-Block-Digest: sha1:{b32('sha1', wrong)}"],  # wrong
        2: [f"WARC-Block-Digest: sha256:{hashlib.sha256(blocks[2]).hexdigest()}",
            f"WARC-Payload-Digest: sha1:{b32('sha1', wrong)}"],  # block digest wins: fine
        3: [f"WARC-Block-Digest: md5:{hashlib.md5(wrong).hexdigest()}"],  # wrong
        4: [f"WARC-Payload-Digest: sha1:{b32('sha1', payload(blocks[4])).lower()}"],
        5: [f"WARC-Payload-Digest: sha1:{b32('sha1', payload(blocks[5]))}"],  # over the bytes as stored
        6: [f"WARC-Payload-Digest: sha1:{b32('sha1', html(6).encode())}"],  # over the de-chunked body
        7: [f"WARC-Payload-Digest: sha1:{b32('sha1', wrong)}"],  # wrong
        8: [f"WARC-Payload-Digest: sha1:{b32('sha1', wrong)}", "WARC-Truncated: length"],  # not checked
        9: ["WARC-Block-Digest: crc32:1234abcd"],  # unknown algorithm: not checked
        10: [f"WARC-Block-Digest: sha1:{b32('sha1', blocks[10])}"],
        11: [f"WARC-Block-Digest: sha512:{base64.b64encode(hashlib.sha512(wrong).digest()).decode()}"],  # wrong
    }
    return [record(n, block=blocks[n], extra=tuple(digests[n])) for n in range(N)], {1, 3, 7, 11}


@pytest.mark.parametrize("layout", ["members", "single", "plain"])
def test_digest_mismatch_is_a_damaged_record(tmp_path, layout):
    records, wrong = digest_records()
    path = tmp_path / f"digests{suffix(layout)}"
    positions = write(path, records, layout)
    check(read(path), wrong, positions, detail="digest mismatch")


@pytest.mark.parametrize("layout", ["members", "single", "plain"])
def test_block_digest_catches_a_length_that_swallows_whole_records(tmp_path, layout):
    """A Content-Length too long by exactly three records lands on a record boundary: only
    the block digest can tell (per-record gzip: the member boundary too). The swallowed
    records are read, not lost."""
    k = 2
    digest = [(f"WARC-Block-Digest: sha1:{b32('sha1', http_block(n))}",) for n in range(N)]
    records = [record(n, extra=digest[n]) for n in range(N)]
    swallow = len(http_block(k)) + sum(len(records[n]) for n in (3, 4, 5))
    records[k] = record(k, length=str(swallow), extra=digest[k])
    path = tmp_path / f"swallow{suffix(layout)}"
    positions = write(path, records, layout)
    check(read(path), {k}, positions)


def test_digests_checked_on_warcio_written_records(tmp_path):
    """warcio writes block and payload digests; flipping one byte of one page is caught."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    raw = []
    for n in range(6):
        buf = io.BytesIO()
        writer = WARCWriter(buf, gzip=False)
        headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
        rec = writer.create_warc_record(url(n), "response", payload=io.BytesIO(html(n).encode()),
                                        http_headers=headers, warc_headers_dict={"WARC-Record-ID": rid(n)})
        writer.write_record(rec)
        raw.append(buf.getvalue())
    assert b"WARC-Block-Digest: sha1:" in raw[0] and b"WARC-Payload-Digest: sha1:" in raw[0]
    raw[2] = raw[2].replace(b"<title>page 2</title>", b"<title>page Z</title>")  # same length
    path = tmp_path / "warcio.warc.gz"
    positions = write(path, raw, "members")
    check(read(path), {2}, positions, n=6, detail="block digest mismatch")


def test_digest_checks_can_be_turned_off(tmp_path, monkeypatch):
    records, _ = digest_records()
    path = tmp_path / "off.warc.gz"
    write(path, records, "members")
    monkeypatch.setattr(warc_mod, "CHECK_DIGESTS", False)
    assert all(isinstance(i, dict) for i in read(path))


@pytest.mark.skipif(not REAL_WARCS.is_dir(), reason=f"real WARC samples not present ({REAL_WARCS}): "
                                                   "only in the development checkout, not in a fresh clone")
def test_real_files_have_no_digest_mismatch(monkeypatch):
    """Real crawls (wget, Heritrix, warcio, ClueWeb09's payload-digest quirk, a truncated
    file): checking digests changes nothing, and many digests really were checked."""
    files = sorted(REAL_WARCS.glob("*.warc*.gz"))
    assert files
    parsed = []
    parse = warc_mod._parse_digest
    monkeypatch.setattr(warc_mod, "_parse_digest", lambda value: parsed.append(value) or parse(value))
    for path in files:
        monkeypatch.setattr(warc_mod, "CHECK_DIGESTS", True)
        with_digests = list(warc_mod.iter_warc(path))  # (.wat.gz / .wet.gz: not WARC by their name)
        monkeypatch.setattr(warc_mod, "CHECK_DIGESTS", False)
        assert with_digests == list(warc_mod.iter_warc(path)), path.name
        assert not [i for i in with_digests if isinstance(i, Rejected) and "digest" in i.detail]
    assert len(parsed) > 200 and all(parse(value) for value in parsed)  # all understood, all match
