"""A folder of Markdown files (`*.md`, `*.markdown`) as input documents, for the `chunk_markdown` stage."""

from __future__ import annotations

import os
from typing import Iterator

from gpupipe.io.records import (MARKDOWN_SUFFIXES, MAX_DOC_BYTES, Rejected, ReaderError, entry_problem, open_regular,
                                printable_path, walk_files)


def normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")


def iter_markdown_dir(path, max_doc_bytes: int = MAX_DOC_BYTES) -> Iterator[dict | Rejected]:
    """One document ({"id", "url", "text", "source_path"}) or Rejected per Markdown file under `path`, in sorted
    relative-path order; id and source_path are the `/`-separated path relative to `path` (machine-independent).
    Text is UTF-8 (a UTF-8/UTF-16 BOM is honoured); other bytes are a decode_error, not a guess. A file larger than
    `max_doc_bytes` is a doc_too_large rejection, and an entry that is not a regular file a not_regular_file one."""
    root = os.fspath(path)
    if not os.path.isdir(root):
        raise ReaderError(f"cannot open input {root!r}: not a directory")
    files = [rel for rel in walk_files(root)[0] if rel.lower().endswith(MARKDOWN_SUFFIXES)]  # hidden ones skipped
    return (_markdown_item(root, rel, i, max_doc_bytes) for i, rel in enumerate(files))


def _markdown_item(root: str, rel: str, index: int, limit: int) -> dict | Rejected:
    full = os.path.join(root, rel)
    if problem := entry_problem(full):
        return Rejected("not_regular_file", f"{printable_path(full)} (file #{index}): {problem}: not read", index)
    try:
        with open_regular(full) as f:
            raw = f.read(limit + 1)
    except OSError as e:
        return Rejected("unreadable_record", f"{full} (file #{index}): {e.strerror or e}", index)
    if len(raw) > limit:
        return Rejected("doc_too_large", f"{full} (file #{index}): larger than max_doc_bytes ({limit} bytes)", index)
    try:
        text = raw.decode("utf-16") if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        return Rejected("decode_error", f"{full} (file #{index}): not UTF-8: {e.reason} at byte {e.start}", index)
    if not text.strip():
        return Rejected("missing_text", f"{full} (file #{index}): empty file", index)
    return {"id": rel, "url": None, "text": normalize_newlines(text), "source_path": rel}
