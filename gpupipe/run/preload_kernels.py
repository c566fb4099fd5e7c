"""Imported by the pool's fork server (multiprocessing's preload names modules): loads gpupipe's cached numba
kernels there once, so that each worker forked from it starts with them (`_numba_cache.load_cached_kernels`).
run/executors.py adds it to the preload when a pool has enough workers for that to pay."""

from gpupipe._numba_cache import load_cached_kernels

LOADED = load_cached_kernels()
