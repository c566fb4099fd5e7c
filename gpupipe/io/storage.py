"""Paths and URLs: the one place gpupipe touches storage that may not be a local disk.

A *location* is a local path or an fsspec URL (`s3://bucket/key`, `gs://`, `abfs://`, `webhdfs://namenode:9870/`
and `hdfs://` (which needs a JVM and libhdfs: `hdfs_unavailable`), `https://` for reading, ...). Local paths take
the plain `os`/`open` calls they always took (same speed, same semantics: rename is atomic); a URL goes through its
fsspec filesystem. Nothing else in gpupipe imports fsspec.

Credentials and endpoint come from each library's standard environment (for S3: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_PROFILE, ...) or from `storage.options` in the run config, a mapping
protocol → keyword arguments of that filesystem (s3fs: `endpoint_url`, `key`, `secret`, `anon`, ...), installed in
every process that opens a URL by `configure` (the Dask executor does it on each worker).

Whole files only. Object stores have no rename, so "a file under its real name is whole" is kept differently: an
object written by `put_file` / `write_bytes` appears only once its upload completed (a multipart upload becomes
visible when it is completed), and a folder that must be read as a unit (a stage's parts, a shard directory) is
committed by writing its marker last (`stats.json`, `manifest.json`): whatever is listed without its marker is
not treated as complete (see docs/design.md, "Object storage").

Storage that does not answer (a server down, a refused connection): every call on a URL is tried `TRIES` times,
waiting `BACKOFF` seconds and twice as long each time after (on top of the client's own retries, s3fs/botocore's),
then raises StorageUnreachable, one line naming the URL. Each retry is counted in the stats of the task or run that
made the call (gpupipe/retries.py: a stage's `extra.storage_retries`).

Reads of large inputs are streamed: `open_input` returns a seekable file that fetches ranges as it is read
(fsspec's read-ahead cache of `READ_BLOCK` bytes), so a 1 GB WARC file is never downloaded whole first.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import threading
import time
from typing import IO, Any, Callable
from urllib.parse import urlsplit

from gpupipe import retries

_SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]+")   # two letters at least: not a Windows drive
READ_BLOCK = 8 << 20   # bytes per ranged read of a streamed input
_READ_ONLY = ("http", "https")
_NO_LISTINGS_CACHE = ("s3", "s3a", "gs", "gcs", "abfs", "az", "adl", "http", "https")

_lock = threading.Lock()
_options: dict[str, dict[str, Any]] = {}   # protocol → filesystem kwargs, from `configure`


def is_url(location: Any) -> bool:
    """True for `scheme://...` other than file://; a local path (str or PathLike) is not a URL."""
    if not isinstance(location, str):
        return False
    head, sep, _ = location.partition("://")
    return bool(sep) and _SCHEME.fullmatch(head) is not None and head != "file"


def protocol(location: str) -> str:
    return location.partition("://")[0] if is_url(location) else "file"


def configure(options: dict[str, dict[str, Any]] | None) -> None:
    """Install per-protocol filesystem options for this process (replacing earlier ones). Filesystems created
    afterwards use them; fsspec caches instances by their arguments, so changed options give new instances."""
    with _lock:
        _options.clear()
        _options.update({k: dict(v) for k, v in (options or {}).items()})


def current_options() -> dict[str, dict[str, Any]]:
    with _lock:
        return {k: dict(v) for k, v in _options.items()}


TRIES, BACKOFF = 3, 1.0   # attempts per call on a URL whose server does not answer; seconds before the 2nd (doubled)
# Connection failures by class name (botocore, aiohttp, urllib3, fsspec), so that no cloud library is imported here.
_UNREACHABLE = {"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
                "ClientConnectorError", "ClientOSError", "ServerDisconnectedError", "ServerTimeoutError",
                "NewConnectionError", "FSTimeoutError"}


class StorageUnreachable(OSError):
    """A URL's server did not answer after `TRIES` attempts with backoff: the message names the URL and why."""

    def __init__(self, message: str):   # one argument: it crosses process boundaries (pickled) intact
        super().__init__(message)

    def __str__(self) -> str:
        return self.args[0]


def unreachable(e: BaseException | None) -> bool:
    """Whether `e` (or an exception it was raised from) is a failure to reach a server, not an answer from it."""
    for _ in range(8):   # the __cause__/__context__ chain, bounded
        if e is None:
            return False
        if isinstance(e, (ConnectionError, StorageUnreachable)) or _UNREACHABLE & {c.__name__ for c in type(e).__mro__}:
            return True
        e = e.__cause__ or e.__context__
    return False


def _retried(fn: Callable) -> Callable:
    """`fn` on a URL (its first URL argument) tried TRIES times while its server cannot be reached."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        url = next((a for a in args if is_url(a)), None)
        if url is None:
            return fn(*args, **kwargs)
        for attempt in range(TRIES):
            try:
                return fn(*args, **kwargs)
            except StorageUnreachable:
                raise
            except Exception as e:
                if not unreachable(e):
                    raise
                if attempt == TRIES - 1:
                    why = (str(e).strip().splitlines() or [""])[0]
                    raise StorageUnreachable(f"{url}: the storage cannot be reached ({type(e).__name__}: {why}; "
                                             f"{TRIES} tries)") from e
                retries.record("storage")   # into the stats of the task (or run) doing this call
                time.sleep(BACKOFF * 2 ** attempt)
    return call


class StorageUnavailable(ValueError):
    """A URL whose filesystem is not installed (s3fs for s3://: the [cloud] extra). The command line prints its
    message as one `error:` line (exit 2): it says what to install."""


_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "http": "aiohttp", "https": "aiohttp", "gs": "gcsfs", "gcs": "gcsfs",
             "abfs": "adlfs", "az": "adlfs", "adl": "adlfs", "webhdfs": "requests"}
_CLOUD = ("s3", "s3a", "http", "https", "webhdfs")   # what the [cloud] extra brings (s3fs, which brings aiohttp)


def _unavailable(url: str, error: ImportError | None = None) -> StorageUnavailable:
    """One line: which package is missing and the command that installs it (error: None when fsspec is)."""
    proto = protocol(url)
    package = "fsspec" if error is None else _PACKAGES.get(proto)
    if package is None:   # a protocol of fsspec's that we know no package for: fsspec's message names it
        return StorageUnavailable(f"{url}: the {proto}:// filesystem is not installed ({error})")
    fix = "pip install 'gpupipe[cloud]'" if error is None or proto in _CLOUD else f"pip install {package}"
    return StorageUnavailable(f"{url}: {proto}:// URLs need {package}, which is not installed: {fix}")


def _fsspec(url: str):
    try:
        import fsspec
    except ImportError:  # fsspec comes with dask; its protocol packages (s3fs, gcsfs, ...) are the [cloud] extra
        raise _unavailable(url) from None
    return fsspec


def require(location) -> None:
    """Fail now, before any work, when `location` is a URL whose filesystem package is missing (StorageUnavailable,
    naming what to install). Local paths pass, and so do protocols fsspec does not know: whoever opens them says
    what is wrong."""
    if not is_url(location):
        return
    try:
        _fsspec(location).get_filesystem_class(protocol(location))
    except ImportError as e:
        raise _unavailable(location, e) from None
    except ValueError:   # "Protocol not known"
        pass
    if protocol(location) == "hdfs":
        filesystem(location)   # starts libhdfs's JVM: no JVM is one line now, not a failure mid-run


def filesystem(url: str):
    """(fsspec filesystem, path inside it) of a URL."""
    fsspec = _fsspec(url)
    proto = protocol(url)
    with _lock:
        opts = dict(_options.get(proto, {}))
    if proto in _NO_LISTINGS_CACHE:
        # fsspec caches directory listings for the life of the instance: a run lists a folder, writes into it and
        # lists it again (as do workers reading what others wrote), so a cached listing would be wrong
        opts.setdefault("use_listings_cache", False)
    try:
        return fsspec.core.url_to_fs(url, **opts)
    except ImportError as e:
        raise _unavailable(url, e) from None
    except OSError as e:
        if proto == "hdfs":   # pyarrow's HadoopFileSystem: a JVM and libhdfs, loaded when the filesystem is made
            raise StorageUnavailable(hdfs_unavailable(url, e)) from None
        raise


def hdfs_unavailable(url: str, e: BaseException) -> str:
    """hdfs:// goes through pyarrow's HadoopFileSystem (libhdfs over JNI): one line saying what it needs."""
    first = (str(e).strip().splitlines() or [""])[0]
    return (f"{url}: hdfs:// URLs go through pyarrow's HadoopFileSystem, which needs a Java runtime (JAVA_HOME), "
            f"Hadoop's libhdfs (HADOOP_HOME or ARROW_LIBHDFS_DIR) and the Hadoop jars on CLASSPATH "
            f"(`hadoop classpath --glob`), and could not start here ({first}); without a JVM, use the NameNode's "
            f"WebHDFS REST API: webhdfs://NAMENODE:9870/path (pure Python)")


def _url(fs, path: str, like: str) -> str:
    """A path inside fs back as a URL like `like` (fsspec's listings drop the protocol, and for a filesystem whose
    paths have no host, webhdfs:// and hdfs://, the host:port too)."""
    url = fs.unstrip_protocol(path)
    netloc = urlsplit(like).netloc
    if netloc and not urlsplit(url).netloc:
        return f"{protocol(like)}://{netloc}/{path.lstrip('/')}"
    return url


def join(base: str | os.PathLike, *names: str) -> str:
    if is_url(base):
        return "/".join([base.rstrip("/"), *names])
    return os.path.join(base, *names)


def basename(location: str | os.PathLike) -> str:
    return location.rstrip("/").rsplit("/", 1)[-1] if is_url(location) else os.path.basename(location)


# -- queries --------------------------------------------------------------------------------------------------------
def _http_info(location: str) -> dict | None:
    """fsspec's http exists/isfile send a GET (a download the server starts); a HEAD (`info`) says as much."""
    fs, path = filesystem(location)
    try:
        return fs.info(path)
    except FileNotFoundError as e:
        if unreachable(e.__cause__):   # fsspec's http says "not found" for a server that does not answer too
            raise
        return None


@_retried
def exists(location) -> bool:
    if not is_url(location):
        return os.path.exists(location)
    if protocol(location) in ("http", "https"):
        return _http_info(location) is not None
    fs, path = filesystem(location)
    return fs.exists(path)


@_retried
def isdir(location) -> bool:
    if not is_url(location):
        return os.path.isdir(location)
    fs, path = filesystem(location)
    return fs.isdir(path)


@_retried
def isfile(location) -> bool:
    if not is_url(location):
        return os.path.isfile(location)
    if protocol(location) in ("http", "https"):
        return (_http_info(location) or {}).get("type") == "file"
    fs, path = filesystem(location)
    return fs.isfile(path)


@_retried
def size(location) -> int:
    if not is_url(location):
        return os.path.getsize(location)
    fs, path = filesystem(location)
    return int(fs.size(path))


@_retried
def identity(location) -> list[Any]:
    """What changes whenever the file is rewritten. Local: size, mtime, ctime, inode (see run/rundir.py). URL:
    size and the store's version of the object (ETag, else its modification time)."""
    if not is_url(location):
        st = os.stat(location)
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    fs, path = filesystem(location)
    info = fs.info(path)
    version = next((str(info[k]) for k in ("ETag", "etag", "VersionId", "LastModified", "mtime", "last_modified",
                                           "modificationTime")
                    if info.get(k)), "")
    return [int(info.get("size") or 0), version]


@_retried
def glob(pattern: str) -> list[str]:
    """Sorted matches of a glob pattern (URLs come back as URLs)."""
    if not is_url(pattern):
        import glob as _glob

        return sorted(_glob.glob(pattern))
    fs, path = filesystem(pattern)
    return sorted(_url(fs, p, pattern) for p in fs.glob(path))


@_retried
def listdir(location) -> list[str]:
    """Names (not paths) of a folder's entries; [] when it does not exist."""
    if not is_url(location):
        return sorted(os.listdir(location)) if os.path.isdir(location) else []
    fs, path = filesystem(location)
    try:
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False, refresh=True)
                      if p.rstrip("/") != path.rstrip("/"))
    except FileNotFoundError:
        return []


@_retried
def find(location) -> list[str]:
    """Every file under a folder, as paths relative to it, sorted; [] when it does not exist."""
    if not is_url(location):
        out = []
        for dirpath, _, files in os.walk(location):
            out += [os.path.relpath(os.path.join(dirpath, f), location).replace(os.sep, "/") for f in files]
        return sorted(out)
    fs, path = filesystem(location)
    root = path.rstrip("/") + "/"
    fs.invalidate_cache(path)
    return sorted(p[len(root):] for p in fs.find(path) if p.startswith(root))


# -- reading --------------------------------------------------------------------------------------------------------
@_retried
def open_input(location, block_size: int = READ_BLOCK) -> IO[bytes]:
    """A seekable binary file. A URL is streamed: ranges of `block_size` bytes are fetched as it is read."""
    if not is_url(location):
        return open(location, "rb")
    fs, path = filesystem(location)
    return fs.open(path, "rb", block_size=block_size, cache_type="readahead")



def sha256(location) -> str:
    """sha256 hex digest of a file's bytes (a local path or a URL), read in 4 MiB blocks."""
    import hashlib

    h = hashlib.sha256()
    with open_input(location) as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()

def file_size(f) -> int:
    """The size of an open file from open_input (local or streamed)."""
    if hasattr(f, "fileno"):
        try:
            return os.fstat(f.fileno()).st_size
        except (OSError, ValueError, NotImplementedError):  # io.UnsupportedOperation is both
            pass
    return int(f.size)


@_retried
def read_bytes(location, start: int | None = None, end: int | None = None) -> bytes:
    """The whole file, or bytes [start, end) by one ranged request."""
    if not is_url(location):
        with open(location, "rb") as f:
            if start is None:
                return f.read()
            f.seek(start)
            return f.read(None if end is None else end - start)
    fs, path = filesystem(location)
    return fs.cat_file(path, start=start, end=end)


def read_text(location) -> str:
    return read_bytes(location).decode("utf-8")


# -- writing (whole files only) -------------------------------------------------------------------------------------
def _writable(location: str) -> None:
    if protocol(location) in _READ_ONLY:
        raise ValueError(f"{location}: http(s) URLs can be read, not written")


@_retried
def put_file(local: str | os.PathLike, location: str) -> None:
    """Copy a local file to `location`; the object appears only once the upload is complete."""
    if not is_url(location):
        from gpupipe.io.parts import atomic_output

        with atomic_output(location) as tmp:
            shutil.copyfile(local, tmp)
        return
    _writable(location)
    fs, path = filesystem(location)
    _replace(fs, path, lambda tmp: fs.put_file(os.fspath(local), tmp))


@_retried
def write_bytes(location: str, data: bytes) -> None:
    if not is_url(location):
        from gpupipe.io.parts import atomic_output

        with atomic_output(location) as tmp:
            tmp.write_bytes(data)
        return
    _writable(location)
    fs, path = filesystem(location)
    _replace(fs, path, lambda tmp: fs.pipe_file(tmp, data))


_RENAMED = ("webhdfs", "hdfs")   # file systems whose files appear when created (HDFS): written aside, then renamed


def _replace(fs, path: str, write: Callable[[str], None]) -> None:
    """write(path) for an object store (an object appears whole, once uploaded). HDFS shows a file from its CREATE
    on, growing as the client appends: it is written under a temporary name beside `path` and renamed, and HDFS's
    rename is atomic but does not replace, so a file already there is removed first (a reader then sees no file,
    never part of one)."""
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if not set(protocols) & set(_RENAMED):
        write(path)
        return
    import uuid

    parent, _, name = path.rstrip("/").rpartition("/")
    tmp = f"{parent}/.{name}.tmp.{uuid.uuid4().hex}"
    try:
        write(tmp)
        if fs.exists(path):
            fs.rm(path)
        fs.mv(tmp, path)
    except BaseException:
        try:
            fs.rm(tmp)
        except Exception:   # the write's own error is the one to see
            pass
        raise


@_retried
def get_file(location: str, local: str | os.PathLike) -> None:
    """Copy `location` to a local path, atomically (a temp name beside it, then rename)."""
    from gpupipe.io.parts import atomic_output

    with atomic_output(local) as tmp:
        if is_url(location):
            fs, path = filesystem(location)
            fs.get_file(path, os.fspath(tmp))
        else:
            shutil.copyfile(location, tmp)


@_retried
def remove(location: str, recursive: bool = False) -> None:
    """Delete a file (or a folder with recursive); nothing there is not an error."""
    if not is_url(location):
        if recursive:
            shutil.rmtree(location, ignore_errors=True)
        elif os.path.lexists(location):
            os.unlink(location)
        return
    fs, path = filesystem(location)
    try:
        fs.rm(path, recursive=recursive)
    except FileNotFoundError:
        pass
    fs.invalidate_cache(path)


# -- files a config names (models, tokenizer, index) ----------------------------------------------------------------
def cache_root() -> str:
    """Where local copies of referenced files live: $GPUPIPE_WORK_DIR/files, else ~/.cache/gpupipe/files."""
    base = os.environ.get("GPUPIPE_WORK_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "gpupipe", "runs")
    return os.path.join(base, "files")


def local_copy(location: str) -> str:
    """A local path holding the file (or folder) at `location`: a URL is downloaded once per version of the object
    (its URL and identity name the copy, so a replaced object gets a new copy), a local path is returned as is.
    Models and indexes are read whole and often, by libraries that take paths; so they are copied, not streamed."""
    if not is_url(location):
        return location
    import hashlib
    import json

    folder = isdir(location)
    ident = [[rel, *identity(join(location, rel))] for rel in find(location)] if folder else identity(location)
    key = hashlib.sha256(json.dumps([location.rstrip("/"), ident]).encode()).hexdigest()[:20]
    dest = os.path.join(cache_root(), key, basename(location) or "file")
    done = os.path.join(cache_root(), key, ".complete")   # written last: the copy is whole
    if not os.path.exists(done):
        if folder:
            for rel, *_ in ident:
                get_file(join(location, rel), os.path.join(dest, rel))
        else:
            get_file(location, dest)
        with open(done, "w", encoding="utf-8") as f:
            f.write(location + "\n")
    return dest
