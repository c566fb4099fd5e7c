"""Directory-of-HTML reader: one document or Rejected per ``*.html``/``*.htm``/``*.html.gz`` file.

Files are visited in sorted relative-path order so ids and positions are deterministic;
the id is the relative path (``/``-separated) and the position the index in that order.
Other files of the folder are not read here: the read stage gives data files (.jsonl, .parquet,
.warc.gz, ...) their own reader and counts the rest as ``unsupported_file``; hidden entries
(.DS_Store, ._page.html) are skipped (`records.walk_files`).
"""
from __future__ import annotations

import html as htmllib
import os
import re
import zlib
from typing import Iterator

from .charset import DecodeError, decode_html
from .records import (HTML_SUFFIXES, MAX_DOC_BYTES, Item, Rejected, ReaderError, entry_problem, open_regular,
                      printable_path, walk_files)

SUFFIXES = HTML_SUFFIXES
_URL_SCAN = 64 << 10  # canonical/og:url live in <head>; don't regex whole pages

_TAG = re.compile(r"<(link|meta)\b([^>]*)>", re.I)
_ATTR = re.compile(r"""([\w:-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")


def iter_html_dir(path, max_doc_bytes: int = MAX_DOC_BYTES) -> Iterator[Item]:
    """Yield a document dict or Rejected for every HTML file under directory ``path``; a page (decompressed) larger
    than ``max_doc_bytes`` is a ``doc_too_large`` rejection, never read whole."""
    root = os.fspath(path)
    if not os.path.isdir(root):
        raise ReaderError(f"cannot open input {root!r}: not a directory")
    try:
        os.listdir(root)
    except OSError as e:
        raise ReaderError(f"cannot open input {root!r}: {e.strerror or e}") from e
    return _items(root, _html_files(root), max_doc_bytes)


def _html_files(root: str) -> list[str]:
    return [rel for rel in walk_files(root)[0] if rel.lower().endswith(SUFFIXES)]


def _items(root: str, files: list[str], max_doc_bytes: int) -> Iterator[Item]:
    for index, rel in enumerate(files):
        try:
            yield _document(os.path.join(root, rel), rel, max_doc_bytes)
        except _Reject as e:
            yield Rejected(e.reason, f"{printable_path(os.path.join(root, rel))} (file #{index}): {e}", index)


class _Reject(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _document(full: str, rel: str, max_doc_bytes: int) -> dict:
    body = _read(full, max_doc_bytes)
    if not body.strip():
        raise _Reject("missing_text", "empty HTML file")
    try:
        d = decode_html(body)
    except DecodeError as e:
        raise _Reject("decode_error", str(e)) from None
    return {"id": rel, "url": canonical_url(d.text), "html": d.text, "charset": d.charset,
            "charset_source": d.source, "mojibake_suspect": d.suspect}


def _read(full: str, limit: int) -> bytes:
    """A page's bytes (decompressed), at most `limit` of them held: a larger page is a doc_too_large rejection."""
    if problem := entry_problem(full):
        raise _Reject("not_regular_file", f"{problem}: not read")
    try:
        with open_regular(full) as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise _Reject("unreadable_record", f"cannot read file: {e.strerror or e}") from None
    gz = full.lower().endswith(".gz")
    if len(raw) > limit and not gz:
        raise _Reject("doc_too_large", f"page larger than max_doc_bytes ({limit} bytes)")
    if not gz:
        return raw
    if len(raw) > limit:   # a compressed page larger than the limit: its text is larger still
        raise _Reject("doc_too_large", f"compressed page larger than max_doc_bytes ({limit} bytes)")
    try:
        d = zlib.decompressobj(47)  # gzip (or zlib) header; one member is what gzip tools write
        out = d.decompress(raw, limit + 1)
        if not d.eof and len(out) <= limit:
            raise _Reject("unreadable_record", "gzip stream cut off")
    except zlib.error as e:
        raise _Reject("unreadable_record", f"corrupt gzip data: {e}") from None
    if len(out) > limit:
        raise _Reject("doc_too_large", f"decompresses to more than max_doc_bytes ({limit} bytes)")
    if d.unused_data.startswith(b"\x1f\x8b"):  # rare multi-member file: the members one by one, bounded
        out = _more_members(d.unused_data, out, limit)
    return out


def _more_members(rest: bytes, out: bytes, limit: int) -> bytes:
    while rest.startswith(b"\x1f\x8b"):
        try:
            d = zlib.decompressobj(31)
            out += d.decompress(rest, limit + 1 - len(out))
        except zlib.error as e:
            raise _Reject("unreadable_record", f"corrupt gzip data: {e}") from None
        if len(out) > limit:
            raise _Reject("doc_too_large", f"decompresses to more than max_doc_bytes ({limit} bytes)")
        if not d.eof:
            raise _Reject("unreadable_record", "gzip stream cut off")
        rest = d.unused_data
    return out


def canonical_url(text: str) -> str | None:
    """URL from <link rel="canonical"> or <meta property="og:url">, else None."""
    for m in _TAG.finditer(text, 0, _URL_SCAN):
        attrs = {k.lower(): dq or sq or bare for k, dq, sq, bare in _ATTR.findall(m.group(2))}
        tag = m.group(1).lower()
        if tag == "link" and "canonical" in attrs.get("rel", "").lower().split():
            url = attrs.get("href", "")
        elif tag == "meta" and attrs.get("property", attrs.get("name", "")).lower() == "og:url":
            url = attrs.get("content", "")
        else:
            continue
        url = htmllib.unescape(url).strip()
        if url:
            return url
    return None
