"""Keep numba's on-disk cache consistent with the whole source tree, not file by file.

numba keys a cached function by its own file's timestamp and size only, but the machine code it stores includes
every helper the function calls or inlines from other modules (`kernels/_mersenne.py`, the UTF-8 decoder in
`kernels/minhash.py`, ...). After an edit or a `git pull` that changes only a helper's file, numba would load the
old code for its callers, silently. So the cache is stamped with a digest of all of gpupipe's Python sources and
dropped when that digest changes, wherever numba keeps it (beside the sources, or under NUMBA_CACHE_DIR). Costs a
few milliseconds per import; never raises (a read-only install just keeps numba's own behaviour).

Without NUMBA_CACHE_DIR the kernels are cached in a folder of the user's cache named by the digest and numba's
version instead (install_locator, digest_folder): never stale, and shared by every clone and venv of the same
sources, so a second fresh checkout skips compiling (numba's own locations depend on the checkout's path).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
from pathlib import Path

_STAMP = "gpupipe-sources.sha256"
_KEEP = 4  # digest folders kept under the user's cache folder (the most recently used)
# ... and any used in the last day: another checkout or venv (a CI clone beside an edited one) may be compiling into
# it right now; removing it under that process makes its numba fail to save (FileNotFoundError)
_IN_USE_S = 24 * 3600


def _roots() -> list[Path]:
    here = Path(__file__).resolve().parent
    checkout_kernels = here.parent / "kernels"  # an editable checkout; in a wheel they are gpupipe/kernels
    return [here, checkout_kernels] if not (here / "kernels").is_dir() and checkout_kernels.is_dir() else [here]


def sources_digest(roots: list[Path]) -> str:
    h = hashlib.sha256()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _cache_folders(roots: list[Path], cache_dir: str) -> list[Path]:
    """Where numba keeps the cache of every source folder under the roots: `__pycache__` beside the sources, or
    with NUMBA_CACHE_DIR one folder per source folder named as numba's UserProvidedCacheLocator names it
    (the folder's name, "_", sha1 of its absolute path), so other projects' caches there are left alone."""
    folders = sorted({p.parent for root in roots for p in root.rglob("*.py")})
    if not cache_dir:
        return [f / "__pycache__" for f in folders]
    base = Path(os.path.abspath(cache_dir))
    return [base / f"{f.name}_{hashlib.sha1(os.path.abspath(f).encode()).hexdigest()}" for f in folders]


def drop_stale_cache(roots: list[Path] | None = None, cache_dir: str | None = None) -> bool:
    """Delete numba's cache files of gpupipe's sources when the sources changed since they were written; True if
    so. `cache_dir`: numba's NUMBA_CACHE_DIR (default: the environment's); each cache location has its own stamp."""
    try:
        roots = _roots() if roots is None else roots
        cache_dir = os.environ.get("NUMBA_CACHE_DIR", "") if cache_dir is None else cache_dir
        digest = sources_digest(roots)
        where = hashlib.sha1(str(roots[0].resolve()).encode()).hexdigest()[:12]
        stamp = (Path(cache_dir) / f"{where}-{_STAMP}") if cache_dir else roots[0] / "__pycache__" / _STAMP
        if stamp.is_file() and stamp.read_text().strip() == digest:
            return False
        for folder in _cache_folders(roots, cache_dir):
            for f in folder.glob("*.nb[ic]"):
                f.unlink(missing_ok=True)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        tmp = stamp.with_name(f"{stamp.name}.{os.getpid()}")
        tmp.write_text(digest)
        os.replace(tmp, stamp)
        return True
    except OSError:
        return False


def user_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpupipe" / "numba"


@functools.cache
def digest_folder() -> Path:
    """Where the kernels' cache lives unless NUMBA_CACHE_DIR is set: a folder of the user's cache named by numba's
    version and the digest of gpupipe's sources, so that a fresh clone or venv of the same sources loads what
    another compiled (numba keeps its cache beside the sources, or under a name made of their path). numba's index
    keys each entry by the CPU as well; the digest covers the helpers a kernel inlines from other files."""
    import numba

    return user_cache_root() / f"numba{numba.__version__}-{sources_digest(_roots())[:20]}"


def _prune(folder: Path) -> None:
    """Keep the _KEEP most recently used digest folders beside `folder` (other versions of the sources), and every
    one used within _IN_USE_S."""
    import time

    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.utime(folder)
        others = sorted((p for p in folder.parent.iterdir() if p.is_dir() and p != folder),
                        key=lambda p: p.stat().st_mtime, reverse=True)
        for old in others[_KEEP - 1:]:
            if time.time() - old.stat().st_mtime > _IN_USE_S:
                shutil.rmtree(old, ignore_errors=True)
    except OSError:
        pass


def install_locator() -> None:
    """Make numba cache gpupipe's kernels in digest_folder() (once per process; not with NUMBA_CACHE_DIR, which
    keeps numba's own behaviour, nor where that folder is not writable: numba's own locations then)."""
    from numba.core import caching, config

    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    base = getattr(caching, "_CacheLocator", None)
    mixin = getattr(caching, "_SourceFileBackedLocatorMixin", None)
    if config.CACHE_DIR or None in (impl, base, mixin) or getattr(impl, "_gpupipe_locator", False):
        return  # another numba's internals: its own locations
    impl._gpupipe_locator = True
    roots = tuple(str(r) + os.sep for r in _roots())
    _prune(digest_folder())

    class DigestLocator(mixin, base):
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = str(digest_folder() / Path(py_file).parent.name)

        def get_cache_path(self):
            return self._cache_path

        @classmethod
        def from_function(cls, py_func, py_file):
            if not os.path.abspath(py_file).startswith(roots):
                return None
            return super().from_function(py_func, py_file)

    impl._locator_classes.insert(0, DigestLocator)


_COMPILED = {"seconds": 0.0, "depth": 0, "t0": 0.0, "listening": False}


def compile_seconds() -> float:
    """Seconds numba has spent compiling (not loading from its cache) in this process since the first call.

    numba broadcasts a "numba:compile" event around each compilation it cannot load from its cache; a kernel's
    callees compile inside it, so only the outermost event of a nest is timed. Compilation holds numba's global
    compiler lock, so the events of two threads never interleave. Take the difference of two calls."""
    if not _COMPILED["listening"]:
        import time

        from numba.core import event

        class Listener(event.Listener):
            def on_start(self, ev) -> None:
                if _COMPILED["depth"] == 0:
                    _COMPILED["t0"] = time.perf_counter()
                _COMPILED["depth"] += 1

            def on_end(self, ev) -> None:
                _COMPILED["depth"] -= 1
                if _COMPILED["depth"] == 0:
                    _COMPILED["seconds"] += time.perf_counter() - _COMPILED["t0"]

        event.register("numba:compile", Listener())
        _COMPILED["listening"] = True
    return _COMPILED["seconds"]


def skip_numba_extensions() -> None:
    """For a process gpupipe owns (`gpupipe run` / `warmup`, a pool worker, a Dask worker with gpupipe's plugin):
    numba imports every installed `numba_extensions` entry point at its first compile or cache load. The one that
    comes with gpupipe's dependencies, awkward's (via gigatoken), costs ~0.35 CPU-s in every process, and no gpupipe
    kernel uses an extension, so they are marked loaded. Not done on import: a notebook that imports gpupipe keeps
    numba's behaviour. numba.core.entrypoints._already_initialized is private: where numba renames it, the
    extensions load as before and nothing else changes."""
    try:
        from numba.core import entrypoints
    except ImportError:
        return
    entrypoints._already_initialized = True
