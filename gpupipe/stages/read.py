"""The first stage of every run: input files → Parquet partitions of documents, every record accounted for.

Each document gets `doc_index` = (file number << 40) | record number: a global input order that does not depend on
how the corpus is partitioned, so "first occurrence wins" means the same thing on 1 worker or 100.

A folder is read file by file, each by its own format: its HTML pages (or, in a folder of only Markdown, its .md
files) as one html_dir (markdown_dir) input, each data file (.jsonl, .parquet, .warc.gz, ...) as an input of its
own, and every other file as one `unsupported_file` rejection naming it. Hidden entries are skipped and counted.
A folder's entry that is not a regular file (FIFO, socket, device, dangling symlink, symlink loop, a name that is not
UTF-8) is never opened: one `not_regular_file` rejection each, counted by the driver. A file that cannot be opened
at all (zero-byte or corrupt Parquet, ...) is one `unreadable_record`, not a crash.

Memory: a document larger than `input.max_doc_bytes` (default 64 MiB) is one `doc_too_large` rejection, found while
streaming (JSONL lines and gzip/zstd streams are read in bounded chunks, HTML and Markdown files read up to the
bound), so a read task holds at most a partition of documents plus about one max_doc_bytes, whatever the input.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Literal

import pandas as pd
from pydantic import Field, field_validator

from gpupipe.config_base import Strict, parse_size
from gpupipe.io import jsonl_blocks, storage
from gpupipe.io.charset import replaced_limit
from gpupipe.io.inputs import UNSUPPORTED, Inputs, resolve_inputs
from gpupipe.io.parts import write_part
from gpupipe.io.readers import iter_records
from gpupipe.io.records import (MAX_DOC_BYTES, IdAllocator, Item, ReaderError, Rejected, missing_text_detail,
                                unsupported_detail)
from gpupipe.nvtx_ranges import annotate
from gpupipe.stages.base import RunContext, StageStats, text_bytes
from gpupipe.stages.phases import DRIVER, Phase, PhasedStage, PhaseRun, Task

log = logging.getLogger("gpupipe")

RECORD_BITS = 40  # up to 1e12 records per file, 2^23 files
LOGGED_NAMES = 20  # files named in the run log; the rejects name them all


class InputConfig(Strict):
    """The run config's `input:`, the read station's own configuration."""

    path: list[str] = Field(description="input file(s) or folder(s)")
    format: Literal["auto", "warc", "jsonl", "parquet", "html_dir", "markdown_dir"] = "auto"
    text_field: str = "text"
    source: str = Field("web", description="mixture source label for documents without a `source` field")
    crawl_id: str | None = Field(None, description="seed 002's crawl_id of every document (e.g. CC-MAIN-2024-51); "
                                 "None: the WARC file's warcinfo isPartOf, a record's own crawl_id, or the "
                                 "CC-MAIN-YYYY-WW in the input's path")
    max_replaced_share: float = Field(0.01, ge=0, le=1, description="HTML whose bytes fit no encoding is read with "
                                      "U+FFFD for at most this share of its bytes, else it is a decode_error")
    # at least 1 KiB; at most 2 GiB, Arrow's largest string value (a partition's text column)
    max_doc_bytes: int = Field(MAX_DOC_BYTES, ge=1 << 10, le=(1 << 31) - 1,
                               description="a larger document (JSONL line, page, Markdown file, Parquet text, "
                               "decompressed) is a doc_too_large rejection, skipped while streaming: bounds memory")

    @field_validator("path", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("max_doc_bytes", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        return parse_size(v)


class ReadStage(PhasedStage):
    """Phases: `read` (one task per input file: its records → parts of at most `partitioning` documents and
    bytes, rejected records → rejects), `skipped` (driver: the hidden entries counted)."""

    name = "read"
    Config = InputConfig

    def __init__(self, config: InputConfig, ctx: RunContext, inputs: Inputs | None = None,
                 partitioning: tuple[int, int] = (0, 0)):
        super().__init__(config, ctx)
        # the driver's instance knows the inputs (io/inputs.resolve_inputs); a worker's needs only the config
        self.resolved = inputs or Inputs()
        self.partitioning = partitioning  # (documents, bytes) per partition at most

    @classmethod
    def of(cls, config: InputConfig, ctx: RunContext, partitioning: tuple[int, int]) -> "ReadStage":
        """The read stage of a run's `input:`, its paths resolved (a ConfigError before any work)."""
        return cls(config, ctx, resolve_inputs(config.path, config.format), partitioning)

    @property
    def files(self) -> list[str]:
        return self.resolved.files

    @property
    def formats(self) -> list[str]:
        return self.resolved.formats

    @property
    def hidden(self) -> list[str]:
        return self.resolved.hidden

    @property
    def unreadable(self) -> list[tuple[str, str]]:
        return self.resolved.unreadable

    @classmethod
    def inputs(cls) -> tuple[str, ...]:
        return ()

    @classmethod
    def outputs(cls) -> tuple[str, ...]:
        return ("id", "doc_index", "url", "text", "html", "source") + RECORD_FIELDS

    def phases(self) -> list[Phase]:
        return [Phase("read", read_phase, over=lambda run: list(zip(run.stage.files, run.stage.formats)),
                      arg=lambda run: run.stage.partitioning, counts=True),
                Phase("skipped", skipped_phase, over=DRIVER)]

    def log_skipped(self) -> None:
        unsupported = [f for f, fmt in zip(self.files, self.formats) if fmt == UNSUPPORTED]
        if unsupported:
            log.warning("read: %d file(s) of the input folders are not a readable input, each counted as "
                        "unsupported_file: %s", len(unsupported), _names(unsupported))
        if self.hidden:
            log.info("read: %d hidden entries of the input folders skipped: %s", len(self.hidden),
                     _names(self.hidden))
        if self.unreadable:
            log.warning("read: %d entries of the input folders are not regular files, each counted as "
                        "not_regular_file: %s", len(self.unreadable),
                        _names([f"{p} ({what})" for p, what in self.unreadable]))


def read_phase(stage: ReadStage, task: Task) -> dict[str, Any]:
    path, fmt = task.item
    cfg = stage.config
    return read_file_task(task.index, path, fmt, cfg.text_field, cfg.source, task.arg, task.dir,
                          cfg.max_replaced_share, cfg.max_doc_bytes, cfg.crawl_id)


def skipped_phase(stage: ReadStage, run: PhaseRun) -> None:
    """The hidden entries counted; the entries that are not regular files counted as input records rejected
    (docs in = out + removed holds with them), each named in rejects/entries.jsonl."""
    stage.log_skipped()
    if stage.hidden:
        run.extra["hidden_skipped"] = len(stage.hidden)
    if stage.unreadable:
        run.dir.rejects.mkdir(parents=True, exist_ok=True)
        with open(run.dir.rejects / "entries.jsonl", "w", encoding="utf-8") as rej:
            for position, (path, what) in enumerate(stage.unreadable):
                rej.write(_reject_line(path, "not_regular_file", position, f"{path}: {what}, not read"))
        run.total.docs_in += len(stage.unreadable)
        run.total.removed["not_regular_file"] += len(stage.unreadable)


def _reject_line(path: str, reason: str, position: int, detail: str) -> str:
    """One line of the read stage's rejects (rejects/*.jsonl): a record that never became a document."""
    return json.dumps({"file": path, "reason": reason, "position": position, "detail": detail},
                      ensure_ascii=False) + "\n"


def _names(paths: list[str]) -> str:
    more = len(paths) - LOGGED_NAMES
    return ", ".join(paths[:LOGGED_NAMES]) + (f" and {more} more (see the read stage's rejects)" if more > 0 else "")


def input_items(path: str, fmt: str, text_field: str, max_doc_bytes: int = MAX_DOC_BYTES) -> Iterator[Item]:
    """iter_records, with a file that cannot be read at all counted as one rejection instead of raised."""
    if fmt == UNSUPPORTED:
        return iter([Rejected("unsupported_file", unsupported_detail(path), 0)])
    try:
        return iter_records(path, fmt, text_field=text_field, max_doc_bytes=max_doc_bytes)
    except ReaderError as e:
        log.warning("read: %s (counted as one unreadable_record)", e)
        return iter([Rejected("unreadable_record", str(e), 0)])


# Seed 002 §1.3's record fields, on every document from the read stage on (export --format jsonl writes them):
#   crawl_id       input.crawl_id, else the WARC file's warcinfo `isPartOf`, a JSONL/Parquet record's own
#                  `crawl_id`, else the CC-MAIN-YYYY-WW in the input's path; else null
#   extracted_at   when the page was fetched: its WARC-Date (ISO 8601, UTC, "Z"), or a text record's own
#                  `extracted_at` (top level or in `metadata`); else null. Never the clock: the same input gives
#                  the same bytes in every run, on any number of workers (the seed's datetime.utcnow() would not)
#   content_length characters of `text`, set whenever a part with a text is written (io/parts.write_table), so in
#                  curated documents it is the length of their final text
RECORD_FIELDS = ("crawl_id", "extracted_at", "content_length")
_CRAWL_IN_PATH = re.compile(r"CC-MAIN-\d{4}-\d{2}")


def _record_row(rec: dict[str, Any], file_no: int, record_no: int, source: str, path: str = "",
                crawl_id: str | None = None) -> dict[str, Any]:
    row = dict(rec)
    row["doc_index"] = (file_no << RECORD_BITS) | record_no
    row.setdefault("source", source)
    row["source"] = row["source"] if isinstance(row["source"], str) and row["source"] else source
    own = row.get("crawl_id")
    row["crawl_id"] = crawl_id or (own if isinstance(own, str) and own else None) or _crawl_in_path(path)
    row["extracted_at"] = extracted_at(row)
    text = row.get("text")
    row["content_length"] = len(text) if isinstance(text, str) else None
    return row


@functools.lru_cache(maxsize=64)
def _crawl_in_path(path: str) -> str | None:
    """The CC-MAIN-YYYY-WW in an input's path (once per file, not per record)."""
    found = _CRAWL_IN_PATH.search(path)
    return found.group(0) if found else None


def extracted_at(row: dict[str, Any]) -> str | None:
    """The record's fetch time as ISO 8601 UTC ("2024-05-18T01:58:10Z"; fractions kept), or None."""
    value = row.get("warc_date") or row.get("extracted_at")
    if not value and isinstance(row.get("metadata"), str) and "extracted_at" in row["metadata"]:
        try:
            meta = json.loads(row["metadata"])
            value = meta.get("extracted_at") if isinstance(meta, dict) else None
        except ValueError:
            value = None
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        t = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return value.strip()          # kept as written: not ours to guess
    if t.tzinfo is not None:
        t = t.astimezone(timezone.utc).replace(tzinfo=None)
    return t.isoformat() + "Z"


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
                   partitioning: tuple[int, int], folder, max_replaced_share: float = 0.01,
                   max_doc_bytes: int = MAX_DOC_BYTES, crawl_id: str | None = None) -> dict[str, Any]:
    """Read one input file, streaming, into parts `part-FFFF-PPPPPP.parquet` of at most (documents, bytes) =
    `partitioning` each (a single document larger than the byte bound is a part of its own); rejected records go
    to rejects.jsonl. HTML documents' `charset_source` and `charset`, and `mojibake_suspect` ones, are counted in
    extra (`charset_source_detected`, `charset_gb18030`, `mojibake_suspect`, ...)."""
    if fmt == "jsonl" and jsonl_blocks.enabled():
        try:
            return _read_jsonl_blocks(file_no, path, text_field, source, partitioning, folder, max_doc_bytes,
                                      crawl_id)
        except jsonl_blocks.Irregular as e:   # whatever it wrote is gone: the line reader reads the whole file
            log.debug("read: %s is read line by line (%s)", path, e)
    max_docs, max_bytes = partitioning
    t0 = time.perf_counter()
    stats = StageStats()
    stats.bytes_in = _file_bytes(path)
    rows: list[dict[str, Any]] = []
    part_no, held = 0, 0  # held: body bytes in `rows`
    rejects_path = folder.rejects / f"file-{file_no:04d}.jsonl"   # folder: the stage's StageDir
    rejects_path.parent.mkdir(parents=True, exist_ok=True)

    def flush() -> None:
        nonlocal rows, part_no, held
        df = _one_type_per_column(pd.DataFrame(rows), stats, path)
        body = "html" if "html" in df.columns else "text"
        stats.bytes_out += text_bytes(df[body])
        write_part(df, folder.part(f"part-{file_no:04d}-{part_no:06d}.parquet"))
        rows, part_no, held = [], part_no + 1, 0

    with annotate("gpupipe/read"), replaced_limit(max_replaced_share), \
            open(rejects_path, "w", encoding="utf-8") as rej:
        for record_no, rec in enumerate(input_items(path, fmt, text_field, max_doc_bytes)):
            stats.docs_in += 1
            if isinstance(rec, Rejected):
                stats.removed[rec.reason] += 1
                rej.write(_reject_line(path, rec.reason, rec.position, rec.detail))
                continue
            row = _record_row(rec, file_no, record_no, source, path, crawl_id)
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


def _one_type_per_column(df: pd.DataFrame, stats: StageStats, path: str) -> pd.DataFrame:
    """A record field whose values differ in type (a number here, a string there), or an integer beyond 64 bits,
    cannot be one Parquet column: such a column's values are written as their JSON text ("1", "2.5", "true"),
    counted in extra (`mixed_type_field_<name>`) and logged, and no document is lost."""
    for name in df.columns[df.dtypes == object]:
        values = df[name].tolist()
        kinds = {type(v) for v in values if v is not None}
        big = int in kinds and any(type(v) is int and not -2**63 <= v < 2**63 for v in values)
        if len(kinds) > 1 or big:
            df[name] = pd.Series([v if v is None or isinstance(v, str) else json.dumps(v) for v in values],
                                 index=df.index, dtype=object)
            if not stats.extra[f"mixed_type_field_{name}"]:
                log.warning("read: %s: field %r holds %s values; written as their JSON text", path, name,
                            " and ".join(sorted(k.__name__ for k in kinds)) + (" (beyond 64 bits)" if big else ""))
            stats.extra[f"mixed_type_field_{name}"] += 1
    return df


def _read_jsonl_blocks(file_no: int, path: str, text_field: str, source: str, partitioning: tuple[int, int],
                       folder, max_doc_bytes: int, crawl_id: str | None) -> dict[str, Any]:
    """read_file_task for a regular JSONL file (io/jsonl_blocks.py): the same parts, rows, columns and rejects as
    the line reader, built as Arrow columns. Raises Irregular, having removed what it wrote, where the file is not
    regular (then the line reader reads it)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    max_docs, max_bytes = partitioning
    t0 = time.perf_counter()
    stats = StageStats()
    stats.bytes_in = _file_bytes(path)
    rejects_path = folder.rejects / f"file-{file_no:04d}.jsonl"
    rejects_path.parent.mkdir(parents=True, exist_ok=True)
    ids, name = IdAllocator(), os.path.basename(path)
    written: list = []
    pending: list = []          # slices of blocks' tables in the part being filled
    held = count = 0            # its body bytes and documents

    def flush() -> None:
        nonlocal pending, held, count
        try:
            # one chunk: Parquet starts a page at each chunk, and the line reader's parts have one
            table = pa.concat_tables(pending).combine_chunks()
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:   # blocks whose fields Arrow typed apart
            raise jsonl_blocks.Irregular(f"blocks differ: {e}") from None
        df = table.to_pandas()
        stats.bytes_out += held   # the texts' UTF-8 bytes, as text_bytes counts them
        part = folder.part(f"part-{file_no:04d}-{len(written):06d}.parquet")
        written.append(part)
        write_part(df, part)
        pending, held, count = [], 0, 0

    try:
        with annotate("gpupipe/read"), open(rejects_path, "w", encoding="utf-8") as rej:
            for block in jsonl_blocks.iter_blocks(path, text_field, max_doc_bytes):
                n = block.table.num_rows
                stats.docs_in += n
                for i in np.flatnonzero(block.empty_text).tolist():   # what _item rejects, in the same words
                    stats.removed["missing_text"] += 1
                    lineno = block.first_line + i
                    rej.write(_reject_line(path, "missing_text", lineno,
                                           f"{path}:{lineno}: {missing_text_detail('', text_field, ())}"))
                keep = np.flatnonzero(~block.empty_text)
                table = block.table if keep.size == n else block.table.take(keep)
                table = _with_record_fields(table, keep + (block.first_line - 1), file_no, source, path,
                                            crawl_id, ids, name)
                sizes = pc.binary_length(table.column("text")).to_numpy(zero_copy_only=False).tolist()
                start = 0
                for row, size in enumerate(sizes):   # the line reader's cuts: bytes first, then documents
                    if count and held + size > max_bytes:
                        pending.append(table.slice(start, row - start))
                        start = row
                        flush()
                    held += size
                    count += 1
                    if count >= max_docs:
                        pending.append(table.slice(start, row + 1 - start))
                        start = row + 1
                        flush()
                if start < len(sizes):
                    pending.append(table.slice(start))
                stats.docs_out += len(sizes)
            if count:
                flush()
    except BaseException:
        for part in written:
            Path(part).unlink(missing_ok=True)
        raise
    stats.extra["format_jsonl"] += 1
    return stats.to_dict("read", time.perf_counter() - t0)


def _with_record_fields(table, record_no, file_no: int, source: str, path: str, crawl_id: str | None,
                        ids: IdAllocator, name: str):
    """_record_row on Arrow columns: the claimed id, doc_index, source, crawl_id, extracted_at, content_length, each
    where the record had it or appended, as a dict of the row would place it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cols = dict(zip(table.column_names, table.columns))
    own_ids = cols["id"].to_pylist()
    cols["id"] = pa.array([ids.claim(own, f"{name}:{no + 1}") for own, no in zip(own_ids, record_no.tolist())],
                          pa.string())
    if cols["url"].null_count == len(cols["url"]):
        cols["url"] = pa.nulls(len(cols["url"]))
    cols["doc_index"] = pa.array((file_no << RECORD_BITS) | record_no, pa.int64())
    own_source = cols.get("source")
    if own_source is not None and pa.types.is_string(own_source.type):
        cols["source"] = pc.if_else(pc.equal(own_source, ""), source, own_source)
    else:
        cols["source"] = pa.array([source] * table.num_rows, pa.string())
    own_crawl = cols.get("crawl_id")
    fallback = crawl_id or _crawl_in_path(path)
    if crawl_id is None and own_crawl is not None and pa.types.is_string(own_crawl.type):
        cols["crawl_id"] = pa.array([c or fallback for c in own_crawl.to_pylist()])
    else:
        cols["crawl_id"] = pa.array([fallback] * table.num_rows)
    dated = [k for k in ("warc_date", "extracted_at", "metadata") if k in cols]
    if dated:
        values = [c.to_pylist() for c in (cols[k] for k in dated)]
        cols["extracted_at"] = pa.array([extracted_at(dict(zip(dated, row))) for row in zip(*values)])
    else:
        cols["extracted_at"] = pa.nulls(table.num_rows)
    cols["content_length"] = pc.cast(pc.utf8_length(cols["text"]), pa.int64())
    return pa.table(cols)
