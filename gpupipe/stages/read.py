"""The first stage of every run: input files → Parquet partitions of documents, every record accounted for.

Each document gets `doc_index` = (file number << 40) | record number: a global input order that does not depend on
how the corpus is partitioned, so "first occurrence wins" means the same thing on 1 worker or 100.

A folder is read file by file, each by its own format: its HTML pages (or, in a folder of only Markdown, its .md
files) as one html_dir (markdown_dir) input, each data file (.jsonl, .parquet, .warc.gz, ...) as an input of its
own, and every other file as one `unsupported_file` rejection naming it. Hidden entries are skipped and counted.
A file that cannot be opened at all (zero-byte or corrupt Parquet, ...) is one `unreadable_record`, not a crash.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Iterator, Literal

import pandas as pd
from pydantic import Field, field_validator

from gpupipe.config_base import ConfigError, Strict
from gpupipe.io import storage
from gpupipe.io.charset import replaced_limit
from gpupipe.io.parts import write_part
from gpupipe.io.readers import iter_records
from gpupipe.io.records import (HTML_SUFFIXES, MARKDOWN_SUFFIXES, Item, ReaderError, Rejected, detect_format,
                                file_format, folder_format, unsupported_detail, walk_files)
from gpupipe.nvtx_ranges import annotate
from gpupipe.stages.base import RunContext, Stage, StageJob, StageStats, text_bytes

log = logging.getLogger("gpupipe")

RECORD_BITS = 40  # up to 1e12 records per file, 2^23 files
UNSUPPORTED = "unsupported"  # the "format" of a folder's file that no reader takes: read as one rejection
FOLDER_FORMATS = ("html_dir", "markdown_dir")
LOGGED_NAMES = 20  # files named in the run log; the rejects name them all


class InputConfig(Strict):
    """The run config's `input:`, the read station's own configuration."""

    path: list[str] = Field(description="input file(s) or folder(s)")
    format: Literal["auto", "warc", "jsonl", "parquet", "html_dir", "markdown_dir"] = "auto"
    text_field: str = "text"
    source: str = Field("web", description="mixture source label for documents without a `source` field")
    max_replaced_share: float = Field(0.01, ge=0, le=1, description="HTML whose bytes fit no encoding is read with "
                                      "U+FFFD for at most this share of its bytes, else it is a decode_error")

    @field_validator("path", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


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


def resolve_input(path: str, fmt: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The (file or folder, format) inputs that one configured path stands for, and the hidden entries skipped."""
    if storage.is_url(path):
        return _resolve_url(path, fmt), []
    if not os.path.exists(path):
        raise ConfigError(f"input not found: {path}")
    if not os.path.isdir(path):
        return [(path, fmt if fmt != "auto" else _file_format(path))], []
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


def folder_inputs(root: str, fmt: str = "auto") -> tuple[list[tuple[str, str]], list[str]]:
    """A folder's inputs: its pages as one folder input, each data file on its own, the rest UNSUPPORTED."""
    files, hidden = walk_files(root)
    low = [f.lower() for f in files]
    fmt = folder_format(files) if fmt == "auto" else fmt
    pages = HTML_SUFFIXES if fmt == "html_dir" else MARKDOWN_SUFFIXES
    inputs = [(root, fmt)] if any(n.endswith(pages) for n in low) else []
    inputs += [(os.path.join(root, rel), file_format(rel) or UNSUPPORTED)
               for rel, n in zip(files, low) if not n.endswith(pages)]
    return inputs, [os.path.join(root, h) for h in hidden]


class ReadStage(Stage):
    name = "read"
    Config = InputConfig

    def __init__(self, config: InputConfig, ctx: RunContext, partitioning: tuple[int, int]):
        super().__init__(config, ctx)
        self.partitioning = partitioning  # (documents, bytes) per partition at most
        self.files: list[str] = []
        self.formats: list[str] = []
        self.hidden: list[str] = []  # hidden entries of input folders, skipped (counted in extra.hidden_skipped)
        seen: set[tuple[str, str]] = set()  # a file named both on its own and through its folder is read once
        for path in expand_inputs(config.path):
            inputs, hidden = resolve_input(path, config.format)
            if not inputs:
                raise ConfigError(f"input folder {path} holds no files to read"
                                  + (f" ({len(hidden)} hidden entries skipped)" if hidden else ""))
            for f, fmt in inputs:
                where = f if storage.is_url(f) else os.path.abspath(f)
                if (where, fmt) not in seen:
                    seen.add((where, fmt))
                    self.files.append(f)
                    self.formats.append(fmt)
            self.hidden += hidden

    def execute(self, job: StageJob) -> StageStats:
        n = len(self.files)
        self._log_skipped()
        results = job.executor.map(read_file_task, list(range(n)), self.files, self.formats,
                                   [self.config.text_field] * n, [self.config.source] * n,
                                   [self.partitioning] * n, [job.out_dir] * n,
                                   [self.config.max_replaced_share] * n, progress=job.progress)
        total = StageStats()
        for r in results:
            total.merge(StageStats.from_dict(r))
        if self.hidden:
            total.extra["hidden_skipped"] = len(self.hidden)
        return total

    def _log_skipped(self) -> None:
        unsupported = [f for f, fmt in zip(self.files, self.formats) if fmt == UNSUPPORTED]
        if unsupported:
            log.warning("read: %d file(s) of the input folders are not a readable input, each counted as "
                        "unsupported_file: %s", len(unsupported), _names(unsupported))
        if self.hidden:
            log.info("read: %d hidden entries of the input folders skipped: %s", len(self.hidden),
                     _names(self.hidden))


def _names(paths: list[str]) -> str:
    more = len(paths) - LOGGED_NAMES
    return ", ".join(paths[:LOGGED_NAMES]) + (f" and {more} more (see the read stage's rejects)" if more > 0 else "")


def input_items(path: str, fmt: str, text_field: str) -> Iterator[Item]:
    """iter_records, with a file that cannot be read at all counted as one rejection instead of raised."""
    if fmt == UNSUPPORTED:
        return iter([Rejected("unsupported_file", unsupported_detail(path), 0)])
    try:
        return iter_records(path, fmt, text_field=text_field)
    except ReaderError as e:
        log.warning("read: %s (counted as one unreadable_record)", e)
        return iter([Rejected("unreadable_record", str(e), 0)])


def _record_row(rec: dict[str, Any], file_no: int, record_no: int, source: str) -> dict[str, Any]:
    row = dict(rec)
    row["doc_index"] = (file_no << RECORD_BITS) | record_no
    row.setdefault("source", source)
    row["source"] = row["source"] if isinstance(row["source"], str) and row["source"] else source
    return row


def body_bytes(row: dict[str, Any]) -> int:
    """UTF-8 bytes of a document's HTML (or text), what a partition's size counts."""
    body = row.get("html") or row.get("text")
    return len(body.encode("utf-8", "surrogatepass")) if isinstance(body, str) else 0


def _file_bytes(path: str) -> int:
    """A file's size; 0 for a folder and for what cannot be read (counted as a rejection instead)."""
    if not storage.is_url(path):
        return os.path.getsize(path) if os.path.isfile(path) else 0
    try:
        return storage.size(path)
    except (OSError, ValueError):
        return 0


def read_file_task(file_no: int, path: str, fmt: str, text_field: str, source: str,
                   partitioning: tuple[int, int], out_dir: Path,
                   max_replaced_share: float = 0.01) -> dict[str, Any]:
    """Read one input file, streaming, into parts `part-FFFF-PPPPPP.parquet` of at most (documents, bytes) =
    `partitioning` each (a single document larger than the byte bound is a part of its own); rejected records go
    to rejects.jsonl. HTML documents' `charset_source` and `charset`, and `mojibake_suspect` ones, are counted in
    extra (`charset_source_detected`, `charset_gb18030`, `mojibake_suspect`, ...)."""
    max_docs, max_bytes = partitioning
    t0 = time.perf_counter()
    stats = StageStats()
    stats.bytes_in = _file_bytes(path)
    rows: list[dict[str, Any]] = []
    part_no, held = 0, 0  # held: body bytes in `rows`
    out_dir = Path(out_dir)
    rejects_path = out_dir / "rejects" / f"file-{file_no:04d}.jsonl"
    rejects_path.parent.mkdir(parents=True, exist_ok=True)

    def flush() -> None:
        nonlocal rows, part_no, held
        df = pd.DataFrame(rows)
        body = "html" if "html" in df.columns else "text"
        stats.bytes_out += text_bytes(df[body])
        write_part(df, out_dir / f"part-{file_no:04d}-{part_no:06d}.parquet")
        rows, part_no, held = [], part_no + 1, 0

    with annotate("gpupipe/read"), replaced_limit(max_replaced_share), \
            open(rejects_path, "w", encoding="utf-8") as rej:
        for record_no, rec in enumerate(input_items(path, fmt, text_field)):
            stats.docs_in += 1
            if isinstance(rec, Rejected):
                stats.removed[rec.reason] += 1
                rej.write(json.dumps({"file": path, "reason": rec.reason, "position": rec.position,
                                      "detail": rec.detail}, ensure_ascii=False) + "\n")
                continue
            row = _record_row(rec, file_no, record_no, source)
            if "charset_source" in row:
                stats.extra[f"charset_source_{row['charset_source']}"] += 1
                stats.extra[f"charset_{row['charset']}"] += 1
                stats.extra["mojibake_suspect"] += row.get("mojibake_suspect") is not None
            size = body_bytes(row)
            if rows and held + size > max_bytes:
                flush()
            rows.append(row)
            held += size
            stats.docs_out += 1
            if len(rows) >= max_docs:
                flush()
        if rows or part_no == 0 and stats.docs_out:
            flush()
    stats.extra[f"format_{fmt}"] += 1
    return stats.to_dict("read", time.perf_counter() - t0)
