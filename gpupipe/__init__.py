"""gpupipe: web crawl → curated documents → packed token shards, on GPU (RAPIDS) or CPU."""

__version__ = "0.1.0"

from gpupipe._numba_cache import drop_stale_cache as _drop_stale_cache

_drop_stale_cache()
