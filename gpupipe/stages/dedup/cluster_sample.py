"""clusters_sample.jsonl, the audit file of the dedup stages that cluster documents (fuzzy_dedup, semantic_dedup):
for a seeded sample of clusters, the kept text beside the removed ones.

The driver picks the sample when it has the clusters (`pick`, before the apply phase). The apply phase has each
partition in memory anyway: `ClusterDedup.apply_partition` sets the sampled documents' texts aside there, as
side tables inside the exchange, and `write_sample` (a driver phase after it) joins them. So no phase reads the
partitions again for a few hundred texts.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from gpupipe.stages.base import Applied
from gpupipe.stages.dedup.global_stage import GlobalStage, removals_of
from gpupipe.stages.phases import APPLY, DRIVER, Phase, PhaseRun, Task

SAMPLE_TEXTS = "sample-texts"  # the apply phase's side tables, removed once the sample is written
TEXT_CHARS = 2000                        # characters of each text in the file


@dataclass(slots=True)
class ClusterState:
    """What `pick` chose for the sample: whether there are clusters at all, the sampled clusters' members and their
    documents."""
    clustered: bool = False
    sample: Any = None
    wanted: Any = None


class ClusterDedup(GlobalStage):
    """A global stage whose driver ends with clusters (`pick` fills `run.state`, a ClusterState): its last phases
    apply the removals and write the sample."""

    State = ClusterState

    def tail_phases(self) -> list[Phase]:
        return [Phase("apply", apply_info, over=APPLY, arg=lambda run: run.state.wanted),
                Phase("sample", write_sample, over=DRIVER)]

    def apply_partition(self, df: pd.DataFrame, info: dict | None = None) -> Applied:
        """Drop the partition's removals; set aside the texts of the sampled clusters' documents it holds."""
        applied = GlobalStage.apply_partition(self, df, info["removals"])
        wanted = df[df["doc_index"].isin(info["wanted"])]
        if len(wanted):
            applied.side[SAMPLE_TEXTS] = wanted[["id", "doc_index", "text"]].reset_index(drop=True)
        return applied


def pick(run: PhaseRun, members: pd.DataFrame, clusters: int, seed: int) -> None:
    """The members (`cluster`, `doc_index`, `keep`, ...) of a seeded sample of `clusters` clusters, into run.state."""
    run.state.clustered = len(members) > 0
    if len(members):
        ids = np.sort(members["cluster"].unique())
        chosen = np.sort(np.random.default_rng(seed).choice(ids, size=min(clusters, len(ids)), replace=False))
        members = members[members["cluster"].isin(chosen)]
    run.state.sample = members
    run.state.wanted = members["doc_index"].to_numpy()


def apply_info(stage: ClusterDedup, task: Task) -> dict:
    """What `apply_partition` gets for one partition: its removals and the sampled documents."""
    return {"removals": removals_of(stage, task), "wanted": task.arg}


def write_sample(stage: ClusterDedup, run: PhaseRun) -> None:
    if not run.state.clustered:
        return
    wanted = run.state.sample
    texts = [pq.read_table(p).to_pandas() for p in sorted(run.dir.side(SAMPLE_TEXTS).glob("*.parquet"))]
    shutil.rmtree(run.dir.side(SAMPLE_TEXTS), ignore_errors=True)
    wanted = wanted.merge(pd.concat(texts, ignore_index=True), on="doc_index") if texts else wanted.iloc[:0]
    with open(run.dir.clusters_sample, "w", encoding="utf-8") as f:
        for c, grp in wanted.groupby("cluster"):
            kept = grp[grp["keep"]].iloc[0]
            f.write(json.dumps({"cluster": int(c), "kept": {"id": kept["id"], "text": kept["text"][:TEXT_CHARS]},
                                "removed": [{"id": r["id"], "text": r["text"][:TEXT_CHARS]}
                                            for _, r in grp[~grp["keep"]].iterrows()]},
                               ensure_ascii=False) + "\n")


__all__ = ["ClusterDedup", "ClusterState", "SAMPLE_TEXTS", "apply_info", "pick", "write_sample"]
