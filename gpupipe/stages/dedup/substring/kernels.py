"""Numba kernels (CPU) of substring dedup: join texts, permuted LCP, marking duplicate windows, covering marks
with ranges, winnowing anchors, shrinking cuts to characters (and whitespace), gathering bytes."""

from __future__ import annotations

import numpy as np
from gpupipe.kernels._jit import njit

from gpupipe.kernels._mersenne import splitmix64

SEP = 0xFF                 # document separator in the joined text: not a UTF-8 byte
_WS = np.zeros(256, dtype=np.bool_)
_WS[[9, 10, 11, 12, 13, 32]] = True   # ASCII whitespace; multi-byte spaces are not cut points


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
