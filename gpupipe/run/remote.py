"""A run directory at a URL (`output: s3://bucket/runs/r1`): the run works in a local copy, and every stage is
committed to the bucket once it is complete, its marker written last.

Why a local copy: stages write with rename-based atomic files, Parquet writers and memory maps, which object
stores do not offer; the bucket instead receives each finished stage as a unit. The protocol keeps the run
directory's promise ("a stage whose marker is there is complete; nothing half-written looks whole") without rename:

- commit of a stage (`push_stage`): delete its marker in the bucket, delete the objects there that the local stage
  does not have (files of an interrupted attempt), upload every file (each object appears only once its upload is
  complete), then upload the marker `stats.json`. A kill anywhere before the last step leaves the stage without a
  marker in the bucket, so it counts as not done there.
- the end of a run (`push_results`): the shards with `manifest.json` last, the other top-level files, then
  `stats.json` last.
- the start of a run (`pull`): the bucket is the truth. A local stage whose marker differs from the bucket's (or
  that the bucket has none of) is dropped; a stage the bucket has complete and the local copy lacks is downloaded
  (marker last). So a run killed with kill -9 resumes on this machine or on another one after the last stage the
  bucket holds complete; a stage finished locally but not yet committed is run again.
- invalidation mirrors the local one (`invalidate`): when a run redoes stage k, the bucket's markers from k on,
  its `stats.json`, `report.html` and `shards/` go first.

Two runs must not write one bucket run directory at once: the local copy is locked (flock, as a local run
directory), but machines do not see each other's locks.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from gpupipe.io import storage
from gpupipe.run.rundir import LOCK_FILE, MANIFEST_FILE, NAMES, RESULT_FILES, STATS_FILE, RunLayout, at

log = logging.getLogger("gpupipe")

LOCAL_ONLY = (LOCK_FILE,)


def default_work_dir(url: str) -> Path:
    """Where the local copy of a run directory at `url` lives when the config names no `storage.work_dir`."""
    base = os.environ.get("GPUPIPE_WORK_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "gpupipe", "runs")
    return Path(base) / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]


def _upload_tree(local: Path, url: str, last: str | None) -> None:
    """Every file under `local` to `url` (same relative names), the file named `last` after all others; objects
    under `url` that `local` does not have are deleted first."""
    mine = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()
                  and p.name not in LOCAL_ONLY and not p.name.startswith("."))
    for rel in set(storage.find(url)) - set(mine):
        storage.remove(storage.join(url, rel))
    for rel in sorted(mine, key=lambda r: r == last):
        storage.put_file(local / rel, storage.join(url, rel))


class RemoteRun:
    """The bucket side of a run directory whose local copy is `local`."""

    def __init__(self, url: str, local: Path):
        self.url, self.local = url.rstrip("/"), Path(local)

    def _stage_url(self, name: str) -> str:
        return at(self.url, NAMES.stage_named(name).root)

    def _remote_marker(self, name: str) -> bytes | None:
        try:
            return storage.read_bytes(storage.join(self._stage_url(name), STATS_FILE))
        except FileNotFoundError:
            return None

    def pull(self) -> None:
        """Make the local copy's completed stages those of the bucket (module doc)."""
        import shutil

        layout = RunLayout(self.local)
        layout.stages_root.mkdir(parents=True, exist_ok=True)
        names = set(storage.listdir(at(self.url, NAMES.stages_root))) | {d.name for d in layout.stage_dirs()}
        for name in sorted(names):
            stage, remote = layout.stage_named(name), self._remote_marker(name)
            folder, marker = stage.root, stage.marker
            here = marker.read_bytes() if marker.is_file() else None
            if here is not None and here == remote:
                continue
            if here is not None or remote is not None:
                shutil.rmtree(folder, ignore_errors=True)
            if remote is None:
                continue
            log.info("run directory %s: stage %s is complete in the bucket: downloading it", self.url, name)
            base = self._stage_url(name)
            for rel in storage.find(base):
                if rel != STATS_FILE:
                    storage.get_file(storage.join(base, rel), folder / rel)
            storage.get_file(storage.join(base, STATS_FILE), marker)   # the marker last, as in the bucket

    def invalidate(self, stage_names: list[str], first: int | None) -> None:
        """The bucket side of RunDir.drop_stale and (when a stage `first` is redone) of RunDir.invalidate_from."""
        if first is not None:
            for name in RESULT_FILES:
                storage.remove(storage.join(self.url, name))
            storage.remove(at(self.url, NAMES.shards), recursive=True)
            for name in stage_names[first:]:
                storage.remove(storage.join(self._stage_url(name), STATS_FILE))
        valid = set(stage_names)
        for name in storage.listdir(at(self.url, NAMES.stages_root)):
            if name not in valid:
                storage.remove(self._stage_url(name), recursive=True)

    def push_stage(self, folder: Path) -> None:
        """Commit one completed stage to the bucket, its marker last (module doc)."""
        base = self._stage_url(folder.name)
        storage.remove(storage.join(base, STATS_FILE))
        _upload_tree(folder, base, last=STATS_FILE)

    def push_results(self) -> None:
        """The end of a run: the shards (manifest last), the other top-level files, stats.json last."""
        layout = RunLayout(self.local)
        for sub in sorted(p for p in self.local.iterdir() if p.is_dir() and p != layout.stages_root):
            _upload_tree(sub, storage.join(self.url, sub.name), last=MANIFEST_FILE if sub == layout.shards else None)
        top = sorted(p.name for p in self.local.iterdir() if p.is_file() and p.name not in LOCAL_ONLY
                     and not p.name.startswith("."))
        for name in sorted(top, key=lambda n: n == STATS_FILE):
            storage.put_file(self.local / name, storage.join(self.url, name))

    def url_of(self, local_path: str | None) -> str | None:
        """The bucket URL of a path inside the local copy."""
        if local_path is None:
            return None
        rel = Path(local_path).resolve().relative_to(self.local.resolve()).as_posix()
        return self.url if rel == "." else storage.join(self.url, rel)
