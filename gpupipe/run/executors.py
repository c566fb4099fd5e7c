"""Executors run a function over partitions: `local` in this process (one machine; the tasks of global stages'
phases on threads), `dask` on a real distributed cluster (a LocalCluster of worker processes, or an existing
scheduler). Results come back in input order either way, so nothing downstream can tell them apart."""

from __future__ import annotations

import concurrent.futures
import functools
import logging
from typing import Any, Callable, Sequence

from gpupipe.config import ExecutorConfig, GpuClusterConfig
from gpupipe.run import interrupt

log = logging.getLogger("gpupipe")


class LocalExecutor:
    """Tasks in this process, in input order. `threads` > 1: the tasks of a `stateless` map (a global stage's
    phases: their hooks keep nothing on the stage, tests/interleave.py) run on that many threads, so one
    partition's Parquet I/O overlaps another's kernels; map chains stay one partition at a time (their stages use
    the cores within a partition)."""

    kind = "local"

    def __init__(self, threads: int = 1):
        self.threads = threads

    def map(self, fn: Callable, *iterables: Sequence, progress: Callable[[int], None] = lambda n: None,
            stateless: bool = False) -> list:
        args = list(zip(*iterables))
        if stateless and self.threads > 1 and len(args) > 1 and numba_takes_threads():
            return _threaded(fn, args, min(self.threads, len(args)), progress)
        out = []
        for a in args:
            out.append(fn(*a))
            interrupt.check()
            progress(1)
        return out

    def close(self) -> None:
        pass


@functools.cache
def numba_takes_threads() -> bool:
    """Whether numba's parallel kernels may be called from two threads at once: yes with its tbb and omp threading
    layers; its fallback, workqueue (where neither loads, e.g. macOS without libomp), aborts the process then."""
    try:
        from numba.np.ufunc import parallel

        parallel._launch_threads()   # loads the layer numba loads on its first parallel kernel anyway, once
        return parallel.threading_layer() in ("tbb", "omp")
    except Exception:   # a numba without these internals: one task at a time
        return False


def _threaded(fn: Callable, args: list[tuple], threads: int, progress: Callable[[int], None]) -> list:
    """fn over args on a pool of threads, results in input order; the first error (or a stop request) cancels
    the tasks not yet started and is raised once the running ones end."""
    pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="gpupipe-task")
    try:
        futures = [pool.submit(fn, *a) for a in args]
        for f in concurrent.futures.as_completed(futures):
            f.result()
            interrupt.check()
            progress(1)
        return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class DaskExecutor:
    kind = "dask"

    def __init__(self, workers: int, scheduler_address: str | None = None, device: str = "cpu",
                 gpu: GpuClusterConfig | None = None, storage_options: dict | None = None):
        from distributed import Client

        self._cluster = None
        if scheduler_address:
            self.client = Client(scheduler_address)
        elif device == "gpu":
            from dask_cuda import LocalCUDACluster  # one worker per visible GPU

            self._cluster = LocalCUDACluster(**cuda_cluster_kwargs(gpu or GpuClusterConfig()))
            self.client = Client(self._cluster)
        else:
            from distributed import LocalCluster

            # Processes, not threads: trafilatura and fastText hold the GIL. Distributed starts them with spawn,
            # which is safe after Rust-threaded libraries (tokenizers) ran in this process.
            self._cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                         dashboard_address=None, silence_logs=logging.WARNING)
            self.client = Client(self._cluster)
        if storage_options:   # every worker, present and future, opens URLs with the run's options
            from gpupipe.run.worker_plugin import StorageOptions

            self.client.register_plugin(StorageOptions(storage_options), name="gpupipe-storage-options")
        log.info("dask executor: %s", self.client)

    def map(self, fn: Callable, *iterables: Sequence, progress: Callable[[int], None] = lambda n: None,
            stateless: bool = False) -> list:
        from distributed import as_completed

        futures = self.client.map(fn, *iterables, pure=False)
        for _ in as_completed(futures):
            interrupt.check()
            progress(1)
        return self.client.gather(futures)  # in submission order; raises the first task error

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()


def cuda_cluster_kwargs(gpu: GpuClusterConfig) -> dict[str, Any]:
    """LocalCUDACluster keyword arguments (dask_cuda.LocalCUDACluster: CUDA_VISIBLE_DEVICES, device_memory_limit,
    enable_cudf_spill, rmm_pool_size, rmm_async, rmm_allocator_external_lib_list; docs.rapids.ai/api/dask-cuda).
    One worker per visible GPU is LocalCUDACluster's own default."""
    kwargs: dict[str, Any] = {"device_memory_limit": gpu.device_memory_limit,
                              "enable_cudf_spill": gpu.enable_cudf_spill,
                              "dashboard_address": None}
    if gpu.visible_devices:
        kwargs["CUDA_VISIBLE_DEVICES"] = gpu.visible_devices
    if gpu.rmm_async:
        kwargs["rmm_async"] = True
    elif gpu.rmm_pool_size:
        kwargs["rmm_pool_size"] = gpu.rmm_pool_size
    if gpu.rmm_allocator_libs and (gpu.rmm_async or gpu.rmm_pool_size):
        kwargs["rmm_allocator_external_lib_list"] = list(gpu.rmm_allocator_libs)
    return kwargs


def make_executor(cfg: ExecutorConfig, device: str) -> Any:
    if cfg.kind == "dask":
        from gpupipe.io import storage

        return DaskExecutor(cfg.workers, cfg.scheduler_address, device, cfg.gpu, storage.current_options())
    return LocalExecutor(threads=cfg.workers)
