"""The readers' vocabulary: what an input record becomes (a document dict or a `Rejected` with one of `REASONS`),
`ReaderError` for a file that cannot be opened at all, format detection by name, folder walking, and the helpers
every format module shares (ids, opening, the missing-text detail). The format modules (warc, jsonl, parquet,
html_dir, markdown_dir) import this; `readers.iter_records` picks one of them."""
from __future__ import annotations

import codecs
import errno
import json
import os
import stat
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
    # An entry of an input folder (or a named input) that is not a regular file: a FIFO, socket or device, a
    # dangling symlink or a symlink loop, or a name that is not valid UTF-8 (it could not be named in the
    # outputs). Counted, never opened: a FIFO would block and /dev/zero never ends.
    "not_regular_file",
    # A document larger than `input.max_doc_bytes`: skipped while streaming, never held in memory whole.
    "doc_too_large",
)

# `input.max_doc_bytes`' default: a document (a JSONL line, a page, a Markdown file, decompressed) larger than this
# is a `doc_too_large` rejection, found while streaming and never held whole; a reader holds at most about this
# much of one document (plus a read chunk), so the read stage's memory is bounded by the config, not the input.
MAX_DOC_BYTES = 64 << 20

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
        # a symlink to a folder is not entered (os.walk's default: no loops): listed as a file, so the read stage
        # counts it (records.entry_problem) instead of dropping it unseen
        files += [prefix + d for d in dirnames if not d.startswith(".") and os.path.islink(os.path.join(dirpath, d))]
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



_UTF32 = {codecs.BOM_UTF32_LE: "utf-32", codecs.BOM_UTF32_BE: "utf-32"}
_UTF16 = {codecs.BOM_UTF16_LE: "utf-16", codecs.BOM_UTF16_BE: "utf-16"}


def text_encoding(head: bytes) -> str:
    """'utf-8', 'utf-16', 'utf-16-le', ... for a JSON (or YAML) text starting with `head` (4 bytes or more): its
    BOM, else the NULs around its first character (RFC 4627, section 3: JSON's first two characters are ASCII)."""
    if head[:4] in _UTF32:   # before UTF-16: UTF-32-LE's BOM starts with UTF-16-LE's
        return "utf-32"
    if head[:2] in _UTF16:
        return "utf-16"
    if len(head) >= 4 and head[0] and not any(head[1:4]):
        return "utf-32-le"
    if len(head) >= 4 and not any(head[:3]) and head[3]:
        return "utf-32-be"
    if len(head) >= 2 and head[0] and not head[1]:
        return "utf-16-le"
    if len(head) >= 2 and not head[0] and head[1]:
        return "utf-16-be"
    return "utf-8"


def open_binary(path):
    """open(path, 'rb') (a URL: streamed by ranged reads, io/storage.py), turning any OS error into a ReaderError
    that names the file. A local path must be a regular file (`open_regular`)."""
    try:
        return storage.open_input(path) if storage.is_url(path) else open_regular(path)
    except OSError as e:
        raise ReaderError(f"cannot open input {os.fspath(path)!r}: {e.strerror or e}") from e


def open_regular(path):
    """A local file opened for reading, or OSError when it is not a regular file. Opened non-blocking and checked
    on the open descriptor: opening a FIFO blocks until a writer comes, and a device (/dev/zero) never ends."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        kind = not_regular(os.fstat(fd))
        if kind:
            raise OSError(f"not a regular file: {kind}")
        return os.fdopen(fd, "rb")   # O_NONBLOCK does nothing to a regular file's reads
    except BaseException:
        os.close(fd)
        raise


def not_regular(st: os.stat_result) -> str | None:
    """What a (followed) stat result is when it is not a regular file: 'a FIFO', 'a socket', ...; None otherwise."""
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return None
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return "not a regular file"


def entry_problem(path) -> str | None:
    """Why a local input entry cannot be read as a file ('a FIFO', 'a dangling symlink', 'a symlink loop', 'a file
    name that is not valid UTF-8', ...), or None for a regular file (a symlink to one included)."""
    p = os.fspath(path)
    try:
        p.encode("utf-8")
    except UnicodeEncodeError:   # os.walk hands undecodable bytes over as surrogate escapes
        return "a file name that is not valid UTF-8"
    try:
        kind = not_regular(os.stat(p))
        return "a symlink to a folder (not followed)" if kind == "a folder" and os.path.islink(p) else kind
    except OSError as e:
        if os.path.islink(p):
            return "a symlink loop" if e.errno == errno.ELOOP else "a dangling symlink" \
                if e.errno == errno.ENOENT else f"a symlink that cannot be followed ({e.strerror})"
        return f"unreadable ({e.strerror or e})"


def printable_path(path) -> str:
    """A path as text that can be written anywhere: undecodable bytes as \\xNN escapes."""
    return os.fsencode(os.fspath(path)).decode("utf-8", "backslashreplace")


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
