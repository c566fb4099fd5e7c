"""`gpupipe export RUN --format jsonl --out FILE`: a run's curated documents as seed 002 §1.3's JSON Lines.

One line per document, in input order, the seed's fields and nothing else:

    {"id": ..., "text": ..., "url": ..., "source": ..., "crawl_id": ..., "language": ...,
     "metadata": {"content_length": ..., "extracted_at": ...}}

`language` is the langid stage's `lang` (null without one), `content_length` the characters of the text,
`extracted_at` the page's fetch time (its WARC-Date; stages/read.py says why never the clock), so the same run
exports the same bytes. Curated documents are the parts of the last stage before `tokenize` (the last stage when
there is none). FILE ending in `.gz` is gzip-compressed (mtime 0: byte-reproducible too); written under a temporary
name and renamed.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any, Iterator

import pyarrow.parquet as pq

from gpupipe.io.parts import atomic_output, part_paths
from gpupipe.run.rundir import RunLayout

SEED_FIELDS = ("id", "text", "url", "source", "crawl_id")
TOKEN_STAGES = ("tokenize", "mixture", "pack")


class ExportError(ValueError):
    """The folder is not a run with curated documents; the message says what is missing."""


def curated_stage(run_dir: str | os.PathLike) -> Path:
    """The folder of a run's curated documents: the last completed stage before tokenize."""
    layout = RunLayout(run_dir)
    stages = layout.stage_dirs()
    if not stages:
        raise ExportError(f"{layout.root} is not a gpupipe run directory with stages (no "
                          f"{layout.stages_root}/NN-<name>)")
    before = [s for s in stages if s.station not in TOKEN_STAGES]
    for stage in reversed(before):
        if stage.marker.is_file() and stage.parts():
            return stage.root
    raise ExportError(f"{layout.root}: no completed stage before tokenize has parts (run it to the end first, or "
                      f"with keep_intermediate: true)")


def records(folder: Path) -> Iterator[dict[str, Any]]:
    """Seed 002 §1.3 records of every document in a stage's parts, in input order."""
    for part in part_paths(folder):
        names = pq.read_schema(part).names
        wanted = [c for c in (*SEED_FIELDS, "lang", "content_length", "extracted_at") if c in names]
        table = pq.read_table(part, columns=wanted)
        cols = {c: table.column(c).to_pylist() for c in wanted}
        for i in range(table.num_rows):
            get = lambda c: cols[c][i] if c in cols else None   # noqa: E731
            text = get("text")
            length = get("content_length")
            yield {"id": get("id"), "text": text, "url": get("url"), "source": get("source"),
                   "crawl_id": get("crawl_id"), "language": get("lang"),
                   "metadata": {"content_length": length if length is not None else
                                (len(text) if isinstance(text, str) else None),
                                "extracted_at": get("extracted_at")}}


def export_jsonl(run_dir: str | os.PathLike, out: str | os.PathLike) -> int:
    """Write the run's curated documents to `out` as JSON Lines; the number of documents written."""
    folder = curated_stage(run_dir)
    n = 0
    with atomic_output(out) as tmp:
        raw = open(tmp, "wb")
        f = gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) if str(out).endswith(".gz") else raw
        try:
            for rec in records(folder):
                f.write(json.dumps(rec, ensure_ascii=False).encode("utf-8") + b"\n")
                n += 1
        finally:
            f.close()
            raw.close()
    return n
