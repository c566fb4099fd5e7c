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

Modules: `config` (the stage's settings), `kernels` (numba: join, LCP, marking, cover, winnowing, cuts, gather),
`text` (Arrow text arrays and their buffers), `marks` (suffix array → duplicate ranges: both passes),
`anchors` (winnowing and the planning of the cross-group pass), `cuts` (ranges → whole-character cuts → texts;
`substring_dedup`, the in-memory path), `groups` (partition groups), `stage` (the phases, declared).
"""

from gpupipe.stages.dedup.substring.anchors import anchor_k, pack_batches, winnow_anchors
from gpupipe.stages.dedup.substring.config import REASON, SubstringDedupConfig
from gpupipe.stages.dedup.substring.cuts import apply_cuts, final_cuts, substring_dedup
from gpupipe.stages.dedup.substring.groups import partition_groups
from gpupipe.stages.dedup.substring.marks import duplicate_ranges, suffix_array
from gpupipe.stages.dedup.substring.stage import SubstringDedup

__all__ = ["SubstringDedup", "SubstringDedupConfig", "substring_dedup", "duplicate_ranges", "winnow_anchors",
           "final_cuts", "apply_cuts", "partition_groups", "pack_batches", "anchor_k", "suffix_array", "REASON"]
