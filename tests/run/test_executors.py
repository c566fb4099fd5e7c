"""The local executor's threads (run/executors.py): the tasks of a global stage's phases run two at a time, for
real (no turn-taking: tests/helpers/interleave.py proves the hooks keep no state), with results in input order, errors
raised, and the run's files byte-identical to one thread."""

import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from gpupipe.cli import main
from gpupipe.run.executors import POOL_RETRIES, LocalExecutor, WorkerLost, numba_takes_threads
from tests.helpers import near_copy_texts, write_jsonl
from tests.helpers.dying_tasks import die_once


def test_stateless_tasks_run_at_once_and_come_back_in_order():
    both = threading.Barrier(2, timeout=60)   # passes only when two tasks run at the same time
    seen = []

    def task(i: int, delay: float) -> int:
        if i < 2:
            both.wait()
        time.sleep(delay)
        seen.append(threading.current_thread().name)
        return i * 10

    ex = LocalExecutor(threads=2)
    done = []
    assert ex.map(task, range(6), [0.05, 0.0, 0.03, 0.0, 0.02, 0.0], progress=done.append, stateless=True) == \
        [0, 10, 20, 30, 40, 50]
    assert len(done) == 6 and len(set(seen)) == 2 and all(n.startswith("gpupipe-task") for n in seen)
    # not stateless (a map chain), or one thread: one task at a time, on this thread
    names = ex.map(lambda i: threading.current_thread().name, range(3))
    assert names == [threading.current_thread().name] * 3
    assert LocalExecutor().map(lambda i: threading.current_thread().name, range(3), stateless=True) == names


def test_a_failing_task_raises_and_the_tasks_not_started_never_run():
    ran = []

    def task(i: int) -> int:
        ran.append(i)
        if i == 1:
            raise ValueError("partition 1 is bad")
        time.sleep(0.2)
        return i

    # 400 tasks of 0.2 s on 2 threads: all of them would run only if the error were never acted on
    with pytest.raises(ValueError, match="partition 1 is bad"):
        LocalExecutor(threads=2).map(task, range(400), stateless=True)
    assert len(ran) < 400


def _run(tmp: Path, name: str, src: Path, workers: int) -> Path:
    cfg = {"input": {"path": str(src)}, "output": str(tmp / name), "device": "cpu",
           "executor": {"kind": "local", "workers": workers, "partition_docs": 7, "shuffle_buckets": 3},
           "stages": [{"exact_dedup": {}}, {"fuzzy_dedup": {}}, {"substring_dedup": {"group_bytes": 20000}},
                      {"url_dedup": {}}, {"tokenize": {"vocab_size": 300}}, {"pack": {"seq_len": 32}}]}
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", str(tmp / f"{name}.yaml")]) == 0
    return tmp / name


def test_two_threads_write_the_same_bytes_as_one(tmp_path):
    assert numba_takes_threads()   # omp or tbb here; a workqueue-only numba would run the tasks one at a time
    texts = near_copy_texts(60, 8)
    texts += [texts[5], texts[33] + " " + texts[9][:300]]   # an exact copy and a shared long substring
    src = write_jsonl(tmp_path / "in.jsonl", texts)
    one, two = _run(tmp_path, "one", src, 1), _run(tmp_path, "two", src, 2)
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file() and p.suffix in (".parquet", ".bin",
                                                                                                ".jsonl"))
    assert len([f for f in files if f.parts[0] == "stages" and f.name.startswith("part-")]) > 20
    for f in files:
        assert (one / f).read_bytes() == (two / f).read_bytes(), f
    assert (one / "shards" / "manifest.json").read_bytes() == (two / "shards" / "manifest.json").read_bytes()


# -- the pool of worker processes (executor local, workers > 1) ------------------------------------------------------

def _pid_after(seconds: float, tag) -> tuple:
    import os
    import time

    time.sleep(seconds)
    return os.getpid(), tag


def _fail_on(x: int) -> int:
    if x == 3:
        raise ValueError("task 3 failed")
    return x * x


def test_pool_runs_tasks_in_worker_processes_in_input_order():
    import os

    ex = LocalExecutor(processes=2)
    try:
        # the first task is the slowest: results still come back in input order
        out = ex.map(_pid_after, [0.5, 0.0, 0.0, 0.0], ["a", "b", "c", "d"])
        assert [tag for _, tag in out] == ["a", "b", "c", "d"]
        pids = {pid for pid, _ in out}
        assert os.getpid() not in pids and len(pids) == 2       # both workers took tasks, none ran here
        again = {pid for pid, _ in ex.map(_pid_after, [0.2] * 4, list(range(4)))}
        assert again == pids          # the same processes for the whole run: their stage caches persist
    finally:
        ex.close()


def test_stopping_the_pools_waits_for_the_pool_s_manager_thread():
    """After shutdown(wait=False) the pool's manager thread holds its queues last and unlinks their named semaphores;
    the CLI's os._exit right after shutdown_pools must not cut that short (a registered semaphore left behind)."""
    from gpupipe.run import executors

    ex = LocalExecutor(processes=2)
    ex.map(_pid_after, [0.0] * 4, list(range(4)))
    pool = executors._POOLS[2]
    manager, queue = pool._executor_manager_thread, pool._call_queue
    join_thread = queue.join_thread
    queue.join_thread = lambda: (time.sleep(0.5), join_thread())   # its last steps, slowed as on a loaded machine
    assert manager.is_alive()
    del pool, queue
    executors.shutdown_pools()
    assert not manager.is_alive() and not executors._POOLS


def _parent_and_loaded(_):
    import os
    import sys

    return os.getppid(), "pandas" in sys.modules and "gpupipe.stages" in sys.modules


@pytest.mark.skipif(sys.platform == "win32", reason="no fork server on Windows: workers are spawned there")
def test_pool_workers_are_forks_of_a_fork_server_that_imported_the_stages():
    """Workers never fork the driver (unsafe after Rust-threaded libraries) and never import gpupipe themselves
    (~3 CPU-s each): they are forks of one server process that imported it, which is not the driver."""
    import os

    import psutil

    from gpupipe.run.executors import WORKER_PRELOAD, worker_context

    assert worker_context().get_start_method() == "forkserver" and "gpupipe.stages" in WORKER_PRELOAD
    ex = LocalExecutor(processes=2)
    try:
        out = ex.map(_parent_and_loaded, [0, 1, 2, 3])
        parents = {ppid for ppid, _ in out}
        assert all(loaded for _, loaded in out)
        assert len(parents) == 1 and os.getpid() not in parents
        server = psutil.Process(parents.pop())
        assert server.ppid() == os.getpid() and "forkserver" in " ".join(server.cmdline())
    finally:
        ex.close()


def test_the_fork_server_s_imports_start_no_thread_pool():
    """Forking is safe only from a process with no thread pool: what the fork server imports (WORKER_PRELOAD) must
    not start numba's threading layer (its OpenMP layer aborts every fork after it: seen when the server also loaded
    the cached kernels) nor leave any thread beyond the interpreter's own and those libraries start at import."""
    import subprocess

    from gpupipe.run.executors import WORKER_PRELOAD

    code = ("import threading; from numba.np.ufunc import parallel; "
            + "; ".join(f"import {m}" for m in WORKER_PRELOAD)
            + "; print(parallel._is_initialized, threading.active_count())")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert out == ["False", "1"], out


@pytest.mark.skipif(sys.platform == "win32", reason="no named semaphores nor resource tracker warnings there")
@pytest.mark.parametrize("grace", [None, 0.0], ids=["idle-workers-quit", "workers-terminated"])
def test_the_console_script_ends_a_pooled_run_without_leaked_semaphores(tmp_path, grace):
    """The `gpupipe` script ends with os._exit (cli.entry). Before that, idle pool workers are asked to quit, not
    terminated, and multiprocessing's exit work runs in the driver: else the resource tracker printed "There appear
    to be N leaked semaphore objects" after every pooled run (the pool's queues in the driver). A worker holds no
    named semaphore of its own (numba's guard of its threading layer's start, replaced in _worker_init): with no
    grace at all every worker is terminated (as a busy one is), and still nothing leaks."""
    import subprocess

    src = write_jsonl(tmp_path / "in.jsonl", [f"document {i}: " + "words of a plain English text " * 20
                                              for i in range(40)])
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"input": {"path": str(src)}, "output": str(tmp_path / "run"), "device": "cpu",
                                   "executor": {"workers": 2, "partition_docs": 10},
                                   "stages": [{"normalize": {}}, {"exact_dedup": {}}]}))
    code = "from gpupipe.cli import entry; "
    if grace is not None:
        code += f"import gpupipe.run.executors as ex; ex.QUIT_GRACE_S = {grace}; "
    r = subprocess.run([sys.executable, "-c", code + "entry()", "run", str(cfg)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    stats = yaml.safe_load((tmp_path / "run" / "stats.json").read_text())
    assert stats["workers"] == 2 and stats["stages"][1]["partitions"] == 4   # the pool ran the tasks
    assert "leaked" not in r.stderr and "resource_tracker" not in r.stderr, r.stderr[-3000:]


def test_pool_raises_a_task_error():
    ex = LocalExecutor(processes=2)
    try:
        with pytest.raises(ValueError, match="task 3 failed"):
            ex.map(_fail_on, list(range(6)))
    finally:
        ex.close()


def test_on_a_gpu_device_stations_run_in_the_feeder_and_host_stations_in_the_pool():
    import os

    from gpupipe.stages.base import DEVICE, HOST

    ex = LocalExecutor(processes=2, device="gpu")
    try:
        device = {pid for pid, _ in ex.map(_pid_after, [0.0] * 3, list(range(3)), resources=DEVICE)}
        host = {pid for pid, _ in ex.map(_pid_after, [0.0] * 3, list(range(3)), resources=HOST)}
        assert device == {os.getpid()} and os.getpid() not in host
    finally:
        ex.close()


def test_on_a_gpu_a_device_station_s_first_task_runs_alone_then_the_rest_on_threads():
    """The first task compiles the station's kernels once (CuPy's caches take no lock); the others then overlap.
    A host station's tasks all start at once."""
    import threading

    from gpupipe.run.executors import numba_takes_threads
    from gpupipe.stages.base import DEVICE, HOST

    if not numba_takes_threads():
        pytest.skip("numba's threading layer takes one thread at a time here: maps run in turn")

    def run(resources, meet):
        events, lock, other_started = [], threading.Lock(), threading.Event()
        together = threading.Barrier(len(meet), timeout=60)   # the tasks in `meet` cannot run one after another

        def task(i):
            with lock:
                events.append(("start", i))
            if i:
                other_started.set()
            else:   # task 0 gives the others the time to start beside it: they must not, on a device station's map
                other_started.wait(2)
            if i in meet:
                together.wait()
            with lock:
                events.append(("end", i))
            return i

        ex = LocalExecutor(threads=4, processes=1, device="gpu")
        assert ex.map(task, [0, 1, 2, 3], stateless=True, resources=resources) == [0, 1, 2, 3]
        return events

    assert run(DEVICE, meet={1, 2, 3})[:2] == [("start", 0), ("end", 0)]
    assert [e for e, _ in run(HOST, meet={0, 1, 2, 3})[:4]] == ["start"] * 4


def _always_die(x):
    import os
    import signal

    if x == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def test_a_killed_worker_s_tasks_run_again_on_a_fresh_pool(tmp_path):
    ex = LocalExecutor(processes=2)
    try:
        assert ex.map(die_once, list(range(6)), [str(tmp_path)] * 6) == [x * x for x in range(6)]
        assert (tmp_path / "died").exists()   # the kill happened: task 2's result comes from the rerun
        assert ex.map(die_once, [3, 4], [str(tmp_path)] * 2) == [9, 16]   # the fresh pool serves later maps
    finally:
        ex.close()


def test_a_task_that_kills_every_worker_stops_the_map_with_one_clear_error():
    ex = LocalExecutor(processes=2)
    try:
        with pytest.raises(WorkerLost, match=f"died {POOL_RETRIES + 1} times.*run the same command again"):
            ex.map(_always_die, list(range(4)))
    finally:
        ex.close()
