"""The LLM judge against a real chat-completions server on 127.0.0.1 (http.server in a thread): normal answers,
HTTP 500 (transient and permanent), malformed JSON, slow answers (timeouts), bounded concurrency, and resume after
an interruption (including a SIGKILLed `chunk-markdown --judge` process) without asking anything twice."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

from gpupipe.stages.base import RunContext
from gpupipe.stages.text.chunk_markdown import ChunkMarkdown, ChunkMarkdownConfig, chunk_markdown_dir
from gpupipe.stages.text.llm_judge import (AttemptError, CheckpointWriter, JudgeConfig, JudgeError, LLMJudge, Verdict,
                                      load_verdicts, parse_verdict, verdict_line)
from tests.helpers import ROOT
from tests.helpers import set_up

KEY_ENV = "GPUPIPE_TEST_LLM_KEY"


def completion(content: str) -> dict:
    return {"id": "cmpl-1", "object": "chat.completion", "model": "test-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}


def good_answer(text: str) -> str:
    keep = "spam" not in text
    return json.dumps({"keep": int(keep), "score": 8 if keep else 1, "reason": "ok" if keep else "advert"})


class FakeLLM:
    """What the server does per request: `behave(text, attempt_of_this_text)` → (status, body, delay_s)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests: list[str] = []      # chunk texts, in arrival order
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.per_text = Counter()
        self.in_flight = self.max_in_flight = 0
        self.behave = lambda text, n: (200, completion(good_answer(text)), 0)

    def handle(self, body: dict, headers: dict):
        text = body["messages"][0]["content"].split("\n---\n", 1)[1]
        with self.lock:
            self.requests.append(text)
            self.bodies.append(body)
            self.headers.append(headers)
            self.per_text[text] += 1
            n = self.per_text[text]
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            status, payload, delay = self.behave(text, n)
            time.sleep(delay)  # counted as in flight
            return status, payload
        finally:
            with self.lock:
                self.in_flight -= 1


def make_handler(fake: FakeLLM):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, payload = fake.handle(body, dict(self.headers))
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout) or was killed

        def log_message(self, *args):
            pass

    return Handler


@pytest.fixture
def server(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv(KEY_ENV, "sk-test-123")
    fake = FakeLLM()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(fake))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield fake
    httpd.shutdown()
    httpd.server_close()


def judge_cfg(fake: FakeLLM, **kw) -> JudgeConfig:
    params = dict(enabled=True, base_url=fake.url, model="test-model", api_key_env=KEY_ENV, timeout_s=5,
                  max_concurrency=4, max_attempts=3, backoff_base_s=0.01, backoff_max_s=0.05)
    params.update(kw)
    return JudgeConfig(**params)


def items(n: int, prefix: str = "chunk") -> list[tuple[str, str]]:
    return [(f"id{i:04d}", f"{prefix} {i}: some text about buffer overflows" + (" spam" if i % 5 == 0 else ""))
            for i in range(n)]


# ----------------------------------------------------------------------------- the protocol


def test_normal_server(server):
    judge = LLMJudge(judge_cfg(server, domain="密码学"))
    verdicts, stats = judge.judge_all(items(20))
    assert len(server.requests) == 20 and stats["asked"] == 20 and stats["failed"] == 0
    assert [verdicts[f"id{i:04d}"].keep for i in range(20)] == [i % 5 != 0 for i in range(20)]
    assert verdicts["id0001"] == Verdict(True, 8.0, "ok", attempts=1)
    assert (stats["kept"], stats["dropped"]) == (16, 4)
    body, headers = server.bodies[0], server.headers[0]
    assert body["model"] == "test-model" and body["temperature"] == 0
    assert body["response_format"] == {"type": "json_object"}
    prompt = body["messages"][0]["content"]
    assert "你是密码学领域" in prompt and all(k in prompt for k in ("完整性", "相关性", "洁净度"))
    assert headers["Authorization"] == "Bearer sk-test-123"


def test_http_500_then_ok_is_retried(server):
    server.behave = lambda text, n: (500, b'{"error": "overloaded"}', 0) if n == 1 else \
        (200, completion(good_answer(text)), 0)
    verdicts, stats = LLMJudge(judge_cfg(server)).judge_all(items(6))
    assert len(server.requests) == 12 and stats["failed"] == 0 and stats["attempts"] == 12
    assert all(v.attempts == 2 and not v.failed and v.score in (8.0, 1.0) for v in verdicts.values())


def test_always_500_keeps_the_chunk_with_score_minus_one(server):
    server.behave = lambda text, n: (500, b"boom", 0)
    verdicts, stats = LLMJudge(judge_cfg(server, max_attempts=4)).judge_all(items(3))
    assert len(server.requests) == 12 and stats["failed"] == 3 and stats["kept"] == 3
    v = verdicts["id0000"]
    assert (v.keep, v.score, v.failed, v.attempts) == (True, -1.0, True, 4) and "HTTP 500" in v.reason


def test_client_errors_fail_fast(server):
    server.behave = lambda text, n: (401, b'{"error": "bad key"}', 0)
    verdicts, _ = LLMJudge(judge_cfg(server)).judge_all(items(2))
    assert len(server.requests) == 2 and all(v.failed and "HTTP 401" in v.reason for v in verdicts.values())


def test_malformed_json_is_retried_then_fails_kept(server):
    answers = [b"<html>gateway error</html>",                      # not JSON at all
               completion("I think this chunk is fine!"),          # no JSON object in the content
               completion('Sure:\n```json\n{"keep": 0, "score": 3, "reason": "nav"}\n```\nHope it helps.')]
    server.behave = lambda text, n: (200, answers[n - 1], 0)
    verdicts, stats = LLMJudge(judge_cfg(server)).judge_all(items(1))
    assert verdicts["id0000"] == Verdict(False, 3.0, "nav", attempts=3) and stats["dropped"] == 1

    server.behave = lambda text, n: (200, completion('{"keep": "maybe", "score": 5}'), 0)
    verdicts, _ = LLMJudge(judge_cfg(server)).judge_all(items(1, "other"))
    assert verdicts["id0000"].failed and "malformed verdict" in verdicts["id0000"].reason


def test_slow_server_times_out_and_is_retried(server):
    server.behave = lambda text, n: (200, completion(good_answer(text)), 3.0 if n == 1 else 0)
    verdicts, stats = LLMJudge(judge_cfg(server, timeout_s=0.3)).judge_all(items(4))
    # the first answer, had the client waited the server's 3 s, was a good one: two attempts mean it gave up
    assert all(v.attempts == 2 and not v.failed for v in verdicts.values())

    server.behave = lambda text, n: (200, completion(good_answer(text)), 1.0)
    verdicts, _ = LLMJudge(judge_cfg(server, timeout_s=0.2, max_attempts=2)).judge_all(items(1, "slow"))
    assert verdicts["id0000"].failed and "timed out" in verdicts["id0000"].reason.lower()


def test_bounded_concurrency(server):
    server.behave = lambda text, n: (200, completion(good_answer(text)), 0.05)
    LLMJudge(judge_cfg(server, max_concurrency=3)).judge_all(items(30))
    assert server.max_in_flight == 3
    server.max_in_flight = 0
    LLMJudge(judge_cfg(server, max_concurrency=1)).judge_all(items(5, "serial"))
    assert server.max_in_flight == 1


@pytest.mark.parametrize("content,expected", [
    ('{"keep": 1, "score": 9, "reason": "good"}', Verdict(True, 9.0, "good")),
    ('```json\n{"keep": 0, "score": 2, "reason": "ads"}\n```', Verdict(False, 2.0, "ads")),
    ('verdict: {"keep": true, "score": "7", "reason": "x"} — done {not json}', Verdict(True, 7.0, "x")),
    ('{"note": {"a": 1}} then {"keep": "false", "score": 0.5}', Verdict(False, 0.5, "")),
])
def test_parse_verdict(content, expected):
    assert parse_verdict(content) == expected


@pytest.mark.parametrize("content", ["", "no json", '{"keep": 1, "score": 11}', '{"keep": 2, "score": 5}',
                                     '{"score": 5}', '{"keep": 1}'])
def test_parse_verdict_rejects(content):
    with pytest.raises(AttemptError, match="malformed"):
        parse_verdict(content)


def test_backoff_is_exponential_jittered_and_capped(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "k")
    judge = LLMJudge(JudgeConfig(api_key_env=KEY_ENV, backoff_base_s=1.0, backoff_max_s=5.0))
    for attempt, (lo, hi) in {1: (0.5, 1.0), 2: (1.0, 2.0), 3: (2.0, 4.0), 9: (2.5, 5.0)}.items():
        delays = [judge.backoff(attempt) for _ in range(50)]
        assert all(lo <= d <= hi for d in delays) and len(set(delays)) > 1
    assert judge.backoff(1, retry_after=3.0) == 3.0 and judge.backoff(1, retry_after=60) == 5.0


def test_missing_api_key_is_an_error_unless_none(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(JudgeError, match=KEY_ENV):
        LLMJudge(JudgeConfig(api_key_env=KEY_ENV))
    assert "Authorization" not in LLMJudge(JudgeConfig(api_key_env=None)).headers


def test_custom_prompt_must_escape_braces():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="placeholder"):
        JudgeConfig(prompt='Answer {"keep": 1} about {domain}')
    judge = LLMJudge(JudgeConfig(api_key_env=None, domain="web", prompt='Judge {domain} text; answer {{"keep": 1}}'))
    assert judge.instruction == 'Judge web text; answer {"keep": 1}'


# ----------------------------------------------------------------------------- checkpoint and resume


def test_resume_asks_only_what_the_checkpoint_lacks(server, tmp_path):
    cfg = judge_cfg(server, checkpoint_every=10)
    judge = LLMJudge(cfg)
    all_items = items(40)
    ckpt = tmp_path / "verdicts.jsonl"
    # an interrupted run: 25 verdicts on disk, one of them failed, then a line torn by the kill
    with open(ckpt, "w", encoding="utf-8") as f:
        for i, (cid, text) in enumerate(all_items[:25]):
            v = Verdict(True, -1.0, "HTTP 500", failed=True) if i == 3 else Verdict(i % 5 != 0, 6.0, "earlier")
            f.write(json.dumps(verdict_line(cid, v, judge.key, cfg.model)) + "\n")
        f.write('{"id": "id0025", "keep": tr')
    verdicts, stats = judge.judge_all(all_items, checkpoint=ckpt)
    asked = {cid for cid, text in all_items if text in server.requests}
    assert asked == {"id0003"} | {f"id{i:04d}" for i in range(25, 40)}  # the failed one gets another chance
    assert (stats["resumed"], stats["asked"]) == (24, 16) and len(verdicts) == 40
    assert verdicts["id0001"].reason == "earlier"
    # the checkpoint now holds all 40 (the torn line is skipped, not merged into the next record)
    assert set(load_verdicts(ckpt, judge.key)) == {cid for cid, _ in all_items}
    # a run with the same checkpoint asks nothing; another prompt (another key) asks everything again
    server.requests.clear()
    judge.judge_all(all_items, checkpoint=ckpt)
    assert server.requests == []
    LLMJudge(cfg.model_copy(update={"domain": "other"})).judge_all(all_items, checkpoint=ckpt)
    assert len(server.requests) == 40


def test_checkpoint_is_flushed_every_n_verdicts(tmp_path):
    path = tmp_path / "c.jsonl"
    w = CheckpointWriter(path, every=3)
    for i in range(5):
        w.write({"i": i})
        on_disk = path.read_text().count("\n")
        assert on_disk == (3 if i >= 2 else 0)
    w.close()
    assert path.read_text().count("\n") == 5


def write_docs(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"doc{i:03d}.md").write_text(
            f"# Advisory {i}\n\nCVE-2024-{i:05d} is a heap overflow in parser module {i}; "
            f"an attacker can send a crafted packet to trigger it, so upgrade the parser before exposing it."
            f"{' spam' if i % 7 == 0 else ''}", encoding="utf-8")
    return folder


def test_killed_cli_run_resumes_without_asking_again(server, tmp_path):
    """A real interruption: `chunk-markdown --judge` is SIGKILLed mid-run (the server stalls after 150 answers);
    the re-run asks exactly the chunks whose verdicts did not reach the disk."""
    docs = write_docs(tmp_path / "docs", 300)
    out = tmp_path / "out"
    gate = threading.Event()

    def stall_after_150(text, n):
        if len(server.requests) > 150:
            gate.wait(30)
        return 200, completion(good_answer(text)), 0

    server.behave = stall_after_150
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(json.dumps({"judge": judge_cfg(server, timeout_s=60).model_dump()}), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "gpupipe.stages.text.chunk_markdown", str(docs), "--out", str(out),
                             "--config", str(cfg_file), "--judge"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ckpt = out / "judge_verdicts.jsonl"
    try:
        deadline = time.time() + 900   # only against a hang: the run always reaches the stall
        while not (len(server.requests) >= 154 and ckpt.is_file() and ckpt.read_text().count("\n") >= 100):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.time() < deadline, "the judged run did not reach the stall"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
        gate.set()
    assert not (out / "chunks.jsonl").exists()  # no half dataset
    judge = LLMJudge(judge_cfg(server))
    survived = set(load_verdicts(ckpt, judge.key))
    assert 100 <= len(survived) <= 150
    time.sleep(0.1)  # let the stalled handlers finish
    server.requests.clear()

    server.behave = lambda text, n: (200, completion(good_answer(text)), 0)
    cfg = ChunkMarkdownConfig(judge=judge_cfg(server))
    stats = chunk_markdown_dir(docs, out, cfg)
    chunks = [json.loads(line) for line in (out / "chunks.jsonl").read_text(encoding="utf-8").splitlines()]
    rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text(encoding="utf-8").splitlines()]
    by_text = {c["text"]: c["id"] for c in chunks + rejected}
    asked_again = {by_text[t] for t in server.requests}
    assert not asked_again & survived and len(asked_again) == len(server.requests) == 300 - len(survived)
    assert stats["judge"]["resumed"] == len(survived) and stats["judge"]["asked"] == 300 - len(survived)
    assert len(chunks) + len(rejected) == 300 and all(r["reason"] == "llm_judge" for r in rejected)
    assert len(rejected) == len(range(0, 300, 7)) and all(c["judge"]["keep"] for c in chunks)
    assert stats["chunks_removed"] == {"llm_judge": len(rejected)}


def test_stage_with_judge_drops_and_checkpoints_in_the_run_dir(server, tmp_path):
    texts = [f"# Item {i}\n\nA paragraph on access control lists and their pitfalls, number {i}, with the "
             f"mistakes that open a file to everyone, and how an audit finds them early."
             + (" spam" if i % 2 else "") for i in range(6)]
    df = pd.DataFrame({"id": [f"d{i}" for i in range(6)], "doc_index": range(6), "text": texts})
    cfg = ChunkMarkdownConfig(judge=judge_cfg(server))
    stage = set_up(ChunkMarkdown(cfg, RunContext(run_dir=str(tmp_path))))
    kept, rejects, stats = stage.run_partition(df)
    assert dict(stats.removed) == {"llm_judge": 3} and len(kept) == 3
    assert kept["judge_score"].tolist() == [8.0] * 3 and not kept["judge_failed"].any()
    assert stats.extra["judge_asked"] == 6
    assert stats.docs_in + stats.extra["docs_added"] == stats.docs_out + sum(stats.removed.values())
    assert len(list((tmp_path / "llm_judge").rglob("verdicts-*.jsonl"))) == 1
    server.requests.clear()
    kept2, _, stats2 = set_up(ChunkMarkdown(cfg, RunContext(run_dir=str(tmp_path)))).run_partition(df)
    assert server.requests == [] and stats2.extra["judge_resumed"] == 6
    pd.testing.assert_frame_equal(kept, kept2)
