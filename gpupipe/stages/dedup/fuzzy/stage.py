"""The `fuzzy_dedup` stage: its phases, declared; the work is in the sibling modules.

  sign        per partition: band hashes and priority columns (exchange `bands`, one file per partition), and
              band group 0's (band, hash, doc) rows sent to buckets by hash (`keys-g000`)
  route-G     per partition, for band group G >= 1: the same from `bands` (`keys-gG`)
  edges-G     per bucket: star edges of its (band, hash) buckets (`edges-gG`, one file per bucket with edges)
  candidates  driver: the edges, each pair once; their documents (`candidates`)
  shingles    per partition, with `verify`: shingle sets of its candidate documents (`shingles`)
  pair-up     driver: the edges grouped by the two partitions their documents are in (`pairs`)
  verify      per partition pair: true Jaccard per edge from the two partitions' sets, edges below the threshold
              cut (a task holds two partitions' candidate sets at most; the driver, 16 bytes per edge)
  verified    driver: the kept edges, in (u, v) order
  cluster     driver: connected components, one keeper per cluster; the others sent to their partitions
              (`removals`). The driver holds cluster members only, never all documents.
  apply       per partition: its removals dropped as `near_duplicate`; the texts of a seeded sample of clusters
              set aside (exchange `sample-texts`: the part is in memory then, so no phase reads it again for them)
  sample      driver: those texts → clusters_sample.jsonl
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from gpupipe.nvtx_ranges import annotate
from gpupipe.stages.dedup.cluster_sample import ClusterDedup, ClusterState, pick
from gpupipe.stages.dedup.fuzzy.bands import band_rows
from gpupipe.stages.dedup.fuzzy.components import connected_components, priority_frame, remove_all_but_keepers
from gpupipe.stages.dedup.fuzzy.config import FuzzyDedupConfig, lsh_shape
from gpupipe.stages.dedup.fuzzy.edges import unique_edges, star_edges
from gpupipe.columns import text_array
from gpupipe.stages.dedup.fuzzy.signatures import cjk_mask, lsh_band_hashes
from gpupipe.stages.dedup.fuzzy.verify import sets_of_tables, shingle_sets, shingle_table, verify_edges
from gpupipe.stages.phases import BUCKETS, DRIVER, Phase, PhaseRun, Task
from gpupipe.stages.base import DEVICE


@dataclass(slots=True)
class FuzzyState(ClusterState):
    edges: Any = None    # candidate pairs (u, v), then the verified ones with their Jaccard
    pairs: list = field(default_factory=list)   # (group, first, last) edge ranges the verify tasks take


class FuzzyDedup(ClusterDedup):
    name = "fuzzy_dedup"
    resources = DEVICE
    Config = FuzzyDedupConfig
    State = FuzzyState

    def phases(self) -> list[Phase]:
        out = [Phase("sign", sign)]
        for g, group in enumerate(band_groups(self.config)):
            if g:  # sign routes group 0 itself, from the band hashes it just computed
                out.append(Phase(f"route-{g}", route, arg=lambda run, a=(g, group): a))
            out.append(Phase(f"edges-{g}", edges, over=BUCKETS, arg=lambda run, g=g: g))
        out.append(Phase("candidates", candidates, over=DRIVER))
        if self.config.verify:
            out += [Phase("shingles", shingles), Phase("pair-up", pair_up, over=DRIVER),
                    Phase("verify", verify, over=lambda run: run.state.pairs),
                    Phase("verified", verified, over=DRIVER)]
        return out + [Phase("cluster", cluster, over=DRIVER), *self.tail_phases()]


def band_groups(cfg: FuzzyDedupConfig) -> list[list[int]]:
    """The bands, in `band_groups` rounds of exchange (each round's keys are on disk at once, not all bands')."""
    bands, _ = lsh_shape(cfg)
    return [list(map(int, g)) for g in np.array_split(np.arange(bands), min(cfg.band_groups, bands))]


def _needed(path, cfg: FuzzyDedupConfig) -> pd.DataFrame:
    """The columns of a part the signatures and the keeper choice read (text, lang, the priority columns): a part
    carries every earlier stage's columns (dozens of quality signals), read for nothing otherwise. A priority
    column the part lacks is named by `priority_frame`'s error."""
    names = pq.read_schema(path).names
    wanted = {"doc_index", "text", "lang", *(p.lstrip("-") for p in cfg.priority)}
    return pq.read_table(path, columns=[c for c in names if c in wanted]).to_pandas()


def sign(stage: FuzzyDedup, task: Task) -> None:
    cfg = stage.config
    with annotate("gpupipe/fuzzy_dedup/sign"):
        df = _needed(task.item, cfg)
        texts = text_array(df["text"])
        bh = lsh_band_hashes(texts, cjk_mask(df, cfg.cjk_langs, texts), cfg, stage.ctx.seed, stage.ctx.device)
        out = priority_frame(df, cfg, texts).assign(part=np.int64(task.index))
        groups = band_groups(cfg)
        for b in range(bh.shape[1]) if len(groups) > 1 else []:  # later rounds route from the stored hashes
            out[f"b{b}"] = bh[:, b]
        task.exchange.put("bands", task.index, out)
        bands = pd.DataFrame({"doc_index": out["doc_index"], **{f"b{b}": bh[:, b] for b in groups[0]}})
        _send_keys(stage, task, 0, band_rows(bands, groups[0]))


def route(stage: FuzzyDedup, task: Task) -> None:
    g, group = task.arg
    _send_keys(stage, task, g, band_rows(task.exchange.get("bands", task.index), group))


def _send_keys(stage: FuzzyDedup, task: Task, g: int, keys: pd.DataFrame) -> None:
    bucket = keys["hash"].to_numpy(np.uint64) % np.uint64(stage.ctx.shuffle_buckets)
    task.exchange.send(f"keys-g{g:03d}", task.index, keys, bucket.astype(np.int64))


def edges(stage: FuzzyDedup, task: Task) -> int:
    keys = task.exchange.receive(f"keys-g{task.arg:03d}", task.index)
    if keys is None:
        return 0
    found = star_edges(keys, stage.ctx.device)
    if len(found):
        task.exchange.put(f"edges-g{task.arg:03d}", task.index, found.reset_index(drop=True))
    return len(found)


def candidates(stage: FuzzyDedup, run: PhaseRun) -> None:
    ex = run.exchange
    names = [f"edges-g{g:03d}" for g in range(len(band_groups(stage.config)))]
    found = [ex.get(name, k) for name in names for k in ex.keys(name)]
    u = np.concatenate([e["u"].to_numpy(np.int64) for e in found] or [np.array([], np.int64)])
    v = np.concatenate([e["v"].to_numpy(np.int64) for e in found] or [np.array([], np.int64)])
    run.state.edges = e = unique_edges(u, v)
    bands, rows = lsh_shape(stage.config)
    run.extra.update({"bands": bands, "rows": rows, "candidate_edges": len(e)})
    if stage.config.verify and len(e):
        # The candidates go to the workers as one file, not inside every task (the task graph stays small).
        ex.put("candidates", 0, pd.DataFrame({"doc_index": np.union1d(e["u"], e["v"])}))


def shingles(stage: FuzzyDedup, task: Task) -> np.ndarray:
    """The shingle sets of this partition's candidates (exchange `shingles`); returns their doc_index."""
    wanted = task.exchange.get("candidates", 0)
    if wanted is None:
        return np.zeros(0, np.int64)
    df = _needed(task.item, stage.config)
    df = df[df["doc_index"].isin(wanted["doc_index"].to_numpy())]
    if df.empty:
        return np.zeros(0, np.int64)
    texts = text_array(df["text"])
    sets = shingle_sets(texts, cjk_mask(df, stage.config.cjk_langs, texts), df["doc_index"].to_numpy(), stage.config,
                        stage.ctx.device)
    task.exchange.put("shingles", task.index, shingle_table(sets))
    return sets.doc_index


def pair_up(stage: FuzzyDedup, run: PhaseRun) -> None:
    """The candidate edges grouped by the pair of partitions that hold their two documents (exchange `pairs`),
    so that each verify task loads the shingle sets of two partitions at most, never all candidates'."""
    e = run.state.edges
    held = run.results["shingles"]
    doc = np.concatenate(held) if held else np.zeros(0, np.int64)
    part = np.repeat(np.arange(len(held), dtype=np.int64), [len(h) for h in held])
    order = np.argsort(doc, kind="stable")
    pu, pv = (part[order][np.searchsorted(doc[order], e[c].to_numpy(np.int64))] for c in ("u", "v"))
    lo, hi = np.minimum(pu, pv), np.maximum(pu, pv)
    pairs, group = np.unique(np.stack([lo, hi], axis=1), axis=0, return_inverse=True)
    run.exchange.send("pairs", 0, e, group.reshape(-1))   # one file, a destination per partition pair
    run.state.pairs = [(g, int(a), int(b)) for g, (a, b) in enumerate(pairs.tolist())]


def verify(stage: FuzzyDedup, task: Task) -> pd.DataFrame:
    """True Jaccard of one partition pair's candidate edges; those below the threshold are cut."""
    g, a, b = task.item
    ex = task.exchange
    sets = sets_of_tables([ex.get_table("shingles", p) for p in sorted({a, b})])
    return verify_edges(ex.receive("pairs", g), sets, stage.config.threshold, device=stage.ctx.device)


def verified(stage: FuzzyDedup, run: PhaseRun) -> None:
    found = [r for r in run.results["verify"] if len(r)]
    e = pd.concat(found, ignore_index=True) if found else run.state.edges.assign(jaccard=1.0).iloc[:0]
    run.state.edges = e.sort_values(["u", "v"], kind="stable").reset_index(drop=True)
    run.extra["verified_edges"] = len(e)


def cluster(stage: FuzzyDedup, run: PhaseRun) -> None:
    members = connected_components(run.state.edges, stage.ctx.device)
    members = remove_all_but_keepers(run, members, "bands", stage.config.priority)
    pick(run, members, stage.config.sample_clusters, stage.ctx.seed)


__all__ = ["FuzzyDedup"]
