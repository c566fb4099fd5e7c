"""The exact check of candidate edges: true shingle-set Jaccard (sets of the candidate documents only), and
byte-for-byte identity, which needs no sets."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from gpupipe.kernels.lsh_graph import jaccard, on_device, to_host
from gpupipe.kernels.near_dedup import reaches_threshold, same_bytes
from gpupipe.stages.dedup.fuzzy.config import FuzzyDedupConfig


class ShingleSets(NamedTuple):
    """Documents' sorted distinct shingle hashes, flat: doc_index[i]'s set is flat[offsets[i]:offsets[i + 1]]."""
    doc_index: np.ndarray
    flat: np.ndarray
    offsets: np.ndarray


def shingle_sets(texts: pa.Array, cjk: np.ndarray, doc_index: np.ndarray, cfg: FuzzyDedupConfig,
                 device: str = "cpu") -> ShingleSets:
    """The true shingle sets the MinHash estimates (same kernel code as the signatures; on the GPU, the shingle
    kernel and a device sort)."""
    from gpupipe.kernels.minhash import shingle_hashes_cpu, shingle_hashes_gpu
    from gpupipe.kernels.text_hash import arrow_buffers

    data, offsets = arrow_buffers(texts)
    shingles = shingle_hashes_gpu if device == "gpu" else shingle_hashes_cpu
    flat, offs = shingles(data, offsets, cjk, cfg.word_k, cfg.char_k, distinct=True)
    return ShingleSets(np.asarray(doc_index, np.int64), to_host(flat), to_host(offs))


def shingle_table(sets: ShingleSets) -> pa.Table:
    """doc_index and the set as a list<uint64> column (Arrow list = our flat + offsets)."""
    shingles = pa.LargeListArray.from_arrays(pa.array(sets.offsets, pa.int64()), pa.array(sets.flat, pa.uint64()))
    return pa.table({"doc_index": sets.doc_index, "shingles": shingles})


def sets_of_tables(tables: list[pa.Table]) -> ShingleSets:
    """ShingleSets from `shingle_table`s (one per partition), in the given order."""
    table = pa.concat_tables(tables).combine_chunks() if tables else shingle_table(
        ShingleSets(np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(1, np.int64)))
    col = table.column("shingles").chunk(0) if table.num_rows else pa.array([], pa.large_list(pa.uint64()))
    offsets = col.offsets.to_numpy().astype(np.int64)
    flat = col.values.to_numpy(zero_copy_only=False).astype(np.uint64)[offsets[0]:offsets[-1]]
    return ShingleSets(table.column("doc_index").to_numpy().astype(np.int64), flat, offsets - offsets[0])


def _positions(doc_index: np.ndarray, docs: np.ndarray, what: str) -> np.ndarray:
    """Where each of docs sits in doc_index (KeyError naming `what` when one is missing)."""
    order = np.argsort(doc_index, kind="stable")
    known = doc_index[order]
    i = np.minimum(np.searchsorted(known, docs), max(len(known) - 1, 0))
    if len(docs) and (len(known) == 0 or (known[i] != docs).any()):
        raise KeyError(f"fuzzy dedup: an edge names a document without {what}")
    return order[i]


def identical_texts(edges: pd.DataFrame, texts: pa.Array, doc_index: np.ndarray) -> np.ndarray:
    """Per edge, whether its two documents' texts are byte for byte the same (texts[i] is doc_index[i]'s)."""
    from gpupipe.kernels.text_hash import arrow_buffers

    data, offsets = arrow_buffers(texts)
    return same_bytes(data, offsets, _positions(doc_index, edges["u"].to_numpy(np.int64), "a text"),
                      _positions(doc_index, edges["v"].to_numpy(np.int64), "a text"))


def verify_edges(edges: pd.DataFrame, sets: ShingleSets, threshold: float,
                 identical: np.ndarray | None = None, device: str = "cpu") -> pd.DataFrame:
    """Keep the edges whose shingle-set Jaccard reaches the threshold; adds a `jaccard` column.

    identical: optional, per edge, True where the two texts are the same bytes (identical_texts): Jaccard 1 by
    definition, so those edges need no shingle sets (exact duplicates are most candidate pairs when exact dedup
    has not run first)."""
    jac = np.ones(len(edges), dtype=np.float64)
    check = np.flatnonzero(~identical) if identical is not None else np.arange(len(edges))
    if len(check):
        jac[check] = to_host(jaccard(*on_device(
            device, sets.flat, sets.offsets,
            _positions(sets.doc_index, edges["u"].to_numpy(np.int64)[check], "a shingle set"),
            _positions(sets.doc_index, edges["v"].to_numpy(np.int64)[check], "a shingle set"))))
    return edges.assign(jaccard=jac)[reaches_threshold(jac, threshold)]
