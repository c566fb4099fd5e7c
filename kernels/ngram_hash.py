"""Word / character n-gram hashes looked up in a sorted table: CUDA kernels (CuPy) and a bit-identical
numba twin. Used by benchmark decontamination (gpupipe.stages.filters.decontam): which n-grams of a training
document also occur in a benchmark item, and where in the document they are.

Definition (both twins follow it exactly; p = 2^61 - 1, arithmetic on residues is exact)
-------------------------------------------------------------------------------------
Input: ``data`` uint8 (an Arrow value buffer, UTF-8), ``offsets`` int32/int64 (n + 1 entries), ``cjk``
uint8 per document (1: character units, 0: word units), a :class:`NgramTable` (sorted unique uint64
hashes), and two gram lengths per mode: ``word = (n, min_n)`` and ``char = (n, min_n)``,
1 <= min_n <= n.

1-4. Code points, separators, units and unit hashes u are exactly minhash's (kernels/minhash.py,
   steps 1-4): a unit is a maximal run of non-separator code points (word mode) or one non-separator
   code point (character mode); separators are ASCII whitespace and punctuation plus the Unicode
   general/CJK/full-width punctuation ranges; ASCII A-Z fold to a-z; u = Horner over the unit's
   folded bytes with base BU. *This is the decontamination normalization*: case (ASCII), punctuation
   and whitespace cannot change the units, and since every unit remembers where it lies in the
   original bytes, matches map back to spans of the text as it was.
5. Spans. Unit j covers the document's bytes [a_j, b_j) (relative to the document's first byte):
   a_j is the first byte of its first code point, b_j one past its last byte.
6. Grams. For k in {n, min_n} of the document's mode (one length when min_n == n), the windows of
   exactly k consecutive units, i = 0..m-k (none when m < k), hash as minhash's shingles do:
       S = sum_{r<k} u_{i+r} * BS^(k-1-r) mod p,        H = fmix64(S XOR k)
   (so H equals ``minhash.shingle_hashes_cpu(..., word_k=k, char_k=k)`` for documents of >= k units;
   the length in the tag keeps grams of different lengths apart).
7. Lookup. A window hits when H is in the table; its result is (pos, a_i, b_{i+k-1}) with pos the
   index of H in the table's hash array. A document's hits are ordered by i, and at equal i the
   n-gram comes before the min_n-gram.

Output (two phases, so its size is exact): per document a hit count, then a fill into arrays
``pos``, ``start``, ``end`` (int64) sliced by ``hit_offsets`` (int64, n + 1, the counts' prefix sum).
Only documents with hits are scanned again in the fill phase.

Table: the sorted hashes plus a directory on their top B bits (dir[t] = first position whose top
bits are >= t), so a lookup binary-searches only the few entries of its bucket, and in front of it a
bit filter on the top F bits (8-16 bits per hash: small enough to stay in cache), which answers
most misses with one read. Both only narrow the search: the result is the position in the whole
array either way.

What the normalization does not cover: Unicode case folding beyond ASCII (Ä vs ä), compatibility
forms (full-width letters, ligatures: apply NFKC to both sides first), digit grouping (1,000 vs 1000
are different units), and anything that changes words (paraphrase, translation, reformatted math).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np
from numba import prange

from ._jit import njit
from ._mersenne import P61, addmod61, fmix64, mulmod61
from ._cuda import cupy_module, raw_module
from .script_class import CJK, is_cjk
from .strings import check_buffers
# Same params layout (BU, BS, separator mask, BU powers) and batching as the MinHash kernels.
from .minhash import _device_batches, _gpu_batches, _gpu_params, _gpu_params_on_device  # noqa: F401
from .minhash import _one_document_on_host
from .minhash import (ASCII_SEPARATORS, BS, UNICODE_SEPARATOR_RANGES, _SEP_TABLE, _chunk_bounds, _compact,
                      _cjk_flags, _is_separator, _unit_hash, _utf8_len)

_P = np.uint64(P61)
_BS = np.uint64(BS)
_ZERO = np.uint64(0)
_ONE = np.uint64(1)
_S6, _M6 = np.uint64(6), np.uint64(63)
_NO_HIT = np.int64(-1)

GPU_BATCH_BYTES = 64 << 20  # text per launch group: the GPU scratch is 16 bytes per text byte
_GPU_BLOCK = 256            # every kernel: one warp per document, 8 per block
_GPU_MAX_BLOCKS = 1 << 20   # kernels loop over documents, so the grid can be capped
_MAX_DIR_BITS = 22          # directory of at most 4M + 1 int64 (32 MiB)
_MAX_FILTER_BITS = 30       # filter of at most 2^30 bits (128 MiB)


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------


@dataclass
class NgramTable:
    """Sorted unique uint64 gram hashes, the bucket directory of their top ``bits`` bits and a bit
    filter of their top ``filter_bits`` bits (bit t set when some hash has top bits t)."""

    hashes: np.ndarray
    bits: int = 0
    directory: np.ndarray = field(default=None, repr=False)
    filter_bits: int = 0
    filter: np.ndarray = field(default=None, repr=False)
    _device: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        h = np.ascontiguousarray(self.hashes, dtype=np.uint64)
        if h.ndim != 1 or (h.size > 1 and not (h[1:] > h[:-1]).all()):
            raise ValueError("table hashes must be a 1-d array, sorted ascending without repeats")
        self.hashes = h
        if not self.bits:  # about one hash per bucket
            self.bits = int(min(_MAX_DIR_BITS, max(1, int(h.size).bit_length() - 1)))
        if not self.filter_bits:  # 8 to 16 bits per hash, at least one 64-bit word
            self.filter_bits = int(min(_MAX_FILTER_BITS, max(6, int(8 * h.size).bit_length())))
        if not (1 <= self.bits <= _MAX_DIR_BITS and 6 <= self.filter_bits <= _MAX_FILTER_BITS):
            raise ValueError(f"need 1 <= bits <= {_MAX_DIR_BITS} and 6 <= filter_bits <= {_MAX_FILTER_BITS}")
        shift = np.uint64(64 - self.bits)
        tops = h >> shift
        self.directory = np.searchsorted(tops, np.arange((1 << self.bits) + 1, dtype=np.uint64),
                                         side="left").astype(np.int64)
        top = h >> np.uint64(64 - self.filter_bits)
        self.filter = np.zeros(1 << (self.filter_bits - 6), dtype=np.uint64)
        np.bitwise_or.at(self.filter, (top >> np.uint64(6)).astype(np.int64),
                         np.left_shift(np.uint64(1), top & np.uint64(63)))

    @property
    def shifts(self) -> tuple[np.uint64, np.uint64]:
        """(directory shift, filter shift): 64 minus their bit counts."""
        return np.uint64(64 - self.bits), np.uint64(64 - self.filter_bits)

    def __len__(self) -> int:
        return int(self.hashes.size)

    def on_device(self):
        """(hashes, directory, filter) as CuPy arrays on the current device, copied once per device, synchronously
        (blocking=True): later lookups read them on whatever stream is current then."""
        cp = cupy_module()

        dev = cp.cuda.Device().id
        if dev not in self._device:
            self._device[dev] = tuple(cp.asarray(a, blocking=True) for a in (self.hashes, self.directory, self.filter))
        return self._device[dev]


# --------------------------------------------------------------------------------------------
# CPU twin
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def _doc_units(data, start, end, char_mode, sep_table, units, ustart, uend):
    """Unit hashes of data[start:end] into units[0:m] with their byte spans relative to start
    (definition steps 1-5; minhash._doc_units plus the spans). Returns m (<= end - start)."""
    m = 0
    unit_start = -1                         # start of the open word, -1 when none
    i = start
    while i < end:
        n = _utf8_len(data, i, end)
        step = n if n > 0 else 1            # an invalid byte is one code point
        if n > 0 and _is_separator(data, i, n, sep_table):
            if unit_start >= 0:
                units[m] = _unit_hash(data, unit_start, i)
                ustart[m], uend[m] = unit_start - start, i - start
                m += 1
                unit_start = -1
        elif char_mode:
            units[m] = _unit_hash(data, i, i + step)
            ustart[m], uend[m] = i - start, i + step - start
            m += 1
        elif unit_start < 0:
            unit_start = i
        i += step
    if unit_start >= 0:
        units[m] = _unit_hash(data, unit_start, end)
        ustart[m], uend[m] = unit_start - start, end - start
        m += 1
    return m


@njit(cache=True, inline="always")
def _find(hashes, directory, shift, filt, fshift, h):
    """Position of h in the sorted hashes, or -1: the filter first, then a binary search inside h's
    directory bucket."""
    b = h >> fshift
    if (filt[np.int64(b >> _S6)] >> (b & _M6)) & _ONE == _ZERO:
        return _NO_HIT
    t = np.int64(h >> shift)
    lo, hi = directory[t], directory[t + 1]
    while lo < hi:
        mid = (lo + hi) >> 1
        if hashes[mid] < h:
            lo = mid + 1
        else:
            hi = mid
    if lo < hashes.shape[0] and hashes[lo] == h:
        return lo
    return _NO_HIT


@njit(cache=True, inline="always")
def _window_start(units, k):
    s = _ZERO
    for r in range(k):
        s = addmod61(mulmod61(s, _BS), units[r])
    return s


@njit(cache=True)
def _pow_bs(e):
    """BS^e mod p (e small: a gram length)."""
    r = np.uint64(1)
    for _ in range(e):
        r = mulmod61(r, _BS)
    return r


@njit(cache=True, inline="always")
def _roll(s, leaving, entering, drop):
    """The next window's sum: remove the leaving unit (weight BS^(k-1)), shift, add the new one."""
    s = addmod61(s, _P - mulmod61(leaving, drop))  # _P - x is in (0, p]: still exact
    return addmod61(mulmod61(s, _BS), entering)


@njit(cache=True)
def _doc_hits(units, ustart, uend, m, k1, k2, hashes, directory, shift, filt, fshift, fill, pos, hs, he, o):
    """Hits of one document's m units (definition steps 6-7), k2 <= k1. With fill, writes them from
    index o of pos/hs/he. Returns the number of hits."""
    if m < k2:
        return 0
    two = k2 < k1
    count = 0
    s1 = _window_start(units, k1) if m >= k1 else _ZERO
    s2 = _window_start(units, k2)
    drop1, drop2 = _pow_bs(k1 - 1), _pow_bs(k2 - 1)
    t1, t2 = np.uint64(k1), np.uint64(k2)
    last1 = m - k1                          # last window start of each length (may be < 0)
    last2 = m - k2
    for i in range(last2 + 1):
        if i <= last1:
            p = _find(hashes, directory, shift, filt, fshift, fmix64(s1 ^ t1))
            if p >= 0:
                if fill:
                    pos[o + count], hs[o + count], he[o + count] = p, ustart[i], uend[i + k1 - 1]
                count += 1
            if i < last1:
                s1 = _roll(s1, units[i], units[i + k1], drop1)
        if two:
            p = _find(hashes, directory, shift, filt, fshift, fmix64(s2 ^ t2))
            if p >= 0:
                if fill:
                    pos[o + count], hs[o + count], he[o + count] = p, ustart[i], uend[i + k2 - 1]
                count += 1
            if i < last2:
                s2 = _roll(s2, units[i], units[i + k2], drop2)
    return count


@njit(parallel=True, cache=True)
def _hits_chunks(data, offsets, cjk, lengths, hashes, directory, shift, filt, fshift, sep_table, bounds,
                 fill, hit_offsets, counts, pos, hs, he):
    """Count (fill=False: into counts) or write (fill=True: at hit_offsets) every document's hits;
    chunk c (documents bounds[c]..bounds[c+1]) per parallel task. lengths = [wn, wmin, cn, cmin]."""
    for c in prange(bounds.shape[0] - 1):
        d0, d1 = bounds[c], bounds[c + 1]
        longest = 1
        for d in range(d0, d1):
            if not fill or counts[d] > 0:
                longest = max(longest, np.int64(offsets[d + 1] - offsets[d]))
        units = np.empty(longest, dtype=np.uint64)  # one scratch per chunk, not per document
        ustart = np.empty(longest, dtype=np.int64)
        uend = np.empty(longest, dtype=np.int64)
        for d in range(d0, d1):
            if fill and counts[d] == 0:
                continue                            # the fill pass rescans only documents with hits
            char_mode = cjk[d] != 0
            k1 = lengths[2] if char_mode else lengths[0]
            k2 = lengths[3] if char_mode else lengths[1]
            m = _doc_units(data, np.int64(offsets[d]), np.int64(offsets[d + 1]), char_mode, sep_table,
                           units, ustart, uend)
            got = _doc_hits(units, ustart, uend, m, k1, k2, hashes, directory, shift, filt, fshift, fill,
                            pos, hs, he, hit_offsets[d])
            if not fill:
                counts[d] = got


@njit(parallel=True, cache=True)
def _unit_counts(data, offsets, cjk, sep_table, scratch, counts):
    """Every document's unit count (its units go to its own byte range of scratch)."""
    base = np.int64(offsets[0])
    for d in prange(offsets.shape[0] - 1):
        start, end = np.int64(offsets[d]), np.int64(offsets[d + 1])
        units = scratch[start - base:end - base]
        spans = np.empty(end - start, dtype=np.int64)
        counts[d] = _doc_units(data, start, end, cjk[d] != 0, sep_table, units, spans, spans)


@njit(parallel=True, cache=True)
def _grams_in_place(data, offsets, cjk, ks, sep_table, scratch, counts):
    """Every document's windows of exactly ks[d] units (none when ks[d] == 0 or it has fewer units),
    hashed as the definition says, written at its own byte range of scratch (8 bytes per byte)."""
    base = np.int64(offsets[0])
    for d in prange(offsets.shape[0] - 1):
        start, end = np.int64(offsets[d]), np.int64(offsets[d + 1])
        units = scratch[start - base:end - base]
        spans = np.empty(end - start, dtype=np.int64)
        m = _doc_units(data, start, end, cjk[d] != 0, sep_table, units, spans, spans)
        k = ks[d]
        counts[d] = m - k + 1 if 0 < k <= m else 0
        if counts[d] == 0:
            continue
        s = _window_start(units, k)
        drop = _pow_bs(k - 1)
        tag = np.uint64(k)
        for i in range(m - k + 1):
            leaving = units[i]
            units[i] = fmix64(s ^ tag)  # window i is written after u_i, which leaves it, was read
            if i < m - k:
                s = _roll(s, leaving, units[i + k], drop)


CJK_RANGES = CJK   # a CJK letter (kernels/script_class.py); the CJK punctuation U+3000..U+303F is a separator first


@njit(cache=True, inline="always")
def _is_cjk(data, i, n):
    """Whether the well-formed n-byte UTF-8 sequence at data[i] is a CJK letter (every one is 3 or 4 bytes)."""
    if n < 3:
        return False
    b0 = np.int64(data[i])
    if n == 3:
        cp = ((b0 & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) | (np.int64(data[i + 2]) & 0x3F)
    else:
        cp = (((b0 & 0x07) << 18) | ((np.int64(data[i + 1]) & 0x3F) << 12) | ((np.int64(data[i + 2]) & 0x3F) << 6)
              | (np.int64(data[i + 3]) & 0x3F))
    return is_cjk(cp)


@njit(parallel=True, cache=True)
def _script_counts(data, offsets, sep_table, out):
    for d in prange(offsets.shape[0] - 1):
        start, end = np.int64(offsets[d]), np.int64(offsets[d + 1])
        cjk = letters = words = 0
        in_word = False
        i = start
        while i < end:
            n = _utf8_len(data, i, end)
            step = n if n > 0 else 1
            if n > 0 and _is_separator(data, i, n, sep_table):
                in_word = False
            elif n > 0 and _is_cjk(data, i, n):
                cjk += 1
                in_word = False
            else:
                letters += 1
                if not in_word:
                    words += 1
                in_word = True
            i += step
        out[d, 0], out[d, 1], out[d, 2] = cjk, letters, words


def script_counts_cpu(data, offsets) -> np.ndarray:
    """(n, 3) int64 per document: CJK letters (CJK_RANGES), other letters (every other non-separator
    code point, digits included) and words (maximal runs of those). The stage picks each document's
    mode from them, and whether it needs the other mode too."""
    data = np.ascontiguousarray(data)
    offsets = np.ascontiguousarray(offsets)
    check_buffers(data, offsets)
    out = np.zeros((offsets.shape[0] - 1, 3), dtype=np.int64)
    if out.shape[0]:
        _script_counts(data, offsets, _SEP_TABLE, out)
    return out


# --------------------------------------------------------------------------------------------
# Argument checks and results
# --------------------------------------------------------------------------------------------


@dataclass
class NgramHits:
    """Per document d, hits hit_offsets[d]..hit_offsets[d+1] of pos (table positions) and start/end
    (byte spans relative to the document's first byte). Arrays are numpy (CPU) or CuPy (GPU)."""

    hit_offsets: object
    pos: object
    start: object
    end: object

    def get(self) -> "NgramHits":
        """A host (numpy) copy; numpy arrays pass through."""
        as_np = (lambda a: a) if isinstance(self.pos, np.ndarray) else (lambda a: a.get())
        return NgramHits(*(as_np(a) for a in (self.hit_offsets, self.pos, self.start, self.end)))


def _lengths(word: tuple[int, int], char: tuple[int, int]) -> np.ndarray:
    out = []
    for name, (n, min_n) in (("word", word), ("char", char)):
        n, min_n = int(n), int(min_n)
        if not 1 <= min_n <= n:
            raise ValueError(f"{name} gram lengths must satisfy 1 <= min_n <= n, got n={n}, min_n={min_n}")
        out += [n, min_n]
    return np.array(out, dtype=np.int64)


def _as_table(table) -> NgramTable:
    return table if isinstance(table, NgramTable) else NgramTable(np.asarray(table))


# --------------------------------------------------------------------------------------------
# CPU entry points
# --------------------------------------------------------------------------------------------


def ngram_lookup_cpu(data, offsets, cjk, table, word=(13, 8), char=(20, 12)) -> NgramHits:
    """Every document's table hits (definition above): numba threads over chunks of documents,
    counted first, then written, so the output has exactly the size of the result."""
    data = np.ascontiguousarray(data)
    offsets = np.ascontiguousarray(offsets)
    check_buffers(data, offsets)
    table = _as_table(table)
    lengths = _lengths(word, char)
    n_docs = offsets.shape[0] - 1
    flags = _cjk_flags(cjk, n_docs)
    counts = np.zeros(n_docs, dtype=np.int64)
    hit_offsets = np.zeros(n_docs + 1, dtype=np.int64)
    empty = np.empty(0, dtype=np.int64)
    if n_docs == 0 or len(table) == 0:
        return NgramHits(hit_offsets, empty, empty.copy(), empty.copy())
    bounds = _chunk_bounds(offsets, 16 * numba.get_num_threads())
    shift, fshift = table.shifts
    args = (data, offsets, flags, lengths, table.hashes, table.directory, shift, table.filter, fshift,
            _SEP_TABLE, bounds)
    _hits_chunks(*args, False, hit_offsets, counts, empty, empty, empty)
    np.cumsum(counts, out=hit_offsets[1:])
    total = int(hit_offsets[-1])
    pos, start, end = (np.empty(total, dtype=np.int64) for _ in range(3))
    if total:
        _hits_chunks(*args, True, hit_offsets, counts, pos, start, end)
    return NgramHits(hit_offsets, pos, start, end)


def _prepare(data, offsets, cjk):
    data = np.ascontiguousarray(data)
    offsets = np.ascontiguousarray(offsets)
    check_buffers(data, offsets)
    n_docs = offsets.shape[0] - 1
    scratch = np.empty(max(1, int(offsets[-1]) - int(offsets[0])), dtype=np.uint64)
    return data, offsets, _cjk_flags(cjk, n_docs), n_docs, scratch


def unit_counts_cpu(data, offsets, cjk) -> np.ndarray:
    """Every document's number of units m (definition steps 1-3), int64."""
    data, offsets, flags, n_docs, scratch = _prepare(data, offsets, cjk)
    counts = np.zeros(n_docs, dtype=np.int64)
    if n_docs:
        _unit_counts(data, offsets, flags, _SEP_TABLE, scratch, counts)
    return counts


def gram_hashes_cpu(data, offsets, cjk, k) -> tuple[np.ndarray, np.ndarray]:
    """Index side: every document's gram hashes H (step 6) for windows of exactly k[d] units (k: a
    scalar or one per document; 0 or more than m gives none), flat, and int64 offsets (n + 1).
    A training document containing the same units hits every one of them."""
    data, offsets, flags, n_docs, scratch = _prepare(data, offsets, cjk)
    ks = np.ascontiguousarray(np.broadcast_to(np.asarray(k, dtype=np.int64), (n_docs,)))
    if (ks < 0).any():
        raise ValueError("gram lengths must be >= 0")
    counts = np.zeros(n_docs, dtype=np.int64)
    if n_docs:
        _grams_in_place(data, offsets, flags, ks, _SEP_TABLE, scratch, counts)
    out_offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(counts, out=out_offsets[1:])
    flat = np.empty(int(out_offsets[-1]), dtype=np.uint64)
    if n_docs:
        _compact(scratch, offsets, counts, out_offsets, flat)
    return flat, out_offsets


# --------------------------------------------------------------------------------------------
# The normalization, readable (a reference for tests and reports; the kernels never call it)
# --------------------------------------------------------------------------------------------


def _separator(ch: str) -> bool:
    cp = ord(ch)
    if cp < 128:
        return cp in ASCII_SEPARATORS
    return any(lo <= cp <= hi for lo, hi in UNICODE_SEPARATOR_RANGES)


def decontam_units(text: str, cjk: bool = False) -> list[str]:
    """The units the kernels hash (steps 1-3) of a valid str: what case, punctuation and whitespace
    changes cannot alter. ``" ".join(decontam_units(t))`` is the "decontamination-normalized" text."""
    units, word = [], []
    for ch in text:
        if _separator(ch):
            if word:
                units.append("".join(word))
            word = []
        elif cjk:
            units.append(ch)
        else:
            word.append(ch)
    if word:
        units.append("".join(word))
    return [u.translate(_ASCII_LOWER) for u in units]


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


# --------------------------------------------------------------------------------------------
# GPU (CuPy is imported only here, so the module imports on machines without it)
# --------------------------------------------------------------------------------------------


def ngram_lookup_gpu(data, offsets, cjk, table, word=(13, 8), char=(20, 12), *,
                     batch_bytes: int = GPU_BATCH_BYTES) -> NgramHits:
    """GPU version of :func:`ngram_lookup_cpu`: CuPy (or host) arrays in, CuPy :class:`NgramHits` out.

    Per batch of at most ``batch_bytes`` of text: units (one warp per document) into a scratch of 16
    bytes per text byte, hit counts (one warp per document), one host sync for the total, then the
    fill (one warp per document that has hits). The batch size only bounds memory.
    """
    cp = cupy_module()

    d_data = cp.ascontiguousarray(cp.asarray(data))
    d_offsets = cp.ascontiguousarray(cp.asarray(offsets))
    host_offsets = offsets if isinstance(offsets, np.ndarray) else cp.asnumpy(d_offsets)
    check_buffers(d_data, host_offsets)   # on the host's copy: no device sync
    table = _as_table(table)
    lengths = _lengths(word, char)
    n_docs = d_offsets.shape[0] - 1
    if batch_bytes >= 1 << 31:
        raise ValueError("batch_bytes of 2 GiB or more: unit spans are int32 on the GPU")
    hit_offsets = cp.zeros(n_docs + 1, dtype=cp.int64)
    if n_docs == 0 or len(table) == 0:
        empty = cp.empty(0, dtype=cp.int64)
        return NgramHits(hit_offsets, empty, empty.copy(), empty.copy())
    flags = _cjk_flags(cjk, n_docs, xp=cp)
    d_hashes, d_dir, d_filter = table.on_device()
    params = _gpu_params_on_device(cp.cuda.Device().id)
    suffix = "i32" if d_offsets.dtype == cp.int32 else "i64"
    module = raw_module("ngram_hash.cu")
    units_k, count_k, fill_k = (module.get_function(f"ngram_{name}_{suffix}")
                                for name in ("units", "count", "fill"))
    shift, fshift = (np.int32(x) for x in table.shifts)
    k = tuple(np.int32(x) for x in lengths)
    n_hashes = np.int64(len(table))

    # A document larger than a batch goes through the CPU twin (its bytes alone copied to the host), as in MinHash:
    # the device scratch (16 bytes per text byte of a batch) stays bounded by batch_bytes whatever the longest one.
    batches, oversize = _device_batches(host_offsets, batch_bytes)
    every = sorted([(d0, d1, True) for d0, d1 in batches] + [(d0, d1, False) for d0, d1 in oversize])
    most_bytes = max((int(host_offsets[d1] - host_offsets[d0]) for d0, d1 in batches), default=1)
    units = cp.empty(max(1, most_bytes), dtype=cp.uint64)  # a document has <= 1 unit per byte
    spans = cp.empty((2, max(1, most_bytes)), dtype=cp.int32)
    n_units = cp.empty(max((d1 - d0 for d0, d1 in batches), default=1), dtype=cp.int64)
    counts = cp.zeros(n_docs, dtype=cp.int64)
    docs_per_block = _GPU_BLOCK // 32
    pieces = []  # per batch: (pos, start, end)
    with _nvtx_range("gpupipe/kernel/ngram_hash"):
        for d0, d1, on_device in every:
            if not on_device:
                data_h, offs_h, flag_h = _one_document_on_host(d_data, host_offsets, flags, d0)
                hits = ngram_lookup_cpu(data_h, offs_h, flag_h, table, word, char)
                counts[d0] = int(hits.hit_offsets[-1])
                pieces.append(cp.asarray(np.stack([hits.pos, hits.start, hits.end])))
                continue
            n = d1 - d0
            base = np.int64(host_offsets[d0])  # the batch's first byte: scratch index 0
            offs = d_offsets[d0:d1 + 1]
            grid = (min(-(-n // docs_per_block), _GPU_MAX_BLOCKS),)
            units_k(grid, (_GPU_BLOCK,), (d_data, offs, np.int64(n), base, flags[d0:d1], params,
                                          units, spans[0], spans[1], n_units))
            count_k(grid, (_GPU_BLOCK,), (offs, np.int64(n), base, flags[d0:d1], units, n_units,
                                          *k, d_hashes, n_hashes, d_dir, shift, d_filter, fshift,
                                          params, counts[d0:d1]))
            local = cp.zeros(n + 1, dtype=cp.int64)
            cp.cumsum(counts[d0:d1], out=local[1:])
            total = int(local[-1])  # the one host sync per batch
            out = cp.empty((3, total), dtype=cp.int64)
            if total:
                hit_docs = cp.flatnonzero(counts[d0:d1]).astype(cp.int64)
                h = int(hit_docs.shape[0])
                fill_k((min(-(-h // docs_per_block), _GPU_MAX_BLOCKS),), (_GPU_BLOCK,),
                       (offs, hit_docs, np.int64(h), base, flags[d0:d1], units, spans[0], spans[1],
                        n_units, *k, d_hashes, n_hashes, d_dir, shift, d_filter, fshift, params,
                        local, out[0], out[1], out[2]))
            pieces.append(out)
    cp.cumsum(counts, out=hit_offsets[1:])
    allhits = cp.concatenate(pieces, axis=1) if len(pieces) > 1 else pieces[0]
    return NgramHits(hit_offsets, allhits[0], allhits[1], allhits[2])


def _nvtx_range(message: str):
    from .text_hash import _nvtx_range as nvtx_range

    return nvtx_range(message)


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device; never raises."""
    from .text_hash import gpu_available as available

    return available()


# --------------------------------------------------------------------------------------------
# Convenience entry point
# --------------------------------------------------------------------------------------------


def ngram_lookup(strings, cjk, table, word=(13, 8), char=(20, 12), device: str = "cpu") -> NgramHits:
    """Table hits of a column of strings (nulls count as empty), as host arrays.

    ``strings``: a pyarrow (Chunked)Array, a pandas Series, a sequence of str/bytes, or a cuDF
    Series (read in place on the GPU for "gpu" and "auto"). ``cjk``: a bool for all documents or
    one per document. ``device``: "cpu", "gpu" or "auto"; all agree.
    """
    from .strings import kernel_inputs

    data, offsets, on_gpu = kernel_inputs(strings, device)
    if on_gpu:
        return ngram_lookup_gpu(data, offsets, cjk, table, word, char).get()
    return ngram_lookup_cpu(data, offsets, cjk, table, word, char)
