"""Near-duplicate removal: MinHash signatures → LSH band buckets → candidate edges → (exact Jaccard check) →
connected components → one document kept per cluster.

Phases on the executor (see global_stage.py for the exchange pattern):
  sign    per partition: signatures (MinHash kernel, CUDA or its numba twin) reduced at once to one 64-bit hash per
          band; only band hashes and the priority columns leave the partition (8 bytes × bands per document).
  route   per partition and band group: (band, hash, doc) rows routed to buckets by hash.
  edges   per bucket: documents sharing a (band, hash) bucket become a star of edges to the bucket's first doc.
  verify  optional: shingle sets of the candidate documents only, true Jaccard per edge, edges below threshold cut.
  cluster in the driver: union-find over the edges. Memory is bounded by the candidate documents (those with at
          least one edge), not the corpus: 16 bytes per edge plus the shingle sets when verifying.
  apply   per partition: drop every non-keeper, counted as `near_duplicate`.
Every decision uses hashes, priority columns and `doc_index`, so results do not depend on partitioning, bucket
count or backend.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import numba
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numba import njit, prange
from pydantic import Field, model_validator

from gpupipe.config import Fraction, KeyProblem, Strict
from gpupipe.io.parts import read_part, write_part, write_table
from gpupipe.kernels.minhash import MAX_PERM
from gpupipe.nvtx_ranges import annotate
from gpupipe.stages.base import StageJob, StageStats, peak_rss_mb, worker_stage
from gpupipe.stages.global_stage import GlobalStage, apply_task

CJK_SCRIPT = r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]"
SIZE_BINS = [(2, 2), (3, 5), (6, 10), (11, 100), (101, None)]
# Choosing bands × rows from the threshold scores every b·r ≤ num_perm (lsh.optimal_params): ~num_perm·ln(num_perm)
# shapes, 3 s and 0.7 GB per worker at 4096. Beyond that, bands and rows must be given.
SEARCH_MAX_PERM = 4096


class FuzzyDedupConfig(Strict):
    num_perm: int = Field(128, ge=1, le=MAX_PERM)
    word_k: int = Field(5, ge=1)    # seed 002: 5-word shingles
    char_k: int = Field(3, ge=1)    # seed 002: 3-character shingles for Chinese (ngram_size_zh)
    threshold: float = Field(0.8, gt=0.0, le=1.0)
    bands: int | None = Field(None, ge=1)   # bands × rows given, or chosen from the threshold (FP/FN areas)
    rows: int | None = Field(None, ge=1)
    # Recall-leaning (12 x 10 at 0.8 / 128): the exact Jaccard check below removes the extra candidates this
    # admits. Without `verify`, datasketch's equal weights (9 x 13, seed 002's choice) are the usual pick.
    fp_weight: Fraction = 0.2
    fn_weight: Fraction = 0.8
    cjk_langs: list[str] = ["zh", "ja", "ko"]   # `lang` values shingled by characters
    verify: bool = True             # cut candidate pairs whose true shingle Jaccard is below threshold
    priority: list[str] = []        # columns deciding the keeper ("-col" = largest first); then input order
    band_groups: int = Field(1, ge=1)   # exchange the bands in this many rounds (bounds the exchange on disk)
    sample_clusters: int = Field(20, ge=0)  # clusters written side by side to clusters_sample.jsonl for review

    @model_validator(mode="after")
    def _lsh_shape(self) -> "FuzzyDedupConfig":
        if (self.bands is None) != (self.rows is None):
            missing = "rows" if self.rows is None else "bands"
            raise KeyProblem(missing, "give bands and rows together, or neither (then the threshold chooses them)")
        if self.bands is not None and self.bands * self.rows > self.num_perm:
            raise KeyProblem("bands", f"bands × rows = {self.bands} × {self.rows} = {self.bands * self.rows} "
                                      f"exceeds num_perm {self.num_perm}")
        if self.bands is None and self.num_perm > SEARCH_MAX_PERM:
            raise KeyProblem("num_perm", f"num_perm {self.num_perm} > {SEARCH_MAX_PERM} needs bands and rows: "
                                         "choosing them from the threshold would take minutes and GBs "
                                         "(`gpupipe minhash-params` shows the S-curve of a choice)")
        if self.bands is None and self.fp_weight + self.fn_weight == 0:
            raise KeyProblem("fp_weight", "fp_weight and fn_weight cannot both be 0")
        return self


def lsh_shape(cfg: FuzzyDedupConfig) -> tuple[int, int]:
    if cfg.bands and cfg.rows:
        if cfg.bands * cfg.rows > cfg.num_perm:
            raise ValueError(f"fuzzy_dedup: bands × rows = {cfg.bands * cfg.rows} exceeds num_perm {cfg.num_perm}")
        return cfg.bands, cfg.rows
    from gpupipe.stages.lsh import optimal_params

    return optimal_params(cfg.threshold, cfg.num_perm, cfg.fp_weight, cfg.fn_weight)


# ---------------------------------------------------------------------------------------------------------------
# Pure functions: used by the stage's phases and by find_duplicates (in memory, for tests and benchmarks).
# ---------------------------------------------------------------------------------------------------------------

def _texts(df: pd.DataFrame) -> pa.Array:
    """The text column as one Arrow large_string array (nulls as empty): built once per frame, shared below."""
    arr = pa.array(df["text"], type=pa.large_string(), from_pandas=True).fill_null("")
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def cjk_mask(df: pd.DataFrame, cjk_langs: list[str], texts: pa.Array) -> np.ndarray:
    """1 where a document is shingled by characters: by its `lang`, or by script when there is no `lang`."""
    if "lang" in df.columns:
        return df["lang"].isin(cjk_langs).to_numpy(np.uint8)
    import pyarrow.compute as pc

    cjk = pc.count_substring_regex(texts, CJK_SCRIPT).to_numpy(zero_copy_only=False)
    chars = np.maximum(pc.utf8_length(texts).to_numpy(zero_copy_only=False), 1)
    return (cjk / chars > 0.3).astype(np.uint8)


def lsh_band_hashes(texts: pa.Array, cjk: np.ndarray, cfg: FuzzyDedupConfig, seed: int, device: str) -> np.ndarray:
    """(n, bands) LSH band keys of the documents' MinHash signatures (kernels.minhash.minhash_bands). Only the
    bands × rows permutations the bands read are computed (120 of 128 at 12 × 10): permutation j depends on the seed
    and j alone, so they are the full signature's first columns."""
    from gpupipe.kernels.minhash import minhash_bands

    bands, rows = lsh_shape(cfg)
    return minhash_bands(texts, cjk, bands, rows, seed=seed, word_k=cfg.word_k, char_k=cfg.char_k, device=device)


@njit(cache=True)
def _table_size(rows):
    """Slots of a bucket table for `rows` rows: a power of two, at most half full."""
    size = 16
    while size < 2 * rows:
        size <<= 1
    return size


@njit(cache=True)
def _smallest_in_buckets(hashes, doc, table, first):
    """first[i] = the smallest doc among the rows whose hash equals hashes[i].

    table: (size, 2) int64 of zeros, size a power of two >= 2 * rows: open addressing with linear probing (band
    hashes are already mixed, so their low bits index it); a slot holds the hash and 1 + the smallest doc (0: free).
    O(rows); two passes (fill, then read each row's smallest doc back).
    """
    mask = np.uint64(table.shape[0] - 1)
    slot_of = np.empty(hashes.shape[0], np.int64)
    for i in range(hashes.shape[0]):
        h = np.int64(hashes[i])
        s = np.int64(hashes[i] & mask)
        while table[s, 1] != 0 and table[s, 0] != h:
            s = (s + 1) & np.int64(mask)
        if table[s, 1] == 0:
            table[s, 0], table[s, 1] = h, doc[i] + 1
        elif doc[i] + 1 < table[s, 1]:
            table[s, 1] = doc[i] + 1
        slot_of[i] = s
    for i in range(hashes.shape[0]):
        first[i] = table[slot_of[i], 1] - 1


@njit(cache=True)
def _star_edges(first, doc):
    """(u, v) = (first[g, i], doc[i]) wherever a row's doc is not the smallest of its bucket, in row order."""
    m = 0
    for g in range(first.shape[0]):
        for i in range(first.shape[1]):
            m += first[g, i] != doc[i]
    u = np.empty(m, np.int64)
    v = np.empty(m, np.int64)
    m = 0
    for g in range(first.shape[0]):
        for i in range(first.shape[1]):
            if first[g, i] != doc[i]:
                u[m], v[m] = first[g, i], doc[i]
                m += 1
    return u, v


@njit(parallel=True, cache=True)
def _star(band, hashes, doc):
    """(u, v) per row whose doc is not the smallest doc of its (band, hash) bucket: u = that smallest doc.
    Rows must come grouped by band (see star_edges); bands in parallel."""
    n = band.shape[0]
    cuts = [0]
    for i in range(1, n):
        if band[i] != band[i - 1]:
            cuts.append(i)
    cuts.append(n)
    first = np.empty(n, np.int64)
    for g in prange(len(cuts) - 1):
        start, end = cuts[g], cuts[g + 1]
        table = np.zeros((_table_size(end - start), 2), np.int64)
        _smallest_in_buckets(hashes[start:end], doc[start:end], table, first[start:end])
    return _star_edges(first.reshape(1, n), doc)


@njit(parallel=True, cache=True)
def _star_matrix(keys, doc, workers):
    """_star for an (n, bands) band-key matrix whose row i is doc[i] (what find_duplicates holds): no
    (band, hash, doc) rows to build, and one table per worker, cleared between its bands, instead of one per band
    (fresh memory costs page faults)."""
    n, bands = keys.shape
    first = np.empty((bands, n), np.int64)
    size = _table_size(n)
    for w in prange(workers):
        table = np.empty((size, 2), np.int64)
        for b in range(w, bands, workers):
            table[:] = 0
            _smallest_in_buckets(keys[:, b], doc, table, first[b])
    return _star_edges(first, doc)


def _unique_edges(u: np.ndarray, v: np.ndarray) -> pd.DataFrame:
    """Edges sorted by (u, v) without repeats (a pair shares buckets in several bands)."""
    order = np.lexsort((v, u))
    u, v = u[order], v[order]
    new = np.ones(len(u), dtype=bool)
    new[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
    return pd.DataFrame({"u": u[new], "v": v[new]})


def star_edges(keys: pd.DataFrame) -> pd.DataFrame:
    """Rows (band, hash, doc_index) → edges from every doc of a (band, hash) bucket to its smallest doc_index,
    sorted by (u, v), each pair once."""
    band = keys["band"].to_numpy(np.int64)
    order = np.argsort(band, kind="stable")
    u, v = _star(band[order], keys["hash"].to_numpy(np.uint64)[order], keys["doc_index"].to_numpy(np.int64)[order])
    return _unique_edges(u, v)


class ShingleSets(NamedTuple):
    """Documents' sorted distinct shingle hashes, flat: doc_index[i]'s set is flat[offsets[i]:offsets[i + 1]]."""
    doc_index: np.ndarray
    flat: np.ndarray
    offsets: np.ndarray


def shingle_sets(texts: pa.Array, cjk: np.ndarray, doc_index: np.ndarray, cfg: FuzzyDedupConfig) -> ShingleSets:
    """The true shingle sets the MinHash estimates (same kernel code as the signatures)."""
    from gpupipe.kernels.minhash import shingle_hashes_cpu
    from gpupipe.kernels.text_hash import arrow_buffers

    data, offsets = arrow_buffers(texts)
    flat, offs = shingle_hashes_cpu(data, offsets, cjk, cfg.word_k, cfg.char_k, distinct=True)
    return ShingleSets(np.asarray(doc_index, np.int64), flat, offs)


def write_shingle_sets(sets: ShingleSets, path: Path) -> None:
    """One Parquet file: doc_index and the set as a list<uint64> column (Arrow list = our flat + offsets)."""
    shingles = pa.LargeListArray.from_arrays(pa.array(sets.offsets, pa.int64()), pa.array(sets.flat, pa.uint64()))
    write_table(pa.table({"doc_index": sets.doc_index, "shingles": shingles}), path)


def read_shingle_sets(paths: list[Path]) -> ShingleSets:
    table = pa.concat_tables([pq.read_table(p) for p in paths]).combine_chunks()
    col = table.column("shingles").chunk(0) if table.num_rows else pa.array([], pa.large_list(pa.uint64()))
    offsets = col.offsets.to_numpy().astype(np.int64)
    flat = col.values.to_numpy(zero_copy_only=False).astype(np.uint64)[offsets[0]:offsets[-1]]
    return ShingleSets(table.column("doc_index").to_numpy().astype(np.int64), flat, offsets - offsets[0])


@njit(cache=True)
def _jaccard(flat, offsets, ia, ib, out):
    # Sorted-unique shingle sets: merge-count the intersection of each pair.
    for e in range(ia.shape[0]):
        a0, a1 = offsets[ia[e]], offsets[ia[e] + 1]
        b0, b1 = offsets[ib[e]], offsets[ib[e] + 1]
        i, j, inter = a0, b0, 0
        while i < a1 and j < b1:
            if flat[i] == flat[j]:
                inter += 1
                i += 1
                j += 1
            elif flat[i] < flat[j]:
                i += 1
            else:
                j += 1
        union = (a1 - a0) + (b1 - b0) - inter
        out[e] = inter / union if union > 0 else 1.0


def _positions(doc_index: np.ndarray, docs: np.ndarray, what: str) -> np.ndarray:
    """Where each of docs sits in doc_index (KeyError naming `what` when one is missing)."""
    order = np.argsort(doc_index, kind="stable")
    known = doc_index[order]
    i = np.minimum(np.searchsorted(known, docs), max(len(known) - 1, 0))
    if len(docs) and (len(known) == 0 or (known[i] != docs).any()):
        raise KeyError(f"fuzzy dedup: an edge names a document without {what}")
    return order[i]


@njit(cache=True)
def _same_bytes(data, offsets, ia, ib, out):
    for e in range(ia.shape[0]):
        a0, a1, b0, b1 = offsets[ia[e]], offsets[ia[e] + 1], offsets[ib[e]], offsets[ib[e] + 1]
        same = a1 - a0 == b1 - b0
        k = 0
        while same and k < a1 - a0:
            same = data[a0 + k] == data[b0 + k]
            k += 1
        out[e] = same


def identical_texts(edges: pd.DataFrame, texts: pa.Array, doc_index: np.ndarray) -> np.ndarray:
    """Per edge, whether its two documents' texts are byte for byte the same (texts[i] is doc_index[i]'s)."""
    from gpupipe.kernels.text_hash import arrow_buffers

    data, offsets = arrow_buffers(texts)
    out = np.zeros(len(edges), dtype=bool)
    _same_bytes(data, offsets, _positions(doc_index, edges["u"].to_numpy(np.int64), "a text"),
                _positions(doc_index, edges["v"].to_numpy(np.int64), "a text"), out)
    return out


def verify_edges(edges: pd.DataFrame, sets: ShingleSets, threshold: float,
                 identical: np.ndarray | None = None) -> pd.DataFrame:
    """Keep the edges whose shingle-set Jaccard reaches the threshold; adds a `jaccard` column.

    identical: optional, per edge, True where the two texts are the same bytes (identical_texts): Jaccard 1 by
    definition, so those edges need no shingle sets (exact duplicates are most candidate pairs when exact dedup
    has not run first)."""
    jac = np.ones(len(edges), dtype=np.float64)
    check = np.flatnonzero(~identical) if identical is not None else np.arange(len(edges))
    if len(check):
        part = np.empty(len(check), dtype=np.float64)
        _jaccard(sets.flat, sets.offsets,
                 _positions(sets.doc_index, edges["u"].to_numpy(np.int64)[check], "a shingle set"),
                 _positions(sets.doc_index, edges["v"].to_numpy(np.int64)[check], "a shingle set"), part)
        jac[check] = part
    return edges.assign(jaccard=jac)[jac >= threshold]


@njit(cache=True)
def _union_find(n, u, v):
    parent = np.arange(n)
    for e in range(u.shape[0]):
        a, b = u[e], v[e]
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a != b:
            if a < b:
                parent[b] = a
            else:
                parent[a] = b
    for i in range(n):  # flatten: every node points at its root (the smallest node of the component)
        r = i
        while parent[r] != r:
            r = parent[r]
        parent[i] = r
    return parent


def connected_components(edges: pd.DataFrame, device: str = "cpu") -> pd.DataFrame:
    """Edges (u, v) over doc_index → (doc_index, cluster) for every doc on an edge; cluster = smallest doc_index
    of the component, whichever algorithm found it (union-find here, cuGraph on the GPU when installed)."""
    if edges.empty:
        return pd.DataFrame({"doc_index": np.array([], np.int64), "cluster": np.array([], np.int64)})
    if device == "gpu" and importlib.util.find_spec("cugraph") is not None:
        return _components_cugraph(edges)
    nodes, inv = np.unique(np.concatenate([edges["u"].to_numpy(), edges["v"].to_numpy()]), return_inverse=True)
    root = _union_find(len(nodes), inv[: len(edges)].astype(np.int64), inv[len(edges):].astype(np.int64))
    return pd.DataFrame({"doc_index": nodes.astype(np.int64), "cluster": nodes[root].astype(np.int64)})


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
    order = members.sort_values(["cluster", *cols, "doc_index"],
                                ascending=[True, *[not p.startswith("-") for p in priority], True], kind="stable")
    keep = ~order.duplicated("cluster", keep="first")
    return members.assign(keep=keep.reindex(members.index))


def _priority_frame(df: pd.DataFrame, cfg: FuzzyDedupConfig, texts: pa.Array) -> pd.DataFrame:
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


def find_duplicates(df: pd.DataFrame, cfg: FuzzyDedupConfig, seed: int = 0, device: str = "cpu") -> pd.DataFrame:
    """In memory, for one frame: one row per document in a duplicate cluster (doc_index, cluster, keep)."""
    texts = _texts(df)
    cjk = cjk_mask(df, cfg.cjk_langs, texts)
    doc = df["doc_index"].to_numpy(np.int64)
    bh = lsh_band_hashes(texts, cjk, cfg, seed, device)
    u, v = _star_matrix(bh, doc, max(1, min(bh.shape[1], numba.get_num_threads())))
    edges = _unique_edges(u, v)
    if cfg.verify and len(edges):
        same = identical_texts(edges, texts, doc)
        pos = np.flatnonzero(np.isin(doc, np.union1d(edges["u"][~same], edges["v"][~same])))
        edges = verify_edges(edges, shingle_sets(texts.take(pos), cjk[pos], doc[pos], cfg), cfg.threshold, same)
    members = connected_components(edges, device)
    pos = np.flatnonzero(np.isin(doc, members["doc_index"].to_numpy()))
    members = members.merge(_priority_frame(df.iloc[pos], cfg, texts.take(pos)), on="doc_index")
    return choose_keepers(members, cfg.priority)[["doc_index", "cluster", "keep"]]


def cluster_size_histogram(members: pd.DataFrame) -> dict[str, int]:
    sizes = members.groupby("cluster").size()
    hist = {}
    for lo, hi in SIZE_BINS:
        label = f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi else f">{lo - 1}")
        hist[label] = int(((sizes >= lo) & (sizes <= (hi or np.iinfo(np.int64).max))).sum())
    return hist


# ---------------------------------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------------------------------

class FuzzyDedup(GlobalStage):
    name = "fuzzy_dedup"
    Config = FuzzyDedupConfig

    def execute(self, job: StageJob) -> StageStats:
        cfg, n, ex, spec = self.config, len(job.inputs), job.executor, self.spec()
        bands, rows = lsh_shape(cfg)
        work = job.out_dir / "_exchange"
        parts = list(range(n))
        peaks = ex.map(sign_task, [spec] * n, parts, job.inputs, [work] * n, [bands] * n, [rows] * n)
        groups = [list(g) for g in np.array_split(np.arange(bands), min(cfg.band_groups, bands))]
        edge_files: list[str] = []
        for g, group in enumerate(groups):
            gdir = work / f"group-{g:03d}"
            b = job.ctx.shuffle_buckets
            peaks += ex.map(route_task, [spec] * n, parts, [work] * n, [gdir] * n, [group] * n, [b] * n)
            edge_files += [f for f in ex.map(edges_task, [spec] * b, list(range(b)), [gdir] * b) if f]
        found = [read_part(f) for f in edge_files]
        edges = _unique_edges(np.concatenate([e["u"].to_numpy(np.int64) for e in found] or [np.array([], np.int64)]),
                              np.concatenate([e["v"].to_numpy(np.int64) for e in found] or [np.array([], np.int64)]))
        extra = Counter({"bands": bands, "rows": rows, "candidate_edges": len(edges)})
        if cfg.verify and len(edges):
            # The candidates go to the workers as one file, not inside every task (the task graph stays small).
            cand_file = work / "candidates.parquet"
            write_part(pd.DataFrame({"doc_index": np.union1d(edges["u"], edges["v"])}), cand_file)
            set_files = ex.map(shingles_task, [spec] * n, parts, job.inputs, [work] * n, [cand_file] * n)
            edges = verify_edges(edges, read_shingle_sets([f for f in set_files if f]), cfg.threshold)
            extra["verified_edges"] = len(edges)
        members = connected_components(edges, job.ctx.device)
        if len(members):
            cols = ["doc_index", "part", "length", *[c for c in dict.fromkeys(p.lstrip("-") for p in cfg.priority)
                                                     if c != "length"]]
            ids = members["doc_index"].to_numpy(np.int64)  # the driver holds cluster members only, never all docs
            docs = pd.concat([_rows_of(work / "bands" / f"part-{p:06d}.parquet", cols, ids) for p in parts],
                             ignore_index=True)
            members = choose_keepers(members.merge(docs, on="doc_index"), cfg.priority)
            for part, grp in members[~members["keep"]].groupby("part"):
                write_part(grp[["doc_index"]].assign(reason="near_duplicate").reset_index(drop=True),
                           work / f"removals-p{int(part):06d}" / "bucket-00000.parquet")
        results = ex.map(apply_task, [spec] * n, parts, job.inputs, [job.out_dir] * n, [work] * n,
                         progress=job.progress)
        total = StageStats()
        for r in results:
            total.merge(StageStats.from_dict(r))
        clusters = members["cluster"].nunique() if len(members) else 0
        extra.update({"clusters": clusters, "duplicates_removed": int((~members["keep"]).sum()) if len(members)
                      else 0})
        extra.update({f"cluster_size_{k}": v for k, v in cluster_size_histogram(members).items()} if len(members)
                     else {})
        total.extra = extra
        total.extra["peak_rss_mb_worker"] = round(max(peaks, default=0.0), 1)
        if len(members):
            self._write_sample(job, members, ex)
        shutil.rmtree(work, ignore_errors=True)
        return total

    def _write_sample(self, job: StageJob, members: pd.DataFrame, ex) -> None:
        """clusters_sample.jsonl: for a seeded sample of clusters, the kept text beside the removed ones."""
        rng = np.random.default_rng(job.ctx.seed)
        ids = np.sort(members["cluster"].unique())
        chosen = np.sort(rng.choice(ids, size=min(self.config.sample_clusters, len(ids)), replace=False))
        wanted = members[members["cluster"].isin(chosen)]
        n = len(job.inputs)
        texts = pd.concat(ex.map(texts_task, job.inputs, [wanted["doc_index"].to_numpy()] * n), ignore_index=True)
        wanted = wanted.merge(texts, on="doc_index")
        with open(job.out_dir / "clusters_sample.jsonl", "w", encoding="utf-8") as f:
            for cluster, grp in wanted.groupby("cluster"):
                kept = grp[grp["keep"]].iloc[0]
                f.write(json.dumps({"cluster": int(cluster), "kept": {"id": kept["id"], "text": kept["text"][:2000]},
                                    "removed": [{"id": r["id"], "text": r["text"][:2000]}
                                                for _, r in grp[~grp["keep"]].iterrows()]},
                                   ensure_ascii=False) + "\n")


def sign_task(spec, part: int, in_path: Path, work: Path, bands: int, rows: int) -> float:
    stage = worker_stage(spec)
    with annotate("gpupipe/fuzzy_dedup/sign"):
        df = read_part(in_path)
        texts = _texts(df)
        bh = lsh_band_hashes(texts, cjk_mask(df, stage.config.cjk_langs, texts), stage.config, stage.ctx.seed,
                             stage.ctx.device)
        out = _priority_frame(df, stage.config, texts).assign(part=np.int64(part))
        for b in range(bands):
            out[f"b{b}"] = bh[:, b]
        write_part(out, Path(work) / "bands" / f"part-{part:06d}.parquet")
    return peak_rss_mb()


def route_task(spec, part: int, work: Path, gdir: Path, group: list[int], buckets: int) -> float:
    bands = read_part(Path(work) / "bands" / f"part-{part:06d}.parquet")
    doc = bands["doc_index"].to_numpy(np.int64)
    keys = pd.DataFrame({"band": np.repeat(np.asarray(group, np.int64), len(bands)),
                         "hash": np.concatenate([bands[f"b{b}"].to_numpy(np.uint64) for b in group])
                         if len(group) else np.array([], np.uint64),
                         "doc_index": np.tile(doc, len(group))})
    route = (keys["hash"].to_numpy(np.uint64) % np.uint64(buckets)).astype(np.int64)
    for j, grp in keys.groupby(route, sort=True):
        write_part(grp.reset_index(drop=True), Path(gdir) / f"keys-b{j:05d}" / f"part-{part:06d}.parquet")
    return peak_rss_mb()


def edges_task(spec, bucket: int, gdir: Path) -> str | None:
    files = sorted((Path(gdir) / f"keys-b{bucket:05d}").glob("part-*.parquet"))
    if not files:
        return None
    edges = star_edges(pd.concat([read_part(f) for f in files], ignore_index=True))
    if edges.empty:
        return None
    out = Path(gdir) / "edges" / f"bucket-{bucket:05d}.parquet"
    write_part(edges.reset_index(drop=True), out)
    return str(out)


def _rows_of(path: Path, columns: list[str], doc_index: np.ndarray) -> pd.DataFrame:
    """The rows of a part whose doc_index is in `doc_index`, only `columns`."""
    df = pd.read_parquet(path, columns=columns)
    return df[np.isin(df["doc_index"].to_numpy(np.int64), doc_index)]


def shingles_task(spec, part: int, in_path: Path, work: Path, candidates_file: Path) -> str | None:
    stage = worker_stage(spec)
    df = read_part(in_path)
    df = df[df["doc_index"].isin(read_part(candidates_file)["doc_index"].to_numpy())]
    if df.empty:
        return None
    out = Path(work) / "shingles" / f"part-{part:06d}.parquet"
    texts = _texts(df)
    write_shingle_sets(shingle_sets(texts, cjk_mask(df, stage.config.cjk_langs, texts), df["doc_index"].to_numpy(),
                                    stage.config), out)
    return str(out)


def texts_task(in_path: Path, wanted: np.ndarray) -> pd.DataFrame:
    df = pd.read_parquet(in_path, columns=["id", "doc_index", "text"])
    return df[df["doc_index"].isin(wanted)]


__all__ = ["FuzzyDedup", "FuzzyDedupConfig", "find_duplicates", "connected_components", "star_edges",
           "lsh_band_hashes", "verify_edges", "choose_keepers", "lsh_shape"]
