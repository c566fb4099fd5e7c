"""Exact-substring dedup: repeated spans of at least `min_length` bytes are cut from every document but the first
that holds them (Lee et al. 2022, "Deduplicating Training Data Makes Language Models Better", ExactSubstr).

Definition. Let L = `min_length`. A *window* is L consecutive bytes of one document's UTF-8 text (never across two
documents). Documents are ordered by `doc_index` (the global input order) and bytes by offset, so every window
occurrence has a position (doc_index, offset); the *first occurrence* of a window is its smallest position.
An occurrence at p is a *duplicate* when
  within_document = false (default): the window's first occurrence lies in an earlier document;
  within_document = true:             p is not the window's first occurrence (repeats inside a document count too).
A document loses the union of [p, p + L) over its duplicate occurrences p, shrunk to whole characters (a character
is cut only if all its bytes are covered) and, with `snap_to_whitespace`, moved inward to the nearest whitespace
within SNAP_REACH_BYTES. Cuts only ever shrink, so no byte outside a repeated span is touched. A document that
lost bytes and keeps fewer than `min_remaining_chars` non-blank characters is dropped
(`substring_duplicate_too_short`). Consequences: a paragraph of >= L bytes copied onto later pages stays whole in
its first page and disappears from the others; a document equal to an earlier one (and >= L bytes) is cut to
nothing and dropped while the first stays byte-identical; spans shorter than L are never touched.

Why not Lee et al.'s rule: their `collect` step strikes *every* copy of a repeated span, the first included (their
README: "completely striking them from the dataset"). That deletes a repeated paragraph, or a page that has
mirrors, from the corpus altogether: the model never sees that text, not even once. Keeping the first copy
is what the seed asks ("移除跨文档的重复段落") and matches exact/fuzzy dedup's first-occurrence-wins.
`within_document` defaults to false for the same reason: the seed targets cross-document repeats (reposted news,
templates); repetition inside a page is the repetition filters' business (they drop, they do not cut).

Method. Documents are joined with one 0xFF byte after each (0xFF never occurs in UTF-8, so it cannot be text).
libdivsufsort (pydivsufsort) builds the suffix array SA; numba computes the LCP of SA-adjacent suffixes in O(n)
(Kasai's algorithm in its Φ form, Kärkkäinen et al. 2009: permuted LCP computed in place over the Φ array, so LCP
costs one array, not two), clipped at the separator so no match crosses a document boundary. Suffixes sharing a
window are exactly the maximal SA runs whose adjacent clipped LCP is >= L; in each run the smallest text position
is the first occurrence and the others are marked (subject to `within_document`).

Scale. The suffix array is built per *group*: consecutive partitions holding up to `group_bytes` of text. Memory
of a group task: text n + SA 4n (8n past 2 GiB) + LCP 4n + marks n = 10 bytes per text byte (18 past 2 GiB), plus
the Arrow text column it reads (~n). The default 256 MiB group needs about 3 GiB.
Repeats across groups are caught exactly by a second pass over a small subset of the text:
  1. Each group also winnows its text (Schleimer et al. 2003): hashes of every K-byte gram (K = min(64, L/2)), and
     in every run of L - K + 1 consecutive grams - one per window - the rightmost minimal hash is an *anchor*.
     Equal windows have equal anchors at the same relative offset, so every occurrence of a window owns an anchor
     with the same hash. Anchors are ~2/(L - K + 2) of positions (1% on news text at L = 200), routed to buckets
     by hash.
  2. Per bucket: hashes whose anchors lie in >= 2 groups are cross-group candidates; they are packed into batches
     of at most `group_bytes` of region text (all anchors of one hash in one batch).
  3. Per group: each candidate anchor a yields the region [a - (L - K), a + L) (clipped to its document), which
     contains every window that owns a. Regions of one document in one batch are merged.
  4. Per batch: the same suffix-array marking over the regions, ordered by (doc_index, offset).
Soundness: each pass marks an occurrence only when an earlier equal window (in another document, when
within_document is false) lies in the text that pass sees - a group, or a batch's regions: subsets of the corpus -
so the first occurrence is earlier still (and, documents being contiguous in that order, in an earlier document
too). Completeness: a window
repeated within one group is marked by pass 1 unless its first occurrence lies in an earlier group; then it occurs
in >= 2 groups, its anchor hash is a candidate, and pass 2 holds all its occurrences. So the union of both
passes' marks is exactly the definition, and the output does not depend on partitioning or `group_bytes`. Pass 2
costs 10 bytes per region byte; regions are <= 2L - K bytes per candidate anchor. The one unbounded case is a
single anchor hash repeated in more than group_bytes / (2L - K) places across groups (~800k at the defaults): its
batch exceeds group_bytes (stated; not split, since splitting it would lose completeness). Measured on 39 MB of
news text (profiling/bench_substring.py): regions are 18% of the text with 5 groups, 31% with 20, and the output
is byte-identical to one group's.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numba import njit
from pydantic import Field

from gpupipe.config import Strict
from gpupipe.io.parts import read_part, write_part
from gpupipe.kernels._mersenne import splitmix64
from gpupipe.nvtx_ranges import annotate
from gpupipe.stages.base import MapStage, StageJob, StageStats, map_partition_task, peak_rss_mb, worker_stage

SEP = 0xFF                 # document separator in the joined text: not a UTF-8 byte
ANCHOR_K_MAX = 64          # winnowing gram length (bytes) for the cross-group pass, at most min_length / 2
SNAP_REACH_BYTES = 64      # how far a cut point may move inward to reach whitespace
REASON = "substring_duplicate_too_short"
_WS = np.zeros(256, dtype=np.bool_)
_WS[[9, 10, 11, 12, 13, 32]] = True   # ASCII whitespace; multi-byte spaces are not cut points


class SubstringDedupConfig(Strict):
    min_length: int = Field(200, ge=16, description="shortest repeated span removed, in UTF-8 bytes")
    within_document: bool = False        # also cut a window's later repeats inside the document that has it first
    min_remaining_chars: int = Field(50, ge=0, description="a cut document keeping fewer non-blank chars is dropped")
    snap_to_whitespace: bool = False     # move cut points inward to whitespace (keeps words whole where possible)
    group_bytes: int = Field(256 * 2**20, ge=1, description="text bytes per suffix-array group (memory ~10x)")


# ---------------------------------------------------------------------------------------------------------------
# Kernels (numba, CPU)
# ---------------------------------------------------------------------------------------------------------------

@njit(cache=True)
def _join(data, offsets):
    """Texts → one buffer with SEP after each; seg_starts[i] = where text i begins (n + 1 entries)."""
    m = offsets.shape[0] - 1
    total = (offsets[m] - offsets[0]) + m
    out = np.empty(total, dtype=np.uint8)
    starts = np.empty(m + 1, dtype=np.int64)
    pos = 0
    for i in range(m):
        starts[i] = pos
        for j in range(offsets[i], offsets[i + 1]):
            out[pos] = data[j]
            pos += 1
        out[pos] = SEP
        pos += 1
    starts[m] = pos
    return out, starts


@njit(cache=True)
def _permuted_lcp(text, sa):
    """PLCP[i] = common prefix of suffix i and its SA predecessor, stopping at SEP (Kasai, Φ form, in place)."""
    n = sa.shape[0]
    phi = np.empty_like(sa)
    if n == 0:
        return phi
    phi[sa[0]] = -1
    for r in range(1, n):
        phi[sa[r]] = sa[r - 1]
    h = 0
    for i in range(n):
        j = phi[i]
        if j < 0:
            h = 0
            phi[i] = 0
            continue
        # Clipping keeps Kasai's invariant PLCP[i+1] >= PLCP[i] - 1: min(lcp, distance to SEP) drops by <= 1 too.
        while i + h < n and j + h < n and text[i + h] == text[j + h] and text[i + h] != SEP:
            h += 1
        phi[i] = h
        if h > 0:
            h -= 1
    return phi


@njit(cache=True)
def _mark_duplicates(sa, plcp, seg_starts, doc_lo, doc_hi, min_length, within_document):
    """1 at every duplicate window start. A maximal SA run with adjacent LCP >= L = all occurrences of one window;
    its smallest position is the first occurrence. doc_lo/doc_hi: per segment, the span of its document."""
    n = sa.shape[0]
    mark = np.zeros(n, dtype=np.uint8)
    r = 1
    while r < n:
        if plcp[sa[r]] < min_length:
            r += 1
            continue
        r0 = r - 1
        first = sa[r0]
        while r < n and plcp[sa[r]] >= min_length:
            first = min(first, sa[r])
            r += 1
        if within_document:
            for q in range(r0, r):
                if sa[q] != first:
                    mark[sa[q]] = 1
        else:
            s = np.searchsorted(seg_starts, first, side="right") - 1
            lo, hi = doc_lo[s], doc_hi[s]
            for q in range(r0, r):
                if sa[q] < lo or sa[q] >= hi:
                    mark[sa[q]] = 1
    return mark


@njit(cache=True)
def _cover(mark, min_length, fill, out_s, out_e):
    """Union of [p, p + L) over marked p, as sorted disjoint ranges; returns their count (fills when `fill`)."""
    k = 0
    s = -1
    e = -1
    for i in range(mark.shape[0]):
        if mark[i]:
            if i > e:
                if s >= 0:
                    if fill:
                        out_s[k] = s
                        out_e[k] = e
                    k += 1
                s = i
            e = max(e, i + min_length)
    if s >= 0:
        if fill:
            out_s[k] = s
            out_e[k] = e
        k += 1
    return k


@njit(cache=True)
def _winnow(data, offsets, min_length, k, fill, out_row, out_off, out_hash):
    """Anchors: per window of every text with >= L bytes, the rightmost minimal k-gram hash (monotone deque)."""
    w = min_length - k + 1
    base_mul = np.uint64(1099511628211)
    top = np.uint64(1)
    for _ in range(k - 1):
        top *= base_mul
    longest = 0
    for d in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[d + 1] - offsets[d])
    hs = np.empty(max(longest, 1), dtype=np.uint64)
    dq = np.empty(max(longest, 1), dtype=np.int64)
    cnt = 0
    for d in range(offsets.shape[0] - 1):
        base = offsets[d]
        length = offsets[d + 1] - base
        if length < min_length:
            continue
        grams = length - k + 1
        h = np.uint64(0)
        for i in range(k):
            h = h * base_mul + np.uint64(data[base + i])
        hs[0] = splitmix64(h)  # polynomial hashes of similar grams land far apart: minima spread evenly
        for i in range(1, grams):
            h = (h - np.uint64(data[base + i - 1]) * top) * base_mul + np.uint64(data[base + i + k - 1])
            hs[i] = splitmix64(h)
        head, tail, last = 0, 0, -1
        for i in range(grams):
            while tail > head and hs[dq[tail - 1]] >= hs[i]:
                tail -= 1
            dq[tail] = i
            tail += 1
            if dq[head] <= i - w:
                head += 1
            if i >= w - 1 and dq[head] != last:
                last = dq[head]
                if fill:
                    out_row[cnt] = d
                    out_off[cnt] = last
                    out_hash[cnt] = hs[last]
                cnt += 1
    return cnt


@njit(cache=True)
def _after_space(data, base, length, q, ws):
    return q == 0 or q == length or ws[data[base + q - 1]]


@njit(cache=True)
def _shrink(data, base, length, s, e, reach, ws):
    """Move [s, e) inward to character boundaries, then (reach > 0) to just after whitespace when that is near."""
    while s < e and (data[base + s] & 0xC0) == 0x80:
        s += 1
    while e > s and e < length and (data[base + e] & 0xC0) == 0x80:
        e -= 1
    if reach > 0 and s < e:
        q = s
        while q < e and q - s < reach and not _after_space(data, base, length, q, ws):
            q += 1
        if q < e and _after_space(data, base, length, q, ws):
            s = q
        q = e
        while q > s and e - q < reach and not _after_space(data, base, length, q, ws):
            q -= 1
        if q > s and _after_space(data, base, length, q, ws):
            e = q
    return s, e


@njit(cache=True)
def _final_cuts(data, offsets, rows, starts, ends, reach, ws):
    """Ranges sorted by (row, start) → merged, shrunk, non-empty cuts (row, start, end) in text bytes."""
    m = rows.shape[0]
    out_r = np.empty(m, dtype=np.int64)
    out_s = np.empty(m, dtype=np.int64)
    out_e = np.empty(m, dtype=np.int64)
    k = 0
    i = 0
    while i < m:
        row, s, e = rows[i], starts[i], ends[i]
        i += 1
        while i < m and rows[i] == row and starts[i] <= e:
            e = max(e, ends[i])
            i += 1
        base = offsets[row]
        a, b = _shrink(data, base, offsets[row + 1] - base, s, e, reach, ws)
        if a < b:
            out_r[k], out_s[k], out_e[k] = row, a, b
            k += 1
    return out_r[:k], out_s[:k], out_e[:k]


@njit(cache=True)
def _gather(data, offsets, rows, starts, ends, keep):
    """Concatenate byte slices. keep=True: each distinct row's text minus its cuts (rows grouped, cuts sorted);
    keep=False: the slices [start, end) themselves, one output item each."""
    m = rows.shape[0]
    n_items = 0
    for i in range(m):
        if not keep or i == 0 or rows[i] != rows[i - 1]:
            n_items += 1
    out_off = np.zeros(n_items + 1, dtype=np.int64)
    total = 0
    for i in range(m):
        total += ends[i] - starts[i]
    if keep:
        total = -total
        prev = -1
        for i in range(m):
            if rows[i] != prev:
                total += offsets[rows[i] + 1] - offsets[rows[i]]
                prev = rows[i]
    out = np.empty(total, dtype=np.uint8)
    pos, item, i = 0, 0, 0
    while i < m:
        row = rows[i]
        base = offsets[row]
        if keep:
            cursor = 0
            while i < m and rows[i] == row:
                for j in range(base + cursor, base + starts[i]):
                    out[pos] = data[j]
                    pos += 1
                cursor = ends[i]
                i += 1
            for j in range(base + cursor, offsets[row + 1]):
                out[pos] = data[j]
                pos += 1
        else:
            for j in range(base + starts[i], base + ends[i]):
                out[pos] = data[j]
                pos += 1
            i += 1
        item += 1
        out_off[item] = pos
    return out, out_off


# ---------------------------------------------------------------------------------------------------------------
# Pure functions on Arrow text arrays: used by the stage's tasks, tests and the benchmark.
# ---------------------------------------------------------------------------------------------------------------

def _buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    from gpupipe.kernels.text_hash import arrow_buffers

    data, offsets = arrow_buffers(arr)
    return data, offsets.astype(np.int64, copy=False)


def as_text_array(texts) -> pa.Array:
    """One large_string (or large_binary) Arrow array, nulls as empty strings."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if not isinstance(texts, pa.Array):
        texts = pa.array(texts, type=pa.large_string(), from_pandas=True)
    binary = pa.types.is_binary(texts.type) or pa.types.is_large_binary(texts.type)
    texts = texts.cast(pa.large_binary() if binary else pa.large_string())
    return texts.fill_null(b"" if binary else "")


def suffix_array(text: np.ndarray) -> np.ndarray:
    """libdivsufsort: int32 positions up to 2 GiB of text, int64 beyond."""
    from pydivsufsort import divsufsort

    if len(text) == 0:
        return np.empty(0, dtype=np.int32)
    return divsufsort(np.ascontiguousarray(text, dtype=np.uint8))


def duplicate_ranges(texts: pa.Array, min_length: int, within_document: bool,
                     doc_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte ranges to cut, as (segment, start, end) relative to each segment, sorted and disjoint per segment.

    texts: segments in input order. doc_ids: the document of each segment (non-decreasing; several consecutive
    segments may be pieces of one document, as in the cross-group pass); default: every segment its own document.
    """
    data, offsets = _buffers(as_text_array(texts))
    joined, seg_starts = _join(data, offsets)
    m = len(offsets) - 1
    if doc_ids is None:
        doc_lo, doc_hi = seg_starts[:-1], seg_starts[1:]
    else:
        new_doc = np.r_[True, doc_ids[1:] != doc_ids[:-1]] if m else np.zeros(0, bool)
        run = np.cumsum(new_doc) - 1
        first = np.flatnonzero(new_doc)
        last = np.r_[first[1:] - 1, m - 1].astype(np.int64)
        doc_lo, doc_hi = seg_starts[first][run], seg_starts[last + 1][run]
    with annotate("gpupipe/kernel/suffix_array"):
        sa = suffix_array(joined)
    with annotate("gpupipe/kernel/lcp"):
        plcp = _permuted_lcp(joined, sa)
    mark = _mark_duplicates(sa, plcp, seg_starts, doc_lo, doc_hi, min_length, within_document)
    del sa, plcp
    empty = np.empty(0, np.int64)
    k = _cover(mark, min_length, False, empty, empty)
    s, e = np.empty(k, np.int64), np.empty(k, np.int64)
    _cover(mark, min_length, True, s, e)
    seg = np.searchsorted(seg_starts, s, side="right") - 1
    return seg, s - seg_starts[seg], e - seg_starts[seg]


def anchor_k(min_length: int) -> int:
    """Gram length of the anchors. Longer grams are shared by fewer unrelated documents (on news text, 64-byte
    grams make 3x fewer cross-group candidates than 16-byte ones), shorter ones leave more grams per window."""
    return min(ANCHOR_K_MAX, min_length // 2)


def winnow_anchors(texts: pa.Array, min_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, offset, hash) of every anchor: each L-byte window of a text owns the anchor of its minimal k-gram."""
    k = anchor_k(min_length)
    data, offsets = _buffers(as_text_array(texts))
    e64, eu = np.empty(0, np.int64), np.empty(0, np.uint64)
    n = _winnow(data, offsets, min_length, k, False, e64, e64, eu)
    rows, offs, hashes = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.uint64)
    _winnow(data, offsets, min_length, k, True, rows, offs, hashes)
    return rows, offs, hashes


def final_cuts(texts: pa.Array, rows, starts, ends, snap_to_whitespace: bool = False):
    """Raw ranges (any order, may overlap) → merged cuts on whole characters: (row, start, end) arrays."""
    data, offsets = _buffers(texts)
    rows, starts, ends = (np.asarray(a, dtype=np.int64) for a in (rows, starts, ends))
    order = np.lexsort((starts, rows))
    return _final_cuts(data, offsets, rows[order], starts[order], ends[order],
                       SNAP_REACH_BYTES if snap_to_whitespace else 0, _WS)


def apply_cuts(texts: pa.Array, rows, starts, ends) -> tuple[np.ndarray, pa.Array]:
    """Final cuts (sorted by row, start) → (modified rows, their new texts)."""
    data, offsets = _buffers(texts)
    out, out_off = _gather(data, offsets, rows, starts, ends, True)
    new = pa.Array.from_buffers(pa.large_string(), len(out_off) - 1, [None, pa.py_buffer(out_off), pa.py_buffer(out)])
    new.validate(full=True)  # cuts lie on character boundaries, so this is valid UTF-8
    return np.unique(rows), new


def slices(texts: pa.Array, rows, starts, ends) -> pa.Array:
    """The byte slices [start, end) of the given rows, as a large_binary array."""
    data, offsets = _buffers(texts)
    out, out_off = _gather(data, offsets, np.asarray(rows, np.int64), np.asarray(starts, np.int64),
                           np.asarray(ends, np.int64), False)
    return pa.Array.from_buffers(pa.large_binary(), len(out_off) - 1, [None, pa.py_buffer(out_off), pa.py_buffer(out)])


def substring_dedup(texts, cfg: SubstringDedupConfig | None = None) -> tuple[list[str], dict[str, int]]:
    """In memory, one group: the texts after cutting (dropping is the stage's job) and counters."""
    cfg = cfg or SubstringDedupConfig()
    arr = as_text_array(texts)
    seg, s, e = duplicate_ranges(arr, cfg.min_length, cfg.within_document)
    rows, cs, ce = final_cuts(arr, seg, s, e, cfg.snap_to_whitespace)
    out = arr.to_pylist()
    if len(rows):
        changed, new = apply_cuts(arr, rows, cs, ce)
        for r, t in zip(changed.tolist(), new.to_pylist()):
            out[r] = t
    return out, {"spans_cut": int(len(rows)), "bytes_cut": int((ce - cs).sum()),
                 "docs_modified": int(len(np.unique(rows)))}


# ---------------------------------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------------------------------

def _text_bytes_on_disk(path: Path) -> int:
    """Uncompressed size of the `text` column from Parquet metadata: a cheap estimate for grouping."""
    meta = pq.ParquetFile(path).metadata
    cols = [meta.schema.column(j).path for j in range(meta.num_columns)]
    j = cols.index("text")
    return sum(meta.row_group(i).column(j).total_uncompressed_size for i in range(meta.num_row_groups))


def partition_groups(paths: list[Path], group_bytes: int) -> list[list[int]]:
    """Consecutive partitions up to group_bytes of text each (a larger partition is a group of its own)."""
    groups: list[list[int]] = []
    size = 0
    for i, p in enumerate(paths):
        b = _text_bytes_on_disk(p)
        if not groups or size + b > group_bytes:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += b
    return groups


def _read_group(paths: list[Path], parts: list[int]) -> pa.Table:
    """doc_index, part, text of a group's partitions, in doc_index order."""
    tables = [pq.read_table(p, columns=["doc_index", "text"]).append_column(
        "part", pa.array(np.full(pq.ParquetFile(p).metadata.num_rows, part, dtype=np.int64)))
        for p, part in zip(paths, parts)]
    t = pa.concat_tables(tables)
    di = t["doc_index"].to_numpy()
    if len(di) > 1 and np.any(di[1:] < di[:-1]):
        t = t.take(np.argsort(di, kind="stable"))
    return t.set_column(t.schema.get_field_index("text"), "text", as_text_array(t["text"])).combine_chunks()


def _write_ranges(work: Path, name: str, doc_index, part, start, end) -> None:
    """Removal ranges, one file per destination partition: ranges-pPART/NAME.parquet."""
    df = pd.DataFrame({"doc_index": doc_index, "start": start, "end": end, "part": part})
    for p, grp in df.groupby("part", sort=True):
        write_part(grp.drop(columns="part").reset_index(drop=True),
                   Path(work) / f"ranges-p{int(p):06d}" / f"{name}.parquet")


def group_task(spec, g: int, paths: list[Path], parts: list[int], work: Path, buckets: int) -> dict[str, float]:
    """Pass 1 over one group; with buckets > 0 also writes the group's winnowing anchors, routed by hash."""
    stage = worker_stage(spec)
    cfg = stage.config
    with annotate("gpupipe/substring_dedup/group"):
        t = _read_group(paths, parts)
        doc, part = t["doc_index"].to_numpy(), t["part"].to_numpy()
        seg, s, e = duplicate_ranges(t["text"].combine_chunks(), cfg.min_length, cfg.within_document)
        _write_ranges(work, f"g{g:06d}", doc[seg], part[seg], s, e)
        anchors = 0
        if buckets:
            rows, offs, hashes = winnow_anchors(t["text"].combine_chunks(), cfg.min_length)
            anchors = len(rows)
            a = pd.DataFrame({"hash": hashes, "doc_index": doc[rows], "part": part[rows], "offset": offs,
                              "group": np.int64(g)})
            for b, grp in a.groupby((hashes % np.uint64(buckets)).astype(np.int64), sort=True):
                write_part(grp.reset_index(drop=True), Path(work) / f"anchors-b{b:05d}" / f"g{g:06d}.parquet")
    return {"text_bytes": int(pc.sum(pc.binary_length(t["text"])).as_py() or 0), "anchors": anchors,
            "peak_rss_mb": peak_rss_mb()}


def select_task(spec, b: int, work: Path) -> dict[str, Any]:
    """Anchors of one bucket → the cross-group candidates, as requests to the groups holding them, in local
    batches of <= group_bytes of region text (whole hashes: all occurrences of a hash stay together)."""
    cfg = worker_stage(spec).config
    files = sorted((Path(work) / f"anchors-b{b:05d}").glob("g*.parquet"))
    if not files:
        return {"batch_bytes": [], "cross_group_anchors": 0}
    a = pd.concat([read_part(f) for f in files], ignore_index=True)
    groups_per_hash = a.groupby("hash")["group"].nunique()
    a = a[a["hash"].isin(groups_per_hash.index[groups_per_hash >= 2])]
    if a.empty:
        return {"batch_bytes": [], "cross_group_anchors": 0}
    per_hash = a.groupby("hash").size().sort_index() * (2 * cfg.min_length - anchor_k(cfg.min_length))
    before = per_hash.cumsum() - per_hash
    batch = pd.Series(np.unique(before.to_numpy() // cfg.group_bytes, return_inverse=True)[1], index=per_hash.index)
    a = a.assign(batch=a["hash"].map(batch).astype(np.int64))
    for g, grp in a.groupby("group", sort=True):
        write_part(grp[["doc_index", "offset", "batch"]].reset_index(drop=True),
                   Path(work) / f"requests-g{int(g):06d}" / f"b{b:05d}.parquet")
    return {"batch_bytes": per_hash.groupby(batch).sum().tolist(), "cross_group_anchors": len(a)}


def pack_batches(selected: list[dict[str, Any]], budget: int) -> dict[tuple[int, int], int]:
    """(bucket, local batch) → pass-2 batch: consecutive local batches share one while it stays within budget, so
    a document's regions from several buckets merge (fewer bytes) and few batches remain."""
    out, batch, used = {}, 0, 0
    for b, sel in enumerate(selected):
        for local, size in enumerate(sel["batch_bytes"]):
            if used and used + size > budget:
                batch, used = batch + 1, 0
            out[(b, local)] = batch
            used += size
    return out


def region_task(spec, g: int, paths: list[Path], parts: list[int], work: Path,
                batch_of: dict[tuple[int, int], int]) -> int:
    """Writes the text around this group's requested anchors, per pass-2 batch; returns the region bytes."""
    cfg = worker_stage(spec).config
    files = sorted((Path(work) / f"requests-g{g:06d}").glob("b*.parquet"))
    if not files:
        return 0
    req = pd.concat([read_part(f).assign(bucket=int(f.stem[1:])) for f in files], ignore_index=True)
    req["batch"] = [batch_of[(b, k)] for b, k in zip(req["bucket"].tolist(), req["batch"].tolist())]
    t = _read_group(paths, parts)
    texts = t["text"].combine_chunks()
    lengths = pc.binary_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
    row_of = pd.Index(t["doc_index"].to_numpy())
    total = 0
    for batch, r in req.groupby("batch", sort=True):
        rows = row_of.get_indexer(r["doc_index"].to_numpy())
        off = r["offset"].to_numpy(np.int64)
        start = np.maximum(off - (cfg.min_length - anchor_k(cfg.min_length)), 0)
        end = np.minimum(off + cfg.min_length, lengths[rows])
        rows, start, end = _merge_regions(rows, start, end)
        data = slices(texts, rows, start, end)
        total += int((end - start).sum())
        out = pa.table({"doc_index": t["doc_index"].take(rows), "part": t["part"].take(rows),
                        "start": pa.array(start), "data": data})
        path = Path(work) / f"regions-{batch:06d}" / f"g{g:06d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(out, path, compression="zstd")
    return total


def _merge_regions(rows, start, end):
    """Overlapping or touching regions of a document become one: no text position may appear twice in pass 2."""
    if len(rows) == 0:
        return rows, start, end
    order = np.lexsort((start, rows))
    rows, start, end = rows[order], start[order], end[order]
    reach = pd.Series(end).groupby(rows).cummax().to_numpy()   # furthest end so far within the document
    new = np.r_[True, (rows[1:] != rows[:-1]) | (start[1:] > reach[:-1])]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(rows) - 1]
    return rows[first], start[first], reach[last]


def cross_task(spec, region_dir: Path, work: Path) -> dict[str, float]:
    """Pass 2 over one batch of regions: the same marking, positions ordered by (doc_index, offset)."""
    cfg = worker_stage(spec).config
    with annotate("gpupipe/substring_dedup/cross"):
        t = pa.concat_tables([pq.read_table(f) for f in sorted(Path(region_dir).glob("g*.parquet"))])
        t = t.sort_by([("doc_index", "ascending"), ("start", "ascending")]).combine_chunks()
        doc = t["doc_index"].to_numpy()
        seg, s, e = duplicate_ranges(t["data"].combine_chunks(), cfg.min_length, cfg.within_document, doc_ids=doc)
        base = t["start"].to_numpy()[seg]
        _write_ranges(work, f"x-{Path(region_dir).name}", doc[seg], t["part"].to_numpy()[seg], base + s, base + e)
    return {"region_bytes": int(pc.sum(pc.binary_length(t["data"])).as_py() or 0), "peak_rss_mb": peak_rss_mb()}


def apply_task(spec, part: int, in_path: Path, out_dir: Path, work: Path) -> dict[str, Any]:
    """Per partition: install its removal ranges on the worker's stage, then the usual map (cut, drop, account)."""
    stage = worker_stage(spec)
    files = sorted((Path(work) / f"ranges-p{part:06d}").glob("*.parquet"))
    stage._ranges = pd.concat([read_part(f) for f in files], ignore_index=True) if files else None
    try:
        return map_partition_task(spec, in_path, out_dir)
    finally:
        stage._ranges = None


class SubstringDedup(MapStage):
    name = "substring_dedup"
    Config = SubstringDedupConfig

    _ranges: pd.DataFrame | None = None     # this partition's raw removal ranges (doc_index, start, end)
    _modified: np.ndarray = np.zeros(0, bool)
    _counts: Counter = Counter()

    def execute(self, job: StageJob) -> StageStats:
        cfg, ex, spec, n = self.config, job.executor, self.spec(), len(job.inputs)
        work = job.out_dir / "_exchange"
        shutil.rmtree(work, ignore_errors=True)   # never mix in an interrupted attempt's ranges
        groups = partition_groups(job.inputs, cfg.group_bytes)
        gpaths = [[job.inputs[i] for i in grp] for grp in groups]
        buckets = max(job.ctx.shuffle_buckets, len(groups)) if len(groups) > 1 else 0
        ng = len(groups)
        g_res = ex.map(group_task, [spec] * ng, list(range(ng)), gpaths, groups, [work] * ng, [buckets] * ng)
        extra = Counter({"groups": ng, "anchors": sum(r["anchors"] for r in g_res)})
        peaks = [r["peak_rss_mb"] for r in g_res]
        if buckets:
            sel = ex.map(select_task, [spec] * buckets, list(range(buckets)), [work] * buckets)
            extra["cross_group_anchors"] = sum(r["cross_group_anchors"] for r in sel)
            batch_of = pack_batches(sel, cfg.group_bytes)
            ex.map(region_task, [spec] * ng, list(range(ng)), gpaths, groups, [work] * ng, [batch_of] * ng)
            batches = sorted(work.glob("regions-*"))
            x_res = ex.map(cross_task, [spec] * len(batches), batches, [work] * len(batches))
            extra.update({"cross_batches": len(batches),
                          "cross_region_bytes": sum(r["region_bytes"] for r in x_res)})
            peaks += [r["peak_rss_mb"] for r in x_res]
        results = ex.map(apply_task, [spec] * n, list(range(n)), job.inputs, [job.out_dir] * n, [work] * n,
                         progress=job.progress)
        total = StageStats()
        for r in results:
            total.merge(StageStats.from_dict(r))
        total.extra.update(extra)
        total.extra["docs_dropped"] = total.removed.get(REASON, 0)
        total.extra["peak_rss_mb_worker"] = round(max(peaks, default=0.0), 1)
        shutil.rmtree(work, ignore_errors=True)
        return total

    # -- apply phase: MapStage.run_partition calls transform → reasons → extra_stats on each partition.
    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        self._modified = np.zeros(len(df), dtype=bool)
        self._counts = Counter({"spans_cut": 0, "bytes_cut": 0, "docs_modified": 0})
        r = self._ranges
        if r is None or r.empty or df.empty:
            return df
        texts = as_text_array(df["text"])
        rows = pd.Index(df["doc_index"].to_numpy()).get_indexer(r["doc_index"].to_numpy())
        assert (rows >= 0).all(), "substring_dedup: removal ranges name documents this partition lacks"
        rows, s, e = final_cuts(texts, rows, r["start"].to_numpy(), r["end"].to_numpy(),
                                self.config.snap_to_whitespace)
        if not len(rows):
            return df
        changed, new = apply_cuts(texts, rows, s, e)
        self._modified[changed] = True
        self._counts.update({"spans_cut": len(rows), "bytes_cut": int((e - s).sum()), "docs_modified": len(changed)})
        text = df["text"].copy()
        text.iloc[changed] = new.to_pylist()
        return df.assign(text=text)

    def reasons(self, df: pd.DataFrame) -> pd.Series:
        if not self._modified.any():
            return pd.Series([None] * len(df), index=df.index, dtype=object)
        arr = as_text_array(df["text"])
        chars = pc.utf8_length(pc.utf8_trim_whitespace(arr)).to_numpy(zero_copy_only=False)
        drop = self._modified & ((chars < self.config.min_remaining_chars) | (chars == 0))
        return pd.Series(np.where(drop, REASON, None), index=df.index, dtype=object)

    def extra_stats(self, df_out: pd.DataFrame) -> Counter:
        return Counter(self._counts)


__all__ = ["SubstringDedup", "SubstringDedupConfig", "substring_dedup", "duplicate_ranges", "winnow_anchors",
           "final_cuts", "apply_cuts", "partition_groups", "pack_batches", "anchor_k", "suffix_array"]
