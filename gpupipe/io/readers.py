"""Input readers: turn any supported input into documents, and account for every record.

Every input record yields exactly one item: a document ``dict`` or a :class:`Rejected`
saying why it was dropped. Bad input (corrupt gzip members, truncated records, invalid
JSON, undecodable bytes, unreadable row groups) never raises; only a file that cannot be
opened at all raises :class:`ReaderError`.

Documents always carry ``id`` (str, unique within the file and stable across reads) and
``url`` (str or None), plus ``html`` (WARC, html_dir) or ``text`` (JSONL, Parquet).
"""
from __future__ import annotations

from typing import Iterator

from .records import FORMATS, MAX_DOC_BYTES, Item, detect_format


def iter_records(path, fmt: str = "auto", text_field: str = "text", max_doc_bytes: int = MAX_DOC_BYTES
                 ) -> Iterator[Item]:
    """Yield one document dict or Rejected per input record of ``path``; a document larger than ``max_doc_bytes``
    is a ``doc_too_large`` rejection, found without holding it whole (WARC: its own MAX_BLOCK, the same 64 MiB).

    The file is opened eagerly, so a missing or unopenable input raises ReaderError here,
    not at the first ``next()``.
    """
    if fmt == "auto":
        fmt = detect_format(path)
    # Imported lazily: reading WARCs should not pay for importing pyarrow, and vice versa.
    if fmt == "warc":
        from .warc import iter_warc
        return iter_warc(path)
    if fmt == "jsonl":
        from .jsonl import iter_jsonl
        return iter_jsonl(path, text_field=text_field, max_doc_bytes=max_doc_bytes)
    if fmt == "parquet":
        from .parquet import iter_parquet
        return iter_parquet(path, text_field=text_field, max_doc_bytes=max_doc_bytes)
    if fmt == "html_dir":
        from .html_dir import iter_html_dir
        return iter_html_dir(path, max_doc_bytes=max_doc_bytes)
    if fmt == "markdown_dir":
        from .markdown_dir import iter_markdown_dir
        return iter_markdown_dir(path, max_doc_bytes=max_doc_bytes)
    raise ValueError(f"unknown input format {fmt!r}; expected 'auto' or one of {FORMATS}")
