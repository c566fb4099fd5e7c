"""Optional LLM judge for Markdown chunks (completeness, relevance, cleanliness): an OpenAI-compatible
chat-completions client on the standard library, bounded concurrency, retries with capped exponential backoff,
and an append-only checkpoint.

Contract: every chunk gets a verdict. The model answers {"keep": 1|0, "score": 0-10, "reason": str} (the scale of
the user's reference recipe); after the last failed attempt the chunk is kept with score -1 and the error as reason,
so a flaky endpoint never silently deletes data. Verdicts are appended to a JSONL checkpoint as they arrive (flushed
every `checkpoint_every`), so an interrupted run resumes without asking again; failed verdicts are written too (for
the audit) but asked again on resume, since they are not judgements.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import logging
import os
import random
import re
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from pydantic import Field, field_validator

from gpupipe.config_base import Strict, ordered

log = logging.getLogger("gpupipe")

# The recipe's reviewer prompt, with the domain taken from config ({domain} appears twice: role and relevance).
DEFAULT_DOMAIN = "网络安全或计算机技术"
DEFAULT_PROMPT = (
    "你是{domain}领域的语料质量审核员。请判断以下文本切片是否适合作为大模型预训练语料。\n"
    "评估维度：\n"
    "1. 完整性：不是标题残片、半截表格、被截断的公式或代码；\n"
    "2. 相关性：包含{domain}的实质知识，而非广告、导航、致谢、参考文献列表；\n"
    "3. 洁净度：无 OCR 乱码、无意义符号堆砌、无导流信息。\n"
    '只输出 JSON：{{"keep": 1或0, "score": 0到10的整数, "reason": "简短理由"}}'
)
SCORE_MAX = 10.0
FAILED_SCORE = -1.0
RETRYABLE_STATUS = {408, 409, 425, 429}  # plus every 5xx; other 4xx (bad key, bad model) fail fast


class JudgeConfig(Strict):
    enabled: bool = False
    base_url: str = "https://api.openai.com/v1"  # the recipe: https://dashscope.aliyuncs.com/compatible-mode/v1
    model: str = "gpt-4o-mini"                   # the recipe: qwen-plus
    api_key_env: str | None = "OPENAI_API_KEY"   # None: send no Authorization header (local servers)
    domain: str = DEFAULT_DOMAIN
    prompt: str = DEFAULT_PROMPT                 # {domain} is filled in (other braces doubled: {{ }});
    #                                              the chunk follows after "\n---\n"
    max_chars: int = Field(3000, ge=1)           # the recipe sends text[:3000]
    temperature: float = Field(0.0, ge=0, le=2)  # the OpenAI API's range
    json_mode: bool = True                       # response_format {"type": "json_object"}
    timeout_s: float = Field(60.0, gt=0)
    max_concurrency: int = Field(8, ge=1)        # the recipe's MAX_WORKERS
    max_attempts: int = Field(3, ge=1)           # the recipe's retries=3
    backoff_base_s: float = Field(1.0, ge=0)     # waits base·2^k (the recipe's 1 s, 2 s), jittered, capped
    backoff_max_s: float = Field(30.0, ge=0)
    checkpoint_every: int = Field(100, ge=1)

    _order = ordered(("backoff_base_s", "backoff_max_s"))

    @field_validator("prompt")
    @classmethod
    def _fillable(cls, v: str) -> str:
        try:
            v.format(domain="")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"the prompt must have only {{domain}} as a placeholder (write other braces as "
                             f"{{{{ }}}}): {e!r}") from None
        return v


class JudgeError(RuntimeError):
    """The judge cannot start (e.g. its API key variable is not set)."""


class AttemptError(Exception):
    """One request failed; `retryable` says whether another attempt can help."""

    def __init__(self, message: str, retryable: bool = True, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass(frozen=True)
class Verdict:
    keep: bool
    score: float
    reason: str
    failed: bool = False
    attempts: int = 1

    def public(self, model: str) -> dict:
        """The `judge` field of an output chunk: fixed keys and types, so Arrow/HF readers infer one schema."""
        return {"keep": self.keep, "score": float(self.score), "reason": self.reason, "failed": self.failed,
                "model": model}


# ----------------------------------------------------------------------------- parsing the model's answer

_TRUE = {"1", "true", "yes", "y", "keep", "保留", "是"}
_FALSE = {"0", "false", "no", "n", "drop", "discard", "剔除", "丢弃", "否"}


def parse_verdict(content: str) -> Verdict:
    """The first JSON object with a `keep` key anywhere in the answer (code fences, prose around it are fine)."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", content or ""):
        try:
            obj, _ = decoder.raw_decode(content, m.start())
        except ValueError:
            continue
        if isinstance(obj, dict) and "keep" in obj:
            return Verdict(_as_bool(obj["keep"]), _as_score(obj.get("score")), str(obj.get("reason", ""))[:500])
    raise AttemptError(f"malformed verdict: no JSON object with 'keep' in {content[:200]!r}")


def _as_bool(v) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
        return v.strip().lower() in _TRUE
    raise AttemptError(f"malformed verdict: keep={v!r}")


def _as_score(v) -> float:
    try:
        score = float(v)
    except (TypeError, ValueError):
        raise AttemptError(f"malformed verdict: score={v!r}") from None
    if not 0.0 <= score <= SCORE_MAX:
        raise AttemptError(f"malformed verdict: score {score} outside 0-{SCORE_MAX:g}")
    return score


# ----------------------------------------------------------------------------- the client


class LLMJudge:
    """Judges chunk texts against one endpoint and model; thread-safe (each request opens its own connection)."""

    def __init__(self, cfg: JudgeConfig, sleep: Callable[[float], None] = time.sleep):
        self.cfg = cfg
        self.url = cfg.base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Content-Type": "application/json"}
        if cfg.api_key_env:
            key = os.environ.get(cfg.api_key_env, "")
            if not key:
                raise JudgeError(f"the LLM judge reads its API key from ${cfg.api_key_env}, which is not set "
                                 f"(set it, or set judge.api_key_env: null for a server without keys)")
            self.headers["Authorization"] = f"Bearer {key}"
        self.instruction = cfg.prompt.format(domain=cfg.domain)
        self.key = judge_key(cfg)
        self._sleep = sleep
        self._rng = random.Random()

    def request_body(self, text: str) -> bytes:
        body = {"model": self.cfg.model, "temperature": self.cfg.temperature,
                "messages": [{"role": "user", "content": f"{self.instruction}\n---\n{text[:self.cfg.max_chars]}"}]}
        if self.cfg.json_mode:
            body["response_format"] = {"type": "json_object"}
        return json.dumps(body, ensure_ascii=False).encode("utf-8")

    def ask(self, text: str) -> Verdict:
        """One attempt: POST, read the answer, parse it; raises AttemptError."""
        req = urllib.request.Request(self.url, data=self.request_body(text), headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.cfg.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raise AttemptError(f"HTTP {e.code}: {_error_body(e)}", e.code in RETRYABLE_STATUS or e.code >= 500,
                               _retry_after(e.headers.get("Retry-After") if e.headers else None)) from None
        except (OSError, ValueError, http.client.HTTPException) as e:  # URLError, timeouts, resets, torn bodies
            raise AttemptError(f"request failed: {type(e).__name__}: {e}") from None
        try:
            content = json.loads(raw)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise AttemptError(f"malformed response: {raw[:200]!r}") from None
        return parse_verdict(content if isinstance(content, str) else json.dumps(content))

    def judge(self, text: str) -> Verdict:
        """Ask until a valid verdict, at most `max_attempts` times; a final failure keeps the chunk (score -1)."""
        for attempt in range(1, self.cfg.max_attempts + 1):
            try:
                v = self.ask(text)
                return Verdict(v.keep, v.score, v.reason, attempts=attempt)
            except AttemptError as e:
                if not e.retryable or attempt == self.cfg.max_attempts:
                    return Verdict(True, FAILED_SCORE, f"judge failed after {attempt} attempt(s), kept: {e}",
                                   failed=True, attempts=attempt)
                self._sleep(self.backoff(attempt, e.retry_after))
        raise AssertionError("unreachable")

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """base·2^(attempt-1), capped, with jitter in [50%, 100%] so parallel retries do not stampede."""
        delay = min(self.cfg.backoff_max_s, self.cfg.backoff_base_s * 2 ** (attempt - 1))
        delay *= 0.5 + 0.5 * self._rng.random()
        if retry_after is not None:  # the server asked for a pause (429/503): honour it, within the cap
            delay = max(delay, min(retry_after, self.cfg.backoff_max_s))
        return delay

    def judge_all(self, items: Iterable[tuple[str, str]], checkpoint: str | os.PathLike | None = None,
                  resume_from: Iterable[str | os.PathLike] = ()) -> tuple[dict[str, Verdict], Counter]:
        """Verdicts for (id, text) items: those already in the checkpoint (or `resume_from` files) are not asked.

        Returns (id → verdict, counters: asked, resumed, failed, kept, dropped, attempts, retries: the attempts
        after each chunk's first).
        """
        done: dict[str, Verdict] = {}
        for path in [*resume_from, *([checkpoint] if checkpoint else [])]:
            done.update(load_verdicts(path, self.key))
        stats = Counter()
        verdicts: dict[str, Verdict] = {}

        def todo() -> Iterator[tuple[str, str]]:  # lazy: texts are read as they are asked, not all at once
            for cid, text in items:
                if cid in done:
                    verdicts[cid] = done[cid]
                    stats["resumed"] += 1
                else:
                    yield cid, text

        writer = CheckpointWriter(checkpoint, self.cfg.checkpoint_every) if checkpoint else None
        results = bounded_map(lambda item: (item[0], self.judge(item[1])), todo(), self.cfg.max_concurrency)
        try:
            with contextlib.closing(results):  # on an interrupt: cancel queued requests now, not at GC time
                for cid, v in results:
                    verdicts[cid] = v
                    if writer:
                        writer.write(verdict_line(cid, v, self.key, self.cfg.model))
                    stats["asked"] += 1
                    stats["attempts"] += v.attempts
                    stats["retries"] += v.attempts - 1   # a stage's `judge_retries` (gpupipe/retries.py)
                    stats["failed"] += v.failed
        finally:
            if writer:
                writer.close()
        for v in verdicts.values():
            stats["kept" if v.keep else "dropped"] += 1
        return verdicts, stats


def judge_key(cfg: JudgeConfig) -> str:
    """What makes two verdicts comparable: model and the exact instruction. Another key means ask again."""
    payload = [cfg.model, cfg.prompt.format(domain=cfg.domain), cfg.max_chars, cfg.temperature]
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode()).hexdigest()[:16]


def _error_body(e: urllib.error.HTTPError) -> str:
    try:
        return e.read()[:200].decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        return ""


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: rare for APIs, and the backoff covers it


def bounded_map(fn: Callable, items: Iterable, concurrency: int) -> Iterator:
    """fn over items on `concurrency` threads, results in completion order; at most 2×concurrency submitted at
    once, so a million chunks do not become a million futures. On an exception (or when the consumer stops),
    queued work is cancelled and only the requests in flight finish."""
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="llm-judge")
    pending: set[Future] = set()
    try:
        for item in items:
            pending.add(pool.submit(fn, item))
            if len(pending) >= 2 * concurrency:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    yield f.result()
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                yield f.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# ----------------------------------------------------------------------------- checkpoint


def verdict_line(cid: str, v: Verdict, key: str, model: str) -> dict:
    return {"id": cid, "keep": v.keep, "score": float(v.score), "reason": v.reason, "failed": v.failed,
            "attempts": v.attempts, "model": model, "key": key}


def load_verdicts(path: str | os.PathLike, key: str) -> dict[str, Verdict]:
    """Verdicts of a checkpoint made with the same judge key. A torn last line (killed mid-write) is skipped,
    and so are failed verdicts: they get another chance."""
    out: dict[str, Verdict] = {}
    path = Path(path)
    if not path.is_file():
        return out
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                d = json.loads(line)
                if d.get("key") != key or d.get("failed"):
                    continue
                out[str(d["id"])] = Verdict(bool(d["keep"]), float(d["score"]), str(d.get("reason", "")),
                                            attempts=int(d.get("attempts", 1)))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
    return out


class CheckpointWriter:
    """Append-only JSONL; flushed to disk every `every` lines and on close, so a kill loses at most that many."""

    def __init__(self, path: str | os.PathLike, every: int = 100):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.every = every
        self.f = open(self.path, "a", encoding="utf-8")
        self.n = 0
        if self.f.tell() and not self._ends_with_newline():
            self.f.write("\n")  # a torn line from a killed run must not swallow our first line

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as g:
            g.seek(-1, os.SEEK_END)
            return g.read(1) == b"\n"

    def write(self, record: dict) -> None:
        self.f.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.n += 1
        if self.n % self.every == 0:
            self.sync()

    def sync(self) -> None:
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self) -> None:
        if not self.f.closed:
            self.sync()
            self.f.close()


__all__ = ["JudgeConfig", "JudgeError", "LLMJudge", "Verdict", "parse_verdict", "load_verdicts",
           "CheckpointWriter", "bounded_map", "judge_key", "DEFAULT_PROMPT", "DEFAULT_DOMAIN"]
