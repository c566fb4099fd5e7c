"""Executors run a function over partitions: `local` on one machine (a pool of worker processes, one per core by
default; or in this process), `dask` on a real distributed cluster (a LocalCluster of worker processes, or an existing
scheduler). Results come back in input order either way, so nothing downstream can tell them apart."""

from __future__ import annotations

import atexit
import concurrent.futures
import functools
import logging
from typing import Any, Callable, Sequence

from gpupipe import retries
from gpupipe._numba_cache import skip_numba_extensions
from gpupipe.config import ExecutorConfig, GpuClusterConfig
from gpupipe.run import interrupt

log = logging.getLogger("gpupipe")


class LocalExecutor:
    """One machine. `processes` > 1: every task (a partition through a fused chain, a phase's task, an input file)
    runs in a pool of that many worker processes (forked from a fork server, or spawned: never forked from this
    process, which is unsafe after Rust-threaded libraries), each keeping its
    stage instances, models and compiled kernels for the whole run; results come back in input order. The pool
    outlives the run (`shared_pool`): a process that runs several pipelines (warm-up, tests, a notebook) starts its
    workers once. 1: tasks in this process, in input order; then `threads` > 1 runs the tasks of a `stateless` map
    (phases, whose hooks keep nothing on the stage, tests/helpers/interleave.py) on threads, so one partition's I/O
    overlaps another's kernels."""

    kind = "local"
    places = False   # every task runs on this machine's workers alike

    def __init__(self, threads: int = 1, processes: int = 1, log_file: str | None = None,
                 storage_options: dict | None = None, device: str = "cpu"):
        import uuid

        self.threads = threads
        self.processes = processes
        # device gpu: this process is the GPU's feeder (one CUDA context, the device stations' tasks in turn,
        # each using the whole GPU), the pool takes the host stations
        self.device = device
        # what a worker sets up before this run's first task there: the run (its stage cache starts empty), its
        # log file, its storage options
        self._run = (uuid.uuid4().hex, log_file, storage_options or {})

    def map(self, fn: Callable, *iterables: Sequence, progress: Callable[[int], None] = lambda n: None,
            stateless: bool = False, label: str = "", resources: Any = None) -> list:
        args = list(zip(*iterables))
        on_gpu = self.device == "gpu" and resources is not None and resources.device
        if self.processes > 1 and len(args) > 1 and not on_gpu and not _in_a_child_process():
            return _pooled(self.processes, self._run, fn, args, progress)
        if stateless and self.threads > 1 and len(args) > 1 and numba_takes_threads():
            if not on_gpu:
                return _threaded(fn, args, min(self.threads, len(args)), progress)
            # a device station's first task alone: it compiles or loads the station's CUDA kernels (its own and
            # CuPy's) once; CuPy's per-process caches take no lock, so N threads that miss together compile N times
            first = fn(*args[0])
            interrupt.check()
            progress(1)
            return [first, *_threaded(fn, args[1:], min(self.threads, len(args) - 1), progress)]
        out = []
        for a in args:
            out.append(fn(*a))
            interrupt.check()
            progress(1)
        return out

    def close(self) -> None:
        pass   # the pool stays for the next run of this process (shut down when the process exits)


def _in_a_child_process() -> bool:
    """A pipeline run inside a worker process (the warm-up's, a user's own pool) runs its tasks there: a worker
    never starts a pool of its own."""
    import multiprocessing

    return multiprocessing.parent_process() is not None


_POOLS: dict[int, concurrent.futures.ProcessPoolExecutor] = {}


# What a worker imports before its first task, once: in the fork server, whose forks then start with it loaded.
# gpupipe.cli: a worker of the `gpupipe` command runs that script again as __mp_main__ (multiprocessing's rule for
# a main script), which imports the CLI.
WORKER_PRELOAD = ["gpupipe.cli", "gpupipe.run.tasks", "gpupipe.stages"]


def worker_context():
    """How pool workers start: forked from a fork server where one is available (Linux, macOS), else spawned.

    A spawned worker imports gpupipe, pandas, numba and pyarrow itself before its first task: ~3 CPU-s each on a
    small VM, paid by every worker of every run (16 workers on a 16-core node spent 5x the CPU of one process on the
    39 MB corpus). The fork server is a fresh interpreter (exec'd, like a spawned worker: no thread of this process
    is copied, so forking is safe after Rust-threaded libraries ran here) that imports WORKER_PRELOAD once; each
    worker is a fork of it. It exits when this process does; its workers then see their parent change and exit."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(WORKER_PRELOAD)
    return ctx


def start_workers_early(processes: int) -> None:
    """Start the fork server now (it imports while this process reads its input), when a pool will be used."""
    if processes > 1 and not _POOLS and not _in_a_child_process():
        ctx = worker_context()
        if ctx.get_start_method() == "forkserver":
            from multiprocessing import forkserver

            forkserver.ensure_running()


def shared_pool(processes: int) -> concurrent.futures.ProcessPoolExecutor:
    """This process's pool of `processes` workers (worker_context), started on first use."""
    pool = _POOLS.get(processes)
    if pool is None:
        pool = _POOLS[processes] = concurrent.futures.ProcessPoolExecutor(
            processes, mp_context=worker_context(), initializer=_worker_init)
    return pool


QUIT_GRACE_S = 1.0   # how long idle workers get to exit on their own when the pools stop


def shutdown_pools() -> None:
    """Stop this process's pools now (the CLI ends with os._exit, which runs no atexit handler): tasks not started
    are dropped; idle workers exit on their own (so their exit handlers run), workers still busy after QUIT_GRACE_S
    are terminated (a worker holds no named semaphore of its own: _worker_init). Returns once the pool's manager
    thread has ended: after shutdown(wait=False) that thread holds the pool's queues last, so their named semaphores
    were unlinked there, and os._exit in the middle of it left one unlinked but still registered (the resource
    tracker's "leaked semaphore" + "No such file" lines, seen on a loaded CI machine)."""
    import time

    for pool in list(_POOLS.values()):
        workers = list((getattr(pool, "_processes", None) or {}).values())
        manager = getattr(pool, "_executor_manager_thread", None)
        pool.shutdown(wait=False, cancel_futures=True)
        end = time.monotonic() + QUIT_GRACE_S
        for w in workers:
            w.join(timeout=max(0.0, end - time.monotonic()))
        for w in workers:
            if w.is_alive():
                w.terminate()
        for w in workers:
            w.join(timeout=5)
        if manager is not None:   # its workers are gone: it ends at once
            manager.join(timeout=5)
    _POOLS.clear()


# A process that exits normally (tests, a notebook; the CLI ends with os._exit) stops its pools while its modules
# still exist: a pool collected during interpreter teardown made concurrent.futures print "Exception ignored in
# weakref_cb" (its module globals already None).
atexit.register(shutdown_pools)


def _worker_init() -> None:
    """A pool worker: the driver handles Ctrl-C (it cancels the tasks), log lines go to the run's log only, and
    numba's parallel kernels take one thread (the pool is the parallelism: a kernel on every core in every worker
    would oversubscribe the machine). It ends when its driver is gone, however the driver ended (kill -9 too)."""
    import os
    import signal
    import threading
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    driver = os.getppid()   # the driver, or the fork server, which exits when the driver does

    def orphaned() -> None:
        while os.getppid() == driver:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=orphaned, name="gpupipe-orphan-check", daemon=True).start()
    log.setLevel(logging.INFO)
    log.propagate = False
    skip_numba_extensions()
    try:
        import numba
        from numba.np.ufunc import parallel

        # numba guards its threading layer's start with a multiprocessing RLock when the start method's name holds
        # "fork" ("forkserver" does): a named semaphore of this worker's own, shared with no one, that a terminated
        # worker left to the resource tracker (a run whose two workers were terminated at its end printed "2 leaked
        # semaphore objects"). A no-op guard instead: nothing else starts this worker's threads.
        if getattr(parallel, "_backend_init_process_lock", 0) is None and hasattr(parallel, "_nop"):
            parallel._backend_init_process_lock = parallel._nop()
        numba.set_num_threads(1)
    except Exception:   # numba without threads: nothing to limit
        pass


_WORKER_RUN: list = [None]   # in a pool worker: the run whose tasks it runs now


def _in_worker(run: tuple, fn: Callable, args: tuple):
    """A task in a pool worker; its run's setup first when the run changed: an empty stage cache (a worker never
    holds the models of an earlier run), the run's storage options, its log file."""
    if _WORKER_RUN[0] != run:
        from gpupipe.io import storage
        from gpupipe.run.tasks import clear_worker_stages

        _, log_file, storage_options = run
        clear_worker_stages()
        storage.configure(storage_options)
        for h in list(log.handlers):
            log.removeHandler(h)
            h.close()
        if log_file:
            handler = logging.FileHandler(log_file, encoding="utf-8")
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [worker %(process)d] %(message)s"))
            log.addHandler(handler)
        _WORKER_RUN[0] = run
    return fn(*args)


POOL_RETRIES = 2   # fresh pools one map may start after a worker process died (killed, out of memory)


class WorkerLost(RuntimeError):
    """A pool worker process died under the same tasks on every try."""


def _pooled(processes: int, run: tuple, fn: Callable, args: list[tuple], progress: Callable[[int], None]) -> list:
    """fn over args in the shared pool, results in input order; the first error (or a stop request) cancels the
    tasks not yet started and is raised. A worker that dies (kill -9, the OOM killer) breaks the pool: it is dropped,
    and the tasks that had not finished run again on a fresh one (a task's outputs are atomic and a pure function of
    its inputs, so a rerun writes the same bytes), POOL_RETRIES times at most; each task run again is one `task`
    retry (gpupipe/retries.py), counted in the stats of the stage that submitted it."""
    results: dict[int, Any] = {}
    for attempt in range(POOL_RETRIES + 1):
        pool = shared_pool(processes)
        futures = {pool.submit(_in_worker, run, fn, a): i for i, a in enumerate(args) if i not in results}
        try:
            for f in concurrent.futures.as_completed(futures):
                results[futures[f]] = f.result()
                interrupt.check()
                progress(1)
            return [results[i] for i in range(len(args))]
        except concurrent.futures.BrokenExecutor as e:   # BrokenProcessPool: a worker died
            _POOLS.pop(processes, None)
            pool.shutdown(wait=False, cancel_futures=True)
            for f, i in futures.items():   # what finished before the break is kept
                if i not in results and f.done() and not f.cancelled() and f.exception() is None:
                    results[i] = f.result()
                    progress(1)
            left = len(args) - len(results)
            if attempt == POOL_RETRIES:
                raise WorkerLost(f"a worker process died {attempt + 1} times with {left} task(s) of this stage "
                                 f"unfinished (killed, or out of memory: a smaller executor.partition_bytes or "
                                 f"fewer executor.workers needs less); run the same command again to resume after "
                                 f"the last completed stage") from e
            log.warning("a worker process died (%s): %d of %d task(s) run again on a fresh pool", e, left,
                        len(args))
            retries.record("task", left)   # the stats of the stage whose tasks these are (run/pipeline)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    raise AssertionError("unreachable")


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

            # each GPU's worker advertises it: device stations' tasks go there (`map`); CPU workers started
            # against the same scheduler with `--resources CPU=1` take the host stations
            kwargs = installed_rapids_only(cuda_cluster_kwargs(gpu or GpuClusterConfig()))
            self._cluster = LocalCUDACluster(resources={"GPU": 1}, **kwargs)
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
        # Placement: a cluster whose workers advertise resources (`--resources GPU=1` on a GPU's worker, `CPU=1`
        # on the others) runs device stations' tasks on GPU workers and host stations' on CPU workers.
        advertised = set()
        for w in self.client.scheduler_info().get("workers", {}).values():
            advertised |= set(w.get("resources") or {})
        self.places = "GPU" in advertised
        self._host_resource = {"CPU": 1} if "CPU" in advertised else None
        if self.places:
            log.info("dask executor: placement by resources (device stations on GPU workers%s)",
                     ", host stations on CPU workers" if self._host_resource else "")

    def map(self, fn: Callable, *iterables: Sequence, progress: Callable[[int], None] = lambda n: None,
            stateless: bool = False, label: str = "", resources: Any = None) -> list:
        """`label` names the tasks (the dashboard and the scheduler's story show which station they are);
        `resources`: the station's declared Resources, used when the cluster places by resources."""
        import uuid

        from distributed import as_completed

        n = len(iterables[0]) if iterables else 0
        kw: dict[str, Any] = {}
        if label:
            token = uuid.uuid4().hex[:8]
            kw["key"] = [f"{label}-{token}-{i}" for i in range(n)]
        if self.places and resources is not None:
            need = {"GPU": resources.gpus} if resources.device else self._host_resource
            if need:
                kw["resources"] = need
        futures = self.client.map(fn, *iterables, pure=False, **kw)
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


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def installed_rapids_only(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The LocalCUDACluster kwargs this machine can honour. dask-cuda (>= 24.10) imports cuDF on every worker for
    enable_cudf_spill and RMM for a pool, async resource or RMM allocator of other libraries: without them the
    cluster would fail to start, and CuPy-only mode (the README's) needs neither. A dropped setting is named in a
    warning; with cuDF and RMM installed the settings pass unchanged."""
    kwargs = dict(kwargs)
    if kwargs.get("enable_cudf_spill") and not _importable("cudf"):
        logging.getLogger(__name__).warning(
            "executor.gpu.enable_cudf_spill is on but cuDF is not installed: starting dask-cuda without cuDF "
            "spilling (CuPy-only mode; install RAPIDS cuDF to spill device frames)")
        kwargs["enable_cudf_spill"] = False
    rmm_keys = [k for k in ("rmm_pool_size", "rmm_async", "rmm_allocator_external_lib_list") if kwargs.get(k)]
    if rmm_keys and not _importable("rmm"):
        logging.getLogger(__name__).warning(
            "executor.gpu %s set but RMM is not installed: dask-cuda's workers allocate with CuPy's own memory "
            "pool instead (install rmm to use an RMM pool)", "/".join(rmm_keys))
        for k in rmm_keys:
            kwargs.pop(k)
    return kwargs


def make_executor(cfg: ExecutorConfig, device: str, log_file: str | None = None,
                  input_bytes: int | None = None) -> Any:
    from gpupipe.io import storage

    if cfg.kind == "dask":
        return DaskExecutor(cfg.worker_count(), cfg.scheduler_address, device, cfg.gpu, storage.current_options())
    workers = cfg.worker_count(input_bytes)
    if device == "gpu" and cfg.workers == "auto":   # a core for this process, the GPU's feeder
        workers = max(1, workers - 1)
    # in this process (one worker): the phases' tasks still take a thread per core
    threads = cfg.worker_count() if workers == 1 and cfg.workers == "auto" else workers
    start_workers_early(workers)
    return LocalExecutor(threads=threads, processes=workers, log_file=log_file,
                         storage_options=storage.current_options(), device=device)
