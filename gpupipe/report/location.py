"""A run directory named by a path or a URL, for the commands that read a finished run (report, audit).

The report and the audit read Parquet parts with pyarrow and write files beside them, so a run directory at a URL
(`s3://bucket/runs/r1`) is read through a local copy: the run's own work directory (run/remote.py
`default_work_dir`, so on the machine that ran it only what differs is downloaded). Its complete stages come from
the bucket as a resumed run takes them (`RemoteRun.pull`: a stage's marker decides), the top-level files and
`audit/` are copied down, and what the command writes (report.html, audit/) is uploaded back.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpupipe.io import storage
from gpupipe.run.rundir import NAMES, STATS_FILE, RunDir, RunLayout, at

TOP_FILES = (NAMES.stats, NAMES.config, NAMES.manifest)   # copied down beside the stages (relative paths)


class NotARunDir(ValueError):
    """No stats.json: not a run directory, or a run that has not finished."""


def check_run_dir(location: str) -> None:
    if not storage.isfile(at(location, NAMES.stats)):
        raise NotARunDir(f"{location} is not a finished run directory (no {STATS_FILE})")


class RunLocation:
    """with RunLocation(path_or_url) as run: run.local is a local run directory; run.push(names) uploads what the
    command wrote back to the bucket (nothing to do for a local directory); run.where(path) names a file as the
    user knows it (its URL)."""

    def __init__(self, location: str):
        self.url = location.rstrip("/") if storage.is_url(location) else None
        self.local = Path(location)
        self._rundir = None

    def __enter__(self) -> "RunLocation":
        if self.url is None:
            check_run_dir(str(self.local))
            return self
        from gpupipe.run.remote import RemoteRun, default_work_dir

        check_run_dir(self.url)
        self.local = default_work_dir(self.url)
        self._rundir = RunDir(self.local)
        self._rundir.lock()   # a run working in this copy would change it under us (RunDirBusy says so)
        try:
            RemoteRun(self.url, self.local).pull()
            for rel in TOP_FILES:
                target = self.local / rel
                if storage.isfile(at(self.url, rel)):
                    storage.get_file(at(self.url, rel), target)
                else:
                    target.unlink(missing_ok=True)
            # audit/ as the bucket holds it: reviews recorded on another machine are kept
            local_audit = RunLayout(self.local).audit
            storage.remove(str(local_audit), recursive=True)
            audit = at(self.url, NAMES.audit)
            for rel in storage.find(audit):
                storage.get_file(storage.join(audit, rel), local_audit / rel)
        except BaseException:
            self._rundir.unlock()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._rundir is not None:
            self._rundir.unlock()

    def push(self, *names: str | os.PathLike) -> None:
        """Upload these files or folders (relative to the run directory) back to the bucket."""
        if self.url is None:
            return
        for name in names:
            path = self.local / name
            files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path] if path.is_file() else []
            for f in sorted(files):
                storage.put_file(f, storage.join(self.url, f.relative_to(self.local).as_posix()))

    def where(self, path: str | Path) -> str:
        """A path inside the local copy as the user names it: its URL in the bucket, or the local path."""
        if self.url is None:
            return str(path)
        rel = Path(path).relative_to(self.local).as_posix()
        return self.url if rel == "." else storage.join(self.url, rel)
