"""The numba cache is dropped when any gpupipe source changes (numba itself only looks at each function's file)."""

from gpupipe._numba_cache import _roots, drop_stale_cache


def test_cache_dropped_when_any_source_changes(tmp_path):
    pkg, helpers = tmp_path / "pkg", tmp_path / "kernels"
    for d in (pkg, helpers):
        (d / "__pycache__").mkdir(parents=True)
        (d / "mod.py").write_text("x = 1\n")
    cached = [pkg / "__pycache__" / "mod.f-1.py311.nbi", helpers / "__pycache__" / "mod.f-1.py311.1.nbc"]
    other = pkg / "__pycache__" / "mod.cpython-311.pyc"
    for f in (*cached, other):
        f.write_bytes(b"old")
    assert drop_stale_cache([pkg, helpers], "") is True      # no stamp yet: unknown provenance, dropped
    assert not any(f.exists() for f in cached) and other.exists()
    for f in cached:
        f.write_bytes(b"fresh")
    assert drop_stale_cache([pkg, helpers], "") is False     # same sources: kept
    assert all(f.exists() for f in cached)
    (helpers / "mod.py").write_text("x = 2\n")               # only a helper's file changed
    assert drop_stale_cache([pkg, helpers], "") is True
    assert not any(f.exists() for f in cached)


def test_cache_under_numba_cache_dir_dropped_too(tmp_path):
    """With NUMBA_CACHE_DIR numba keeps the cache in one folder per source folder there; those of gpupipe's
    sources are dropped on a change, another project's are not."""
    import hashlib
    import os

    import numba
    from numba.core.caching import _CacheLocator

    src, cache = tmp_path / "src" / "kernels", tmp_path / "cache"
    src.mkdir(parents=True)
    (src / "k.py").write_text("x = 1\n")
    mine = cache / _CacheLocator.get_suitable_cache_subpath(str(src / "k.py"))
    assert mine.name == f"kernels_{hashlib.sha1(os.path.abspath(src).encode()).hexdigest()}"
    theirs = cache / "other_0123"
    for d in (mine, theirs):
        d.mkdir(parents=True)
        (d / "k.f-1.py311.nbi").write_bytes(b"old")
    assert drop_stale_cache([src], str(cache)) is True
    assert not (mine / "k.f-1.py311.nbi").exists() and (theirs / "k.f-1.py311.nbi").exists()
    (mine / "k.f-1.py311.nbi").write_bytes(b"fresh")
    assert drop_stale_cache([src], str(cache)) is False and (mine / "k.f-1.py311.nbi").exists()
    (src / "k.py").write_text("x = 2\n")
    assert drop_stale_cache([src], str(cache)) is True and not (mine / "k.f-1.py311.nbi").exists()
    assert numba.config.CACHE_DIR == os.environ.get("NUMBA_CACHE_DIR", "")


def test_roots_cover_the_kernels():
    names = {p.name for p in _roots()}
    assert "gpupipe" in names
    assert any((p / "minhash.py").is_file() or (p / "kernels" / "minhash.py").is_file() for p in _roots())


def test_kernel_called_with_constants_compiles_once():
    """gpupipe.kernels._jit.njit: a kernel called from another with literal constants (`f(x, 0)`, `n = 0` passed
    on) compiles for int64 only, not once more per constant (a full compile of it and its callees each time)."""
    import numpy as np

    from gpupipe.kernels._jit import njit

    @njit(cache=False)
    def add(a, n, flag):
        return a[0] + n if flag else a[0]

    @njit(cache=False)
    def caller(a):
        n = 0
        return add(a, 3, True) + add(a, n, False) + add(a, a.shape[0], a[0] > 0)

    assert caller(np.arange(1, 5)) == 4 + 1 + 5
    assert [str(t) for t in add.signatures[0]][1:] == ["int64", "bool"] and len(add.signatures) == 1


def test_warm_up_groups_share_out_the_kernel_stations():
    from gpupipe.warmup import _COMPILE_COST, _full_stages, _groups

    stages = _full_stages("index.parquet")
    names = [next(iter(s)) for s in stages]
    groups = [[next(iter(s)) for s in g] for g in _groups(stages, 2)]
    assert len(groups) == 2
    for g in groups:  # each in the pipeline's order, with every station that has no kernel
        assert g == [n for n in names if n in g] and {n for n in names if n not in _COMPILE_COST} <= set(g)
    heavy = [n for g in groups for n in g if n in _COMPILE_COST]
    assert sorted(heavy) == sorted(n for n in names if n in _COMPILE_COST)  # each kernel station once
    assert [[next(iter(s)) for s in g] for g in _groups(stages, 1)] == [names]
    assert _groups([{"extract": {}}, {"pack": {}}], 2) == [[{"extract": {}}, {"pack": {}}]]


def test_kernels_cached_under_the_sources_digest():
    """Without NUMBA_CACHE_DIR, a kernel's cache is in the user's cache folder named by numba's version and the
    sources' digest (shared by fresh clones of the same sources), not beside the sources."""
    import os

    import numba
    import pytest

    from gpupipe._numba_cache import digest_folder, sources_digest
    from gpupipe.kernels import repetition
    from gpupipe.stages.dedup.substring import kernels

    if os.environ.get("NUMBA_CACHE_DIR"):
        pytest.skip("NUMBA_CACHE_DIR keeps numba's own locations")
    folder = digest_folder()
    assert folder.name == f"numba{numba.__version__}-{sources_digest(_roots())[:20]}"
    for fn in (repetition._decode, kernels._final_cuts):
        cache_path = fn._cache._cache_path
        assert os.path.dirname(cache_path) == str(folder) or not os.access(folder, os.W_OK)


def test_prune_keeps_the_recent_folders_and_any_in_use(tmp_path):
    """Another checkout's digest folder used within the last day survives the pruning (its process may be compiling
    into it now); older ones beyond the most recent few go."""
    import os
    import time

    from gpupipe._numba_cache import _IN_USE_S, _KEEP, _prune

    day_ago = time.time() - _IN_USE_S - 60
    old = [tmp_path / f"old{i}" for i in range(_KEEP + 2)]
    busy = [tmp_path / f"busy{i}" for i in range(_KEEP + 1)]
    for i, p in enumerate(old):
        p.mkdir()
        os.utime(p, (day_ago - i, day_ago - i))
    for p in busy:
        p.mkdir()
    _prune(tmp_path / "mine")
    left = {p.name for p in tmp_path.iterdir()}
    assert {p.name for p in busy} | {"mine"} <= left   # in use: kept, however many
    assert not any(p.name in left for p in old)        # beyond the most recent _KEEP and a day old: removed


def test_gpupipe_processes_skip_numba_extensions(tmp_path):
    """numba loads every installed extension at its first kernel (awkward's, ~0.35 CPU-s a process); a `gpupipe run`
    process and a pool worker skip them, a process that merely imports gpupipe keeps numba's behaviour."""
    import json
    import os
    import subprocess
    import sys

    import pytest
    import yaml

    pytest.importorskip("awkward")   # the extension installed with gigatoken: without it there is nothing to skip
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"The quality of document {i} is judged by rules. " * 8}) + "\n"
                           for i in range(20)))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"input": {"path": str(src)}, "output": str(tmp_path / "run"), "device": "cpu",
                                   "allow_empty": True, "stages": [{"quality": {}}]}))
    kernel = "import gpupipe, numba; numba.njit(lambda x: x + 1)(1)"   # numba's first compile
    checks = {
        "run": f"from gpupipe.cli import main; assert main(['run', {str(cfg)!r}]) == 0",
        "worker": f"from gpupipe.run.executors import _worker_init; _worker_init(); {kernel}",
        "import only": kernel,
    }
    loaded = {}
    for name, code in checks.items():
        out = subprocess.run([sys.executable, "-c", f"import sys; {code}; print('awkward' in sys.modules)"],
                             capture_output=True, text=True, env=dict(os.environ), timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        loaded[name] = out.stdout.strip().splitlines()[-1]
    assert loaded == {"run": "False", "worker": "False", "import only": "True"}
