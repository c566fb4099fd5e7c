"""The `semantic_dedup` stage (NeMo Curator's SemDeDup): embeddings → seeded k-means → within-cluster cosine
pairs → one document kept per group. Its phases, declared (`stages/phases.py` runs them):

  embed        per partition: mean-pooled, normalised embeddings of its documents with doc_index, part and the
               priority columns (exchange `embeddings`, one file per partition)
  centroids    driver: a seeded sample (documents whose hash of (doc_index, seed) falls under sample/N, so the
               same documents whatever the partitioning) read partition by partition; spherical k-means on it
               (torch, on the GPU with device gpu); the centroids (exchange `centroids`, one small file)
  assign       per partition: each document's nearest centroid; rows sent to buckets by cluster (`assigned`),
               so every cluster lies in one bucket; returns the cluster sizes
  compare      per bucket: per cluster, every pair at cosine ≥ threshold (blocks of rows, the cluster's m² only),
               connected components over those pairs, one keeper per group by `priority` then doc_index (as
               fuzzy dedup); the others sent to their partitions (`removals`); returns the groups' members
  cluster      driver: counters, cluster-size histograms (duplicate groups: cluster_size_*; k-means clusters:
               kmeans_*), a seeded sample of groups
  apply        per partition: its removals dropped as `semantic_duplicate`
  sample       the texts of the sampled groups, set aside by apply → clusters_sample.jsonl (cluster_sample.py)

Memory: a worker holds one partition's embeddings or one bucket's clusters; the driver the k-means sample, the
centroids and the duplicate groups' members. Pairs across two k-means clusters are not compared (SemDeDup's
trade-off: more clusters, faster and fewer such misses only when duplicates sit near a boundary).

Determinism: every decision uses embeddings, doc_index and the priority columns; embeddings do not depend on the
batching (to fp32 rounding on the CPU), the sample and the k-means seeding on the seed only, so removals do not
depend on partitioning or bucket count. On the GPU (bf16 embeddings) a pair within ~1e-2 of the threshold may
decide differently from the CPU.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pandas as pd
import pyarrow as pa

from gpupipe.io.parts import read_part
from gpupipe.kernels._mersenne import splitmix64_array
from gpupipe.models.ref import model_path
from gpupipe.stages.dedup.fuzzy.components import choose_keepers, cluster_size_histogram, connected_components
from gpupipe.stages.dedup.cluster_sample import ClusterDedup, pick
from gpupipe.stages.dedup.global_stage import send_removals
from gpupipe.stages.phases import BUCKETS, DRIVER, Phase, PhaseRun, Task
from gpupipe.stages.dedup.semantic.config import SemanticDedupConfig
from gpupipe.stages.dedup.semantic.kmeans import assign_clusters, kmeans
from gpupipe.stages.dedup.semantic.pairs import similar_pairs
from gpupipe.stages.base import DEVICE

REASON = "semantic_duplicate"
_MIX = np.uint64(0x9E3779B97F4A7C15)


def sample_hash(doc_index: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 of (doc_index, seed): a uniform uint64 per document, the same in every partitioning."""
    with np.errstate(over="ignore"):
        z = np.asarray(doc_index, np.uint64) + np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _MIX + _MIX
        return splitmix64_array(z)   # kernels/_mersenne.py


def _embedding_column(emb: np.ndarray) -> pa.Array:
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), emb.shape[1] if emb.ndim == 2 else 0)


def _embeddings(table: pa.Table) -> np.ndarray:
    col = table.column("embedding").combine_chunks()
    d = col.type.list_size
    return col.flatten().to_numpy(zero_copy_only=False).reshape(-1, d) if len(col) else np.zeros((0, d), np.float32)


class SemanticDedup(ClusterDedup):
    name = "semantic_dedup"
    resources = DEVICE
    Config = SemanticDedupConfig

    def setup(self) -> None:
        self._lock = threading.Lock()   # the model loads on the first embed task (other phases do not need it)
        self._encoder = None

    def encoder(self):
        with self._lock:
            if self._encoder is None:
                from gpupipe.models.encoder import Encoder

                c = self.config
                self._encoder = Encoder(model_path(c.model), head="embed", device=self.device(), dtype=c.dtype,
                                        max_length=c.max_length, truncation=c.truncation)
            return self._encoder

    def device(self) -> str:
        return self.ctx.device if self.config.device == "auto" else self.config.device

    def phases(self) -> list[Phase]:
        return [Phase("embed", embed), Phase("centroids", centroids, over=DRIVER), Phase("assign", assign),
                Phase("compare", compare, over=BUCKETS), Phase("cluster", cluster, over=DRIVER),
                *self.tail_phases()]


def priority_columns(cfg: SemanticDedupConfig) -> list[str]:
    return [c for c in dict.fromkeys(p.lstrip("-") for p in cfg.priority) if c != "length"]


def embed(stage: SemanticDedup, task: Task) -> dict[str, int]:
    cfg = stage.config
    df = read_part(task.item)
    if not len(df):
        return {"docs": 0, "tokens": 0, "truncated": 0}
    texts = df["text"].fillna("").astype(str)
    emb, truncated, tokens = stage.encoder().embed(texts.tolist(), cfg.batch_size, cfg.batch_tokens)
    cols = {"doc_index": pa.array(df["doc_index"].to_numpy(np.int64)),
            "part": pa.array(np.full(len(df), task.index, np.int64)),
            "length": pa.array(texts.str.len().to_numpy(np.int64))}
    for c in priority_columns(cfg):
        if c not in df.columns:
            raise KeyError(f"semantic_dedup priority column '{c}' is not in the documents "
                           f"(columns: {', '.join(df.columns)})")
        cols[c] = pa.array(df[c].to_numpy())
    cols["embedding"] = _embedding_column(emb)
    task.exchange.put("embeddings", task.index, pa.table(cols))
    return {"docs": len(df), "tokens": int(tokens), "truncated": int(truncated.sum())}


def centroids(stage: SemanticDedup, run: PhaseRun) -> None:
    cfg, ex, seed = stage.config, run.exchange, stage.ctx.seed
    done = run.results["embed"]
    n = sum(r["docs"] for r in done)
    run.extra.update({"docs_embedded": n, "model_tokens": sum(r["tokens"] for r in done),
                      "docs_truncated": sum(r["truncated"] for r in done)})
    if n == 0:
        return
    share = min(1.0, cfg.kmeans_sample / n)
    cut = np.uint64(min(int(share * 2.0**64), 2**64 - 1))
    picked, docs = [], []
    for p in ex.keys("embeddings"):   # one partition at a time: the driver holds the sample only
        t = ex.get_table("embeddings", p, columns=["doc_index", "embedding"])
        doc = t.column("doc_index").to_numpy()
        take = np.flatnonzero(sample_hash(doc, seed) <= cut) if share < 1.0 else np.arange(len(doc))
        picked.append(_embeddings(t.take(pa.array(take, pa.int64()))))
        docs.append(doc[take])
    doc = np.concatenate(docs)
    x = np.concatenate(picked)[np.argsort(doc, kind="stable")]   # doc_index order: partition-independent
    k = cfg.n_clusters or max(1, math.ceil(n / cfg.cluster_docs))
    cent, iters = kmeans(x, k, seed, cfg.kmeans_iterations, stage.device())
    ex.put("centroids", 0, pa.table({"embedding": _embedding_column(cent)}))
    run.extra.update({"kmeans_clusters": len(cent), "kmeans_sample_docs": len(x), "kmeans_iterations": iters})


def assign(stage: SemanticDedup, task: Task) -> np.ndarray:
    ex = task.exchange
    t = ex.get_table("embeddings", task.index)
    cent = ex.get_table("centroids", 0)
    if t is None or cent is None:
        return np.zeros(0, np.int64)
    c = _embeddings(cent)
    cluster = assign_clusters(_embeddings(t), c, stage.device())
    t = t.append_column("cluster", pa.array(cluster))
    ex.send("assigned", task.index, t, cluster % stage.ctx.shuffle_buckets)
    return np.bincount(cluster, minlength=len(c))


def compare(stage: SemanticDedup, task: Task) -> dict:
    cfg, ex = stage.config, task.exchange
    tables = [t for _, t in ex.receive_tables("assigned", task.index)]
    none = {"pairs": 0, "members": None}
    if not tables:
        return none
    t = pa.concat_tables(tables)
    emb = _embeddings(t)
    meta = t.drop_columns(["embedding"]).to_pandas()
    members, pairs = [], 0
    for _, rows in meta.groupby("cluster", sort=True):
        if len(rows) < 2:
            continue
        pos = rows.index.to_numpy()
        edges = similar_pairs(emb[pos], rows["doc_index"].to_numpy(np.int64), cfg.threshold, stage.device())
        if not len(edges):
            continue
        pairs += len(edges)
        groups = connected_components(edges[["u", "v"]])
        members.append(groups.merge(rows.drop(columns=["cluster"]), on="doc_index")
                       .assign(kmeans_cluster=int(rows["cluster"].iloc[0])))
    if not members:
        return none
    m = choose_keepers(pd.concat(members, ignore_index=True), cfg.priority)
    gone = m.loc[~m["keep"], ["doc_index", "part"]].assign(reason=REASON)
    send_removals(ex, task.index, gone)
    return {"pairs": pairs, "members": m[["doc_index", "cluster", "keep", "kmeans_cluster"]]}


def cluster(stage: SemanticDedup, run: PhaseRun) -> None:
    cfg = stage.config
    sizes = [s for s in run.results["assign"] if len(s)]
    if sizes:
        total = np.sum(np.stack(sizes), axis=0)
        run.extra.update({"kmeans_size_max": int(total.max()), "kmeans_size_median": float(np.median(total)),
                          "kmeans_size_min": int(total.min()), "kmeans_empty_clusters": int((total == 0).sum())})
        for lo, hi in ((1, 1), (2, 10), (11, 100), (101, 1000), (1001, None)):
            label = f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi else f">{lo - 1}")
            run.extra[f"kmeans_clusters_of_{label}"] = int(((total >= lo) & (total <= (hi or total.max()))).sum())
    found = [r["members"] for r in run.results["compare"] if r["members"] is not None]
    members = (pd.concat(found, ignore_index=True) if found else
               pd.DataFrame({"doc_index": np.zeros(0, np.int64), "cluster": np.zeros(0, np.int64),
                             "keep": np.zeros(0, bool)}))
    run.extra.update({"similar_pairs": sum(r["pairs"] for r in run.results["compare"]),
                      "clusters": int(members["cluster"].nunique()),
                      "duplicates_removed": int((~members["keep"]).sum())})
    if len(members):
        run.extra.update({f"cluster_size_{k}": v for k, v in cluster_size_histogram(members).items()})
    pick(run, members, cfg.sample_clusters, stage.ctx.seed)


__all__ = ["SemanticDedup", "sample_hash"]
