"""MinHash signatures over Arrow string buffers: CUDA kernels (CuPy) and a bit-identical numba twin.

Used by fuzzy dedup: two documents' signatures agree in a fraction of positions that estimates the
Jaccard similarity of their shingle sets.

Definition (both twins follow it exactly; p = 2^61 - 1, all arithmetic on residues is exact)
-------------------------------------------------------------------------------------------
Input: ``data`` uint8 (an Arrow value buffer, UTF-8), ``offsets`` int32/int64 (n + 1 entries,
indexing ``data``; they may start above 0), ``cjk`` uint8 per document (1: character units,
0: word units), ``a``, ``b`` uint64 permutation parameters (num_perm each, all < p),
``word_k`` and ``char_k`` (shingle lengths, >= 1).

1. Code points. Each document's bytes are decoded left to right as UTF-8: a well-formed sequence
   (Unicode Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF, not cut by the end of
   the document) is one code point; any other byte is one code point on its own (an "invalid byte";
   this is what Python's ``decode("utf-8", "surrogateescape")`` produces).
2. Separators are the code points
     ASCII whitespace  U+0009..U+000D, U+0020
     ASCII punctuation and symbols  !"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~
     U+2000..U+206F, U+3000..U+303F, U+FF00..U+FF0F, U+FF1A..U+FF20, U+FF3B..U+FF40, U+FF5B..U+FF65
   (general punctuation and spaces, CJK punctuation, full-width ASCII punctuation). Invalid bytes and
   every other code point (letters, digits, controls, emoji, ...) are not separators.
3. Units. Word mode (cjk == 0): a unit is a maximal run of non-separator code points. Character mode
   (cjk == 1): a unit is one non-separator code point. A unit's bytes are its UTF-8 bytes (an invalid
   byte as itself) with ASCII A-Z folded to a-z; nothing else is folded (no Unicode case folding).
4. Unit hash: u = sum_i (c_i + 1) * BU^(len-1-i) mod p over the unit's folded bytes c_i
   (Horner: u = u*BU + c + 1, as text_hash does).
5. Shingles. With m units u_0..u_{m-1} and k = char_k or word_k by mode, let kk = min(k, m). The
   document's shingles are the windows of kk consecutive units, i = 0..m-kk (one shingle of all units
   when 0 < m < k; none when m == 0). Shingle base hash (64 bits):
       S_i = sum_{r<kk} u_{i+r} * BS^(kk-1-r) mod p,      H_i = fmix64(S_i XOR kk)
6. Signature: sig_j = min_i (a_j * (H_i mod p) + b_j) mod p, for j < num_perm. H is reduced mod p
   first (so that a_j * h needs only 122 bits), then permuted with exact mulmod61/addmod61.
   Every value is < p. A document with no shingle (empty, or only separators) gets every entry
   EMPTY = p = 2^61 - 1, which no real minimum reaches, so empty documents never look similar to a
   real one (they do all equal each other).

Permutations: ``minhash_permutations(num_perm, seed)``: arithmetic progressions a_j = a0 + j*da,
b_j = b0 + j*db mod p with a0, da, b0, db drawn from ``np.random.default_rng(seed)`` (any (a, b)
with entries < p is accepted; progressions let the CPU twin replace 127 of 128 multiplications
per shingle by additions, with identical results).

Cost: unit hashes are computed once per document; the CPU rolls S across windows,
S_{i+1} = (S_i - u_i * BS^(kk-1)) * BS + u_{i+kk}, so work is O(bytes + shingles * num_perm).
The GPU evaluates each window directly (kk multiplies, one thread per shingle); mod-p arithmetic is
exact, so both give the same S. In character mode the CPU looks the unit hash of each 1-3 byte
code point up in a 65,536-entry table (_CHAR_UNITS, 0 for separators) instead of classifying and
hashing its bytes: 15% faster on Chinese text, the same values. The bases BU, BS are fixed (below):
signatures are stable across processes, machines and backends.
"""

from __future__ import annotations

import functools
import string

import numpy as np
import numba
from numba import prange

from ._jit import njit
from ._mersenne import P61, addmod61, fmix64, mulmod61, powmod61, reduce61, splitmix64, splitmix64_array
from ._cuda import cupy_module, raw_module
from ._memory import empty
from .strings import check_buffers

# Bases: the fractional bits of sqrt(3) and sqrt(5) (SHA-512's 2nd and 3rd IV words) mod p, made
# odd; different from text_hash's. Changing either changes every signature.
BU = (0xBB67AE8584CAA73B % P61) | 1  # unit (byte) polynomial
BS = (0x3C6EF372FE94F82B % P61) | 1  # shingle (unit) polynomial
EMPTY = np.uint64(P61)  # every entry of a document without shingles

ASCII_SEPARATORS = bytes(range(0x09, 0x0E)) + b" " + string.punctuation.encode()
UNICODE_SEPARATOR_RANGES = ((0x2000, 0x206F), (0x3000, 0x303F), (0xFF00, 0xFF0F),
                            (0xFF1A, 0xFF20), (0xFF3B, 0xFF40), (0xFF5B, 0xFF65))

GPU_BATCH_BYTES = 128 << 20  # text per launch pair: the GPU scratch is 8 bytes per text byte (1 GiB)
_GPU_UNITS_BLOCK = 256  # units kernel: one warp per document, 8 per block
_GPU_MAX_BLOCKS = 1 << 20  # both kernels loop over documents, so the grid can be capped
_GPU_MAX_SIG_BLOCK = 256  # must match MH_MAX_BLOCK in minhash.cu
_GPU_CHUNK = 1024  # shingles per work item of minhash_progression_*: must match MH_CHUNK in minhash.cu

_SEP_TABLE = np.zeros(128, dtype=np.uint8)
_SEP_TABLE[list(ASCII_SEPARATORS)] = 1

_P = np.uint64(P61)
_BU, _BS = np.uint64(BU), np.uint64(BS)
_ZERO, _ONE = np.uint64(0), np.uint64(1)
_UPPER_A, _UPPER_Z, _CASE = np.uint64(ord("A")), np.uint64(ord("Z")), np.uint64(32)


# --------------------------------------------------------------------------------------------
# CPU twin: decode, units, shingles (shared by minhash_cpu and shingle_hashes_cpu)
# --------------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _utf8_len(data, i, end):
    """Length of the well-formed UTF-8 sequence at data[i] (Unicode Table 3-7), 0 if there is none."""
    b0 = np.int64(data[i])
    if b0 < 0x80:
        return 1
    if b0 < 0xC2:
        return 0  # continuation byte or overlong lead
    if b0 < 0xE0:
        n, lo, hi = 2, 0x80, 0xBF
    elif b0 < 0xF0:
        n = 3
        lo = 0xA0 if b0 == 0xE0 else 0x80  # E0: no overlongs
        hi = 0x9F if b0 == 0xED else 0xBF  # ED: no surrogates
    elif b0 < 0xF5:
        n = 4
        lo = 0x90 if b0 == 0xF0 else 0x80  # F0: no overlongs
        hi = 0x8F if b0 == 0xF4 else 0xBF  # F4: nothing above U+10FFFF
    else:
        return 0
    if i + n > end:
        return 0
    b1 = np.int64(data[i + 1])
    if b1 < lo or b1 > hi:
        return 0
    for r in range(2, n):
        if (np.int64(data[i + r]) & 0xC0) != 0x80:
            return 0
    return n


@njit(cache=True, inline="always")
def _is_separator(data, i, n, sep_table):
    """Whether the code point of n bytes at data[i] separates units (definition, step 2)."""
    if n == 1:
        return sep_table[data[i]] != 0
    if n != 3:  # every separator outside ASCII is a 3-byte sequence
        return False
    cp = ((np.int64(data[i]) & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) \
        | (np.int64(data[i + 2]) & 0x3F)
    return ((0x2000 <= cp <= 0x206F) or (0x3000 <= cp <= 0x303F) or (0xFF00 <= cp <= 0xFF0F)
            or (0xFF1A <= cp <= 0xFF20) or (0xFF3B <= cp <= 0xFF40) or (0xFF5B <= cp <= 0xFF65))


@njit(cache=True, inline="always")
def _fold_byte(c):
    """c + 1 after folding ASCII A-Z to a-z, as a uint64 term of the unit polynomial."""
    x = np.uint64(c)
    if x >= _UPPER_A and x <= _UPPER_Z:
        x += _CASE
    return x + _ONE


def _unit_tables() -> np.ndarray:
    """T[e, c] = (fold(c) + 1) * BU^e mod p for e < 8: byte c's term at e places from a block's end."""
    fold = [c + 32 if 65 <= c <= 90 else c for c in range(256)]
    return np.array([[(fold[c] + 1) * pow(BU, e, P61) % P61 for c in range(256)] for e in range(8)],
                    dtype=np.uint64)


_UNIT_TABLES = _unit_tables()
_BU8 = np.uint64(pow(BU, 8, P61))


@njit(cache=True, inline="always")
def _unit_hash(data, s, e):
    """The unit polynomial of data[s:e] (step 4) in blocks of 8 bytes: table terms instead of a
    multiplication per byte, so no long dependency chain. Sums stay < 8p + 256 < 2^64."""
    t = _UNIT_TABLES
    q = (e - s) % 8
    h = _ZERO
    for r in range(q):                      # the leading partial block: q < 8 terms, < 7p
        h += t[q - 1 - r, data[s + r]]
    h = reduce61(h)
    i = s + q
    while i < e:                            # full blocks: h*BU^8 + 7 table terms + the last byte
        x = mulmod61(h, _BU8) + _fold_byte(data[i + 7])
        for r in range(7):
            x += t[7 - r, data[i + r]]
        h = reduce61(x)
        i += 8
    return h


def _char_unit_table() -> np.ndarray:
    """U[cp] for the BMP code points: the unit hash (step 4) of cp's UTF-8 bytes, what _unit_hash gives for them;
    0 for separators and surrogates (not code points of well-formed UTF-8). Character mode looks 1-3 byte units up
    here instead of classifying and hashing their bytes. No real unit hash is 0 (checked), so 0 means "no unit"."""
    cp = np.arange(0x10000, dtype=np.int64)
    n = np.where(cp < 0x80, 1, np.where(cp < 0x800, 2, 3))
    lead = np.where(n == 1, cp, np.where(n == 2, 0xC0 | (cp >> 6), 0xE0 | (cp >> 12)))
    mid = np.where(n == 2, 0x80 | (cp & 63), 0x80 | ((cp >> 6) & 63))
    last = 0x80 | (cp & 63)
    t = _UNIT_TABLES  # T[e, c]: byte c's term e places from the unit's end, each < p
    u = t[n - 1, lead] + np.where(n >= 2, t[n - 2, mid], 0) + np.where(n == 3, t[0, last], 0)
    u = u % np.uint64(P61)  # a sum of at most 3 terms < 3p: no overflow
    sep = np.zeros(cp.shape, dtype=bool)
    sep[:0x80] = _SEP_TABLE != 0
    for lo, hi in UNICODE_SEPARATOR_RANGES:
        sep[lo:hi + 1] = True
    surrogate = (cp >= 0xD800) & (cp <= 0xDFFF)
    if (u[~sep & ~surrogate] == 0).any():  # p is prime and the terms are fixed: never, but 0 must stay free
        raise AssertionError("a unit hash is 0: character-mode table lookups would drop it")
    u[sep | surrogate] = 0
    return u.astype(np.uint64)


_CHAR_UNITS = _char_unit_table()


@njit(cache=True, inline="always")
def _continuation(x):
    return (np.int64(x) & 0xC0) == 0x80


@njit(cache=True)
def _char_units(data, start, end, sep_table, char_units, units):
    """Character mode of _doc_units: well-formed 1-3 byte sequences (almost all text) decoded inline and looked
    up in char_units; anything else (4-byte sequences, invalid bytes, a sequence cut by the end) takes the
    general path. Same units, same order."""
    m = 0
    i = start
    while i < end:
        b0 = np.int64(data[i])
        n = 0
        u = _ZERO
        if b0 < 0x80:
            u, n = char_units[b0], 1
        elif 0xE0 <= b0 < 0xF0 and i + 2 < end:
            b1, b2 = np.int64(data[i + 1]), np.int64(data[i + 2])
            lo = 0xA0 if b0 == 0xE0 else 0x80  # as _utf8_len: no overlongs, no surrogates
            hi = 0x9F if b0 == 0xED else 0xBF
            if lo <= b1 <= hi and _continuation(b2):
                u, n = char_units[((b0 & 0x0F) << 12) | ((b1 & 0x3F) << 6) | (b2 & 0x3F)], 3
        elif 0xC2 <= b0 < 0xE0 and i + 1 < end and _continuation(data[i + 1]):
            u, n = char_units[((b0 & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F)], 2
        if n == 0:
            n = _utf8_len(data, i, end)
            if n == 0:
                u, n = _unit_hash(data, i, i + 1), 1  # an invalid byte is a unit of its own
            elif not _is_separator(data, i, n, sep_table):
                u = _unit_hash(data, i, i + n)
        if u != _ZERO:
            units[m] = u
            m += 1
        i += n
    return m


@njit(cache=True)
def _doc_units(data, start, end, char_mode, sep_table, char_units, units):
    """Unit hashes of data[start:end] into units[0:m]; returns m (<= end - start). char_units: _CHAR_UNITS."""
    if char_mode:
        return _char_units(data, start, end, sep_table, char_units, units)
    m = 0
    unit_start = -1                         # start of the open word, -1 when none
    i = start
    while i < end:
        n = _utf8_len(data, i, end)
        step = n if n > 0 else 1            # an invalid byte is one code point
        if n > 0 and _is_separator(data, i, n, sep_table):
            if unit_start >= 0:
                units[m] = _unit_hash(data, unit_start, i)
                m += 1
                unit_start = -1
        elif unit_start < 0:
            unit_start = i
        i += step
    if unit_start >= 0:
        units[m] = _unit_hash(data, unit_start, end)
        m += 1
    return m


@njit(cache=True)
def _doc_shingles(data, start, end, char_mode, k, sep_table, char_units, buf):
    """Shingle base hashes H of data[start:end] into buf[0:s]; returns s.

    buf needs end - start slots: first the unit hashes, then overwritten in place by the shingle
    hashes (window i is written after u_i, which leaves it, has been read; later units are intact).
    """
    m = _doc_units(data, start, end, char_mode, sep_table, char_units, buf)
    if m == 0:
        return 0
    kk = min(k, m)
    s = _ZERO
    for r in range(kk):
        s = addmod61(mulmod61(s, _BS), buf[r])
    drop = powmod61(_BS, np.uint64(kk - 1))  # weight of the unit that leaves the window
    tag = np.uint64(kk)
    count = m - kk + 1
    for i in range(count):
        leaving = buf[i]
        buf[i] = fmix64(s ^ tag)
        if i + 1 < count:
            s = addmod61(s, _P - mulmod61(leaving, drop))  # _P - x is in (0, p]: still exact
            s = addmod61(mulmod61(s, _BS), buf[i + kk])
    return count


@njit(cache=True, inline="always")
def _signature(buf, count, a, b, out, d):
    """out[d, j] = min over the shingles of (a_j * (H mod p) + b_j) mod p; EMPTY (= p) if none.

    Reduces buf[0:count] mod p in place first. Permutations outside, shingles inside: the inner
    loop is a min-reduction that LLVM vectorizes (32-bit limb products: vpmuludq).
    """
    for i in range(count):
        buf[i] = reduce61(buf[i])
    for j in range(a.shape[0]):
        aj = a[j]
        bj = b[j]
        lowest = _P
        for i in range(count):
            lowest = min(lowest, addmod61(mulmod61(aj, buf[i]), bj))
        out[d, j] = lowest


@njit(cache=True, inline="always")
def _signature_progression(buf, count, a0, b0, da, db, num_perm, v, w, out, d):
    """_signature for a_j = a0 + j*da, b_j = b0 + j*db: v_i = a_j*h_i + b_j is carried from j to j+1
    by v_i += w_i (w_i = da*h_i + db), one modular addition instead of a multiplication; the values
    are the same residues, exactly. Two permutations per pass over the shingles (one load and store
    of v_i for both): ~15% faster than one."""
    for i in range(count):
        h = reduce61(buf[i])
        v[i] = addmod61(mulmod61(a0, h), b0)
        w[i] = addmod61(mulmod61(da, h), db)
    for j in range(0, num_perm - 1, 2):
        low0 = _P
        low1 = _P
        for i in range(count):
            x = v[i]
            step = w[i]
            low0 = min(low0, x)
            x = _addmod_min(x, step)
            low1 = min(low1, x)
            v[i] = _addmod_min(x, step)
        out[d, j] = low0
        out[d, j + 1] = low1
    if num_perm % 2:
        lowest = _P
        for i in range(count):
            lowest = min(lowest, v[i])
        out[d, num_perm - 1] = lowest


@njit(cache=True, inline="always")
def _addmod_min(x, y):
    """(x + y) mod p for x, y < p, branch-free: below p, s - p wraps past 2^63, so the unsigned min picks s."""
    t = x + y
    return min(t, t - _P)


@njit(cache=True)
def _doc_signature(buf, count, a, b, steps, v, w, out, d):
    # A call of its own on purpose: choosing the target inline, `sig, r = (row, 0) if bands else (out, d)`,
    # then inlining the signature loop lost the odd permutation's write under numba 0.68
    # (tests: test_cpu_matches_reference with num_perm 7).
    if steps.shape[0] == 2:
        _signature_progression(buf, count, a[0], b[0], steps[0], steps[1], a.shape[0], v, w, out, d)
    else:
        _signature(buf, count, a, b, out, d)


@njit(cache=True, inline="always")
def fold_band(sig, d, band, rows):
    """LSH key of one band: FNV-style fold of sig[d, band*rows : (band+1)*rows], then a splitmix64
    finaliser. Two bands collide by accident with probability ~2^-64, far below LSH's own
    false-positive rate."""
    h = np.uint64(0xCBF29CE484222325) ^ np.uint64(band)
    for r in range(rows):
        h = (h ^ sig[d, band * rows + r]) * np.uint64(0x100000001B3)
    return splitmix64(h)


@njit(parallel=True, cache=True)
def _minhash_chunks(data, offsets, cjk, a, b, steps, word_k, char_k, sep_table, char_units, bounds, bands, rows,
                    out):
    """Signatures of all documents; chunk c (documents bounds[c]..bounds[c+1]) per parallel task.
    steps = [da, db] when (a, b) are progressions (fast path), else empty. bands > 0: out gets each
    document's band keys (fold_band) instead of its signature, which then never leaves a
    one-row scratch (no n x num_perm matrix)."""
    progression = steps.shape[0] == 2
    for c in prange(bounds.shape[0] - 1):
        d0, d1 = bounds[c], bounds[c + 1]
        longest = 1
        for d in range(d0, d1):
            longest = max(longest, np.int64(offsets[d + 1] - offsets[d]))
        buf = np.empty(longest, dtype=np.uint64)  # one scratch per chunk, not per document
        v = np.empty(longest if progression else 1, dtype=np.uint64)
        w = np.empty(longest if progression else 1, dtype=np.uint64)
        row = np.empty((1, a.shape[0]), dtype=np.uint64)
        for d in range(d0, d1):
            k = char_k if cjk[d] else word_k
            count = _doc_shingles(data, np.int64(offsets[d]), np.int64(offsets[d + 1]), cjk[d] != 0,
                                  k, sep_table, char_units, buf)
            if bands > 0:  # the signature goes to the one-row scratch, its band keys to out
                _doc_signature(buf, count, a, b, steps, v, w, row, 0)
                for band in range(bands):
                    out[d, band] = fold_band(row, 0, band, rows)
            else:
                _doc_signature(buf, count, a, b, steps, v, w, out, d)


@njit(parallel=True, cache=True)
def _shingle_chunks(data, offsets, cjk, word_k, char_k, sep_table, char_units, distinct, bounds, staged, counts):
    """Every document's shingle hashes, made in a per-chunk scratch (the chunk's longest document,
    cache-resident) and staged back to back from the chunk's first byte position in ``staged`` (a
    chunk has at most one shingle per byte, so chunks never overlap; only the slots written are
    ever touched). distinct: each document's hashes sorted, each once."""
    base = np.int64(offsets[0])
    for c in prange(bounds.shape[0] - 1):
        d0, d1 = bounds[c], bounds[c + 1]
        longest = 1
        for d in range(d0, d1):
            longest = max(longest, np.int64(offsets[d + 1] - offsets[d]))
        buf = np.empty(longest, dtype=np.uint64)
        pos = np.int64(offsets[d0]) - base
        for d in range(d0, d1):
            k = char_k if cjk[d] else word_k
            count = _doc_shingles(data, np.int64(offsets[d]), np.int64(offsets[d + 1]), cjk[d] != 0,
                                  k, sep_table, char_units, buf)
            if distinct and count > 1:
                buf[:count].sort()
                kept = 1
                for i in range(1, count):
                    if buf[i] != buf[kept - 1]:
                        buf[kept] = buf[i]
                        kept += 1
                count = kept
            staged[pos:pos + count] = buf[:count]
            pos += count
            counts[d] = count


@njit(parallel=True, cache=True)
def _gather_chunks(staged, offsets, bounds, out_offsets, flat):
    """Copy each chunk's staged run of shingles to its place in the flat output."""
    base = np.int64(offsets[0])
    for c in prange(bounds.shape[0] - 1):
        d0, d1 = bounds[c], bounds[c + 1]
        src = np.int64(offsets[d0]) - base
        flat[out_offsets[d0]:out_offsets[d1]] = staged[src:src + out_offsets[d1] - out_offsets[d0]]


@njit(parallel=True, cache=True)
def _compact(scratch, offsets, counts, out_offsets, flat):
    """Copy counts[d] values from scratch at document d's byte position to flat at out_offsets[d]."""
    base = np.int64(offsets[0])
    for d in prange(counts.shape[0]):
        src = np.int64(offsets[d]) - base
        flat[out_offsets[d]:out_offsets[d + 1]] = scratch[src:src + counts[d]]


# --------------------------------------------------------------------------------------------
# Argument checks shared by both backends
# --------------------------------------------------------------------------------------------


def _check_inputs(data, offsets, word_k, char_k):
    check_buffers(data, offsets)
    if int(word_k) < 1 or int(char_k) < 1:
        raise ValueError(f"shingle lengths must be >= 1, got word_k={word_k}, char_k={char_k}")


def _cjk_flags(cjk, n_docs: int, xp=np):
    """Per-document uint8 mode flags from a scalar or an array of n_docs bools/ints."""
    flags = xp.asarray(cjk)
    if flags.ndim == 0:
        return xp.full(n_docs, 1 if bool(flags) else 0, dtype=xp.uint8)
    if flags.shape != (n_docs,):
        raise ValueError(f"cjk must be a scalar or have one entry per document ({n_docs}), "
                         f"got shape {flags.shape}")
    return xp.ascontiguousarray((flags != 0).astype(xp.uint8))


def _check_permutations(a, b) -> tuple[np.ndarray, np.ndarray]:
    a = np.ascontiguousarray(a, dtype=np.uint64)
    b = np.ascontiguousarray(b, dtype=np.uint64)
    if a.ndim != 1 or a.shape != b.shape or a.shape[0] < 1:
        raise ValueError("a and b must be 1-d arrays of the same length >= 1")
    if (a >= _P).any() or (b >= _P).any():  # mulmod61/addmod61 need residues
        raise ValueError("permutation parameters must be < 2^61 - 1")
    return a, b


MAX_PERM = 1 << 16  # permutations per seed; the first k of any larger count are the same k


def minhash_permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b), num_perm each, uint64, fixed by the seed: a_j = a0 + j*da, b_j = b0 + j*db (mod p).

    a0, da uniform in [1, p-1], b0, db in [0, p-1] (``np.random.default_rng(seed)``); redrawn in the
    (~2^-45) case that a_j is 0 for some j < MAX_PERM, so permutation j depends on the seed and j
    alone: the first k permutations are the same whatever num_perm (fuzzy dedup computes only the
    bands x rows it reads). Every permutation is still exactly (a_j*h + b_j) mod p; the
    progression lets the CPU twin step from permutation j to j+1 with one modular addition per
    shingle instead of a modular multiplication (see _signature_progression). Estimates are as
    good as with independent draws (z-scores of the Jaccard estimate have std 1.0 either way on
    1,500 pairs x 5 seeds; tests/test_kernels_minhash.py checks bias and spread).
    """
    if not 1 <= num_perm <= MAX_PERM:
        raise ValueError(f"num_perm must be in [1, {MAX_PERM}], got {num_perm}")
    rng = np.random.default_rng(seed)
    while True:
        a0, da = (int(x) for x in rng.integers(1, P61, size=2, dtype=np.uint64))
        b0, db = (int(x) for x in rng.integers(0, P61, size=2, dtype=np.uint64))
        if (-a0 * pow(da, -1, P61)) % P61 >= MAX_PERM:  # the one j with a_j = 0 is out of reach
            j = np.arange(num_perm, dtype=object)
            return (((a0 + j * da) % P61).astype(np.uint64), ((b0 + j * db) % P61).astype(np.uint64))


def _progression_steps(a: np.ndarray, b: np.ndarray) -> tuple[int, int] | None:
    """(da, db) when a and b are arithmetic progressions mod p (as minhash_permutations makes), else None."""
    if a.shape[0] < 2:
        return 0, 0
    da, db = (int(a[1]) - int(a[0])) % P61, (int(b[1]) - int(b[0])) % P61
    j = np.arange(a.shape[0], dtype=object)
    ok = ((int(a[0]) + j * da) % P61 == a.astype(object)).all() and \
        ((int(b[0]) + j * db) % P61 == b.astype(object)).all()
    return (da, db) if ok else None


# --------------------------------------------------------------------------------------------
# CPU entry points
# --------------------------------------------------------------------------------------------


def _chunk_bounds(offsets: np.ndarray, n_chunks: int) -> np.ndarray:
    """Document indices cutting the batch into about n_chunks pieces, even in bytes and in count."""
    n_docs = offsets.shape[0] - 1
    n_chunks = max(1, min(n_chunks, n_docs))
    rel = offsets.astype(np.int64) - np.int64(offsets[0])
    by_bytes = np.searchsorted(rel, np.linspace(0, rel[-1], n_chunks + 1), side="left")
    by_count = np.linspace(0, n_docs, n_chunks + 1).astype(np.int64)
    bounds = np.unique(np.concatenate([[0, n_docs], by_bytes, by_count]))
    return bounds[(bounds >= 0) & (bounds <= n_docs)].astype(np.int64)


def minhash_cpu(data, offsets, cjk, a, b, word_k: int = 5, char_k: int = 3, *, bands: int = 0,
                rows: int = 0) -> np.ndarray:
    """(n, num_perm) uint64 MinHash signatures of Arrow buffers (see the module docstring); with
    bands > 0, the (n, bands) LSH band keys of those signatures instead (band_keys(sig, bands, rows),
    folded as each signature is made).

    Runs in parallel over chunks of documents (numba threads); memory beyond the output is one
    scratch of the longest document per chunk (8 bytes per byte).
    """
    data = np.ascontiguousarray(data)
    offsets = np.ascontiguousarray(offsets)
    _check_inputs(data, offsets, word_k, char_k)
    a, b = _check_permutations(a, b)
    _check_bands(bands, rows, a.shape[0])
    n_docs = offsets.shape[0] - 1
    flags = _cjk_flags(cjk, n_docs)
    out = empty((n_docs, bands if bands else a.shape[0]), np.uint64)
    if n_docs:
        bounds = _chunk_bounds(offsets, 16 * numba.get_num_threads())
        steps = _progression_steps(a, b)
        steps = np.array(steps if steps is not None else [], dtype=np.uint64)
        _minhash_chunks(data, offsets, flags, a, b, steps, np.int64(word_k), np.int64(char_k),
                        _SEP_TABLE, _CHAR_UNITS, bounds, np.int64(bands), np.int64(rows), out)
    return out


def _check_bands(bands: int, rows: int, num_perm: int) -> None:
    if bands < 0 or (bands and (rows < 1 or bands * rows > num_perm)):
        raise ValueError(f"{bands} bands x {rows} rows does not fit {num_perm} permutations")


@njit(parallel=True, cache=True)
def _band_keys(sig, bands, rows, out):
    for d in prange(sig.shape[0]):
        for band in range(bands):
            out[d, band] = fold_band(sig, d, band, rows)


_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)


def band_keys_array(sig, bands: int, rows: int):
    """`band_keys` in array operations, numpy or CuPy alike (the GPU folds its signatures where they are, so only
    8 bytes a band leave the device): the same keys as `fold_band`, bit for bit."""
    xp = np
    if type(sig).__module__.split(".")[0] == "cupy":
        xp = cupy_module()
    _check_bands(bands, rows, sig.shape[1] if sig.ndim == 2 else 0)
    sig3 = sig[:, :bands * rows].astype(np.uint64, copy=False).reshape(sig.shape[0], bands, rows)
    h = xp.broadcast_to(_FNV_OFFSET ^ xp.arange(bands, dtype=np.uint64), (sig.shape[0], bands)).copy()
    for r in range(rows):
        h ^= sig3[:, :, r]
        h *= _FNV_PRIME
    return splitmix64_array(h)


def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, bands) uint64 LSH band keys of an (n, >= bands*rows) signature matrix (fold_band)."""
    sig = np.ascontiguousarray(sig, dtype=np.uint64)
    _check_bands(bands, rows, sig.shape[1] if sig.ndim == 2 else 0)
    out = empty((sig.shape[0], bands), np.uint64)
    if len(sig):
        _band_keys(sig, np.int64(bands), np.int64(rows), out)
    return out


def shingle_hashes_cpu(data, offsets, cjk, word_k: int = 5, char_k: int = 3, *,
                       distinct: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Every document's 64-bit shingle base hashes H (step 5), flat, and int64 offsets (n + 1).

    For exact Jaccard checks of candidate pairs: the same code as minhash_cpu computes them, so
    sig_j = min over a document's slice of (a_j * (H mod p) + b_j) mod p. Repeated shingles repeat,
    in text order; with distinct=True each document's slice is its set: sorted, each hash once.
    Memory: the output, staged once in an 8-bytes-per-text-byte reservation of which only the slots
    written are touched (one per shingle).
    """
    data = np.ascontiguousarray(data)
    offsets = np.ascontiguousarray(offsets)
    _check_inputs(data, offsets, word_k, char_k)
    n_docs = offsets.shape[0] - 1
    flags = _cjk_flags(cjk, n_docs)
    counts = np.zeros(n_docs, dtype=np.int64)
    out_offsets = np.zeros(n_docs + 1, dtype=np.int64)
    if not n_docs:
        return np.empty(0, dtype=np.uint64), out_offsets
    bounds = _chunk_bounds(offsets, 16 * numba.get_num_threads())
    staged = empty(max(1, int(offsets[-1]) - int(offsets[0])), np.uint64)  # untouched beyond what is written
    _shingle_chunks(data, offsets, flags, np.int64(word_k), np.int64(char_k), _SEP_TABLE, _CHAR_UNITS, distinct,
                    bounds, staged, counts)
    np.cumsum(counts, out=out_offsets[1:])
    flat = empty(int(out_offsets[-1]), np.uint64)
    _gather_chunks(staged, offsets, bounds, out_offsets, flat)
    return flat, out_offsets


# --------------------------------------------------------------------------------------------
# GPU (CuPy is imported only here, so the module imports on machines without it)
# --------------------------------------------------------------------------------------------


def _gpu_params() -> np.ndarray:
    """minhash.cu's params: BU, BS, the ASCII separator bitmask (2 words), BU^0 .. BU^32."""
    lo = sum(1 << c for c in ASCII_SEPARATORS if c < 64)
    hi = sum(1 << (c - 64) for c in ASCII_SEPARATORS if c >= 64)
    powers = [pow(BU, e, P61) for e in range(33)]
    return np.array([BU, BS, lo, hi, *powers], dtype=np.uint64)


@functools.lru_cache(maxsize=None)
def _gpu_params_on_device(device_id: int):
    """The params on the device, once per process: copied synchronously (blocking=True), so every stream may read
    them whichever stream was current at the first call (an async copy would be ordered on that stream only)."""
    cp = cupy_module()

    return cp.asarray(_gpu_params(), blocking=True)


def _gpu_batches(offsets: np.ndarray, batch_bytes: int) -> list[tuple[int, int]]:
    """Consecutive document ranges [d0, d1) of at most batch_bytes of text (one doc if longer)."""
    n_docs = offsets.shape[0] - 1
    rel = offsets.astype(np.int64)
    batches, d0 = [], 0
    while d0 < n_docs:
        d1 = int(np.searchsorted(rel, rel[d0] + batch_bytes, side="right")) - 1
        d1 = min(max(d1, d0 + 1), n_docs)
        batches.append((d0, d1))
        d0 = d1
    return batches


def _device_batches(offsets: np.ndarray, batch_bytes: int):
    """(_gpu_batches of the documents that fit a batch, [(d, d + 1)] of each document larger than a batch). The
    larger ones go through the CPU twin: the device scratch (8 bytes per text byte of a batch) stays bounded by
    batch_bytes whatever the longest document, and the result is the same by construction."""
    batches = _gpu_batches(offsets, batch_bytes)
    big = [(d0, d1) for d0, d1 in batches if d1 == d0 + 1 and int(offsets[d1] - offsets[d0]) > batch_bytes]
    return [b for b in batches if b not in big], big


def _one_document_on_host(d_data, host_offsets, flags, d: int):
    """(data, offsets, cjk) on the host of document d alone: its bytes copied from the device."""
    cp = cupy_module()

    s, e = int(host_offsets[d]), int(host_offsets[d + 1])
    return cp.asnumpy(d_data[s:e]), np.array([0, e - s], np.int64), cp.asnumpy(flags[d:d + 1])


def _sig_block(num_perm: int) -> int:
    """Threads per block of the signature kernel: one permutation each, whole warps, <= 256."""
    return min(_GPU_MAX_SIG_BLOCK, -(-num_perm // 32) * 32)


def minhash_gpu(data, offsets, cjk, a, b, word_k: int = 5, char_k: int = 3, *,
                batch_bytes: int = GPU_BATCH_BYTES):
    """GPU version of :func:`minhash_cpu`: CuPy (or host) arrays in, CuPy (n, num_perm) uint64 out.

    Two kernels per batch of at most ``batch_bytes`` of text: unit hashes (one warp per document)
    into a scratch of 8 bytes per text byte, then signatures (one block per document, one thread
    per permutation). The batch size only bounds memory; the result does not depend on it. A
    document larger than a batch goes through the CPU twin (its bytes alone copied to the host), so
    the device scratch stays 8 x batch_bytes whatever the longest document.
    """
    cp = cupy_module()

    d_data = cp.ascontiguousarray(cp.asarray(data))
    d_offsets = cp.ascontiguousarray(cp.asarray(offsets))
    # n + 1 integers to plan the batches on the host (a device-to-host copy if they are on the GPU), checked there:
    # no device sync for the check, and none per batch below (work items are planned from byte counts)
    host_offsets = offsets if isinstance(offsets, np.ndarray) else cp.asnumpy(d_offsets)
    _check_inputs(d_data, host_offsets, word_k, char_k)
    a, b = _check_permutations(cp.asnumpy(a), cp.asnumpy(b))
    num_perm = a.shape[0]
    n_docs = d_offsets.shape[0] - 1
    out = cp.empty((n_docs, num_perm), dtype=cp.uint64)
    if n_docs == 0:
        return out
    flags = _cjk_flags(cjk, n_docs, xp=cp)
    d_a, d_b = cp.asarray(a), cp.asarray(b)
    params = _gpu_params_on_device(cp.cuda.Device().id)
    suffix = "i32" if d_offsets.dtype == cp.int32 else "i64"
    module = raw_module("minhash.cu")
    units_kernel = module.get_function(f"minhash_units_{suffix}")
    sig_kernel = module.get_function(f"minhash_signatures_{suffix}")
    steps = _progression_steps(a, b)   # progressions (the default): the kernel that adds where it multiplied
    prog_kernel = module.get_function(f"minhash_progression_{suffix}") if steps is not None else None

    batches, oversize = _device_batches(host_offsets, batch_bytes)
    for d0, _ in oversize:   # bounded device memory: the CPU twin, on this document's bytes alone
        data_h, offs_h, flag_h = _one_document_on_host(d_data, host_offsets, flags, d0)
        out[d0] = cp.asarray(minhash_cpu(data_h, offs_h, flag_h, a, b, word_k, char_k)[0])
    if not batches:
        return out
    most_bytes = max(int(host_offsets[d1] - host_offsets[d0]) for d0, d1 in batches)
    most_docs = max(d1 - d0 for d0, d1 in batches)
    units = cp.empty(max(1, most_bytes), dtype=cp.uint64)  # a document has <= 1 unit per byte
    n_units = cp.empty(most_docs, dtype=cp.int64)
    sig_block = _sig_block(num_perm)
    docs_per_units_block = _GPU_UNITS_BLOCK // 32
    with _nvtx_range("gpupipe/kernel/minhash"):
        for d0, d1 in batches:
            n = d1 - d0
            base = np.int64(host_offsets[d0])  # the batch's first byte: scratch index 0
            offs = d_offsets[d0:d1 + 1]
            units_kernel((min(-(-n // docs_per_units_block), _GPU_MAX_BLOCKS),), (_GPU_UNITS_BLOCK,),
                         (d_data, offs, np.int64(n), base, flags[d0:d1], params, units, n_units))
            if prog_kernel is None:
                sig_kernel((min(n, _GPU_MAX_BLOCKS),), (sig_block,),
                           (offs, np.int64(n), base, flags[d0:d1], units, n_units, d_a, d_b,
                            np.int32(num_perm), np.int32(word_k), np.int32(char_k), params, out[d0:d1]))
                continue
            # work items: chunks of _GPU_CHUNK shingles, (document, first shingle), planned on the host from byte
            # counts (a document has at most one shingle per byte), so no sync waits for the unit counts; a chunk
            # past a document's last shingle does nothing
            per_doc = -(-np.diff(host_offsets[d0:d1 + 1].astype(np.int64)) // _GPU_CHUNK)
            ends = np.cumsum(per_doc)
            total = int(ends[-1])
            out[d0:d1].fill(EMPTY)   # the kernel lowers it with atomicMin; no shingle: stays EMPTY
            if total:
                chunk_doc = np.repeat(np.arange(n, dtype=np.int64), per_doc)
                chunk_first = (np.arange(total, dtype=np.int64) - (ends - per_doc)[chunk_doc]) * _GPU_CHUNK
                chunk_doc, chunk_first = cp.asarray(chunk_doc), cp.asarray(chunk_first)
                prog_kernel((min(total, _GPU_MAX_BLOCKS),), (_GPU_MAX_SIG_BLOCK,),
                            (offs, base, flags[d0:d1], units, n_units, chunk_doc, chunk_first, np.int64(total),
                             np.uint64(a[0]), np.uint64(b[0]), np.uint64(steps[0]), np.uint64(steps[1]),
                             np.int32(num_perm), np.int32(word_k), np.int32(char_k), params, out[d0:d1]))
    return out


def _shingle_counts(n_units, flags, word_k: int, char_k: int):
    """Shingles per document from its unit count m (step 5: windows of min(m, k) units; none without units), in
    the arrays' module (the GPU's unit counts stay on the device)."""
    k = (flags != 0).astype(np.int64) * (char_k - word_k) + word_k   # per document, by its mode
    kk = n_units - (n_units - k) * (n_units > k)                     # min(m, k)
    return (n_units - kk + 1) * (n_units > 0)


def shingle_hashes_gpu(data, offsets, cjk, word_k: int = 5, char_k: int = 3, *, distinct: bool = False,
                       batch_bytes: int = GPU_BATCH_BYTES):
    """GPU version of :func:`shingle_hashes_cpu`: CuPy (flat uint64, offsets int64 of n + 1) of every document's
    shingle base hashes H, in text order; distinct=True: each document's set, sorted, each hash once (a device
    sort, lsh_graph.distinct_sets_array). Per batch: the units kernel of minhash_gpu, then one block per document
    writes its H_i (minhash_shingles_*)."""
    cp = cupy_module()

    from .lsh_graph import distinct_sets_array

    d_data = cp.ascontiguousarray(cp.asarray(data))
    d_offsets = cp.ascontiguousarray(cp.asarray(offsets))
    _check_inputs(d_data, d_offsets, word_k, char_k)
    host_offsets = offsets if isinstance(offsets, np.ndarray) else cp.asnumpy(d_offsets)
    n_docs = d_offsets.shape[0] - 1
    out_offsets = cp.zeros(n_docs + 1, dtype=cp.int64)
    if n_docs == 0:
        return cp.empty(0, dtype=cp.uint64), out_offsets
    flags = _cjk_flags(cjk, n_docs, xp=cp)
    params = _gpu_params_on_device(cp.cuda.Device().id)
    suffix = "i32" if d_offsets.dtype == cp.int32 else "i64"
    module = raw_module("minhash.cu")
    units_kernel = module.get_function(f"minhash_units_{suffix}")
    shingles_kernel = module.get_function(f"minhash_shingles_{suffix}")
    batches, oversize = _device_batches(host_offsets, batch_bytes)
    every = sorted([(d0, d1, True) for d0, d1 in batches] + [(d0, d1, False) for d0, d1 in oversize])
    most_bytes = max((int(host_offsets[d1] - host_offsets[d0]) for d0, d1 in batches), default=1)
    units = cp.empty(max(1, most_bytes), dtype=cp.uint64)
    n_units = cp.empty(max((d1 - d0 for d0, d1 in batches), default=1), dtype=cp.int64)
    counts, flats = cp.zeros(n_docs, dtype=cp.int64), []
    docs_per_units_block = _GPU_UNITS_BLOCK // 32
    with _nvtx_range("gpupipe/kernel/shingles"):
        for d0, d1, on_device in every:
            if not on_device:   # bounded device memory: the CPU twin, on this document's bytes alone
                flat_h, _ = shingle_hashes_cpu(*_one_document_on_host(d_data, host_offsets, flags, d0), word_k,
                                               char_k)
                counts[d0] = flat_h.shape[0]
                flats.append(cp.asarray(flat_h))
                continue
            n = d1 - d0
            base = np.int64(host_offsets[d0])
            offs = d_offsets[d0:d1 + 1]
            units_kernel((min(-(-n // docs_per_units_block), _GPU_MAX_BLOCKS),), (_GPU_UNITS_BLOCK,),
                         (d_data, offs, np.int64(n), base, flags[d0:d1], params, units, n_units))
            counts[d0:d1] = _shingle_counts(n_units[:n], flags[d0:d1], word_k, char_k)
            batch_offsets = cp.zeros(n + 1, dtype=cp.int64)
            cp.cumsum(counts[d0:d1], out=batch_offsets[1:])
            total = int(batch_offsets[-1])   # one sync a batch: the size of its output
            flat = cp.empty(max(1, total), dtype=cp.uint64)
            shingles_kernel((min(n, _GPU_MAX_BLOCKS),), (_GPU_UNITS_BLOCK,),
                            (offs, np.int64(n), base, flags[d0:d1], units, n_units, np.int32(word_k),
                             np.int32(char_k), params, batch_offsets, flat))
            flats.append(flat[:total])
    cp.cumsum(counts, out=out_offsets[1:])
    flat = cp.concatenate(flats)
    return distinct_sets_array(flat, out_offsets) if distinct else (flat, out_offsets)


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


def minhash(strings, cjk=False, num_perm: int = 128, seed: int = 0, word_k: int = 5,
            char_k: int = 3, device: str = "cpu") -> np.ndarray:
    """(n, num_perm) uint64 signatures of a column of strings (nulls count as empty: all EMPTY).

    ``strings``: a pyarrow (Chunked)Array, a pandas Series, a sequence of str/bytes, or a cuDF
    Series (read in place on the GPU for "gpu" and "auto"). ``cjk``: a bool for all documents or
    one per document. ``device``: "cpu", "gpu" or "auto"; all agree.
    """
    from .strings import kernel_inputs

    data, offsets, on_gpu = kernel_inputs(strings, device)  # a cuDF Series stays where it is
    a, b = minhash_permutations(num_perm, seed)
    if on_gpu:
        return minhash_gpu(data, offsets, cjk, a, b, word_k, char_k).get()
    return minhash_cpu(data, offsets, cjk, a, b, word_k, char_k)


def minhash_bands(strings, cjk=False, bands: int = 12, rows: int = 10, seed: int = 0,
                  word_k: int = 5, char_k: int = 3, device: str = "cpu") -> np.ndarray:
    """(n, bands) uint64 LSH band keys: band_keys(minhash(..., num_perm=bands*rows), bands, rows).

    Only the bands x rows permutations are computed (the first of the seed's, see
    minhash_permutations). The CPU twin folds each signature as it is made; the GPU folds the
    signature matrix on the device after the kernel (band_keys_array), so only the keys come back.
    Same keys either way.
    """
    from .strings import kernel_inputs

    data, offsets, on_gpu = kernel_inputs(strings, device)
    a, b = minhash_permutations(bands * rows, seed)
    if on_gpu:
        return band_keys_array(minhash_gpu(data, offsets, cjk, a, b, word_k, char_k), bands, rows).get()
    return minhash_cpu(data, offsets, cjk, a, b, word_k, char_k, bands=bands, rows=rows)
