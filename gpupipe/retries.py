"""Retries, counted where they happen and reported with the counts of the work they were part of (the dashboards'
`retry_count`, seed 002's pipeline health).

A place that tries something again calls `record(kind)` once per extra attempt: storage calls on a URL whose server
did not answer (io/storage `_retried`, kind `storage`), a pool's tasks run again on a fresh pool after a worker died
(run/executors `_pooled`, kind `task`). Whoever runs a unit of work opens `counting()` around it and adds what was
counted to that work's stats, as stages report every other count: the partition runner (run/tasks) and the phase
tasks (run/phases) into their task's `StageStats.extra`, the run's loop (run/pipeline) around a group of stages
(the tasks it re-submitted, its driver phases) into the group's first stage. The counter is a `ContextVar`: each
task, thread and process has its own (a thread or a worker process starts with none), so no count is shared or
counted twice, and a call outside any `counting()` (a command outside a run) counts nowhere. Places that return
their own counters report them directly: the LLM judge (`judge_retries`); `gpupipe fetch-cc`, a command of its own,
keeps each file's in its ledger (acquire/commoncrawl.py), which a run that reads the file adds to its read stage
(`fetch_retries`).

In a stage's `extra` every retry counter is named `<kind>_retries`; `retries_of(extra)` sums them.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from contextvars import ContextVar
from typing import Any, Iterator, Mapping

SUFFIX = "_retries"
_counter: ContextVar[Counter | None] = ContextVar("gpupipe_retries", default=None)


def record(kind: str, n: int = 1) -> None:
    """`n` more attempts of `kind` (storage, task, ...), into the innermost `counting()` of this context."""
    c = _counter.get()
    if c is not None and n:
        c[kind] += n


@contextlib.contextmanager
def counting() -> Iterator[Counter]:
    """The retries recorded in this context while the block runs (kind → attempts); an inner block takes its own."""
    c: Counter = Counter()
    token = _counter.set(c)
    try:
        yield c
    finally:
        _counter.reset(token)


def as_extra(counts: Mapping[str, int]) -> dict[str, int]:
    """kind → n as stage stats' extra counters: `storage_retries`, `task_retries`, ..."""
    return {f"{kind}{SUFFIX}": n for kind, n in counts.items() if n}


def add_to(extra: Any, counts: Mapping[str, int]) -> None:
    """Add counted retries to a stats `extra` (a Counter or a dict)."""
    for k, n in as_extra(counts).items():
        extra[k] = extra.get(k, 0) + n


def retries_of(extra: Mapping[str, Any]) -> int:
    """Every retry a stage's extra counters hold."""
    return int(sum(v for k, v in extra.items() if k.endswith(SUFFIX)))


__all__ = ["SUFFIX", "add_to", "as_extra", "counting", "record", "retries_of"]
