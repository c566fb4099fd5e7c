"""Input readers: every record yields exactly one document or one Rejected, never a crash.

All inputs are written by the tests themselves (WARCs by hand with gzip, and one with
warcio's WARCWriter).
"""
from __future__ import annotations

import gzip
import io
import json
import os

import pytest

from gpupipe.io import warc as warc_mod
from gpupipe.io.readers import iter_records
from gpupipe.io.records import FORMATS, ReaderError, Rejected, detect_format

# ----------------------------------------------------------------------------- helpers


def outcome(items):
    """'doc' or the rejection reason, per item."""
    return ["doc" if isinstance(i, dict) else i.reason for i in items]


def docs(items):
    return [i for i in items if isinstance(i, dict)]


def rid(n: int) -> str:
    return f"<urn:uuid:00000000-0000-4000-8000-{n:012d}>"


def warc_record(wtype: str, block: bytes = b"", n: int = 0, uri: str | None = None,
                content_type: str | None = None, version: str = "WARC/1.0",
                record_id: bool = True) -> bytes:
    lines = [version, f"WARC-Type: {wtype}", "WARC-Date: 2024-05-18T01:58:10Z"]
    if record_id:
        lines.append(f"WARC-Record-ID: {rid(n)}")
    if uri:
        lines.append(f"WARC-Target-URI: {uri}")
    if content_type is None and wtype in ("response", "request"):
        content_type = f"application/http; msgtype={wtype}"
    if content_type:
        lines.append(f"Content-Type: {content_type}")
    lines.append(f"Content-Length: {len(block)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + block + b"\r\n\r\n"


def http(body: bytes, status: str = "200 OK", content_type: str | None = "text/html; charset=utf-8",
         extra: tuple = ()) -> bytes:
    headers = [f"HTTP/1.1 {status}"]
    if content_type:
        headers.append(f"Content-Type: {content_type}")
    headers += list(extra)
    return ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1") + body


def chunked(body: bytes, size: int = 7) -> bytes:
    parts = [b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size]) for i in range(0, len(body), size)]
    return b"".join(parts) + b"0\r\n\r\n"


def page(text: str) -> str:
    # A bit of pseudo-random filler so each gzip member has real deflate data to corrupt.
    filler = " ".join(f"w{(i * 7919) % 1000}" for i in range(300))
    return f"<!doctype html><html><head><title>t</title></head><body><p>{text}</p><p>{filler}</p></body></html>"


HELLO = page("héllo wörld ✓")
CAFE = page("café naïve")
CHUNKED = page("chunked body")
GZIPPED = page("gzip encoded body")
SJIS = '<html><head><meta charset="shift_jis"></head><body>日本語のページ</body></html>'
SMART = page("“quoted” – dash")
MIXED = "<html><body><p>今天的新闻：经济增长放缓。".encode() + "<p>明天的天气：多云转晴。</p></body></html>".encode("gbk")

# (record bytes, expected outcome, expected html or None)
STANDARD = [
    (warc_record("warcinfo", b"software: test\r\n", n=1, content_type="application/warc-fields"), "not_response", None),
    (warc_record("request", b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", n=2, uri="http://example.com/"),
     "not_response", None),
    (warc_record("response", http(HELLO.encode()), n=3, uri="http://example.com/"), "doc", HELLO),
    (warc_record("response", http(page("gone").encode(), "404 Not Found"), n=4, uri="http://example.com/404"),
     "http_status", None),
    (warc_record("response", http(b"\x89PNG\r\n\x1a\n" + bytes(range(256)), content_type="image/png"), n=5,
                 uri="http://example.com/a.png"), "not_html", None),
    (warc_record("response", http(CAFE.encode("latin-1"), content_type="text/html; charset=ISO-8859-1"), n=6,
                 uri="http://example.com/latin1"), "doc", CAFE),
    (warc_record("response", http(chunked(CHUNKED.encode()), extra=("Transfer-Encoding: chunked",)), n=7,
                 uri="http://example.com/chunked"), "doc", CHUNKED),
    (warc_record("response", http(gzip.compress(GZIPPED.encode()), extra=("Content-Encoding: gzip",)), n=8,
                 uri="http://example.com/gzip"), "doc", GZIPPED),
    (warc_record("metadata", b"fetchTimeMs: 12\r\n", n=9, uri="http://example.com/",
                 content_type="application/warc-fields"), "not_response", None),
    (warc_record("response", http(b""), n=10, uri="http://example.com/empty"), "missing_text", None),
    # Declared UTF-8, and no one encoding reads it (half UTF-8, half GBK: gpupipe/io/charset.py detects a page
    # whose bytes merely do not fit their declaration, such as cp1252 bytes declared UTF-8).
    (warc_record("response", http(MIXED), n=11, uri="http://example.com/bad-utf8"), "decode_error", None),
    (warc_record("response", http(SMART.encode("cp1252"), content_type="text/html"), n=12,
                 uri="http://example.com/cp1252"), "doc", SMART),
    (warc_record("response", http(SJIS.encode("shift_jis"), content_type="text/html"), n=13,
                 uri="http://example.com/sjis"), "doc", SJIS),
    (warc_record("revisit", http(b"", "304 Not Modified"), n=14, uri="http://example.com/"), "not_response", None),
]


def write_warc(path, records: list[bytes], layout: str) -> list[int]:
    """Write records as per-record gzip ("members"), one gzip stream ("single") or "plain".

    Returns each record's expected position (member offset / byte offset / 0).
    """
    offsets, out = [], bytearray()
    for rec in records:
        offsets.append(0 if layout == "single" else len(out))
        out += gzip.compress(rec) if layout == "members" else rec
    if layout == "single":
        out = bytearray(gzip.compress(bytes(out)))
    with open(path, "wb") as f:
        f.write(out)
    return offsets


def read(path, **kw):
    return list(iter_records(path, **kw))


# ----------------------------------------------------------------------------- WARC


@pytest.mark.parametrize("layout", ["members", "single", "plain"])
def test_warc_reasons_and_documents(tmp_path, layout):
    path = tmp_path / ("a.warc" if layout == "plain" else "a.warc.gz")
    offsets = write_warc(path, [r for r, _, _ in STANDARD], layout)
    items = read(path)

    assert len(items) == len(STANDARD)  # one item per record
    assert outcome(items) == [want for _, want, _ in STANDARD]
    if layout != "single":  # a single gzip stream has one member: every position is 0
        assert [(i.position, o) for i, o in zip(items, offsets) if isinstance(i, Rejected)] == \
            [(o, o) for i, o in zip(items, offsets) if isinstance(i, Rejected)]
    for item, (_, want, html) in zip(items, STANDARD):
        if want == "doc":
            assert item["html"] == html
            assert item["content_type"] == "text/html"
            assert item["warc_date"] == "2024-05-18T01:58:10Z"
            assert item["url"].startswith("http://example.com/")
        else:
            assert item.detail and str(path) in item.detail
    by_url = {d["url"]: d for d in docs(items)}
    assert by_url["http://example.com/latin1"]["html"] == CAFE  # ISO-8859-1 decoded correctly
    assert by_url["http://example.com/sjis"]["charset"] == "cp932"  # <meta charset>, WHATWG superset
    assert by_url["http://example.com/cp1252"]["charset"] == "cp1252"  # undeclared: cp1252 fallback
    assert docs(items)[0]["id"] == rid(3)


@pytest.mark.parametrize("layout", ["members", "single", "plain"])
def test_warc_tiny_buffers_give_identical_results(tmp_path, monkeypatch, layout):
    """Records and gzip members straddling every possible read boundary parse the same."""
    path = tmp_path / ("a.warc" if layout == "plain" else "a.warc.gz")
    write_warc(path, [r for r, _, _ in STANDARD], layout)
    reference = read(path)
    monkeypatch.setattr(warc_mod, "CHUNK_SIZE", 7)
    monkeypatch.setattr(warc_mod, "FEED", 5)
    monkeypatch.setattr(warc_mod, "MAX_INFLATE", 11)
    assert read(path) == reference


def test_corrupt_member_in_the_middle(tmp_path):
    records = [r for r, _, _ in STANDARD]
    path = tmp_path / "corrupt.warc.gz"
    offsets = write_warc(path, records, "members")
    data = bytearray(path.read_bytes())
    k = 2  # the 200 HTML response; flip bytes inside its deflate data
    mid = (offsets[k] + offsets[k + 1]) // 2
    for i in range(mid, mid + 4):
        data[i] ^= 0xFF
    path.write_bytes(data)

    items = read(path)
    assert len(items) == len(records)
    assert outcome(items) == ["not_response", "not_response", "unreadable_record"] + \
        [want for _, want, _ in STANDARD[k + 1:]]
    assert items[k].position == offsets[k]
    assert "gzip" in items[k].detail and str(offsets[k]) in items[k].detail
    assert len(docs(items)) == sum(want == "doc" for _, want, _ in STANDARD) - 1  # all later ones read


def test_truncated_last_record(tmp_path):
    records = [r for r, _, _ in STANDARD]
    path = tmp_path / "cut.warc.gz"
    offsets = write_warc(path, records, "members")
    data = path.read_bytes()
    path.write_bytes(data[:offsets[-1] + (len(data) - offsets[-1]) // 2])  # cut mid-member

    items = read(path)
    assert len(items) == len(records)
    assert outcome(items)[:-1] == [want for _, want, _ in STANDARD[:-1]]
    assert items[-1].reason == "unreadable_record" and items[-1].position == offsets[-1]


def test_garbage_between_gzip_members_and_padding(tmp_path):
    records = [r for r, _, _ in STANDARD[:4]]
    members = [gzip.compress(r) for r in records]
    path = tmp_path / "junk.warc.gz"
    path.write_bytes(members[0] + b"not gzip at all" + b"".join(members[1:]) + b"\0" * 64)

    items = read(path)
    # the junk region is one extra rejection; NUL padding at the end is not a record
    assert outcome(items) == ["not_response", "unreadable_record", "not_response", "doc", "http_status"]
    assert len(items) == len(records) + 1
    assert items[1].position == len(members[0])


def test_plain_warc_garbage_line_and_truncated_block(tmp_path):
    ok1 = warc_record("response", http(HELLO.encode()), n=1, uri="http://example.com/1")
    ok2 = warc_record("response", http(CAFE.encode()), n=2, uri="http://example.com/2")
    bad_len = warc_record("response", http(HELLO.encode()), n=3).replace(b"Content-Length: ", b"Content-Length: x")
    last = warc_record("response", http(HELLO.encode()), n=4, uri="http://example.com/4")
    garbage = b"this line is not a WARC record\r\n"
    path = tmp_path / "mixed.warc"
    path.write_bytes(ok1 + garbage + ok2 + bad_len + last[: len(last) // 2])

    items = read(path)
    # 4 records + the garbage line; the malformed header costs only its own record
    assert outcome(items) == ["doc", "unreadable_record", "doc", "unreadable_record", "unreadable_record"]
    assert len(items) == 4 + 1
    assert items[1].position == len(ok1)
    assert "Content-Length" in items[3].detail
    assert "cut off" in items[4].detail and items[4].position == len(ok1 + garbage + ok2 + bad_len)
    assert [d["url"] for d in docs(items)] == ["http://example.com/1", "http://example.com/2"]


def test_old_warc_versions_and_bare_newlines(tmp_path):
    body = http(HELLO.encode()).replace(b"\r\n", b"\n")  # HTTP header with bare \n
    records = [warc_record("warcinfo", b"x: y\r\n", n=1, version="WARC/0.18"),
               warc_record("response", body, n=2, uri="<http://example.com/old>", version="WARC/0.18"),
               warc_record("response", http(HELLO.encode()), n=3, uri="http://example.com/", version="WARC/1.1")]
    path = tmp_path / "old.warc.gz"
    write_warc(path, records, "members")
    items = read(path)
    assert outcome(items) == ["not_response", "doc", "doc"]
    assert items[1]["url"] == "http://example.com/old" and items[1]["html"] == HELLO


def test_mislabelled_and_corrupt_content_encoding(tmp_path):
    records = [
        # ClueWeb quirk: header says gzip but the stored body is already decoded
        warc_record("response", http(HELLO.encode(), extra=("Content-Encoding: gzip",)), n=1, uri="http://a/"),
        warc_record("response", http(b"\x1f\x8b\x08\x00garbage" * 10, extra=("Content-Encoding: gzip",)), n=2),
        warc_record("response", http(HELLO.encode(), extra=("Content-Encoding: compress",)), n=3),
        # deflate, raw (no zlib header), as many servers send it
        warc_record("response", http(_raw_deflate(HELLO.encode()), extra=("Content-Encoding: deflate",)), n=4),
    ]
    path = tmp_path / "enc.warc.gz"
    write_warc(path, records, "members")
    items = read(path)
    assert outcome(items) == ["doc", "unreadable_record", "doc", "doc"]
    assert items[0]["html"] == HELLO and items[3]["html"] == HELLO


def _raw_deflate(data: bytes) -> bytes:
    import zlib
    c = zlib.compressobj(wbits=-15)
    return c.compress(data) + c.flush()


def test_oversized_block_is_skipped_not_buffered(tmp_path, monkeypatch):
    monkeypatch.setattr(warc_mod, "MAX_BLOCK", 1000)
    monkeypatch.setattr(warc_mod, "CHUNK_SIZE", 64)
    big_png = warc_record("response", http(b"\0" * 5000, content_type="image/png"), n=1)
    big_html = warc_record("response", http(HELLO.encode() * 3), n=2)
    small = warc_record("response", http(b"<html>hi</html>"), n=3, uri="http://a/")
    path = tmp_path / "big.warc"
    path.write_bytes(big_png + big_html + small)
    assert outcome(read(path)) == ["not_html", "unreadable_record", "doc"]


def test_warcio_written_file(tmp_path):
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    path = tmp_path / "warcio.warc.gz"
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=True)
        writer.write_record(writer.create_warcinfo_record("x.warc.gz", {"software": "test"}))
        for i, (status, ctype) in enumerate([("200 OK", "text/html; charset=utf-8"), ("301 Moved", "text/html"),
                                             ("200 OK", "application/xhtml+xml")]):
            headers = StatusAndHeaders(status, [("Content-Type", ctype)], protocol="HTTP/1.1")
            rec = writer.create_warc_record(f"http://example.com/{i}", "response",
                                            payload=io.BytesIO(HELLO.encode()), http_headers=headers)
            writer.write_record(rec)
    items = read(path)
    assert outcome(items) == ["not_response", "doc", "http_status", "doc"]
    assert items[1]["html"] == HELLO and items[3]["content_type"] == "application/xhtml+xml"


def test_warc_ids_unique_and_stable(tmp_path):
    dup = warc_record("response", http(HELLO.encode()), n=1)
    anon = warc_record("response", http(HELLO.encode()), record_id=False)
    path = tmp_path / "ids.warc.gz"
    write_warc(path, [dup, dup, anon, anon], "single")  # one member: all share position 0
    first, second = read(path), read(path)
    ids = [d["id"] for d in first]
    assert ids == [d["id"] for d in second]
    assert len(set(ids)) == 4
    assert ids == [rid(1), rid(1) + "#2", "ids.warc.gz:0", "ids.warc.gz:0#2"]


# ----------------------------------------------------------------------------- JSONL

JSONL_LINES = [
    (json.dumps({"id": "a", "text": "first document", "url": "http://x/a", "lang": "en", "meta": {"k": [1, 2]}}),
     "doc"),
    ("", None),  # blank: not a record
    ('{"id": "b", "text": "broken json', "unreadable_record"),
    (None, "decode_error"),  # invalid UTF-8 line, written as bytes below
    (json.dumps({"id": "c", "body": "no text field"}), "missing_text"),
    (json.dumps({"text": "no id, 日本語", "score": 0.5}), "doc"),
    ("[1, 2, 3]", "unreadable_record"),
    ('{"text": "lone surrogate \\ud800 here"}', "decode_error"),
    (json.dumps({"id": 7, "text": "int id"}), "doc"),
    (json.dumps({"id": "a", "text": "repeated id"}), "doc"),
    ("   ", None),
]
JSONL_RECORDS = sum(want is not None for _, want in JSONL_LINES)


def jsonl_bytes() -> bytes:
    out = []
    for line, _ in JSONL_LINES:
        out.append(b'{"text": "caf\xe9 latin-1"}' if line is None else line.encode())
    return b"\n".join(out) + b"\n"


def compress(data: bytes, kind: str) -> bytes:
    if kind == "gz":
        return gzip.compress(data)
    if kind == "zst":
        import zstandard
        return zstandard.ZstdCompressor().compress(data)
    return data


@pytest.mark.parametrize("kind,name", [("plain", "d.jsonl"), ("gz", "d.jsonl.gz"), ("zst", "d.jsonl.zst"),
                                       ("gz", "d.json.gz"), ("plain", "d.ndjson")])
def test_jsonl(tmp_path, kind, name):
    path = tmp_path / name
    path.write_bytes(compress(jsonl_bytes(), kind))
    items = read(path)

    assert len(items) == JSONL_RECORDS
    assert outcome(items) == [want for _, want in JSONL_LINES if want is not None]
    assert [i.position for i in items if isinstance(i, Rejected)] == \
        [n for n, (_, want) in enumerate(JSONL_LINES, 1) if want not in (None, "doc")]  # line numbers
    first = items[0]
    assert first == {"id": "a", "url": "http://x/a", "text": "first document", "lang": "en",
                     "meta": '{"k": [1, 2]}'}  # nested values JSON-encoded
    ds = docs(items)
    assert ds[1]["id"] == f"{name}:6" and ds[1]["url"] is None and ds[1]["score"] == 0.5
    assert ds[2]["id"] == "7"
    assert ds[3]["id"] == "a#2"  # repeated input id made unique
    assert f"{path}:3" in items[1].detail


def test_jsonl_text_field(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"content": "hello", "text": 5}\n{"text": "only text"}\n')
    items = read(path, text_field="content")
    assert outcome(items) == ["doc", "missing_text"]
    assert items[0]["text"] == "hello" and "content" not in items[0]


def test_jsonl_records_read_as_the_json_module_reads_them(tmp_path):
    """orjson reads most lines; what it reads differently from json or refuses (integers beyond 64 bits, NaN,
    Infinity, lone surrogates, duplicate keys, deep nesting) must come out as json gives it (or be rejected)."""
    lines = ['{"text": "big", "n": 123456789012345678901234567890, "m": -9223372036854775809}',
             '{"text": "u64", "n": 18446744073709551615, "f": 1e400, "g": -0.0, "h": 5e-324}',
             '{"text": "nan", "x": NaN, "y": -Infinity}',
             '{"text": "dup", "k": 1, "k": 2}',
             '{"text": "esc \\u00e9 \\ud83d\\ude00 \\u0000 end"}',
             '{"text": "bad \\ud800 surrogate"}',
             '{"text": "deep", "d": ' + "[" * 3000 + "]" * 3000 + "}",
             '{"text": "ok", "nested": {"a": [1, 2.5, null, true]}}']
    path = tmp_path / "j.jsonl"
    path.write_text("\n".join(lines) + "\n")
    items = read(path)
    assert outcome(items) == ["doc", "doc", "doc", "doc", "doc", "decode_error", "unreadable_record", "doc"]
    big, u64, nan, dup, esc, _, _, nested = items
    assert big["n"] == 123456789012345678901234567890 and type(big["n"]) is int and big["m"] == -2**63 - 1
    assert u64["n"] == 2**64 - 1 and u64["f"] == float("inf") and str(u64["g"]) == "-0.0" and u64["h"] == 5e-324
    assert str(nan["x"]) == "nan" and nan["y"] == float("-inf")
    assert dup["k"] == 2
    assert esc["text"] == "esc \u00e9 \U0001f600 \x00 end"
    assert nested["nested"] == json.dumps(json.loads(lines[-1])["nested"], ensure_ascii=False)


def numbered_lines(first: int, n: int) -> list[str]:
    import random
    rng = random.Random(first)  # poorly compressible text: the data spans many deflate/zstd blocks
    return [json.dumps({"id": str(i), "text": " ".join(f"{rng.random():.6f}" for _ in range(20))})
            for i in range(first, first + n)]


def damage(data: bytes, at: int, n: int = 16) -> bytes:
    out = bytearray(data)
    for i in range(at, at + n):
        out[i] ^= 0xA5
    return bytes(out)


@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_jsonl_corrupt_stream_mid_file(tmp_path, kind):
    """Damage the decoder detects: intact lines before it, then one rejection for the rest."""
    first, second, third = numbered_lines(0, 1000), numbered_lines(1000, 1000), numbered_lines(2000, 1000)
    blob = lambda lines: ("\n".join(lines) + "\n").encode()  # noqa: E731
    if kind == "gz":  # concatenated shards (`cat a.gz b.gz c.gz`); the middle one's deflate header is hit
        data = gzip.compress(blob(first)) + damage(gzip.compress(blob(second)), 10) + gzip.compress(blob(third))
    else:  # one zstd frame, hit in the middle
        import zstandard
        data = zstandard.ZstdCompressor().compress(blob(first + second + third))
        data = damage(data, len(data) // 3)
    path = tmp_path / f"c.jsonl.{kind}"
    path.write_bytes(data)

    items = read(path)  # must not raise
    good = docs(items)
    assert outcome(items) == ["doc"] * len(good) + ["unreadable_record"]
    assert [d["id"] for d in good] == [str(i) for i in range(len(good))]  # an intact prefix
    if kind == "gz":
        assert len(good) == 1000  # the first member was verified whole; reading stops at the second
    else:  # a zstd block is decoded (and found bad) as a whole: lose it and the held-back window
        assert 0 < len(good) <= 1000
    assert "rest of file" in items[-1].detail
    assert items[-1].position == len(good) + 1  # the first line not read


def test_jsonl_deflate_damage_never_raises(tmp_path):
    """Damage inside one deflate stream is often caught only by the final CRC: the garbage
    decoded meanwhile becomes rejections, never an exception, and the file still ends with
    the one "rest of file" rejection."""
    lines = numbered_lines(0, 3000)
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / "d.jsonl.gz"
    path.write_bytes(damage(data, len(data) // 2))
    items = read(path)
    assert items[-1].reason == "unreadable_record" and "rest of file" in items[-1].detail
    first_bad = outcome(items).index("unreadable_record")
    assert [d["id"] for d in items[:first_bad]] == [str(i) for i in range(first_bad)]


def test_jsonl_truncated_gzip(tmp_path):
    data = gzip.compress(b"".join(json.dumps({"text": f"doc {i}"}).encode() + b"\n" for i in range(100)))
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(data[:-8])  # lose the gzip trailer only: every line is there
    assert outcome(read(path)) == ["doc"] * 100 + ["unreadable_record"]  # damage is still reported
    path.write_bytes(data[:-30])  # lose the end of the deflate data: the last lines are cut
    out = outcome(read(path))
    assert out[-1] == "unreadable_record" and set(out[:-1]) == {"doc"} and len(out) <= 100


# ----------------------------------------------------------------------------- Parquet


def test_parquet_passthrough_and_ids(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({
        "id": ["r0", None, "r2", "r0"],
        "text": ["alpha", "beta", None, "delta"],
        "url": ["http://a", None, None, "http://d"],
        "score": [0.1, 0.2, 0.3, 0.4],
        "tags": [["x"], [], ["y", "z"], None],
    })
    path = tmp_path / "p.parquet"
    pq.write_table(table, path)
    items = read(path)
    assert len(items) == 4
    assert outcome(items) == ["doc", "doc", "missing_text", "doc"]
    assert items[0] == {"id": "r0", "url": "http://a", "text": "alpha", "score": 0.1, "tags": '["x"]'}
    assert items[1]["id"] == "p.parquet:1" and items[1]["url"] is None
    assert items[2].position == 2
    assert items[3]["id"] == "r0#2"
    assert [d["id"] for d in docs(read(path))] == [d["id"] for d in docs(items)]


def test_parquet_corrupt_row_group(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 300
    table = pa.table({"id": [f"r{i}" for i in range(n)], "text": [f"text {i} " * 20 for i in range(n)]})
    path = tmp_path / "c.parquet"
    pq.write_table(table, path, row_group_size=100, compression="gzip")
    col = pq.ParquetFile(path).metadata.row_group(1).column(1)
    start = col.dictionary_page_offset or col.data_page_offset
    data = bytearray(path.read_bytes())
    for i in range(start + 30, start + 60):
        data[i] ^= 0x55
    path.write_bytes(data)

    items = read(path)
    assert len(items) == n
    assert outcome(items) == ["doc"] * 100 + ["unreadable_record"] * 100 + ["doc"] * 100
    assert [i.position for i in items[100:200]] == list(range(100, 200))
    assert "row group 1" in items[150].detail


def test_parquet_text_field_missing_from_schema(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "n.parquet"
    pq.write_table(pa.table({"body": ["a", "b"]}), path)
    assert outcome(read(path)) == ["missing_text", "missing_text"]
    assert outcome(read(path, text_field="body")) == ["doc", "doc"]


# ----------------------------------------------------------------------------- html_dir


def test_html_dir(tmp_path):
    root = tmp_path / "site"
    (root / "b" / "deep").mkdir(parents=True)
    (root / "a.html").write_text('<html><head><link rel="canonical" href="https://ex.com/a?x=1&amp;y=2">'
                                 "</head><body>A</body></html>", encoding="utf-8")
    (root / "b" / "deep" / "c.htm").write_bytes('<meta charset="iso-8859-1"><p>café</p>'.encode("latin-1"))
    (root / "b" / "z.html.gz").write_bytes(gzip.compress(
        b"<html><head><meta property='og:url' content='https://ex.com/z'></head><body>Z</body></html>"))
    (root / "b" / "broken.html.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    (root / "b" / "empty.html").write_bytes(b"  \n")
    (root / "b" / "smart.html").write_bytes("<p>“smart”</p>".encode("cp1252"))
    (root / "b" / "wrong.html").write_bytes(b'<meta charset="utf-8">' + MIXED)  # fits no encoding
    (root / "notes.txt").write_text("not html")

    items = read(root)
    ids = ["a.html", "b/broken.html.gz", "b/deep/c.htm", "b/empty.html", "b/smart.html", "b/wrong.html",
           "b/z.html.gz"]
    assert len(items) == len(ids)  # one per HTML file, sorted by relative path
    assert outcome(items) == ["doc", "unreadable_record", "doc", "missing_text", "doc", "decode_error", "doc"]
    by_id = {d["id"]: d for d in docs(items)}
    assert list(by_id) == ["a.html", "b/deep/c.htm", "b/smart.html", "b/z.html.gz"]
    assert by_id["a.html"]["url"] == "https://ex.com/a?x=1&y=2"
    assert by_id["b/z.html.gz"]["url"] == "https://ex.com/z"
    assert by_id["b/deep/c.htm"]["url"] is None and "café" in by_id["b/deep/c.htm"]["html"]
    assert "“smart”" in by_id["b/smart.html"]["html"]
    assert [i.position for i in items if isinstance(i, Rejected)] == [1, 3, 5]
    assert read(root) == items  # stable


# ----------------------------------------------------------------------------- dispatch


@pytest.mark.parametrize("name,fmt", [("x.warc", "warc"), ("x.WARC.GZ", "warc"), ("x.jsonl", "jsonl"),
                                      ("x.jsonl.gz", "jsonl"), ("x.jsonl.zst", "jsonl"), ("x.json.gz", "jsonl"),
                                      ("x.ndjson", "jsonl"), ("x.parquet", "parquet")])
def test_detect_format(name, fmt):
    assert detect_format(name) == fmt
    assert fmt in FORMATS


def test_detect_format_directory_and_errors(tmp_path):
    assert detect_format(tmp_path) == "html_dir"
    with pytest.raises(ValueError, match=r"data\.csv.*\.warc\.gz"):
        detect_format("data.csv")
    with pytest.raises(ValueError):
        detect_format("archive.json")
    with pytest.raises(ValueError, match="unknown input format"):
        iter_records(tmp_path / "x.warc", fmt="csv")


def test_unopenable_inputs_raise_reader_error(tmp_path):
    for name in ["missing.warc.gz", "missing.jsonl", "missing.parquet"]:
        with pytest.raises(ReaderError, match=name):
            iter_records(tmp_path / name)
    with pytest.raises(ReaderError, match="missing_dir"):
        iter_records(tmp_path / "missing_dir", fmt="html_dir")
    not_parquet = tmp_path / "fake.parquet"
    not_parquet.write_bytes(b"this is not parquet")
    with pytest.raises(ReaderError, match="fake.parquet"):
        iter_records(not_parquet)


def test_empty_inputs(tmp_path):
    for name, data in [("e.warc.gz", b""), ("e.warc", b""), ("e.jsonl", b"\n\n"), ("e.jsonl.gz", gzip.compress(b""))]:
        (tmp_path / name).write_bytes(data)
        assert read(tmp_path / name) == []
    (tmp_path / "d").mkdir()
    assert read(tmp_path / "d") == []


def test_ids_unique_and_stable_across_reads(tmp_path):
    write_warc(tmp_path / "s.warc.gz", [r for r, _, _ in STANDARD], "members")
    (tmp_path / "s.jsonl").write_bytes(jsonl_bytes())
    for path in [tmp_path / "s.warc.gz", tmp_path / "s.jsonl"]:
        ids1 = [d["id"] for d in docs(read(path))]
        ids2 = [d["id"] for d in docs(read(path))]
        assert ids1 == ids2 and len(set(ids1)) == len(ids1) > 0


def test_random_damage_never_raises(tmp_path):
    """Random byte flips and insertions anywhere: the reader yields items, never raises."""
    import random

    rng = random.Random(0)
    clean = tmp_path / "clean.warc.gz"
    write_warc(clean, [r for r, _, _ in STANDARD], "members")
    data = clean.read_bytes()
    for trial in range(40):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 12)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        if trial % 3 == 0:
            at = rng.randrange(len(damaged))
            damaged[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 500)))
        for name, payload in [("f.warc.gz", damaged), ("f.warc", bytes(damaged[: rng.randrange(len(damaged))]))]:
            (tmp_path / name).write_bytes(payload)
            items = read(tmp_path / name)
            assert all(isinstance(i, (dict, Rejected)) for i in items)
    assert os.path.exists(clean)
