"""The Dask worker plugin that gives every worker the run's `storage.options` (a module of its own: importing
distributed costs time that a `local` run need not pay)."""

from __future__ import annotations

from distributed.diagnostics.plugin import WorkerPlugin


class StorageOptions(WorkerPlugin):
    """Installs the config's `storage.options` (io/storage.configure) in each worker, present and future, and skips
    numba's extensions there (_numba_cache.skip_numba_extensions). It holds the options only."""

    def __init__(self, options: dict):
        self.options = options

    def setup(self, worker) -> None:
        from gpupipe._numba_cache import skip_numba_extensions
        from gpupipe.io import storage

        storage.configure(self.options)
        skip_numba_extensions()
