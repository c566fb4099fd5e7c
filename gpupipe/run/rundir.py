"""The run directory contract (DESIGN.md, "Outputs"):

    RUN/config.resolved.yaml   the config as run, every default filled in
    RUN/stats.json             the funnel: one entry per stage, plus input_records / output_docs
    RUN/stages/NN-<name>/      Parquet parts, rejects/, and that stage's stats.json (written last: marks it done)
    RUN/shards/                shard-NNNNN.bin, tokenizer.json, manifest.json (when the run packs)
    RUN/logs/run.log
    RUN/run.lock               held (flock) by the run in progress; holds its pid
    RUN/file_hashes.json       content hashes of the files the config references, cached by file identity
    RUN/.gpupipe-run           says "a gpupipe run directory": a run writes only into a folder that holds it

A stage is skipped on a re-run when its stats.json exists and carries the same key: a hash of the input
fingerprint, the partitioning (documents and bytes), the configs of this stage and all before it, and the content
of every file those configs reference (models, tokenizer, index); and when the files it produced are still what its
marker vouches for (`files`: size and xxh3-128 of each, `damage`).

The user's files are never destroyed (`claim`): a run writes only into a folder that is new, empty or a gpupipe run
directory (it holds RUN_MARKER), never into, around or as its own input; everything it deletes is inside it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from gpupipe.config_base import ConfigError
from gpupipe.io import storage
from gpupipe.io.parts import atomic_write_text, part_paths
# A shard folder is a product of its own, read without a run directory (`gpupipe verify`, the loader): its two names
# are spelled by the token package, and the run directory's shards/ takes them from there.
from gpupipe.tokens.packing import MANIFEST_FILE
from gpupipe.tokens.tokenizer import TOKENIZER_FILE

# Every name in a run directory, spelled here only (tests/run/test_layout.py looks for them elsewhere).
STATS_FILE = "stats.json"          # RUN/stats.json, and each stage's completion marker
CONFIG_FILE = "config.resolved.yaml"
REPORT_FILE = "report.html"
METRICS_FILE = "metrics.prom"
LOCK_FILE = "run.lock"
FILE_HASHES = "file_hashes.json"
RUN_MARKER = ".gpupipe-run"        # RUN/.gpupipe-run: this folder is a gpupipe run directory (`claim`)
STAGES_DIR, LOGS_DIR, LOG_FILE, SHARDS_DIR, AUDIT_DIR = "stages", "logs", "run.log", "shards", "audit"
REJECTS_DIR = "rejects"            # in a stage's folder: what it removed (Parquet parts; the read stage's JSONL)
EXCHANGE_DIR = "_exchange"         # in a global stage's folder while it runs: files between its phases
# MANIFEST_FILE, TOKENIZER_FILE (above): in shards/ (and the tokenizer beside a stage's parts)
LEDGER_FILE = "mixture.json"                 # the mixture stage's plan of copies per source
DECONTAM_REPORT_FILE = "decontam_report.json"
CLUSTERS_SAMPLE_FILE = "clusters_sample.jsonl"   # near/semantic dedup: sampled duplicate groups, for review
# What a run's end writes at the top level: removed when a run starts over, so a partial run never looks complete.
RESULT_FILES = (STATS_FILE, REPORT_FILE)
REJECTED_RECORDS = "*.jsonl"       # in the read stage's rejects/: the records it could not read (JSONL, per file)


def stage_name(index: int, name: str) -> str:
    """A stage's folder name, NN-name: also how the report, the metrics and the audit name a stage (a station may
    appear twice in a config, so its name alone is no key)."""
    return f"{index:02d}-{name}"


@dataclass(frozen=True)
class StageDir:
    """One stage's folder and the run-level places a station writes: what the engine hands a station's phases
    (`StageJob.dir`, `Task.dir`), so that a station never spells a path."""

    root: Path        # RUN/stages/NN-name
    run_root: Path    # RUN

    @classmethod
    def of(cls, folder: str | os.PathLike) -> "StageDir":
        """A stage folder as a reader finds it (RUN/stages/NN-name: its run directory two levels up)."""
        folder = Path(folder)
        return cls(folder, folder.parent.parent)

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def station(self) -> str:
        """The station's name: the folder's name without its NN- (`stage_name`)."""
        index, sep, rest = self.name.partition("-")
        return rest if sep and index.isdigit() else self.name

    def part(self, name: str) -> Path:
        """A kept part of this stage (`name`: the input part's file name, e.g. part-00003.parquet)."""
        return self.root / name

    def parts(self) -> list[Path]:
        return part_paths(self.root)

    def kept_parts(self) -> list[Path]:
        """The parts holding the documents this stage kept (its chain's, for a fused stage): `kept_parts`."""
        return kept_parts(self.root)

    def columns(self) -> list[str]:
        """The columns of the documents this stage passed on: `stage_columns`."""
        return stage_columns(self.root)

    @property
    def rejects(self) -> Path:
        return self.root / REJECTS_DIR

    def reject_parts(self) -> list[Path]:
        """The documents this stage removed (Parquet parts in rejects/)."""
        return part_paths(self.rejects)

    def rejected_records(self) -> list[Path]:
        """The read stage's rejected records (JSONL in rejects/, one file per input file)."""
        return sorted(self.rejects.glob(REJECTED_RECORDS))

    def read_marker(self) -> dict[str, Any]:
        """This stage's marker (its stats.json) as a dict; {} while the stage is not done."""
        return _marker(self.root)

    def side(self, folder: str) -> Path:
        """A side table folder a stage writes beside its parts (`Applied.side`)."""
        return self.root / folder

    @property
    def exchange(self) -> Path:
        return self.root / EXCHANGE_DIR

    @property
    def marker(self) -> Path:
        return self.root / STATS_FILE

    @property
    def tokenizer(self) -> Path:
        return self.root / TOKENIZER_FILE

    @property
    def ledger(self) -> Path:
        return self.root / LEDGER_FILE

    @property
    def decontam_report(self) -> Path:
        return self.root / DECONTAM_REPORT_FILE

    @property
    def clusters_sample(self) -> Path:
        return self.root / CLUSTERS_SAMPLE_FILE

    @property
    def shards(self) -> Path:
        return self.run_root / SHARDS_DIR


class RunLayout:
    """Where a run directory keeps what: the reading side (report, plan, audit, warm-up) and RunDir's base."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def stage(self, index: int, name: str) -> StageDir:
        return self.stage_named(stage_name(index, name))

    def stage_named(self, folder: str) -> StageDir:
        """A stage by its folder name (NN-name, `stage_name`)."""
        return StageDir(self.stages_root / folder, self.root)

    def stage_of(self, stats: dict[str, Any], index: int) -> StageDir:
        """The folder of entry `index` of a run's stats.json `stages`."""
        return self.stage(index, stats["stages"][index]["name"])

    def stage_dirs(self) -> list[StageDir]:
        """The stage folders present, in order."""
        folder = self.stages_root
        return [StageDir(f, self.root) for f in sorted(folder.iterdir()) if f.is_dir()] if folder.is_dir() else []

    @property
    def stages_root(self) -> Path:
        """RUN/stages: the folder of the stage folders."""
        return self.root / STAGES_DIR

    @property
    def stats(self) -> Path:
        return self.root / STATS_FILE

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def report(self) -> Path:
        return self.root / REPORT_FILE

    @property
    def metrics(self) -> Path:
        return self.root / METRICS_FILE

    @property
    def shards(self) -> Path:
        return self.root / SHARDS_DIR

    @property
    def manifest(self) -> Path:
        return self.root / SHARDS_DIR / MANIFEST_FILE

    @property
    def audit(self) -> Path:
        return self.root / AUDIT_DIR

    @property
    def log(self) -> Path:
        return self.root / LOGS_DIR / LOG_FILE

    @property
    def lock_file(self) -> Path:
        return self.root / LOCK_FILE

    @property
    def result_files(self) -> list[Path]:
        """What a run's end writes at the top level (`RESULT_FILES`)."""
        return [self.root / name for name in RESULT_FILES]

    def relative(self, path: str | os.PathLike) -> str:
        """A path inside this run directory as its name relative to it ('stages/03-langid', 'shards/manifest.json')."""
        return Path(path).relative_to(self.root).as_posix()


# The layout relative to any run directory: NAMES.manifest is Path('shards/manifest.json'). For readers of a run
# directory named by a URL, which join these names with io.storage (`at`): plan, run/remote.py, report/location.py.
NAMES = RunLayout("")


def at(location: str | os.PathLike, path: str | os.PathLike) -> str:
    """`path` (relative, e.g. a NAMES path) inside the run directory `location`: a local path or a URL."""
    return storage.join(location, *Path(path).parts)


def _marker(folder: Path) -> dict[str, Any]:
    f = folder / STATS_FILE
    return json.loads(f.read_text(encoding="utf-8")) if f.is_file() else {}


def kept_parts(folder: Path) -> list[Path]:
    """The Parquet files that hold the documents a stage kept, in a fixed order: its own parts; for a stage that
    ran fused inside a chain without keeping its parts (`parts_kept: false`), the chain's last stage's parts, then
    the rejects of each later stage of the chain (they were kept here and removed there)."""
    if _marker(folder).get("parts_kept") is not False:
        return part_paths(folder)
    later = sorted(f for f in folder.parent.iterdir() if f.is_dir() and f.name > folder.name)
    rejects: list[Path] = []
    for f in later:
        rejects += part_paths(f / REJECTS_DIR)
        if _marker(f).get("parts_kept") is not False:  # the chain's last stage
            return part_paths(f) + rejects
    return rejects


def stage_columns(folder: Path) -> list[str]:
    """The columns of the documents a stage passed on (its marker; else its first part's schema)."""
    cols = _marker(folder).get("columns")
    if cols is None:
        import pyarrow.parquet as pq

        parts = part_paths(folder)
        cols = pq.ParquetFile(parts[0]).schema_arrow.names if parts else []
    return cols


class RunDirBusy(RuntimeError):
    """Another process holds the run directory."""


class RunFault(RuntimeError):
    """A fault that ends a run with one line (the CLI prints it, exit 1): the run directory vanished or cannot be
    written, its lock was taken, a file it reads is damaged. Its message says what to do next."""


class LockLost(RunFault):
    """The run's lock file was removed or replaced while the run held it: another run may be writing."""


# A gpupipe run directory of a version before RUN_MARKER: nothing at its top level but these names, the config among
# them. A folder holding anything else is the user's (their data, their own stats.json and shards/).
_RUN_NAMES = {STATS_FILE, CONFIG_FILE, REPORT_FILE, METRICS_FILE, LOCK_FILE, FILE_HASHES, STAGES_DIR, LOGS_DIR,
              SHARDS_DIR, AUDIT_DIR, RUN_MARKER}


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def claim(output: str | os.PathLike, input_paths: list[str], input_files: list[str]) -> None:
    """Make `output` this run's folder, or refuse (ConfigError) before anything is written: it must not be an input,
    lie inside an input folder (a re-run would read its own outputs) or hold an input; and an existing non-empty
    folder must be a gpupipe run directory (it holds RUN_MARKER, or is one of an older gpupipe: nothing but run
    directory names, its config among them). A new or empty folder gets RUN_MARKER. So a run only ever deletes or
    replaces files inside a folder a run created."""
    shown = os.fspath(output) or "''"
    out = os.path.realpath(output or ".")
    for given in [*input_paths, *input_files]:
        if storage.is_url(given) or not os.path.exists(given):
            continue   # URLs are not local folders; globs were resolved into input_files
        real = os.path.realpath(given)
        if out == real:
            raise ConfigError(f"output {shown} is the input {given}: choose a run directory of its own")
        if os.path.isdir(real) and _inside(out, real):
            raise ConfigError(f"output {shown} is inside the input folder {given}: a re-run would read the run's "
                              f"own files as input; choose a run directory outside it")
        if _inside(real, out):
            raise ConfigError(f"output {shown} holds the input {given}: a run directory is gpupipe's to replace; "
                              f"choose a folder of its own")
    names = set(os.listdir(out)) if os.path.isdir(out) else set()
    if RUN_MARKER in names:
        return
    if names and not (CONFIG_FILE in names and {n for n in names if not n.startswith(".")} <= _RUN_NAMES):
        listed = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
        raise ConfigError(f"output {shown} is a folder that holds files gpupipe did not write ({listed}): a run "
                          f"writes only into a new or empty folder or a gpupipe run directory (one holding "
                          f"{RUN_MARKER}); choose another output")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, RUN_MARKER), "w", encoding="utf-8") as f:
        f.write("a gpupipe run directory: gpupipe run deletes and replaces files in this folder\n")


def digest(path: str | os.PathLike) -> str:
    """xxh3-128 of a file's bytes (hex): what a marker records of each file a stage produced."""
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
    return h.hexdigest()


def _identity(st: os.stat_result) -> list[int]:
    # ctime and inode, not only size and mtime: `cp -p` / `rsync -a` restore the mtime of a replaced file, but
    # any write (or rename onto the path) sets a new ctime, which no user call can set back.
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def input_fingerprint(files: list[str]) -> list[list[Any]]:
    """Path and identity (size, mtime, ctime, inode) of each input: cheap, and changes whenever it is rewritten; a
    folder input (HTML or Markdown pages) by the identity of every file in it (a page rewritten in place changes no
    folder's mtime). A URL: itself, its size and the store's version of it (ETag or modification time,
    `io/storage.identity`)."""
    return [[f, *storage.identity(f)] if storage.is_url(f)
            else [os.path.abspath(f), _tree_identity(Path(f))] if os.path.isdir(f)
            else [os.path.abspath(f), *_identity(os.stat(f))] for f in files]


def stage_key(fingerprint: list, partitioning: tuple[int, int], stage_items: list[dict[str, Any]], seed: int,
              file_hashes: list[dict[str, str]] | None = None) -> str:
    """partitioning: (documents, bytes) per read partition; file_hashes: per stage item, {field: content hash} of
    the files it references."""
    payload = json.dumps([fingerprint, list(partitioning), stage_items, seed, file_hashes or []], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _hash_path(path: Path) -> str:
    """sha256 of a file, or of a folder's files (relative names and contents, in name order)."""
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        if path.is_dir():
            h.update(f.relative_to(path).as_posix().encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def _tree_identity(path: Path) -> list:
    if not path.is_dir():
        return _identity(path.stat())
    return [[f.relative_to(path).as_posix(), *_identity(f.stat())] for f in sorted(path.rglob("*")) if f.is_file()]


class RunDir(RunLayout):
    """A run directory being written: RunLayout's places, the lock, completion markers, invalidation."""

    def __init__(self, root: str | os.PathLike):
        super().__init__(root)
        for sub in (STAGES_DIR, LOGS_DIR):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._lock_fh = None

    def lock(self) -> int | None:
        """Take the run directory for this process; returns the pid of a dead holder whose lock was stale, if any.

        flock, not a lock file's existence: the kernel drops the lock when its holder dies (even by kill -9), so a
        lock file left behind is detected as stale by simply getting the lock."""
        fh = open(self.lock_file, "a+", encoding="utf-8")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                fh.close()
                raise
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise RunDirBusy(f"run directory {self.root} is in use by another gpupipe run (pid {holder}); "
                             f"wait for it to finish, or stop it, or choose another output") from None
        fh.seek(0)
        previous = fh.read().strip()
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._lock_fh = fh
        return int(previous) if previous.isdigit() and int(previous) != os.getpid() else None

    def unlock(self) -> None:
        if self._lock_fh is not None:
            self._lock_fh.seek(0)
            self._lock_fh.truncate()  # an empty lock file: nobody holds it, nothing stale to report
            fcntl.flock(self._lock_fh, fcntl.LOCK_UN)
            self._lock_fh.close()
            self._lock_fh = None

    def file_hashes(self, paths: list[str]) -> dict[str, str]:
        """Content hash of each referenced file or folder, cached in RUN/file_hashes.json by path and identity
        (size, mtime, ctime, inode of every file), so an unchanged multi-GB model is not read again."""
        if not paths:
            return {}
        cache_path = self.root / FILE_HASHES
        try:
            cache = json.loads(cache_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            cache = {}
        out = {}
        for p in paths:
            path = Path(p).resolve()
            ident = _tree_identity(path)
            hit = cache.get(str(path))
            if hit is None or hit["identity"] != ident:
                hit = cache[str(path)] = {"identity": ident, "sha256": _hash_path(path)}
            out[p] = hit["sha256"]
        atomic_write_text(cache_path, json.dumps(cache, indent=1, sort_keys=True) + "\n")
        return out

    def invalidate_from(self, folders: list[Path], first: int) -> None:
        """Before a run that will redo stage `first` and after: remove the run-level results and the completion
        markers of that stage and every later one, so nothing left by an earlier config looks complete if this run
        is interrupted."""
        for path in self.result_files:
            path.unlink(missing_ok=True)
        shutil.rmtree(self.shards, ignore_errors=True)
        for folder in folders[first:]:
            (folder / STATS_FILE).unlink(missing_ok=True)

    def stage_dir(self, index: int, name: str) -> Path:
        return self.stage(index, name).root

    def completed(self, folder: Path, key: str) -> dict[str, Any] | None:
        """The saved stats of a stage done with the same key, else None."""
        f = folder / STATS_FILE
        if not f.is_file():
            return None
        stats = json.loads(f.read_text(encoding="utf-8"))
        return stats if stats.get("key") == key else None

    def reset(self, folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()   # not parents: a run directory removed under the run is not made again here

    def mark_done(self, folder: Path, stats: dict[str, Any], also: list[Path] = ()) -> None:
        """Write the stage's marker: its stats and `files`, {path relative to the run: [size, xxh3-128]} of every
        file in its folder and in `also` (the shards, for the stage that wrote them), which resume checks
        (`damage`)."""
        files = {}
        for top in [folder, *also]:
            for p in sorted(top.rglob("*")):
                if p.is_file() and p != folder / STATS_FILE:
                    files[self.relative(p)] = [p.stat().st_size, digest(p)]
        atomic_write_text(folder / STATS_FILE, json.dumps({**stats, "files": files}, indent=2, sort_keys=True) + "\n")

    def damage(self, folder: Path, marker: dict[str, Any], checksums: bool) -> str | None:
        """What is wrong with the files a completed stage's marker vouches for (None: nothing): a file missing, of
        another size, a part the marker does not list, or (`checksums`) content other than recorded."""
        files = marker.get("files")
        if files is None:
            return "its marker lists no files (an older gpupipe wrote it), so nothing vouches for its outputs"
        for rel, (size, _) in sorted(files.items()):
            try:
                found = (self.root / rel).stat().st_size
            except FileNotFoundError:
                return f"{rel} is missing"
            if found != size:
                return f"{rel} is {found} bytes, its marker recorded {size}"
        extra = sorted({self.relative(p) for p in part_paths(folder)} - set(files))
        if extra:
            return f"{extra[0]} is not one of the parts its marker lists"
        if checksums:
            for rel, (_, recorded) in sorted(files.items()):
                if digest(self.root / rel) != recorded:
                    return f"{rel} is damaged (its checksum differs from the one its marker recorded)"
        return None

    def vanished(self) -> bool:
        """Whether the run directory was removed under the run (its RUN_MARKER is gone: a worker writing a part may
        have made the folder again). A folder made again by this run's own writes gets its marker back, so that the
        same command can take it and start afresh."""
        if (self.root / RUN_MARKER).is_file():
            return False
        with contextlib.suppress(OSError):
            if self.root.is_dir():
                (self.root / RUN_MARKER).write_text("a gpupipe run directory (made again after it was removed)\n")
        return True

    def check_lock(self, before: str) -> None:
        """Raise a RunFault unless this run still holds the run directory: the folder is there and its lock file is
        the one this run locked (a cleanup script that deletes it lets a second run in: the older run stops)."""
        if self.vanished():
            raise RunFault(f"the run directory {self.root} was removed while the run was writing it; it stopped "
                           f"before {before}: run the same command again to start it afresh")
        try:
            now = os.stat(self.lock_file)
        except FileNotFoundError:
            now = None
        mine = os.fstat(self._lock_fh.fileno())
        if now is None or (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
            holder = ""
            if now is not None:
                with contextlib.suppress(OSError):
                    holder = f"; pid {self.lock_file.read_text(encoding='utf-8').strip() or 'unknown'} holds it now"
            raise LockLost(f"the lock {self.lock_file} was {'removed' if now is None else 'replaced'} while this run "
                           f"held it{holder}: this run stopped before {before}, so that two runs never write one "
                           f"run directory; run the same command again once no other run uses it")

    def drop_stale(self, valid: set[str]) -> None:
        """Remove stage folders a previous run left that this run's stage list does not have."""
        for d in self.stages_root.iterdir():
            if d.is_dir() and d.name not in valid:
                shutil.rmtree(d)

    def write_json(self, name: str, data: Any) -> Path:
        path = self.root / name
        atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n")
        return path
