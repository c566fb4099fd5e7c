"""What a run's `input:` stands for: paths, URLs, glob patterns and folders → the (file or folder, format) inputs
the read stage reads, one after another. A folder is read file by file, each by its own format: its HTML pages (or,
in a folder of only Markdown, its .md files) as one html_dir (markdown_dir) input, each data file (.jsonl,
.parquet, .warc.gz, ...) as an input of its own, and every other file as UNSUPPORTED (one rejection naming it).
Hidden entries are skipped and listed. Only regular files are read: a folder's (or a glob's) FIFOs, sockets, devices,
dangling symlinks, symlink loops and names that are not UTF-8 are listed in `unreadable` (the read stage counts each
as a `not_regular_file` rejection); a path named in the config that is one of these is a ConfigError. Every problem
is a ConfigError, found before any work. (An input's resume key, a folder's by every file in it, is computed in one
place: run/rundir.py `input_fingerprint`.)"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from gpupipe.config_base import ConfigError
from gpupipe.io import storage
from gpupipe.io.records import (HTML_SUFFIXES, MARKDOWN_SUFFIXES, detect_format, entry_problem, file_format,
                                folder_format, printable_path, walk_files)

UNSUPPORTED = "unsupported"  # the "format" of a folder's file that no reader takes: read as one rejection
FOLDER_FORMATS = ("html_dir", "markdown_dir")


@dataclass
class Inputs:
    """The resolved inputs, in read order (a file's number is its place here)."""
    files: list[str] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)  # hidden entries of input folders, skipped
    # (path, what it is) of the entries of input folders and globs that are not regular files: never opened,
    # each counted as one not_regular_file rejection; the path printable (undecodable bytes escaped)
    unreadable: list[tuple[str, str]] = field(default_factory=list)


def resolve_inputs(paths: list[str], fmt: str = "auto") -> Inputs:
    """Every configured path's inputs; a file named both on its own and through its folder is read once."""
    out = Inputs()
    seen: set[tuple[str, str]] = set()
    for path in expand_inputs(paths):
        if path not in paths and not storage.is_url(path) and (problem := entry_problem(path)) \
                and problem != "a folder":   # a glob's match that is no file: counted, as in a folder
            out.unreadable.append((printable_path(path), problem))
            continue
        inputs, hidden, unreadable = resolve_input(path, fmt)
        out.unreadable += unreadable
        if not inputs and not unreadable:
            raise ConfigError(f"input folder {path} holds no files to read"
                              + (f" ({len(hidden)} hidden entries skipped)" if hidden else ""))
        for f, f_fmt in inputs:
            where = f if storage.is_url(f) else os.path.abspath(f)
            if (where, f_fmt) not in seen:
                seen.add((where, f_fmt))
                out.files.append(f)
                out.formats.append(f_fmt)
        out.hidden += hidden
    return out


def expand_inputs(paths: list[str]) -> list[str]:
    """Paths, URLs and glob patterns (`s3://bucket/crawl/*.warc.gz` too) → a sorted, de-duplicated list of input
    files/folders."""
    out: list[str] = []
    for p in paths:
        # a file that exists under this very name is that file, even when its name holds glob characters
        matches = storage.glob(p) if is_pattern(p) and not storage.exists(p) else [p]
        if not matches:
            raise ConfigError(f"input pattern matched nothing: {p}")
        out.extend(m for m in matches if m not in out)
    return out


def is_pattern(p: str) -> bool:
    # an http(s) URL's query string may hold '?': such URLs are never patterns
    return any(ch in p for ch in "*?[") and storage.protocol(p) not in ("http", "https")


def resolve_input(path: str, fmt: str) -> tuple[list[tuple[str, str]], list[str], list[tuple[str, str]]]:
    """The (file or folder, format) inputs that one configured path stands for, the hidden entries skipped and
    the unreadable entries (path, what it is) of a folder."""
    if storage.is_url(path):
        return _resolve_url(path, fmt), [], []
    if not os.path.exists(path):
        raise ConfigError(f"input not found: {path}")
    if not os.path.isdir(path):
        if problem := entry_problem(path):
            raise ConfigError(f"input {printable_path(path)} is {problem}, not a regular file")
        return [(path, fmt if fmt != "auto" else _file_format(path))], [], []
    if fmt not in ("auto",) + FOLDER_FORMATS:
        raise ConfigError(f"input {path} is a folder, but format {fmt!r} reads a file: name the files "
                          f"(a glob such as {os.path.join(path, '*')}) or use format auto")
    return folder_inputs(path, fmt)


def _resolve_url(url: str, fmt: str) -> list[tuple[str, str]]:
    """A URL input: a file (streamed when read), or a folder (prefix) of data files, each an input of its own."""
    try:
        if storage.protocol(url) not in ("http", "https") and storage.isdir(url):
            names = [n for n in storage.find(url) if not any(part.startswith(".") for part in n.split("/"))]
            if any(n.lower().endswith(HTML_SUFFIXES + MARKDOWN_SUFFIXES) for n in names):
                raise ConfigError(f"input {url}: folders of HTML or Markdown pages are read from a local path only; "
                                  f"name the data files (e.g. {url.rstrip('/')}/*.warc.gz)")
            return [(storage.join(url, n), file_format(n) or UNSUPPORTED) for n in names]
        if not storage.exists(url):
            raise ConfigError(f"input not found: {url}")
    except (OSError, RuntimeError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"input {url}: {type(e).__name__}: {e}") from None
    return [(url, fmt if fmt != "auto" else _file_format(url))]


def _file_format(path: str) -> str:
    try:
        return detect_format(path)
    except ValueError as e:  # an unknown extension is the user's to fix: a config error, not a traceback
        raise ConfigError(f"{e}; or set input.format") from None


def folder_inputs(root: str, fmt: str = "auto") -> tuple[list[tuple[str, str]], list[str], list[tuple[str, str]]]:
    """A folder's inputs: its pages as one folder input, each data file on its own, the rest UNSUPPORTED; its
    hidden entries; its entries that are not regular files (pages among them are the page reader's to count)."""
    files, hidden = walk_files(root)
    low = [f.lower() for f in files]
    fmt = folder_format(files) if fmt == "auto" else fmt
    pages = HTML_SUFFIXES if fmt == "html_dir" else MARKDOWN_SUFFIXES
    inputs = [(root, fmt)] if any(n.endswith(pages) for n in low) else []
    unreadable = []
    for rel, n in zip(files, low):
        if n.endswith(pages):
            continue
        path = os.path.join(root, rel)
        if problem := entry_problem(path):
            unreadable.append((printable_path(path), problem))
        else:
            inputs.append((path, file_format(rel) or UNSUPPORTED))
    return inputs, [printable_path(os.path.join(root, h)) for h in hidden], unreadable


__all__ = ["FOLDER_FORMATS", "Inputs", "UNSUPPORTED", "expand_inputs", "folder_inputs", "is_pattern", "resolve_input",
           "resolve_inputs"]
