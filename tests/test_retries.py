"""Retries are counted where they happen and land in the run's stats (#35 part 4): storage calls on a URL retried
(a real HTTP server on 127.0.0.1 that drops connections), tasks run again after a pool worker was killed (kill -9),
LLM judge requests asked again; the dashboards' per-stage `retries` and the run's `retries` are their sums."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
import yaml

from gpupipe import retries
from gpupipe.config import load_config
from gpupipe.io import storage
from gpupipe.report.metrics import run_metrics
from gpupipe.run.executors import LocalExecutor
from gpupipe.run.pipeline import run_pipeline
from tests.helpers.dying_tasks import die_once

DOCS = "".join(json.dumps({"text": f"document number {i} " + "word " * (i % 7 + 3)}) + "\n"
               for i in range(60)).encode()


class FlakyServer:
    """Serves DOCS at /docs.jsonl (HEAD and ranged GET), closing every connection after its answer. Every
    `drop_every`-th HEAD starts a burst: the next `burst` HEADs and plain GETs are dropped (the socket closed
    without an answer, as a server going away does). 4 fails one attempt of a size/info call exactly: its HEAD,
    aiohttp's own retry of it, the plain GET fsspec falls back to, and aiohttp's retry of that. Ranged GETs (reads)
    are always answered. `dropped` counts the bursts."""

    def __init__(self, drop_every: int, burst: int = 4):
        self.heads = self.dropped = self.left = 0
        self.lock = threading.Lock()
        outer = self

        def dropping(head: bool) -> bool:
            with outer.lock:
                outer.heads += head
                if head and not outer.left and drop_every and outer.heads % drop_every == 0:
                    outer.left, outer.dropped = burst, outer.dropped + 1
                drop = outer.left > 0
                outer.left -= drop
                return drop

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_HEAD(self):  # noqa: N802
                if dropping(True):
                    self.connection.shutdown(2)
                    self.close_connection = True
                    return
                self._answer(DOCS, 200, body=False)

            def do_GET(self):  # noqa: N802
                rng = self.headers.get("Range")
                if not rng and dropping(False):
                    self.connection.shutdown(2)
                    self.close_connection = True
                    return
                if rng:
                    a, b = rng.split("=")[1].split("-")
                    a, b = int(a), (int(b) if b else len(DOCS) - 1)
                    self._answer(DOCS[a:b + 1], 206, f"bytes {a}-{min(b, len(DOCS) - 1)}/{len(DOCS)}")
                else:
                    self._answer(DOCS, 200)

            def _answer(self, data: bytes, code: int, content_range: str | None = None, body: bool = True):
                self.send_response(code)
                if content_range:
                    self.send_header("Content-Range", content_range)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Connection", "close")   # a fresh connection each time: no client-side replay
                self.close_connection = True
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/docs.jsonl"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def quick_backoff(monkeypatch):
    monkeypatch.setattr(storage, "BACKOFF", 0.01)


def test_a_storage_retry_is_counted_in_the_innermost_counting_block(quick_backoff):
    pytest.importorskip("aiohttp")
    srv = FlakyServer(drop_every=1, burst=10 ** 6)   # every request dropped: the call fails after TRIES attempts
    try:
        with retries.counting() as outer:
            with retries.counting() as inner, pytest.raises(storage.StorageUnreachable):
                storage.size(srv.url)
        assert inner == {"storage": storage.TRIES - 1} and outer == {}
        with pytest.raises(storage.StorageUnreachable):
            storage.size(srv.url)   # outside any block: nobody counts
    finally:
        srv.close()


def test_every_storage_retry_of_a_run_is_in_its_stats_and_dashboards(tmp_path, quick_backoff):
    """Every third HEAD the run sends starts a burst that fails one attempt: each burst is one retry (TRIES = 3
    tolerates it), counted once, in the stage whose task made the call or, for the driver's own calls, in the run's
    total alone."""
    pytest.importorskip("aiohttp")
    srv = FlakyServer(drop_every=3)
    try:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(yaml.safe_dump({
            "input": {"path": srv.url}, "output": str(tmp_path / "run"), "device": "cpu",
            "executor": {"workers": 1, "partition_docs": 20},
            "stages": [{"normalize": {}}, {"exact_dedup": {}}]}))
        result = run_pipeline(load_config(str(cfg)))
    finally:
        srv.close()
    assert srv.dropped >= 2
    assert result["retries"]["storage"] == result["retries"]["total"] == srv.dropped
    read = result["stages"][0]
    assert read["name"] == "read" and read["extra"].get("storage_retries", 0) >= 1   # the read task's HEADs
    in_stages = sum(s["extra"].get("storage_retries", 0) for s in result["stages"])
    health = run_metrics(result, tmp_path / "run")["stages"]
    assert [h["retries"] for h in health] == [s["extra"].get("storage_retries", 0) for s in result["stages"]]
    assert sum(h["retries"] for h in health) == in_stages <= srv.dropped
    on_disk = json.loads((tmp_path / "run" / "stats.json").read_text())
    assert on_disk["retries"] == result["retries"]
    from gpupipe.report.metrics import prometheus_text

    assert f'gpupipe_run_retries{{run="run",type="storage"}} {srv.dropped}' in prometheus_text(result, "run")


def test_tasks_run_again_after_a_worker_died_are_task_retries(tmp_path):
    ex = LocalExecutor(processes=2)
    try:
        with retries.counting() as counted:
            assert ex.map(die_once, list(range(6)), [str(tmp_path)] * 6) == [x * x for x in range(6)]
        assert (tmp_path / "died").exists()
        # the tasks unfinished when the pool broke ran again: at least the killed one, at most all
        assert 1 <= counted["task"] <= 6 and set(counted) == {"task"}
        with retries.counting() as again:
            ex.map(die_once, [3, 4], [str(tmp_path)] * 2)
        assert again == {}
    finally:
        ex.close()


def test_retry_counters_of_a_stage_sum_into_its_dashboard_row():
    from gpupipe.report.metrics import stage_health

    s = {"name": "chunk_markdown", "docs_in": 4, "docs_out": 4, "removed": {},
         "extra": {"judge_retries": 3, "storage_retries": 2, "task_retries": 1, "judge_attempts": 9}}
    assert stage_health(s)["retries"] == 6
    assert retries.as_extra({"storage": 2, "task": 0}) == {"storage_retries": 2}
