"""Phased stations: a stage whose decisions need more than one partition declares its phases; the engine
(`gpupipe/run/phases.py`) runs them with the run's executor, and the files between them go through the stage's
exchange (`gpupipe/run/exchange.py`, reached as `task.exchange` / `run.exchange`).

A phase maps a function over something, or runs once in the driver:

  PARTITIONS  one task per input part: fn(stage, task), task.item = the part's path
  BUCKETS     one task per exchange bucket (`RunContext.shuffle_buckets`): task.item = the bucket number
  a callable  run → the task items (groups of partitions, batches, input files): one task per item
  DRIVER      fn(stage, run), once, in the driver: reads earlier results, plans, writes `run.state`/`run.extra`
  APPLY       one task per input part: fn(stage, task) returns what the exchange decided for that partition
              (None: no fn), handed to the stage's `apply_partition(df, info)` by the engine's partition runner:
              parts, rejects, reasons and stats as for any map stage.

Worker tasks get the worker's cached stage instance, which holds configuration and loaded resources only:
everything a task computes is returned (to `run.results[phase]`) or written to the exchange or to `task.dir`,
never kept on the stage, so two tasks may share an instance on two threads. What driver phases plan for later
phases goes in `run.state`, an instance of the stage's `State` record.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from gpupipe.stages.base import MapStage, StageStats

PARTITIONS, BUCKETS, DRIVER, APPLY = "partitions", "buckets", "driver", "apply"


@dataclass(frozen=True)
class Phase:
    name: str
    fn: Callable | None                # worker phases: a module-level function (tasks pickle it by reference)
    over: str | Callable = PARTITIONS  # PARTITIONS | BUCKETS | DRIVER | APPLY | callable(run) -> task items
    arg: Callable | None = None        # callable(run) -> one value handed to every task of the phase
    # callable(run) -> the stage the phase's workers run, when the driver made its configuration concrete (the
    # tokenizer it trained); None: the stage itself
    stage: Callable | None = None
    # True: each task returns its stats (`StageStats.to_dict`), summed into the stage's, one progress step each
    # (APPLY phases always do)
    counts: bool = False


@dataclass
class Task:
    """What one worker task of a phase gets."""
    index: int          # the partition, bucket or item number
    item: Any           # PARTITIONS/APPLY: the input part's path; BUCKETS: the bucket; else the item
    exchange: Any       # the stage's Exchange
    dir: Any            # the stage's folder (run/rundir.py StageDir): where a task writes what it keeps
    arg: Any = None


@dataclass
class PhaseRun:
    """The driver's side of one execution of a phased stage: its inputs and folders, the results of each phase so
    far, what driver phases planned (`state`) and counted (`extra`, `total`)."""
    stage: "PhasedStage"
    inputs: list[Path]        # the previous stage's parts, in input order
    dir: Any                  # this stage's folder (StageDir)
    prev: Any                 # the previous stage's folder (StageDir), None for the first stage
    exchange: Any
    state: Any = None         # the stage's State record
    progress: Callable[[int], None] = lambda n: None
    results: dict[str, list] = field(default_factory=dict)
    extra: Counter = field(default_factory=Counter)
    total: StageStats = field(default_factory=StageStats)

    @property
    def partitions(self) -> int:
        return len(self.inputs)


@dataclass(slots=True)
class NoState:
    """The State of a stage whose driver phases plan nothing for later phases."""


class PhasedStage(MapStage):
    """A stage that runs as phases: subclasses implement `phases` (and `apply_partition` for an APPLY phase) and
    may declare `State`, the record their driver phases fill in."""

    State: ClassVar[type] = NoState

    def phases(self) -> list[Phase]:
        raise NotImplementedError(f"{type(self).__name__} must declare its phases")


__all__ = ["NoState", "Phase", "PhaseRun", "PhasedStage", "Task", "PARTITIONS", "BUCKETS", "DRIVER", "APPLY"]
