"""The first stage of every run: input files → Parquet partitions of documents, every record accounted for.

Each document gets `doc_index` = (file number << 40) | record number: a global input order that does not depend on
how the corpus is partitioned, so "first occurrence wins" means the same thing on 1 worker or 100.
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from gpupipe.config import ConfigError, InputConfig
from gpupipe.io.parts import write_part
from gpupipe.io.readers import Rejected, detect_format, iter_records
from gpupipe.nvtx_ranges import annotate
from gpupipe.stages.base import RunContext, Stage, StageJob, StageStats, text_bytes

RECORD_BITS = 40  # up to 1e12 records per file, 2^23 files


def expand_inputs(paths: list[str]) -> list[str]:
    """Paths and glob patterns → a sorted, de-duplicated list of input files/folders."""
    out: list[str] = []
    for p in paths:
        matches = sorted(glob.glob(p)) if any(ch in p for ch in "*?[") else [p]
        if not matches:
            raise ConfigError(f"input pattern matched nothing: {p}")
        out.extend(m for m in matches if m not in out)
    return out


class ReadStage(Stage):
    name = "read"
    Config = InputConfig

    def __init__(self, config: InputConfig, ctx: RunContext, partition_docs: int):
        super().__init__(config, ctx)
        self.partition_docs = partition_docs
        self.files = expand_inputs(config.path)
        self.formats = [config.format if config.format != "auto" else detect_format(f) for f in self.files]

    def execute(self, job: StageJob) -> StageStats:
        n = len(self.files)
        results = job.executor.map(read_file_task, list(range(n)), self.files, self.formats,
                                   [self.config.text_field] * n, [self.config.source] * n,
                                   [self.partition_docs] * n, [job.out_dir] * n, progress=job.progress)
        total = StageStats()
        for r in results:
            total.merge(StageStats.from_dict(r))
        return total


def _record_row(rec: dict[str, Any], file_no: int, record_no: int, source: str) -> dict[str, Any]:
    row = dict(rec)
    row["doc_index"] = (file_no << RECORD_BITS) | record_no
    row.setdefault("source", source)
    row["source"] = row["source"] if isinstance(row["source"], str) and row["source"] else source
    return row


def read_file_task(file_no: int, path: str, fmt: str, text_field: str, source: str, partition_docs: int,
                   out_dir: Path) -> dict[str, Any]:
    """Read one input file into parts `part-FFFF-PPPPPP.parquet`; rejected records go to rejects.jsonl."""
    t0 = time.perf_counter()
    stats = StageStats()
    stats.bytes_in = os.path.getsize(path) if os.path.isfile(path) else 0
    rows: list[dict[str, Any]] = []
    part_no = 0
    out_dir = Path(out_dir)
    rejects_path = out_dir / "rejects" / f"file-{file_no:04d}.jsonl"
    rejects_path.parent.mkdir(parents=True, exist_ok=True)

    def flush() -> None:
        nonlocal rows, part_no
        df = pd.DataFrame(rows)
        body = "html" if "html" in df.columns else "text"
        stats.bytes_out += text_bytes(df[body])
        write_part(df, out_dir / f"part-{file_no:04d}-{part_no:06d}.parquet")
        rows, part_no = [], part_no + 1

    with annotate("gpupipe/read"), open(rejects_path, "w", encoding="utf-8") as rej:
        for record_no, rec in enumerate(iter_records(path, fmt, text_field=text_field)):
            stats.docs_in += 1
            if isinstance(rec, Rejected):
                stats.removed[rec.reason] += 1
                rej.write(json.dumps({"file": path, "reason": rec.reason, "position": rec.position,
                                      "detail": rec.detail}, ensure_ascii=False) + "\n")
                continue
            rows.append(_record_row(rec, file_no, record_no, source))
            stats.docs_out += 1
            if len(rows) >= partition_docs:
                flush()
        if rows or part_no == 0 and stats.docs_out:
            flush()
    stats.extra = Counter({f"format_{fmt}": 1})
    return stats.to_dict("read", time.perf_counter() - t0)
