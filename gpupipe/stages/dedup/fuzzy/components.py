"""Clusters and keepers: connected components over the verified edges (union-find, or cuGraph on the GPU),
one keeper per cluster by the priority columns then input order, and the cluster-size histogram."""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pandas as pd
import pyarrow as pa

from gpupipe.kernels.lsh_graph import components, on_device, to_host
from gpupipe.stages.dedup.fuzzy.config import FuzzyDedupConfig
from gpupipe.stages.dedup.global_stage import send_removals

SIZE_BINS = [(2, 2), (3, 5), (6, 10), (11, 100), (101, None)]


def connected_components(edges: pd.DataFrame, device: str = "cpu") -> pd.DataFrame:
    """Edges (u, v) over doc_index → (doc_index, cluster) for every doc on an edge; cluster = smallest doc_index
    of the component, whichever algorithm found it (union-find here, cuGraph on the GPU when installed)."""
    if edges.empty:
        return pd.DataFrame({"doc_index": np.array([], np.int64), "cluster": np.array([], np.int64)})
    if device == "gpu" and importlib.util.find_spec("cugraph") is not None:
        return _components_cugraph(edges)
    # union-find on the CPU; on a GPU without cuGraph, min-label propagation (kernels/lsh_graph.py): same labels
    nodes, cluster = components(*on_device(device, edges["u"].to_numpy(np.int64), edges["v"].to_numpy(np.int64)))
    return pd.DataFrame({"doc_index": to_host(nodes), "cluster": to_host(cluster)})


def _components_cugraph(edges: pd.DataFrame) -> pd.DataFrame:
    # cugraph.weakly_connected_components(G) → cudf frame with `vertex` and `labels` (docs.rapids.ai, cugraph API:
    # weakly_connected_components); labels are arbitrary, so each component is renamed to its smallest vertex.
    import cudf
    import cugraph

    g = cugraph.Graph(directed=False)
    g.from_cudf_edgelist(cudf.DataFrame({"src": edges["u"].to_numpy(), "dst": edges["v"].to_numpy()}),
                         source="src", destination="dst", renumber=True)
    cc = cugraph.weakly_connected_components(g)
    cc["cluster"] = cc.groupby("labels")["vertex"].transform("min")
    out = cc[["vertex", "cluster"]].rename(columns={"vertex": "doc_index"}).to_pandas()
    return out.sort_values("doc_index", ignore_index=True).astype(np.int64)


def choose_keepers(members: pd.DataFrame, priority: list[str]) -> pd.DataFrame:
    """members: doc_index, cluster and the priority columns → adds `keep` (one True per cluster)."""
    cols = [p.lstrip("-") for p in priority]
    missing = [c for c in cols if c not in members.columns]
    if missing:
        raise KeyError(f"fuzzy_dedup priority names columns the documents lack: {missing}")
    ranked = members.assign(**{c: tier_rank(members[c].to_numpy()) for c in cols if c == DOMAIN_TIER})
    order = ranked.sort_values(["cluster", *cols, "doc_index"],
                                ascending=[True, *[not p.startswith("-") for p in priority], True], kind="stable")
    keep = ~order.duplicated("cluster", keep="first")
    return members.assign(keep=keep.reindex(members.index))


DOMAIN_TIER = "domain_tier"   # url_filter's label: an ordered category, not text ("none" sorts before "tier1")


def tier_rank(values) -> np.ndarray:
    """domain_tier as an ordered category: tier1 < tier2 < ... < tier10 (by the number a name ends with, then as
    text) < "none" and null (untiered) last. Ranks (0 = best), for sorting."""
    def key(v):
        if v is None or v != v or v == "none":
            return (1, 0, "")
        digits = re.search(r"(\d+)$", str(v))
        return (0, int(digits.group(1)) if digits else -1, str(v))
    keys = [key(v) for v in np.asarray(values, dtype=object).tolist()]
    rank = {k: i for i, k in enumerate(sorted(set(keys)))}
    return np.array([rank[k] for k in keys], dtype=np.int64)


def priority_frame(df: pd.DataFrame, cfg: FuzzyDedupConfig, texts: pa.Array) -> pd.DataFrame:
    """doc_index, length and the priority columns of documents: what `choose_keepers` ranks clusters by."""
    import pyarrow.compute as pc

    out = pd.DataFrame({"doc_index": df["doc_index"].to_numpy(np.int64),
                        "length": pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)})
    for p in cfg.priority:
        col = p.lstrip("-")
        if col != "length":
            if col not in df.columns:
                raise KeyError(f"fuzzy_dedup priority column '{col}' is not in the documents "
                               f"(columns: {', '.join(df.columns)})")
            out[col] = df[col].to_numpy()
    return out


def cluster_size_histogram(members: pd.DataFrame) -> dict[str, int]:
    sizes = members.groupby("cluster").size()
    hist = {}
    for lo, hi in SIZE_BINS:
        label = f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi else f">{lo - 1}")
        hist[label] = int(((sizes >= lo) & (sizes <= (hi or np.iinfo(np.int64).max))).sum())
    return hist


def remove_all_but_keepers(run, members: pd.DataFrame, table: str, priority: list[str]) -> pd.DataFrame:
    """The clusters' removals (every member but its keeper, by `priority`) sent to their partitions, and the
    counters in `run.extra`; `table`: the exchange that holds each partition's doc_index, part, length and priority
    columns. Returns the members with their `keep` flag (empty without clusters)."""
    if not len(members):
        run.extra.update({"clusters": 0, "duplicates_removed": 0})
        return members
    ex = run.exchange
    cols = ["doc_index", "part", "length", *[c for c in dict.fromkeys(p.lstrip("-") for p in priority)
                                             if c != "length"]]
    ids = members["doc_index"].to_numpy(np.int64)  # the driver holds cluster members only, never all docs
    docs = pd.concat([_rows_of(ex.get(table, p, columns=cols), ids) for p in range(run.partitions)],
                     ignore_index=True)
    members = choose_keepers(members.merge(docs, on="doc_index"), priority)
    send_removals(ex, 0, members.loc[~members["keep"], ["doc_index", "part"]].assign(reason="near_duplicate"))
    run.extra.update({"clusters": members["cluster"].nunique(), "duplicates_removed": int((~members["keep"]).sum())})
    run.extra.update({f"cluster_size_{k}": v for k, v in cluster_size_histogram(members).items()})
    return members


def _rows_of(df: pd.DataFrame, doc_index: np.ndarray) -> pd.DataFrame:
    return df[np.isin(df["doc_index"].to_numpy(np.int64), doc_index)]
