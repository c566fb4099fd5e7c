"""The run directory contract (DESIGN.md §9):

    RUN/config.resolved.yaml   the config as run, every default filled in
    RUN/stats.json             the funnel: one entry per stage, plus input_records / output_docs
    RUN/stages/NN-<name>/      Parquet parts, rejects/, and that stage's stats.json (written last: marks it done)
    RUN/shards/                shard-NNNNN.bin, tokenizer.json, manifest.json (when the run packs)
    RUN/logs/run.log

A stage is skipped on a re-run when its stats.json exists and carries the same key: a hash of the input
fingerprint, the partitioning and the configs of this stage and all before it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from gpupipe.io.parts import atomic_write_text

STATS_FILE = "stats.json"


def input_fingerprint(files: list[str]) -> list[list[Any]]:
    """Path, size and mtime of each input: cheap, and changes whenever the file is rewritten."""
    out = []
    for f in files:
        st = os.stat(f)
        out.append([os.path.abspath(f), st.st_size, st.st_mtime_ns])
    return out


def stage_key(fingerprint: list, partition_docs: int, stage_items: list[dict[str, Any]], seed: int) -> str:
    payload = json.dumps([fingerprint, partition_docs, stage_items, seed], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


class RunDir:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        for sub in ("stages", "logs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def stage_dir(self, index: int, name: str) -> Path:
        return self.root / "stages" / f"{index:02d}-{name}"

    def completed(self, folder: Path, key: str) -> dict[str, Any] | None:
        """The saved stats of a stage done with the same key, else None."""
        f = folder / STATS_FILE
        if not f.is_file():
            return None
        stats = json.loads(f.read_text(encoding="utf-8"))
        return stats if stats.get("key") == key else None

    def reset(self, folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)

    def mark_done(self, folder: Path, stats: dict[str, Any]) -> None:
        atomic_write_text(folder / STATS_FILE, json.dumps(stats, indent=2, sort_keys=True) + "\n")

    def drop_stale(self, valid: set[str]) -> None:
        """Remove stage folders a previous run left that this run's stage list does not have."""
        for d in (self.root / "stages").iterdir():
            if d.is_dir() and d.name not in valid:
                shutil.rmtree(d)

    def write_json(self, name: str, data: Any) -> Path:
        path = self.root / name
        atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n")
        return path
