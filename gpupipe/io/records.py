"""The readers' vocabulary: what an input record becomes (a document dict or a `Rejected` with one of `REASONS`),
`ReaderError` for a file that cannot be opened at all, format detection by name, folder walking, and the helpers
every format module shares (ids, opening, the missing-text detail). The format modules (warc, jsonl, parquet,
html_dir, markdown_dir) import this; `readers.iter_records` picks one of them."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Union

from . import storage

FORMATS = ("warc", "jsonl", "parquet", "html_dir", "markdown_dir")

# The reasons a record can be rejected; the pipeline's stats count these names.
REASONS = (
    "unreadable_record",  # corrupt gzip member, truncated record, malformed header, bad JSON, bad row group
    "decode_error",  # bytes that fit no candidate encoding (HTML: gpupipe/io/charset.py), invalid UTF-8 (text)
    "not_response",  # WARC record that is not a response (warcinfo, request, metadata, ...)
    "http_status",  # HTTP status other than 200
    "not_html",  # Content-Type is not text/html or application/xhtml+xml
    "missing_text",  # no string text field, or an empty HTML body
    # A file in an input folder that no reader takes (.txt, .pdf, README, ...): one per file, named in the detail,
    # so a folder's stray files are counted instead of silently skipped.
    "unsupported_file",
)

HTML_SUFFIXES = (".html", ".htm", ".html.gz")
MARKDOWN_SUFFIXES = (".md", ".markdown")

# Longest suffix first: ".warc.gz" must win over ".gz"-style guesses.
_EXTENSIONS = (
    (".warc.gz", "warc"),
    (".warc", "warc"),
    (".jsonl.gz", "jsonl"),
    (".jsonl.zst", "jsonl"),
    (".json.gz", "jsonl"),
    (".ndjson.gz", "jsonl"),
    (".ndjson.zst", "jsonl"),
    (".jsonl", "jsonl"),
    (".ndjson", "jsonl"),
    (".parquet", "parquet"),
)


@dataclass(frozen=True)
class Rejected:
    reason: str  # one of REASONS
    detail: str  # what was wrong and where (file, byte offset / line number / row)
    position: int  # byte offset (WARC), file index (html_dir), line number (JSONL), row (Parquet)


Item = Union[dict, Rejected]


class ReaderError(Exception):
    """The input file (or directory) cannot be opened at all."""


def detect_format(path) -> str:
    """Format name for ``path``: by extension, or ``html_dir`` for a directory."""
    p = os.fspath(path)
    if not storage.is_url(p) and os.path.isdir(p):
        return folder_format(walk_files(p)[0])
    fmt = file_format(p)
    if fmt:
        return fmt
    known = ", ".join(ext for ext, _ in _EXTENSIONS)
    raise ValueError(f"cannot tell the input format of {p!r}: expected a directory of HTML files "
                     f"(html_dir) or a file ending in one of {known}")


def file_format(path) -> str | None:
    """Format of a single data file by its extension (warc, jsonl, parquet), or None."""
    low = os.fspath(path).lower()
    return next((fmt for ext, fmt in _EXTENSIONS if low.endswith(ext)), None)


def folder_format(files: list[str]) -> str:
    """A folder's format from its file names: Markdown files and no HTML files make Markdown input."""
    names = [f.lower() for f in files]
    markdown_only = any(n.endswith(MARKDOWN_SUFFIXES) for n in names) and \
        not any(n.endswith(HTML_SUFFIXES) for n in names)
    return "markdown_dir" if markdown_only else "html_dir"


def walk_files(root) -> tuple[list[str], list[str]]:
    """(files, hidden) under folder ``root``: sorted ``/``-separated relative paths.

    Hidden entries (a name starting with "."): .DS_Store, macOS ``._page.html`` resource forks, .git/ are not
    input; they are left out of ``files`` (a hidden folder is not entered) and listed in ``hidden`` so callers
    can count them.
    """
    root = os.fspath(root)
    files, hidden = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        prefix = "" if rel_dir == "." else rel_dir + "/"
        hidden += [prefix + d + "/" for d in dirnames if d.startswith(".")]
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for fn in filenames:
            (hidden if fn.startswith(".") else files).append(prefix + fn)
    return sorted(files), sorted(hidden)


def unsupported_detail(path) -> str:
    """Why an input folder's file is not read, for its ``unsupported_file`` rejection."""
    low = os.path.basename(os.fspath(path)).lower()
    if low.endswith(MARKDOWN_SUFFIXES):
        why = "Markdown is read only from a folder holding no HTML files"
    elif low.endswith(HTML_SUFFIXES):
        why = "HTML file in a folder read as Markdown (format markdown_dir)"
    else:
        ext = os.path.splitext(low)[1]
        why = f"unknown file type ({f'extension {ext}' if ext else 'no extension'})"
    known = ", ".join(HTML_SUFFIXES + tuple(ext for ext, _ in _EXTENSIONS))
    return f"{os.fspath(path)}: not read: {why}; input files are {known} (or a folder of only .md files)"



def open_binary(path):
    """open(path, 'rb') (a URL: streamed by ranged reads, io/storage.py), turning any OS error into a ReaderError
    that names the file."""
    try:
        return storage.open_input(path)
    except OSError as e:
        raise ReaderError(f"cannot open input {os.fspath(path)!r}: {e.strerror or e}") from e


class IdAllocator:
    """Hands out ids that are unique within one file and identical on every read.

    An input's own id is kept verbatim; a repeat of an id already handed out (inputs do
    repeat ids) gets ``#2``, ``#3``, ... appended in file order, so it stays deterministic.
    """

    def __init__(self):
        self._seen: set[str] = set()
        self._next: dict[str, int] = {}  # next suffix to try, for ids seen more than once

    def claim(self, own_id, fallback: str) -> str:
        rid = own_id if isinstance(own_id, str) and own_id else fallback
        if rid in self._seen:
            n = self._next.get(rid, 2)
            while f"{rid}#{n}" in self._seen:
                n += 1
            self._next[rid] = n + 1
            rid = f"{rid}#{n}"
        self._seen.add(rid)
        return rid


def own_id(value) -> str | None:
    """A record's own ``id`` field as a string, if it is usable as one (str or int)."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def missing_text_detail(text, text_field: str, fields) -> str:
    """Why a JSONL/Parquet record has no text; names the fields it does have when the text field is not a string
    (the usual cause is a different field name: set `input.text_field`)."""
    if isinstance(text, str):
        return f"field {text_field!r} is empty"
    held = "" if text_field not in fields else " (it is null)" if text is None else f" (it is {type(text).__name__})"
    return f"no string field {text_field!r}{held}; fields found: {', '.join(sorted(fields)) or 'none'}"


def text_document(record: dict, text: str, rid: str, text_field: str) -> dict:
    """Document for a JSONL/Parquet record: id/url/text first, other fields passed through.

    Nested values (lists, dicts) are JSON-encoded so every passed-through value is a scalar.
    """
    url = record.get("url")
    doc = {"id": rid, "url": url if isinstance(url, str) and url else None, "text": text}
    for key, value in record.items():
        if key in doc or key == text_field:
            continue
        if isinstance(value, (dict, list, tuple)):
            value = json.dumps(value, ensure_ascii=False, default=str)
        doc[key] = value
    return doc
