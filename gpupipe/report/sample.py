"""The report's bounded, seeded sampler of Parquet columns: the histograms (report/html.py) and the dashboard
metrics (report/metrics.py) read a stage's values through it, so a huge run costs what a small one does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

MAX_VALUES = 200_000      # rows per stage read for a histogram; more are sampled down to this


def sample_columns(paths: list[Path], columns: list[str], seed: int,
                   limit: int = MAX_VALUES) -> dict[str, np.ndarray]:
    """The columns over the parts (those lacking a column skip it), sampled down to about `limit` rows (seeded).
    On a large run only a random subset of parts holding ~2x that many rows is read, so the cost stays bounded."""
    rng = np.random.default_rng(seed)
    rows = [pq.ParquetFile(p).metadata.num_rows for p in paths]
    if sum(rows) > 2 * limit:
        chosen, n = [], 0
        for i in rng.permutation(len(paths)):
            if n >= 2 * limit:
                break
            chosen.append(int(i))
            n += rows[i]
        paths, rows = [paths[i] for i in sorted(chosen)], [rows[i] for i in sorted(chosen)]
    total = sum(rows)
    keep = min(1.0, limit / total) if total else 1.0
    got: dict[str, list[np.ndarray]] = {c: [] for c in columns}
    for p in paths:
        names = pq.ParquetFile(p).schema_arrow.names
        have = [c for c in columns if c in names]
        if not have:
            continue
        t = pq.read_table(p, columns=have)
        take = rng.random(t.num_rows) < keep if keep < 1 else None
        for c in have:
            v = t[c].to_numpy(zero_copy_only=False)
            got[c].append(v[take] if take is not None else v)
    return {c: np.concatenate(v) for c, v in got.items() if v}
