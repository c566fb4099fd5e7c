"""The `simhash_dedup` stage (seed 001 §2.4.5): 64-bit SimHash fingerprints of weighted tokens, documents within
Hamming distance `hamming` (3) of each other are near duplicates; one kept per cluster, as fuzzy dedup keeps.

Phases (declared; `stages/phases.py` runs them):
  sign     per partition: tokens as fuzzy dedup's shingles (words, or characters for CJK documents: its
           `cjk_mask`), fingerprints (kernels/simhash.py, the GPU kernel for device "gpu"); the fingerprint and the
           priority columns kept (exchange `prints`), and one (table, key, fp, doc) row per permuted-block table
           sent to buckets by (table, key) (`keys`)
  pairs    per bucket: documents sharing a table key, within Hamming distance `hamming` (exact popcount), as edges
           (`edges`, one file per bucket with edges)
  cluster  driver: the edges, each pair once; connected components; one keeper per cluster (fuzzy dedup's
           `choose_keepers`: the priority columns, then input order); the others sent to their partitions
  apply, sample  as fuzzy dedup's (`cluster_sample.py`): removals dropped as `near_duplicate`, clusters_sample.jsonl

The tables (kernels/simhash.table_masks): `levels: 2` (default) cuts the 64 bits into hamming + 1 blocks and the
rest of each into hamming + 1 sub-blocks: at distance 3, 16 tables of 28-bit keys (Manku et al. 2007's
permuted-block layout), so a bucket's key is shared by chance by 1 in 2^28 documents; `levels: 1` is the plain
pigeonhole (4 tables of 16-bit keys: a quarter of the rows, but keys shared by chance by 1 in 65,536 documents,
all compared pairwise). Decisions use fingerprints and `doc_index` only: the same removals whatever the
partitioning, bucket count or backend.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from pydantic import Field

from gpupipe.columns import text_array
from gpupipe.config_base import Strict
from gpupipe.kernels.lsh_graph import to_host
from gpupipe.nvtx_ranges import annotate
from gpupipe.stages.base import DEVICE
from gpupipe.stages.dedup.cluster_sample import ClusterDedup, pick
from gpupipe.stages.dedup.fuzzy.components import (choose_keepers, connected_components, priority_frame,
                                                   remove_all_but_keepers)
from gpupipe.stages.dedup.fuzzy.edges import unique_edges
from gpupipe.stages.dedup.fuzzy.signatures import cjk_mask
from gpupipe.stages.phases import BUCKETS, DRIVER, Phase, PhaseRun, Task


class SimHashDedupConfig(Strict):
    hamming: int = Field(3, ge=0, le=15)   # the seed's "Hamming distance <= 3 on 64 bits"
    # Tokens: single words (the seed's weighted bag of words), character bigrams for CJK documents.
    word_k: int = Field(1, ge=1)
    char_k: int = Field(2, ge=1)
    # A token's weight (the seed's w_i, "IDF or 1"): 1 per distinct token ("distinct"), or its count in the document
    # ("count"). On 20,000 documents of the real corpus (profiling/bench_simhash.py) distinct tokens agree with
    # MinHash + exact Jaccard 0.8 far better: precision 0.995 vs 0.869 at the same recall (0.976): counts let a
    # short text's repeated words outvote the rest.
    weights: Literal["count", "distinct"] = "distinct"
    levels: Literal[1, 2] = 2            # permuted-block tables: blocks (1) or blocks x sub-blocks (2)
    cjk_langs: list[str] = ["zh", "ja", "ko"]   # `lang` values tokenized by characters
    priority: list[str] = []             # columns deciding the keeper ("-col" = largest first); then input order
    sample_clusters: int = Field(20, ge=0)  # clusters written side by side to clusters_sample.jsonl for review


class SimHashDedup(ClusterDedup):
    name = "simhash_dedup"
    resources = DEVICE
    Config = SimHashDedupConfig

    def phases(self) -> list[Phase]:
        return [Phase("sign", sign), Phase("pairs", pairs, over=BUCKETS), Phase("cluster", cluster, over=DRIVER),
                *self.tail_phases()]


def masks(cfg: SimHashDedupConfig) -> np.ndarray:
    from gpupipe.kernels.simhash import table_masks

    return table_masks(cfg.hamming, cfg.levels)


def fingerprints(df: pd.DataFrame, cfg: SimHashDedupConfig, device: str) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 SimHash, whether it has tokens) of every document of a frame (its `text`, and `lang` when present).
    A document without tokens (empty, only punctuation) is never a candidate: its fingerprint 0 says nothing
    (identical empty texts are exact dedup's business)."""
    from gpupipe.kernels.simhash import simhash

    texts = text_array(df["text"])
    fp, n = simhash(texts, cjk_mask(df, cfg.cjk_langs, texts), cfg.word_k, cfg.char_k,
                    distinct=cfg.weights == "distinct", device=device, counts=True)
    return to_host(fp), to_host(n) > 0


def table_rows(fp: np.ndarray, doc: np.ndarray, tokens: np.ndarray, cfg: SimHashDedupConfig) -> pd.DataFrame:
    """(table, key, fp, doc_index) of every permuted-block table, for the documents with tokens."""
    from gpupipe.kernels.simhash import table_keys

    m = masks(cfg)
    fp, doc = fp[tokens], doc[tokens]
    table, key = table_keys(fp, m)
    return pd.DataFrame({"table": table, "key": key, "fp": np.tile(fp, len(m)), "doc_index": np.tile(doc, len(m))})


def _needed(path, cfg: SimHashDedupConfig) -> pd.DataFrame:
    names = pq.read_schema(path).names
    wanted = {"doc_index", "text", "lang", *(p.lstrip("-") for p in cfg.priority)}
    return pq.read_table(path, columns=[c for c in names if c in wanted]).to_pandas()


def sign(stage: SimHashDedup, task: Task) -> None:
    from gpupipe.kernels.simhash import route

    cfg = stage.config
    with annotate("gpupipe/simhash_dedup/sign"):
        df = _needed(task.item, cfg)
        fp, tokens = fingerprints(df, cfg, stage.ctx.device)
        out = priority_frame(df, cfg, text_array(df["text"])).assign(part=np.int64(task.index), fp=fp)
        task.exchange.put("prints", task.index, out)
        rows = table_rows(fp, out["doc_index"].to_numpy(np.int64), tokens, cfg)
        bucket = route(rows["table"].to_numpy(np.int64), rows["key"].to_numpy(np.uint64)) \
            % np.uint64(stage.ctx.shuffle_buckets)
        task.exchange.send("keys", task.index, rows, bucket.astype(np.int64))


def pairs(stage: SimHashDedup, task: Task) -> int:
    from gpupipe.kernels.simhash import hamming_edges

    rows = task.exchange.receive("keys", task.index)
    if rows is None:
        return 0
    u, v = hamming_edges(rows["table"].to_numpy(np.int64), rows["key"].to_numpy(np.uint64),
                         rows["fp"].to_numpy(np.uint64), rows["doc_index"].to_numpy(np.int64), stage.config.hamming)
    found = unique_edges(u, v)
    if len(found):
        task.exchange.put("edges", task.index, found)
    return len(found)


def cluster(stage: SimHashDedup, run: PhaseRun) -> None:
    cfg, ex = stage.config, run.exchange
    found = [ex.get("edges", k) for k in ex.keys("edges")]
    edges = unique_edges(np.concatenate([e["u"].to_numpy(np.int64) for e in found] or [np.zeros(0, np.int64)]),
                         np.concatenate([e["v"].to_numpy(np.int64) for e in found] or [np.zeros(0, np.int64)]))
    run.extra.update({"tables": len(masks(cfg)), "edges": len(edges)})
    members = remove_all_but_keepers(run, connected_components(edges, stage.ctx.device), "prints", cfg.priority)
    pick(run, members, cfg.sample_clusters, stage.ctx.seed)


def find_duplicates(df: pd.DataFrame, cfg: SimHashDedupConfig, device: str = "cpu") -> pd.DataFrame:
    """In memory, for one frame (benchmarks, tests): one row per document in a duplicate cluster (doc_index,
    cluster, keep, fp), by the stage's own steps."""
    from gpupipe.kernels.simhash import hamming_edges

    fp, tokens = fingerprints(df, cfg, device)
    doc = df["doc_index"].to_numpy(np.int64)
    rows = table_rows(fp, doc, tokens, cfg)
    edges = unique_edges(*hamming_edges(*(rows[c].to_numpy() for c in ("table", "key", "fp", "doc_index")),
                                        cfg.hamming))
    members = connected_components(edges, device)
    pos = np.flatnonzero(np.isin(doc, members["doc_index"].to_numpy()))
    members = members.merge(priority_frame(df.iloc[pos], cfg, text_array(df["text"]).take(pos)), on="doc_index")
    out = choose_keepers(members, cfg.priority)[["doc_index", "cluster", "keep"]]
    return out.merge(pd.DataFrame({"doc_index": doc, "fp": fp}), on="doc_index")


__all__ = ["SimHashDedup", "SimHashDedupConfig", "find_duplicates", "fingerprints"]
