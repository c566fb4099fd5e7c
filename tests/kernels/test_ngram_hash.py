"""ngram_hash: the numba twin against a pure-Python reference of the definition (units, spans, grams,
lookup order), Python models of the GPU's lane logic, and the GPU kernels against the twin."""

import random

import numpy as np
import pyarrow as pa
import pytest

from gpupipe.kernels import minhash as mh
from gpupipe.kernels import ngram_hash as ng
from gpupipe.kernels._cuda import cuda_source
from tests.helpers import kernel_text
from tests.helpers.kernel_text import buffers_of, mangle

P = (1 << 61) - 1
M64 = (1 << 64) - 1
PUNCT = set(b"\t\n\x0b\x0c\r !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
RANGES = [(0x2000, 0x206F), (0x3000, 0x303F), (0xFF00, 0xFF0F), (0xFF1A, 0xFF20), (0xFF3B, 0xFF40),
          (0xFF5B, 0xFF65)]


# ---- pure-Python reference (Python ints, exact %, Python's own UTF-8 decoder) ---------------


def fmix64_ref(k):
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & M64
    return k ^ (k >> 33)


def code_points_ref(doc: bytes):
    """(bytes, is_separator, byte offset) per code point; each invalid byte is its own."""
    out, at = [], 0
    for ch in doc.decode("utf-8", "surrogateescape"):
        cp = ord(ch)
        if 0xDC80 <= cp <= 0xDCFF:  # an escaped invalid byte
            raw, sep = bytes([cp - 0xDC00]), False
        else:
            raw = ch.encode()
            sep = cp in PUNCT if cp < 128 else any(lo <= cp <= hi for lo, hi in RANGES)
        out.append((raw, sep, at))
        at += len(raw)
    return out


def units_ref(doc: bytes, cjk: bool) -> list[tuple[bytes, int, int]]:
    """(folded unit bytes, start, end) per unit; start/end are byte offsets in doc."""
    units, word, word_start = [], b"", 0
    for raw, sep, at in code_points_ref(doc):
        if sep:
            if word:
                units.append((word, word_start, at))
            word = b""
        elif cjk:
            units.append((raw, at, at + len(raw)))
        else:
            if not word:
                word_start = at
            word += raw
    if word:
        units.append((word, word_start, len(doc)))
    return [(u.lower(), s, e) for u, s, e in units]  # bytes.lower() folds ASCII A-Z only


def unit_hash_ref(unit: bytes) -> int:
    h = 0
    for c in unit:
        h = (h * mh.BU + c + 1) % P
    return h


def gram_hash_ref(us: list[int], k: int) -> int:
    s = 0
    for x in us:
        s = (s * mh.BS + x) % P
    return fmix64_ref(s ^ k)


def grams_ref(doc: bytes, cjk: bool, k: int) -> list[tuple[int, int, int]]:
    """(H, start, end) of every window of exactly k units."""
    units = units_ref(doc, cjk)
    u = [unit_hash_ref(x) for x, _, _ in units]
    return [(gram_hash_ref(u[i:i + k], k), units[i][1], units[i + k - 1][2])
            for i in range(len(u) - k + 1)]


def hits_ref(doc: bytes, cjk: bool, position: dict, word=(13, 8), char=(20, 12)):
    """[(pos, start, end)] in the definition's order: by window, the n-gram before the min_n-gram."""
    k1, k2 = char if cjk else word
    by_len = {k: grams_ref(doc, cjk, k) for k in {k1, k2}}
    out = []
    for i in range(len(by_len[k2])):
        for k in ((k1, k2) if k2 < k1 else (k1,)):
            if i < len(by_len[k]):
                h, s, e = by_len[k][i]
                if h in position:
                    out.append((position[h], s, e))
    return out


# ---- test documents -------------------------------------------------------------------------

FIXED_DOCS = ["", " ", ".,;!?", "、。，\u3000“”", "word", "Two words", "a b c", "one two three four",
             "中", "中文", "中文字", "😀", "ABC abc", "\x00\x01", "e\u0301", "😀 🎉 😀 🎉 x"]


def random_text(rng: random.Random, n_pieces: int) -> str:
    return kernel_text.random_text(rng, n_pieces, word_share=0.5)


def corpus(rng: random.Random, count: int, max_pieces: int) -> list[bytes]:
    return kernel_text.corpus(rng, count, max_pieces, FIXED_DOCS, word_share=0.5)


def table_from(rng: random.Random, docs, cjk, word, char, share=0.3, noise=200):
    """A table holding a share of the documents' own grams (both lengths) plus random hashes."""
    grams = set()
    for doc, c in zip(docs, cjk):
        for k in set(char if c else word):
            grams.update(h for h, _, _ in grams_ref(doc, bool(c), k))
    picked = {h for h in sorted(grams) if rng.random() < share}
    picked |= {rng.getrandbits(64) for _ in range(noise)}
    hashes = np.array(sorted(picked), dtype=np.uint64)
    return ng.NgramTable(hashes), {int(h): i for i, h in enumerate(hashes)}


def check_hits(hits, docs, cjk, position, word, char):
    assert hits.hit_offsets.dtype == np.int64 and hits.hit_offsets[0] == 0
    for d, doc in enumerate(docs):
        a, b = int(hits.hit_offsets[d]), int(hits.hit_offsets[d + 1])
        got = list(zip(hits.pos[a:b].tolist(), hits.start[a:b].tolist(), hits.end[a:b].tolist()))
        assert got == hits_ref(doc, bool(cjk[d]), position, word, char), (d, doc)


# ---- the reference itself ---------------------------------------------------------------------


def test_reference_units_and_spans():
    assert units_ref("Hello, World!  x".encode(), False) == [(b"hello", 0, 5), (b"world", 7, 12),
                                                             (b"x", 15, 16)]
    assert units_ref("中文，A。".encode(), True) == [("中".encode(), 0, 3), ("文".encode(), 3, 6),
                                                   (b"a", 9, 10)]
    assert units_ref(b"a\xe4\xb8b c", False) == [(b"a\xe4\xb8b", 0, 4), (b"c", 5, 6)]
    assert ng.decontam_units("Don’t STOP—now, ok?") == ["don", "t", "stop", "now", "ok"]
    assert ng.decontam_units("你好，世界", cjk=True) == ["你", "好", "世", "界"]
    assert ng.decontam_units("Ärger") == ["Ärger"]  # ASCII-only folding


# ---- CPU twin vs reference --------------------------------------------------------------------


@pytest.mark.parametrize("offset_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("word,char", [((3, 2), (4, 2)), ((2, 2), (1, 1)), ((5, 1), (3, 3))])
def test_cpu_matches_reference(offset_dtype, word, char):
    rng = random.Random(hash((word, char)) & 0xFFFF)
    docs = corpus(rng, 250, 60)
    cjk = np.array([rng.random() < 0.4 for _ in docs], dtype=np.uint8)
    table, position = table_from(rng, docs, cjk, word, char)
    data, offsets = buffers_of(docs, offset_dtype)
    hits = ng.ngram_lookup_cpu(data, offsets, cjk, table, word, char)
    assert hits.pos.size > 100  # the test must see plenty of hits
    check_hits(hits, docs, cjk, position, word, char)


def test_cpu_matches_reference_default_lengths_and_long_docs():
    rng = random.Random(3)
    docs = corpus(rng, 60, 400) + [random_text(rng, 6000).encode(),
                                   mangle(rng, random_text(rng, 4000).encode())]
    cjk = np.array([i % 3 == 0 for i in range(len(docs))], dtype=np.uint8)
    table, position = table_from(rng, docs, cjk, (13, 8), (20, 12), share=0.2)
    data, offsets = buffers_of(docs)
    hits = ng.ngram_lookup_cpu(data, offsets, cjk, table)
    assert hits.pos.size > 50
    check_hits(hits, docs, cjk, position, (13, 8), (20, 12))


def test_spans_at_document_edges_and_short_documents():
    item = "one two three four five six seven eight nine ten eleven twelve thirteen"
    short = "alpha beta gamma delta epsilon zeta eta theta"  # 8 words: a min_n item
    grams, _ = ng.gram_hashes_cpu(*buffers_of([item.encode(), short.encode()]), 0, [13, 8])
    assert grams.size == 2
    table = ng.NgramTable(np.unique(grams))
    docs = [item, "  " + item.upper() + "!", "x " + item, item + " y", short, "Alpha, beta gamma",
            "", "...", "thirteen " + short + ".", item[:-9]]
    hits = ng.ngram_lookup(docs, False, table)
    spans = [list(zip(hits.start[a:b].tolist(), hits.end[a:b].tolist()))
             for a, b in zip(hits.hit_offsets[:-1], hits.hit_offsets[1:])]
    n = len(item)
    assert spans[0] == [(0, n)]                      # the whole document, start to end
    assert spans[1] == [(2, 2 + n)]                  # case and punctuation around it
    assert spans[2] == [(2, 2 + n)] and spans[3] == [(0, n)]
    assert spans[4] == [(0, len(short))]             # shorter than n: the min_n gram
    assert spans[5:8] == [[], [], []]                # too short, empty, only separators
    assert spans[8] == [(9, 9 + len(short))]
    assert spans[9] == []                            # one word short of the 13-gram


def test_unit_counts_and_gram_hashes_match_reference_and_minhash_shingles():
    rng = random.Random(5)
    docs = corpus(rng, 150, 50)
    cjk = np.array([rng.random() < 0.5 for _ in docs], dtype=np.uint8)
    data, offsets = buffers_of(docs)
    m = ng.unit_counts_cpu(data, offsets, cjk)
    assert m.tolist() == [len(units_ref(d, bool(c))) for d, c in zip(docs, cjk)]
    ks = np.array([rng.choice([0, 1, 2, 3, 5, 13, 20]) for _ in docs], dtype=np.int64)
    flat, offs = ng.gram_hashes_cpu(data, offsets, cjk, ks)
    for i, doc in enumerate(docs):
        want = [h for h, _, _ in grams_ref(doc, bool(cjk[i]), int(ks[i]))] if ks[i] else []
        assert flat[offs[i]:offs[i + 1]].tolist() == want, (i, doc)
    # windows of k units are minhash's shingles of the same length (one definition)
    flat, offs = ng.gram_hashes_cpu(data, offsets, cjk, np.where(cjk, 2, 3))
    sh, sh_offs = mh.shingle_hashes_cpu(data, offsets, cjk, word_k=3, char_k=2)
    for i in range(len(docs)):
        if m[i] >= (2 if cjk[i] else 3):
            assert flat[offs[i]:offs[i + 1]].tolist() == sh[sh_offs[i]:sh_offs[i + 1]].tolist()
    with pytest.raises(ValueError):
        ng.gram_hashes_cpu(data, offsets, cjk, -1)


def test_normalization_is_what_the_kernel_hashes():
    """Hashing the decontam-normalized text gives the same grams as the raw text."""
    rng = random.Random(6)
    texts = [random_text(rng, rng.randrange(5, 80)) for _ in range(200)]
    for cjk in (False, True):
        norm = [" ".join(ng.decontam_units(t, cjk)) for t in texts]
        a = ng.gram_hashes_cpu(*buffers_of([t.encode() for t in texts]), cjk, 3)
        b = ng.gram_hashes_cpu(*buffers_of([t.encode() for t in norm]), cjk, 3)
        assert a[0].size > 1000 and a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


def script_counts_ref(doc: bytes) -> list[int]:
    cjk = letters = words = 0
    in_word = False
    for raw, sep, _ in code_points_ref(doc):
        cp = ord(raw.decode("utf-8", "surrogateescape"))
        if sep:
            in_word = False
        elif any(lo <= cp <= hi for lo, hi in ng.CJK_RANGES):
            cjk, in_word = cjk + 1, False
        else:
            letters, words, in_word = letters + 1, words + (not in_word), True
    return [cjk, letters, words]


def test_script_counts_match_reference():
    rng = random.Random(8)
    docs = corpus(rng, 300, 60) + ["𠀀𪚥 x 𰀀".encode(), "かな カナ 한국어 ⺀".encode(), "\U00040000".encode()]
    got = ng.script_counts_cpu(*buffers_of(docs))
    assert got.tolist() == [script_counts_ref(d) for d in docs]


def test_table_directory_and_checks():
    rng = np.random.default_rng(7)
    edges = np.array([0, 2**64 - 1], dtype=np.uint64)
    hashes = np.unique(np.concatenate([edges, rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64)]))
    for bits, fbits in ((0, 0), (1, 6), (5, 7), (16, 20)):
        t = ng.NgramTable(hashes, bits=bits, filter_bits=fbits)
        shift, fshift = t.shifts
        assert t.directory[0] == 0 and t.directory[-1] == len(hashes)
        tops = hashes >> np.uint64(64 - t.bits)
        for b in range(0, 1 << t.bits, max(1, (1 << t.bits) // 64)):
            assert t.directory[b] == np.searchsorted(tops, b)
        # every stored hash is found at its position; absent ones are not
        top = hashes >> fshift
        assert all((int(t.filter[x >> 6]) >> (x & 63)) & 1 for x in top.tolist())
        assert int(sum(bin(int(w)).count("1") for w in t.filter)) == np.unique(top).size
        for i in range(len(hashes)):
            assert ng._find(t.hashes, t.directory, shift, t.filter, fshift, hashes[i]) == i
        for h in rng.integers(0, 2**64 - 1, 2000, dtype=np.uint64):
            want = int(np.searchsorted(hashes, h))
            want = want if want < len(hashes) and hashes[want] == h else -1
            assert ng._find(t.hashes, t.directory, shift, t.filter, fshift, h) == want
    with pytest.raises(ValueError):
        ng.NgramTable(np.array([3, 2], np.uint64))
    with pytest.raises(ValueError):
        ng.NgramTable(np.array([2, 2], np.uint64))
    data, offsets = buffers_of([b"a b c"])
    with pytest.raises(ValueError):
        ng.ngram_lookup_cpu(data, offsets, 0, hashes, word=(2, 3))
    with pytest.raises(TypeError):
        ng.ngram_lookup_cpu(data.astype(np.int8), offsets, 0, hashes)
    empty = ng.ngram_lookup_cpu(data, offsets, 0, np.empty(0, np.uint64))
    assert empty.hit_offsets.tolist() == [0, 0] and empty.pos.size == 0


def test_sliced_arrow_arrays_and_input_kinds():
    rng = random.Random(9)
    strings = [d.decode("utf-8", "replace") for d in corpus(rng, 150, 40)]
    docs = [s.encode() for s in strings]
    cjk = np.zeros(len(docs), np.uint8)
    table, position = table_from(rng, docs, cjk, (3, 2), (4, 2), share=0.5)
    for typ in (pa.string(), pa.large_string()):
        sliced = pa.array(strings, typ).slice(21, 100)
        hits = ng.ngram_lookup(sliced, False, table, (3, 2), (4, 2))
        check_hits(hits, docs[21:121], cjk[21:121], position, (3, 2), (4, 2))
    import pandas as pd

    want = ng.ngram_lookup(strings, False, table, (3, 2), (4, 2))
    got = ng.ngram_lookup(pd.Series(strings, dtype="string[pyarrow]"), False, table, (3, 2), (4, 2))
    assert got.pos.tolist() == want.pos.tolist() and got.start.tolist() == want.start.tolist()


# ---- the GPU's lane logic, modelled in Python -------------------------------------------------


def lanes_spans_model(doc: bytes, cjk: bool) -> list[tuple[int, int, int]]:
    """ngram_hash.cu's units kernel step by step (32-byte tiles, per-byte classification, segmented
    Horner scan, carries), with its span writes. Must equal the left-to-right definition."""
    e = len(doc)

    def utf8_len(j):
        b0 = doc[j]
        if b0 < 0x80:
            return 1
        if b0 < 0xC2 or b0 >= 0xF5:
            return 0
        n = 2 if b0 < 0xE0 else 3 if b0 < 0xF0 else 4
        lo = {0xE0: 0xA0, 0xF0: 0x90}.get(b0, 0x80)
        hi = {0xED: 0x9F, 0xF4: 0x8F}.get(b0, 0xBF)
        if j + n > e or not lo <= doc[j + 1] <= hi:
            return 0
        return n if all(0x80 <= doc[j + r] <= 0xBF for r in range(2, n)) else 0

    def classify(i):
        if i >= e:
            return False, False
        j, n = i, 0
        for d in (1, 2, 3):
            if i - d < 0:
                break
            ln = utf8_len(i - d)
            if ln > d:
                j, n = i - d, ln
                break
        if j == i:
            n = utf8_len(i)
        sep = False
        if n == 1:
            sep = doc[j] in PUNCT
        elif n == 3:
            cp = ((doc[j] & 0x0F) << 12) | ((doc[j + 1] & 0x3F) << 6) | (doc[j + 2] & 0x3F)
            sep = any(lo <= cp <= hi for lo, hi in RANGES)
        return not sep, j == i

    pw = [pow(mh.BU, r, P) for r in range(33)]
    out, starts_, ends_ = {}, {}, {}
    count, carry_h, carry_m = 0, 0, False
    for t0 in range(0, e, 32):
        cls = [classify(t0 + lane) for lane in range(32)]
        m = [c[0] for c in cls]
        prev_m = [carry_m] + m[:31]
        start = [m[l] and (cls[l][1] if cjk else not prev_m[l]) for l in range(32)]
        if carry_m and not (m[0] and not start[0]):
            out[count - 1], ends_[count - 1] = carry_h, t0
        h, ln, head = [], [], []
        for l in range(32):
            c = doc[t0 + l] if m[l] else 0
            c = c + 32 if 65 <= c <= 90 else c
            h.append(c + 1 if m[l] else 0)
            ln.append(1 if m[l] else 0)
            head.append(not m[l] or start[l])
        for d in (1, 2, 4, 8, 16):
            ho, lo_, hd = h[:], ln[:], head[:]
            for l in range(d, 32):
                if not head[l]:
                    h[l] = (ho[l - d] * pw[ln[l]] + h[l]) % P
                    ln[l] += lo_[l - d]
                    head[l] = hd[l - d]
        for l in range(32):
            if m[l] and not head[l]:
                h[l] = (carry_h * pw[ln[l]] + h[l]) % P
        for l in range(32):
            idx = count + sum(start[: l + 1]) - 1
            if start[l]:
                starts_[idx] = t0 + l
            if l < 31 and m[l] and (not m[l + 1] or start[l + 1]):
                out[idx], ends_[idx] = h[l], t0 + l + 1
        carry_m, carry_h = m[31], h[31]
        count += sum(start)
    if carry_m:
        out[count - 1], ends_[count - 1] = carry_h, e
    assert sorted(out) == sorted(starts_) == sorted(ends_) == list(range(count))
    return [(out[i], starts_[i], ends_[i]) for i in range(count)]


def test_gpu_units_model_matches_the_definition():
    rng = random.Random(16)
    docs = corpus(rng, 120, 80)
    docs += [("x" * 31 + "中文" + "y" * 40).encode(), b"a" * 64, b"a" * 33 + b" " + b"b" * 31,
             ("中" * 11 + "x").encode(), b"a" * 31 + b" ", "😀".encode() * 20]
    docs += [bytes(rng.getrandbits(8) for _ in range(rng.randrange(200))) for _ in range(60)]
    for doc in docs:
        for cjk in (False, True):
            want = [(unit_hash_ref(u), s, e) for u, s, e in units_ref(doc, cjk)]
            assert lanes_spans_model(doc, cjk) == want, (doc, cjk)


def fill_model(hits_per_window: list[tuple[bool, bool]]) -> list[tuple[int, int]]:
    """ngram_fill's slot arithmetic: windows in tiles of 32 lanes; each lane's slot is the number of
    hits (both lengths) in lower lanes; the n-gram first. Returns [(window, which)] by slot."""
    slots, o = {}, 0
    for t0 in range(0, len(hits_per_window), 32):
        tile = hits_per_window[t0:t0 + 32] + [(False, False)] * 32
        tile = tile[:32]
        for lane, (h1, h2) in enumerate(tile):
            slot = o + sum(a + b for a, b in tile[:lane])
            if h1:
                slots[slot] = (t0 + lane, 1)
                slot += 1
            if h2:
                slots[slot] = (t0 + lane, 2)
        o += sum(a + b for a, b in tile)
    assert sorted(slots) == list(range(len(slots)))
    return [slots[i] for i in range(len(slots))]


def test_gpu_fill_order_model_is_the_cpu_order():
    rng = random.Random(17)
    for n in (0, 1, 31, 32, 33, 100, 257):
        flags = [(rng.random() < 0.3, rng.random() < 0.3) for _ in range(n)]
        want = [(i, w) for i, (a, b) in enumerate(flags) for w, hit in ((1, a), (2, b)) if hit]
        assert fill_model(flags) == want


def test_gpu_params_and_source():
    params = ng._gpu_params()
    assert params.shape == (37,) and int(params[0]) == mh.BU and int(params[1]) == mh.BS
    mask = int(params[2]) | int(params[3]) << 64
    assert {c for c in range(128) if mask >> c & 1} == PUNCT
    src = cuda_source("ngram_hash.cu")
    assert '#include "mersenne.cuh"' not in src and "mulmod61" in src


# ---- GPU vs CPU, bit for bit --------------------------------------------------------------------

requires_gpu = pytest.mark.skipif(not ng.gpu_available(), reason="no CUDA device")


def _gpu_vs_cpu(data, offsets, cjk, table, word=(13, 8), char=(20, 12), **kw):
    import cupy as cp

    got = ng.ngram_lookup_gpu(cp.asarray(data), cp.asarray(offsets), cjk, table, word, char, **kw).get()
    want = ng.ngram_lookup_cpu(data, offsets, cjk, table, word, char)
    assert got.hit_offsets.tolist() == want.hit_offsets.tolist()
    for name in ("pos", "start", "end"):
        a, b = getattr(got, name), getattr(want, name)
        bad = np.flatnonzero(a != b)
        assert bad.size == 0, f"{name}: {bad.size} hits differ, first {bad[:10].tolist()}"
    return want


def _mixed(rng: random.Random, count: int, max_pieces: int):
    docs = corpus(rng, count, max_pieces)
    cjk = np.array([rng.random() < 0.4 for _ in docs], dtype=np.uint8)
    return docs, cjk


def _all_grams_table(data, offsets, cjk, word, char, keep=0.5, seed=0):
    """A table of a share of the corpus's own grams of both lengths (computed by the CPU twin)."""
    rng = np.random.default_rng(seed)
    parts = [ng.gram_hashes_cpu(data, offsets, cjk, np.where(cjk, char[j], word[j]))[0] for j in (0, 1)]
    grams = np.unique(np.concatenate(parts))
    return ng.NgramTable(np.unique(grams[rng.random(grams.size) < keep]))


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("offset_dtype", [np.int32, np.int64])
def test_gpu_matches_cpu_random(offset_dtype):
    rng = random.Random(18)
    docs, cjk = _mixed(rng, 3000, 120)
    docs += [random_text(rng, 40_000).encode() for _ in range(4)]  # ~100 KB documents
    docs += [mangle(rng, random_text(rng, 20_000).encode()), b"", b"", ("。" * 5000).encode()]
    cjk = np.concatenate([cjk, [0, 1, 0, 0, 1, 0, 1, 1]]).astype(np.uint8)
    data, offsets = buffers_of(docs, offset_dtype)
    for word, char in (((3, 2), (4, 2)), ((13, 8), (20, 12)), ((2, 2), (1, 1))):
        table = _all_grams_table(data, offsets, cjk, word, char, keep=0.3)
        want = _gpu_vs_cpu(data, offsets, cjk, table, word, char)
        assert want.pos.size > 1000
        _gpu_vs_cpu(data, offsets[100:2101], cjk[100:2100], table, word, char)  # sliced


@pytest.mark.gpu
@requires_gpu
def test_gpu_random_bytes_small_batches_and_dense_hits():
    rng = np.random.default_rng(19)
    lengths = rng.integers(0, 3000, 2000)
    data = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8)
    data[rng.random(data.size) < 0.2] = 32  # some separators
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    cjk = (rng.random(2000) < 0.5).astype(np.uint8)
    table = _all_grams_table(data, offsets, cjk, (3, 2), (4, 2), keep=1.0)  # every window hits
    _gpu_vs_cpu(data, offsets, cjk, table, (3, 2), (4, 2))
    _gpu_vs_cpu(data, offsets, cjk, table, (3, 2), (4, 2), batch_bytes=10_000)


@pytest.mark.gpu
@requires_gpu
def test_gpu_200k_small_docs_and_empty_inputs():
    rng = random.Random(20)
    pool, pool_cjk = _mixed(rng, 2000, 50)
    idx = np.random.default_rng(21).integers(0, len(pool), 200_000)
    data, offsets = buffers_of([pool[i] for i in idx], np.int32)
    table = _all_grams_table(data[:offsets[3000]], offsets[:3001], pool_cjk[idx[:3000]], (3, 2), (4, 2))
    _gpu_vs_cpu(data, offsets, pool_cjk[idx], table, (3, 2), (4, 2))
    empty = ng.ngram_lookup_gpu(np.empty(0, np.uint8), np.zeros(1, np.int32), 0, table).get()
    assert empty.hit_offsets.tolist() == [0] and empty.pos.size == 0
    none = ng.ngram_lookup_gpu(np.empty(0, np.uint8), np.zeros(4, np.int64), 0, table).get()
    assert none.hit_offsets.tolist() == [0, 0, 0, 0]
    arr = pa.array(["a b c d", None, "", "Hello, world, again", "你好，世界。你好"] * 100)
    for cjk in (False, True):
        g = ng.ngram_lookup(arr, cjk, table, (3, 2), (4, 2), device="gpu")
        c = ng.ngram_lookup(arr, cjk, table, (3, 2), (4, 2), device="cpu")
        assert g.pos.tolist() == c.pos.tolist() and g.end.tolist() == c.end.tolist()
