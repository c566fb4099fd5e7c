"""Common Crawl acquisition: a crawl's `warc.paths.gz` → the chosen WARC files in a folder.

Selection. `warc.paths.gz` lists every WARC file of the crawl as `crawl-data/CRAWL/segments/SEGMENT/warc/NAME`,
sorted. `segments` selects the first N distinct segments in that order (a Common Crawl segment holds several
hundred ~1 GB WARC files), and all of their files; `max_files` then keeps the first M of those. The same listing
always gives the same files. A file is saved under its own name (`NAME`, unique within a crawl) in the output
folder; the listing itself is saved there too (`warc.paths.gz`), so a re-run selects from the same list without
asking the server for it again. OUT may be a bucket (`s3://bucket/cc/`): each file is downloaded to a local staging
folder (io/storage.cache_root()/../fetch-cc/<hash of OUT>) and uploaded once whole; the object appears only when
its upload completed, so "complete" is again "there with the server's size".

Download of one file. A file under its real name is whole: it is written to `.NAME.part` and renamed once it has
the length the server announced. A file already there with the size the server reports (a HEAD request) is not
fetched again. A connection cut mid-file leaves the part; the next attempt asks for the rest with an HTTP Range
request and appends when the server answers 206 from that offset (a 200 means it ignored the range: the part is
started over). Failures (connection errors, timeouts, 5xx, 429) are retried with exponential backoff; an attempt
that added bytes resets the count, so a flaky but working connection always finishes. Other 4xx are not retried.
Each file's retries go to OUT/.fetch-cc.json (the ledger), and a `gpupipe run` that reads the file counts them in its
read stage's `fetch_retries`: the acquisition's share of the dashboards' retry count.
"""

from __future__ import annotations

import gzip
import http.client
import logging
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gpupipe.io import storage

log = logging.getLogger("gpupipe")

DEFAULT_BASE_URL = "https://data.commoncrawl.org/"
PATHS_FILE = "warc.paths.gz"
CHUNK = 1 << 20
USER_AGENT = "gpupipe-fetch-cc (+https://github.com/gpupipe)"
RETRY_STATUS = {408, 429, 500, 502, 503, 504}


class FetchError(RuntimeError):
    """A file could not be fetched (after retries), or the listing is unusable."""


@dataclass(frozen=True)
class FetchOptions:
    base_url: str = DEFAULT_BASE_URL
    concurrency: int = 4        # files downloaded at once
    retries: int = 5            # consecutive failed attempts per file before giving up
    backoff: float = 1.0        # seconds before the first retry; doubled each time, capped at 60 s
    timeout: float = 60.0       # socket timeout per request


@dataclass
class FetchSummary:
    selected: list[str]                           # names, in listing order
    fetched: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)   # already complete
    bytes_fetched: int = 0
    retries: int = 0
    resumed: int = 0                              # attempts that continued a part with a Range request
    file_retries: dict[str, int] = field(default_factory=dict)   # name → its retries (HEAD and download)


def _url(base: str, rel: str) -> str:
    return urllib.parse.urljoin(base if base.endswith("/") else base + "/", rel)


def select_paths(listing: list[str], segments: int, max_files: int | None = None) -> list[str]:
    """The WARC paths of the first `segments` segments (listing order), then the first `max_files` of them."""
    if segments < 1:
        raise ValueError(f"segments must be >= 1, got {segments}")
    chosen: list[str] = []
    seen: list[str] = []
    for rel in listing:
        parts = rel.split("/")
        try:
            seg = parts[parts.index("segments") + 1]
        except (ValueError, IndexError):
            raise FetchError(f"{PATHS_FILE}: not a Common Crawl WARC path (no segments/SEGMENT/): {rel!r}") from None
        if seg not in seen:
            if len(seen) == segments:
                break
            seen.append(seg)
        chosen.append(rel)
    return chosen[:max_files] if max_files is not None else chosen


class _StartOver(Exception):
    """The part file cannot be continued (it is longer than the file): it was removed, fetch again."""


def _transient(e: BaseException) -> bool:
    """Worth another attempt: the network's errors and the server's temporary ones, not a local disk's."""
    if isinstance(e, urllib.error.HTTPError):
        return e.code in RETRY_STATUS
    return isinstance(e, (_StartOver, urllib.error.URLError, http.client.HTTPException, ConnectionError,
                          socket.timeout, TimeoutError))


def _with_retries(what: str, opts: FetchOptions, attempt: Callable[[], None], counters: FetchSummary,
                  lock: threading.Lock) -> None:
    """Call attempt() until it returns; a transient error is retried with backoff. An error carrying
    `gpupipe_progressed = True` (the attempt added bytes before it failed) resets the failure count."""
    failures = 0
    while True:
        try:
            attempt()
            return
        except FetchError:
            raise
        except Exception as e:  # noqa: BLE001 - classified by _transient
            if not _transient(e):
                raise FetchError(f"{what}: {type(e).__name__}: {e}") from e
            failures = 0 if getattr(e, "gpupipe_progressed", False) else failures + 1
            if failures > opts.retries:
                raise FetchError(f"{what}: gave up after {opts.retries} retries: {type(e).__name__}: {e}") from e
            delay = min(60.0, opts.backoff * 2 ** max(failures - 1, 0))
            with lock:
                counters.retries += 1
                counters.file_retries[what] = counters.file_retries.get(what, 0) + 1
            log.warning("fetch-cc: %s: %s: %s; retrying in %.1f s", what, type(e).__name__, e, delay)
            time.sleep(delay)


def _open(url: str, opts: FetchOptions, method: str = "GET", start: int = 0):
    req = urllib.request.Request(url, method=method, headers={"User-Agent": USER_AGENT})
    if start:
        req.add_header("Range", f"bytes={start}-")
    return urllib.request.urlopen(req, timeout=opts.timeout)


def remote_size(url: str, opts: FetchOptions) -> int | None:
    """Content-Length from a HEAD request (None when the server does not say)."""
    with _open(url, opts, "HEAD") as resp:
        n = resp.headers.get("Content-Length")
    return int(n) if n is not None and n.isdigit() else None


def _download(url: str, dest: Path, opts: FetchOptions, counters: FetchSummary, lock: threading.Lock,
              on_bytes: Callable[[int], None]) -> int:
    """Fetch url into dest through dest's part file (module doc); returns the bytes transferred."""
    part = dest.with_name(f".{dest.name}.part")
    moved = 0

    def attempt() -> None:
        nonlocal moved
        have = part.stat().st_size if part.exists() else 0
        try:
            resp = _open(url, opts, start=have)
        except urllib.error.HTTPError as e:
            if e.code == 416 and have:   # the part holds the whole file already, or more: check by size
                total = remote_size(url, opts)
                if total == have:
                    os.replace(part, dest)
                    return
                part.unlink()
                raise _StartOver(f"part of {have} bytes, the file has {total}") from None
            raise
        with resp:
            if have and resp.status == 206:
                first, total = _content_range(resp.headers.get("Content-Range"))
                if first != have:
                    raise FetchError(f"{url}: asked for bytes from {have}, got a range from {first}")
                with lock:
                    counters.resumed += 1
            else:   # 200: the whole body (a server that ignores Range included)
                have = 0
                n = resp.headers.get("Content-Length")
                total = int(n) if n is not None and n.isdigit() else None
            with open(part, "ab" if have else "wb") as fh:
                done = have
                try:
                    while chunk := resp.read(CHUNK):
                        fh.write(chunk)
                        done += len(chunk)
                        moved += len(chunk)
                        on_bytes(len(chunk))
                except Exception as e:
                    e.gpupipe_progressed = done > have
                    raise
        if total is not None and done != total:
            err = http.client.IncompleteRead(b"", total - done)
            err.gpupipe_progressed = done > have
            raise err
        os.replace(part, dest)

    _with_retries(dest.name, opts, attempt, counters, lock)
    return moved


def _content_range(value: str | None) -> tuple[int, int | None]:
    """'bytes 100-199/200' → (100, 200); the total may be '*'."""
    try:
        unit, rest = value.split(" ", 1)
        span, total = rest.split("/")
        return int(span.split("-")[0]), (None if total == "*" else int(total))
    except (AttributeError, ValueError):
        raise FetchError(f"unreadable Content-Range {value!r}") from None


def read_listing(crawl: str, out: str, staging: Path, opts: FetchOptions, counters: FetchSummary,
                 lock: threading.Lock) -> list[str]:
    """The crawl's WARC paths, from OUT/warc.paths.gz, fetched once (atomically) when absent."""
    saved = storage.join(out, PATHS_FILE)
    if not storage.isfile(saved):
        url = _url(opts.base_url, f"crawl-data/{crawl}/{PATHS_FILE}")
        try:
            _download(url, staging / PATHS_FILE, opts, counters, lock, lambda n: None)
        except FetchError as e:
            raise FetchError(f"cannot read the listing of crawl {crawl} ({url}): {e}") from None
        _commit(staging / PATHS_FILE, saved)
    try:
        return [line.strip() for line in gzip.decompress(storage.read_bytes(saved)).decode("utf-8").splitlines()
                if line.strip()]
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise FetchError(f"{saved}: not a gzip list of paths ({e}); delete it to fetch it again") from None


def _commit(local: Path, dest: str) -> None:
    """A whole downloaded file to its place in OUT: already there for a local OUT; uploaded (the object appears
    once complete), then removed from the staging folder, for OUT at a URL."""
    if storage.is_url(dest):
        storage.put_file(local, dest)
        local.unlink()


def staging_dir(out: str) -> Path:
    """Where downloads are written before they are whole: OUT itself, or for OUT at a URL a local folder named for
    it (so a cut download resumes there on the next run)."""
    if not storage.is_url(out):
        return Path(out)
    import hashlib

    return Path(storage.cache_root()).parent / "fetch-cc" / hashlib.sha256(out.rstrip("/").encode()).hexdigest()[:16]


def fetch_crawl(crawl: str, segments: int, out: str | os.PathLike, opts: FetchOptions = FetchOptions(),
                max_files: int | None = None, on_file: Callable[[str, str], None] = lambda name, what: None,
                on_bytes: Callable[[int], None] = lambda n: None,
                on_plan: Callable[[list[str], int | None], None] = lambda names, total: None) -> FetchSummary:
    """Fetch the selected WARC files of `crawl` into folder `out`; see the module doc.

    Callbacks (progress): on_plan(names, total bytes or None) once the selection is known, on_bytes(n) per chunk,
    on_file(name, "fetched" | "skipped") when a file is done. Raises FetchError naming every file that failed."""
    if not crawl or "/" in crawl:
        raise ValueError(f"not a crawl name: {crawl!r} (e.g. CC-MAIN-2024-51)")
    for what, v in (("segments", segments), ("max_files", max_files), ("concurrency", opts.concurrency)):
        if v is not None and v < 1:
            raise ValueError(f"{what} must be >= 1, got {v}")
    if opts.retries < 0 or opts.backoff < 0 or opts.timeout <= 0:
        raise ValueError("retries and backoff must be >= 0, timeout > 0")
    out = os.fspath(out)
    staging = staging_dir(out)
    staging.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    summary = FetchSummary(selected=[])
    chosen = select_paths(read_listing(crawl, out, staging, opts, summary, lock), segments, max_files)
    summary.selected = [rel.rsplit("/", 1)[-1] for rel in chosen]
    if len(set(summary.selected)) != len(chosen):
        raise FetchError(f"{PATHS_FILE}: two selected paths share a file name")

    def one(rel: str) -> tuple[str, str, int]:
        name = rel.rsplit("/", 1)[-1]
        dest, url = storage.join(out, name), _url(opts.base_url, rel)
        size = [None]

        def head() -> None:
            size[0] = remote_size(url, opts)

        _with_retries(name, opts, head, summary, lock)
        if size[0] is not None and storage.isfile(dest) and storage.size(dest) == size[0]:
            on_file(name, "skipped")
            return name, "skipped", 0
        n = _download(url, staging / name, opts, summary, lock, on_bytes)
        _commit(staging / name, dest)
        on_file(name, "fetched")
        return name, "fetched", n

    on_plan(summary.selected, None)
    failed = []
    with ThreadPoolExecutor(max_workers=opts.concurrency) as pool:
        futures = [pool.submit(one, rel) for rel in chosen]
        for fut in futures:   # listing order
            try:
                name, what, n = fut.result()
            except FetchError as e:
                failed.append(str(e))
                continue
            (summary.fetched if what == "fetched" else summary.skipped).append(name)
            summary.bytes_fetched += n
    write_ledger(out, summary, crawl)
    if failed:
        raise FetchError(f"{len(failed)} of {len(chosen)} files failed (the others are complete; run again to "
                         f"retry):\n" + "\n".join(failed))
    return summary


# -- the ledger: what each file's download cost, for the runs that read the files -----------------------------------

LEDGER_FILE = ".fetch-cc.json"   # in OUT; hidden, so a folder input never reads it as data


def read_ledger(out: str) -> dict:
    """OUT's ledger, {"crawl", "files": {name: {"retries", "complete", "fetched_at"}}}; {} when none or unreadable."""
    import json

    path = storage.join(out, LEDGER_FILE)
    try:
        ledger = json.loads(storage.read_text(path)) if storage.isfile(path) else {}
    except (OSError, ValueError):
        return {}
    return ledger if isinstance(ledger, dict) and isinstance(ledger.get("files", {}), dict) else {}


def write_ledger(out: str, summary: FetchSummary, crawl: str) -> None:
    """Each file's download retries into OUT's ledger: a file fetched now gets the retries of every attempt since
    its last complete download (earlier invocations that failed included); a file skipped as complete keeps its
    entry. `gpupipe run` adds the retries of the files it reads to its read stage's stats (`fetch_retries`)."""
    import datetime
    import json

    ledger = read_ledger(out)
    files = ledger.setdefault("files", {})
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    fetched = set(summary.fetched)
    for name in [n for n in summary.selected if n in fetched or n in summary.file_retries]:
        if name in summary.skipped:
            continue
        old = files.get(name) or {}
        pending = 0 if old.get("complete") else int(old.get("retries", 0))
        entry = {"retries": pending + summary.file_retries.get(name, 0), "complete": name in fetched}
        if name in fetched:
            entry["fetched_at"] = now
        files[name] = entry
    ledger["crawl"] = crawl
    text = json.dumps(ledger, indent=1, sort_keys=True) + "\n"
    if storage.is_url(out):
        storage.write_bytes(storage.join(out, LEDGER_FILE), text.encode())
    else:
        from gpupipe.io.parts import atomic_write_text

        atomic_write_text(Path(out) / LEDGER_FILE, text)


def fetch_retries(files: list[str]) -> int:
    """The retries `gpupipe fetch-cc` made downloading these files (complete downloads in their folders'
    ledgers); 0 for files it did not fetch."""
    ledgers: dict[str, dict] = {}
    total = 0
    for f in files:
        f = os.fspath(f)
        folder, name = (f.rstrip("/").rsplit("/", 1) if storage.is_url(f) else os.path.split(f))
        if folder not in ledgers:
            ledgers[folder] = read_ledger(folder or ".")
        entry = ledgers[folder].get("files", {}).get(name) or {}
        if entry.get("complete") and isinstance(entry.get("retries"), int):
            total += entry["retries"]
    return total
