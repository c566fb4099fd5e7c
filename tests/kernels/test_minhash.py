"""minhash: the numba twin against a pure-Python reference of the definition, statistics of the
estimate, a Python model of the GPU's segmentation, and the GPU kernels against the twin."""

import random

import numpy as np
import pyarrow as pa
import pytest

from gpupipe.kernels import minhash as mh
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
    """(bytes, is_separator) per code point; surrogateescape makes each invalid byte its own."""
    out = []
    for ch in doc.decode("utf-8", "surrogateescape"):
        cp = ord(ch)
        if 0xDC80 <= cp <= 0xDCFF:  # an escaped invalid byte
            out.append((bytes([cp - 0xDC00]), False))
        else:
            sep = cp in PUNCT if cp < 128 else any(lo <= cp <= hi for lo, hi in RANGES)
            out.append((ch.encode(), sep))
    return out


def units_ref(doc: bytes, cjk: bool) -> list[bytes]:
    units, word = [], b""
    for raw, sep in code_points_ref(doc):
        if sep:
            if word:
                units.append(word)
            word = b""
        elif cjk:
            units.append(raw)
        else:
            word += raw
    if word:
        units.append(word)
    return [u.lower() for u in units]  # bytes.lower() folds ASCII A-Z only


def unit_hash_ref(unit: bytes) -> int:
    h = 0
    for c in unit:
        h = (h * mh.BU + c + 1) % P
    return h


def shingles_ref(doc: bytes, cjk: bool, word_k=5, char_k=3) -> list[int]:
    u = [unit_hash_ref(x) for x in units_ref(doc, cjk)]
    if not u:
        return []
    kk = min(char_k if cjk else word_k, len(u))
    out = []
    for i in range(len(u) - kk + 1):
        s = 0
        for x in u[i:i + kk]:
            s = (s * mh.BS + x) % P
        out.append(fmix64_ref(s ^ kk))
    return out


def signature_ref(doc: bytes, cjk: bool, a, b, word_k=5, char_k=3) -> list[int]:
    hs = [h % P for h in shingles_ref(doc, cjk, word_k, char_k)]
    if not hs:
        return [P] * len(a)
    return [min((int(aj) * h + int(bj)) % P for h in hs) for aj, bj in zip(a, b)]


# ---- test documents -------------------------------------------------------------------------

FIXED_DOCS = ["", " ", ".,;!?", "、。，\u3000“”", "word", "Two words", "a b c d", "one two three four",
             "one two three four five", "中", "中文", "中文字", "😀", "ABC abc", "\x00\x01", "e\u0301"]


def random_text(rng: random.Random, n_pieces: int) -> str:
    return kernel_text.random_text(rng, n_pieces, word_share=0.45)


def corpus(rng: random.Random, count: int, max_pieces: int) -> list[bytes]:
    return kernel_text.corpus(rng, count, max_pieces, FIXED_DOCS, word_share=0.45)


# ---- the reference itself ---------------------------------------------------------------------


def test_reference_units_follow_the_definition():
    assert units_ref("Hello, World!  x".encode(), False) == [b"hello", b"world", b"x"]
    assert units_ref("ÄÖ Ab".encode(), False) == ["ÄÖ".encode(), b"ab"]  # ASCII-only folding
    assert units_ref("中文，A。".encode(), True) == ["中".encode(), "文".encode(), b"a"]
    assert units_ref(b"a\xe4\xb8b", False) == [b"a\xe4\xb8b"]  # invalid bytes are word characters
    assert units_ref(b"\xe4\xb8", True) == [b"\xe4", b"\xb8"]  # one unit per invalid byte


# ---- CPU twin vs reference --------------------------------------------------------------------

def test_character_unit_table_is_the_definition_for_every_bmp_code_point():
    # character mode looks 1-3 byte code points up in this table instead of hashing their bytes
    table = mh._CHAR_UNITS
    for cp in range(0x10000):
        if 0xD800 <= cp <= 0xDFFF:  # not code points of well-formed UTF-8: never looked up
            assert table[cp] == 0
            continue
        units = units_ref(chr(cp).encode(), cjk=True)
        assert int(table[cp]) == (unit_hash_ref(units[0]) if units else 0), hex(cp)


@pytest.mark.parametrize("offset_dtype,num_perm", [(np.int32, 16), (np.int64, 16), (np.int64, 7), (np.int64, 1)])
def test_cpu_matches_reference(offset_dtype, num_perm):
    # odd num_perm: the twin's progression loop handles permutations in pairs, plus a last one alone
    rng = random.Random(1)
    docs = corpus(rng, 250, 60)
    cjk = np.array([rng.random() < 0.4 for _ in docs], dtype=np.uint8)
    a, b = mh.minhash_permutations(num_perm, seed=3)
    data, offsets = buffers_of(docs, offset_dtype)
    got = mh.minhash_cpu(data, offsets, cjk, a, b)
    assert got.dtype == np.uint64 and got.shape == (len(docs), num_perm)
    for i, doc in enumerate(docs):
        assert got[i].tolist() == signature_ref(doc, bool(cjk[i]), a, b), (i, doc)
    assert (got <= P).all()


@pytest.mark.parametrize("word_k,char_k", [(1, 1), (2, 5), (7, 2)])
def test_cpu_matches_reference_other_shingle_lengths(word_k, char_k):
    rng = random.Random(2 + word_k)
    docs = corpus(rng, 80, 40)
    cjk = np.array([i % 2 for i in range(len(docs))], dtype=np.uint8)
    a, b = mh.minhash_permutations(8, seed=4)
    data, offsets = buffers_of(docs)
    got = mh.minhash_cpu(data, offsets, cjk, a, b, word_k=word_k, char_k=char_k)
    want = [signature_ref(d, bool(c), a, b, word_k, char_k) for d, c in zip(docs, cjk)]
    assert got.tolist() == want


def test_band_keys_fused_equal_folding_the_signature():
    # the CPU twin folds each signature into band keys as it goes; that must equal folding the full matrix, whose
    # first bands*rows columns are the only ones read (the permutations are a prefix whatever num_perm)
    rng = random.Random(9)
    docs = corpus(rng, 300, 60) + [b"", b"   ", b"one"]
    cjk = np.array([rng.random() < 0.4 for _ in docs], dtype=np.uint8)
    data, offsets = buffers_of(docs)
    a, b = mh.minhash_permutations(128, seed=2)
    full = mh.minhash_cpu(data, offsets, cjk, a, b)
    for bands, rows in [(12, 10), (9, 13), (1, 1), (5, 25)]:
        want = mh.band_keys(full, bands, rows)
        fused = mh.minhash_cpu(data, offsets, cjk, a[:bands * rows], b[:bands * rows], bands=bands, rows=rows)
        assert want.shape == (len(docs), bands) and (fused == want).all()
        assert (mh.band_keys_array(full, bands, rows) == want).all()   # the array-op fold the GPU runs in place
        assert (mh.minhash_bands([bytes(d) for d in docs], cjk, bands, rows, seed=2) == want).all()
    # identical documents share every band key, unrelated ones (almost surely) none
    texts = [b"the quick brown fox jumps over the lazy dog today", b"the quick brown fox jumps over the lazy dog today",
             b"completely different words appear in this other sentence here"]
    keys = mh.minhash_bands(texts, False, 12, 10)
    assert (keys[0] == keys[1]).all() and not (keys[0] == keys[2]).any()
    with pytest.raises(ValueError):
        mh.minhash_cpu(data, offsets, cjk, a, b, bands=13, rows=10)
    with pytest.raises(ValueError):
        mh.band_keys(full, 2, 0)
    with pytest.raises(ValueError):
        mh.band_keys_array(full, 13, 10)
    assert mh.band_keys_array(full[:0], 12, 10).shape == (0, 12)


def test_shingle_hashes_match_reference_and_signatures():
    rng = random.Random(5)
    docs = corpus(rng, 120, 50)
    cjk = np.array([rng.random() < 0.5 for _ in docs])
    data, offsets = buffers_of(docs)
    flat, offs = mh.shingle_hashes_cpu(data, offsets, cjk)
    assert flat.dtype == np.uint64 and offs.dtype == np.int64 and len(offs) == len(docs) + 1
    for i, doc in enumerate(docs):
        assert flat[offs[i]:offs[i + 1]].tolist() == shingles_ref(doc, bool(cjk[i])), (i, doc)
    # the signature is the min of the permuted shingle hashes, as documented
    a, b = mh.minhash_permutations(32, seed=6)
    sig = mh.minhash_cpu(data, offsets, cjk, a, b)
    for i in range(len(docs)):
        h = flat[offs[i]:offs[i + 1]].tolist()
        want = [min([(int(aj) * (x % P) + int(bj)) % P for x in h], default=P) for aj, bj in zip(a, b)]
        assert sig[i].tolist() == want
    # distinct=True: each document's set, sorted (what the exact Jaccard check of fuzzy dedup merges)
    sets, set_offs = mh.shingle_hashes_cpu(data, offsets, cjk, distinct=True)
    for i, doc in enumerate(docs):
        assert sets[set_offs[i]:set_offs[i + 1]].tolist() == sorted(set(shingles_ref(doc, bool(cjk[i])))), i
    # offsets that start inside the buffer (an Arrow slice): the same sets
    tail, tail_offs = mh.shingle_hashes_cpu(data, offsets[40:], cjk[40:], distinct=True)
    assert tail.tolist() == sets[set_offs[40]:].tolist() and (tail_offs == set_offs[40:] - set_offs[40]).all()
    repeated = ("repeat these five words " * 40).encode()
    sets, set_offs = mh.shingle_hashes_cpu(np.frombuffer(repeated, np.uint8), np.array([0, len(repeated)]), False,
                                           distinct=True)
    assert set_offs.tolist() == [0, 4]  # a 4-word cycle: 156 windows, 4 distinct


def test_long_documents_match_reference():
    rng = random.Random(7)
    docs = [random_text(rng, 6000).encode(), mangle(rng, random_text(rng, 4000).encode())]
    a, b = mh.minhash_permutations(4, seed=8)
    data, offsets = buffers_of(docs)
    for cjk in (0, 1):
        got = mh.minhash_cpu(data, offsets, cjk, a, b)
        assert got.tolist() == [signature_ref(d, bool(cjk), a, b) for d in docs]


def test_sliced_arrow_array_and_input_kinds():
    pd = pytest.importorskip("pandas")

    rng = random.Random(9)
    strings = [d.decode("utf-8", "replace") for d in corpus(rng, 150, 30)]
    a, b = mh.minhash_permutations(16, seed=0)
    for typ in (pa.string(), pa.large_string()):
        sliced = pa.array(strings, typ).slice(21, 100)
        data, offsets = mh_arrow_buffers(sliced)
        assert offsets[0] > 0
        got = mh.minhash_cpu(data, offsets, False, a, b)
        assert got.tolist() == [signature_ref(s.encode(), False, a, b) for s in strings[21:121]]
        assert (mh.minhash(sliced, False, num_perm=16, seed=0) == got).all()
    want = mh.minhash(pa.array(strings), True, num_perm=16)
    for kind in (strings, pd.Series(strings), pd.Series(strings, dtype="string[pyarrow]")):
        assert (mh.minhash(kind, True, num_perm=16) == want).all()


def mh_arrow_buffers(arr):
    from gpupipe.kernels.text_hash import arrow_buffers

    return arrow_buffers(arr)


def test_empty_documents_get_the_sentinel():
    sig = mh.minhash(["", "  ", "...,,,!!!", "。，、", None, "word"], num_perm=8)
    assert mh.EMPTY == np.uint64(2**61 - 1)
    assert (sig[:5] == mh.EMPTY).all()
    assert (sig[5] < mh.EMPTY).all()
    assert mh.minhash(pa.array([], pa.string())).shape == (0, 128)
    flat, offs = mh.shingle_hashes_cpu(np.empty(0, np.uint8), np.zeros(1, np.int32), False)
    assert flat.shape == (0,) and offs.tolist() == [0]


def test_fewer_units_than_k_is_one_shingle_of_all_units():
    data, offsets = buffers_of([b"a b", b"a b c d e f", b"one"])
    flat, offs = mh.shingle_hashes_cpu(data, offsets, False)
    assert np.diff(offs).tolist() == [1, 2, 1]
    assert mh.minhash(["a b"], num_perm=4).tolist() != mh.minhash(["a b c"], num_perm=4).tolist()


def test_argument_checks():
    data, offsets = buffers_of([b"abc"])
    a, b = mh.minhash_permutations(4, 0)
    with pytest.raises(ValueError):
        mh.minhash_cpu(data, offsets, [0, 1], a, b)  # cjk of the wrong length
    with pytest.raises(ValueError):
        mh.minhash_cpu(data, offsets, 0, a, b, word_k=0)
    with pytest.raises(ValueError):
        mh.minhash_cpu(data, offsets, 0, a, np.full(4, P, np.uint64))  # b must be < p
    with pytest.raises(TypeError):
        mh.minhash_cpu(data.astype(np.int8), offsets, 0, a, b)
    with pytest.raises(ValueError):
        mh.minhash_permutations(0, 0)


# ---- semantics --------------------------------------------------------------------------------


def test_mode_is_chosen_per_document():
    text = "数据清洗是预训练语料处理的关键步骤"
    per_doc = mh.minhash([text, text], [1, 0], num_perm=16)
    assert (per_doc[0] == mh.minhash([text], True, num_perm=16)[0]).all()
    assert (per_doc[1] == mh.minhash([text], False, num_perm=16)[0]).all()
    assert (per_doc[0] != per_doc[1]).any()  # 15 char 3-grams vs one "word"


def test_ascii_case_folding_only():
    sig = mh.minhash(["Hello World Foo Bar Baz", "hello world foo bar baz", "HELLO WORLD FOO BAR BAZ",
                      "Ärger World Foo Bar Baz", "ärger world foo bar baz"], num_perm=32)
    assert (sig[0] == sig[1]).all() and (sig[0] == sig[2]).all()
    assert (sig[3] != sig[4]).any()  # Ä is not ASCII: not folded


def test_punctuation_does_not_change_shingles():
    pairs = [("Hello, world", "hello world"), ("a-b-c-d-e-f", "a b c d e f"),
             ("“Quote” — dash… end", "quote dash end"), ("你好，世界。", "你好世界")]
    for x, y in pairs:
        cjk = x.startswith("你")
        sx, sy = mh.minhash([x, y], cjk, num_perm=32)
        assert (sx == sy).all(), (x, y)


def test_determinism_and_seeds():
    a1, b1 = mh.minhash_permutations(64, seed=11)
    a2, b2 = mh.minhash_permutations(64, seed=11)
    a3, b3 = mh.minhash_permutations(64, seed=12)
    assert (a1 == a2).all() and (b1 == b2).all()
    assert (a1 != a3).any() and (b1 != b3).any()
    assert a1.dtype == np.uint64 and (a1 >= 1).all() and (a1 < P).all() and (b1 < P).all()
    a4, b4 = mh.minhash_permutations(mh.MAX_PERM, seed=11)  # a prefix whatever the count (fuzzy dedup relies on it)
    assert (a4[:64] == a1).all() and (b4[:64] == b1).all() and (a4 != 0).all()
    with pytest.raises(ValueError):
        mh.minhash_permutations(mh.MAX_PERM + 1, 0)
    docs = ["the same words in the same order every time", "数据清洗是预训练语料处理"]
    assert (mh.minhash(docs, [0, 1], seed=5) == mh.minhash(docs, [0, 1], seed=5)).all()
    assert (mh.minhash(docs, [0, 1], seed=5) != mh.minhash(docs, [0, 1], seed=6)).any()


def test_constants_are_pinned():
    for base in (mh.BU, mh.BS):
        assert 256 < base < P and base % 2 == 1
    a, b = mh.minhash_permutations(4, seed=0)
    assert mh.minhash(["pinned signature test"], num_perm=4).tolist() == [
        signature_ref(b"pinned signature test", False, a, b)]


def test_jaccard_estimates_are_unbiased_and_within_the_bound():
    """Pairs of documents from distinct words: a shared run (same order in both) between unique
    words. The exact Jaccard comes from the shingle hash sets, for 1-word and 5-word shingles."""
    rng = np.random.default_rng(13)
    vocab = np.array([f"w{i}" for i in range(100_000)])
    docs_a, docs_b = [], []
    for _ in range(400):
        words = vocab[rng.choice(len(vocab), size=300, replace=False)]
        n_shared = int(rng.integers(20, 250))
        shared, rest = words[:n_shared], words[n_shared:]
        n_a = int(rng.integers(0, len(rest) + 1))
        for doc, own in ((docs_a, rest[:n_a]), (docs_b, rest[n_a:])):
            cut = int(rng.integers(0, len(own) + 1))
            doc.append(" ".join([*own[:cut], *shared, *own[cut:]]))
    strings = docs_a + docs_b
    n = len(docs_a)
    data, offsets = mh_arrow_buffers(pa.array(strings))
    for word_k in (1, 5):
        flat, offs = mh.shingle_hashes_cpu(data, offsets, False, word_k=word_k)
        sets = [set(flat[offs[i]:offs[i + 1]].tolist()) for i in range(len(strings))]
        exact = np.array([len(sets[i] & sets[n + i]) / len(sets[i] | sets[n + i]) for i in range(n)])
        assert 0.03 < exact.min() and exact.max() > 0.6  # a wide range of similarities
        sig = mh.minhash(strings, False, num_perm=128, seed=14, word_k=word_k)
        est = (sig[:n] == sig[n:]).mean(axis=1)
        std = np.sqrt(exact * (1 - exact) / 128)
        inside = np.abs(est - exact) <= 3 * std
        assert inside.mean() >= 0.95, (word_k, inside.mean())
        assert abs((est - exact).mean()) < 0.01, (word_k, (est - exact).mean())


def test_no_signature_collisions_between_distinct_random_docs():
    rng = np.random.default_rng(15)
    vocab = np.array([f"t{i}" for i in range(50_000)])
    strings = [" ".join(rng.choice(vocab, 30)) for _ in range(5000)]
    sig = mh.minhash(strings, num_perm=16)
    assert len({tuple(r) for r in sig.tolist()}) == len(set(strings))


# ---- the GPU's segmentation, modelled in Python -----------------------------------------------


def lanes_units_model(doc: bytes, cjk: bool) -> list[int]:
    """minhash.cu's units kernel step by step: 32-byte tiles, per-byte classification from the
    bytes around it, a segmented Horner scan over lanes, a carry between tiles. Must equal the
    CPU's left-to-right decoder (the GPU parity tests check the real kernel)."""
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

    def classify(i):  # (member, cp_start) of byte i
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
    out = {}
    count, carry_h, carry_m = 0, 0, False
    for t0 in range(0, e, 32):
        cls = [classify(t0 + lane) for lane in range(32)]
        m = [c[0] for c in cls]
        prev_m = [carry_m] + m[:31]
        start = [m[l] and (cls[l][1] if cjk else not prev_m[l]) for l in range(32)]
        if carry_m and not (m[0] and not start[0]):
            out[count - 1] = carry_h
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
        for l in range(31):
            idx = count + sum(start[: l + 1]) - 1
            if m[l] and (not m[l + 1] or start[l + 1]):
                out[idx] = h[l]
        carry_m, carry_h = m[31], h[31]
        count += sum(start)
    if carry_m:
        out[count - 1] = carry_h
    assert sorted(out) == list(range(count))
    return [out[i] for i in range(count)]


def test_gpu_segmentation_model_matches_the_definition():
    rng = random.Random(16)
    docs = corpus(rng, 150, 80)
    docs += [("x" * 31 + "中文" + "y" * 40).encode(), b"a" * 64, b"a" * 33 + b" " + b"b" * 31]
    docs += [bytes(rng.getrandbits(8) for _ in range(rng.randrange(200))) for _ in range(60)]
    for doc in docs:
        for cjk in (False, True):
            want = [unit_hash_ref(u) for u in units_ref(doc, cjk)]
            assert lanes_units_model(doc, cjk) == want, (doc, cjk)


def test_gpu_params_layout_and_batches():
    params = mh._gpu_params()
    assert params.shape == (37,) and params.dtype == np.uint64
    assert int(params[0]) == mh.BU and int(params[1]) == mh.BS
    mask = int(params[2]) | int(params[3]) << 64
    assert {c for c in range(128) if mask >> c & 1} == PUNCT
    assert int(params[4]) == 1 and int(params[36]) == pow(mh.BU, 32, P)
    offsets = np.array([5, 10, 10, 40, 41, 100, 100], np.int64)
    batches = mh._gpu_batches(offsets, 30)
    assert batches[0][0] == 0 and batches[-1][1] == 6
    assert all(b0 < b1 for b0, b1 in batches) and all(x[1] == y[0] for x, y in zip(batches, batches[1:]))
    for d0, d1 in batches:  # within the limit unless a single document is longer
        assert offsets[d1] - offsets[d0] <= 30 or d1 - d0 == 1
    assert [mh._sig_block(n) for n in (1, 32, 100, 128, 256, 1000)] == [32, 32, 128, 128, 256, 256]
    src = cuda_source("minhash.cu")
    assert '#include "mersenne.cuh"' not in src and "mulmod61" in src


# ---- GPU vs CPU, bit for bit --------------------------------------------------------------------

requires_gpu = pytest.mark.skipif(not mh.gpu_available(), reason="no CUDA device")


def _gpu_vs_cpu(data, offsets, cjk, num_perm=128, seed=0, **kw):
    import cupy as cp

    a, b = mh.minhash_permutations(num_perm, seed)
    batch = {k: kw.pop(k) for k in ("batch_bytes",) if k in kw}
    got = mh.minhash_gpu(cp.asarray(data), cp.asarray(offsets), cjk, a, b, **kw, **batch).get()
    want = mh.minhash_cpu(data, offsets, cjk, a, b, **kw)
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"{bad.size} documents differ, first {bad[:10].tolist()}"


def _mixed(rng: random.Random, count: int, max_pieces: int):
    docs = corpus(rng, count, max_pieces)
    cjk = np.array([rng.random() < 0.4 for _ in docs], dtype=np.uint8)
    return docs, cjk


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("offset_dtype", [np.int32, np.int64])
def test_gpu_matches_cpu_random(offset_dtype):
    rng = random.Random(17)
    docs, cjk = _mixed(rng, 3000, 120)
    docs += [random_text(rng, 40_000).encode() for _ in range(4)]  # ~100 KB documents
    docs += [mangle(rng, random_text(rng, 20_000).encode()), b"", b"", ("。" * 5000).encode()]
    cjk = np.concatenate([cjk, [0, 1, 0, 0, 1, 0, 1, 1]]).astype(np.uint8)
    data, offsets = buffers_of(docs, offset_dtype)
    _gpu_vs_cpu(data, offsets, cjk)
    _gpu_vs_cpu(data, offsets[100:2101], cjk[100:2100])  # sliced: offsets start above 0


@pytest.mark.gpu
@requires_gpu
def test_gpu_band_keys_match_cpu():
    rng = random.Random(21)
    docs, cjk = _mixed(rng, 2000, 80)
    strings = [bytes(d) for d in docs]
    for bands, rows in ((12, 10), (20, 13)):   # folded on the device (band_keys_array): only the keys come back
        want = mh.minhash_bands(strings, cjk, bands, rows, seed=4, device="cpu")
        assert (mh.minhash_bands(strings, cjk, bands, rows, seed=4, device="gpu") == want).all()


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("num_perm,word_k,char_k", [(1, 5, 3), (100, 1, 1), (300, 2, 5), (64, 9, 2)])
def test_gpu_permutation_counts_and_shingle_lengths(num_perm, word_k, char_k):
    rng = random.Random(18 + num_perm)
    docs, cjk = _mixed(rng, 1500, 80)
    data, offsets = buffers_of(docs)
    _gpu_vs_cpu(data, offsets, cjk, num_perm=num_perm, seed=num_perm, word_k=word_k, char_k=char_k)


@pytest.mark.gpu
@requires_gpu
def test_gpu_random_bytes_and_small_batches():
    rng = np.random.default_rng(19)
    lengths = rng.integers(0, 3000, 2000)
    data = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8)
    data[rng.random(data.size) < 0.2] = 32  # some separators
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    cjk = (rng.random(2000) < 0.5).astype(np.uint8)
    _gpu_vs_cpu(data, offsets, cjk)
    _gpu_vs_cpu(data, offsets, cjk, batch_bytes=10_000)  # many launches; docs longer than a batch


@pytest.mark.gpu
@requires_gpu
def test_gpu_200k_small_docs():
    rng = random.Random(20)
    pool, pool_cjk = _mixed(rng, 2000, 50)  # ~200 B documents, reused (cheap to build)
    idx = np.random.default_rng(21).integers(0, len(pool), 200_000)
    docs = [pool[i] for i in idx]
    data, offsets = buffers_of(docs, np.int32)
    _gpu_vs_cpu(data, offsets, pool_cjk[idx])


@pytest.mark.gpu
@requires_gpu
def test_gpu_convenience_path_and_empty_inputs():
    arr = pa.array(["a", None, "", "ü" * 1000, "😀", "Hello, world", "你好，世界。"] * 100)
    for cjk in (False, True):
        np.testing.assert_array_equal(mh.minhash(arr, cjk, device="gpu"),
                                      mh.minhash(arr, cjk, device="cpu"))
    a, b = mh.minhash_permutations(8, 0)
    assert mh.minhash_gpu(np.empty(0, np.uint8), np.zeros(1, np.int32), 0, a, b).shape == (0, 8)
    got = mh.minhash_gpu(np.empty(0, np.uint8), np.zeros(4, np.int64), 0, a, b).get()
    assert (got == mh.EMPTY).all()


def test_independent_permutations_take_the_general_path_and_agree():
    """(a, b) that are not progressions run the one-multiply-per-permutation path: same definition."""
    rng = random.Random(21)
    gen = np.random.default_rng(21)
    a = gen.integers(1, P, size=16, dtype=np.uint64)
    b = gen.integers(0, P, size=16, dtype=np.uint64)
    assert mh._progression_steps(a, b) is None
    pa_, pb_ = mh.minhash_permutations(16, seed=3)
    assert mh._progression_steps(pa_, pb_) is not None
    docs, cjk = _mixed(rng, 200, 300)
    data, offsets = buffers_of(docs, np.int64)
    for aa, bb in ((a, b), (pa_, pb_)):
        got = mh.minhash_cpu(data, offsets, cjk, aa, bb)
        for i in range(0, 200, 17):
            assert got[i].tolist() == signature_ref(docs[i], bool(cjk[i]), aa, bb)


def test_large_buffers_skip_numpy_hugepage_advice_and_restore_it():
    from gpupipe.kernels import _memory

    if _memory._set_madvise_hugepage is None:
        pytest.skip("this numpy has no madvise switch")
    before = _memory._set_madvise_hugepage(True)
    try:
        x = _memory.empty((3, 5 << 20), np.uint64)  # 120 MiB: numpy would advise huge pages
        assert x.shape == (3, 5 << 20) and x.dtype == np.uint64 and x.flags.c_contiguous
        assert _memory._set_madvise_hugepage(True) is True  # numpy's flag is back as it was
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(8) as pool:  # callers in many threads: still back as it was
            list(pool.map(lambda _: _memory.empty(1 << 20, np.uint8), range(400)))
        assert _memory._set_madvise_hugepage(True) is True
    finally:
        _memory._set_madvise_hugepage(before)


def test_documents_larger_than_a_batch_are_set_apart():
    """minhash_gpu / shingle_hashes_gpu send a document larger than a batch to the CPU twin (bounded device
    scratch); the other documents keep their batches, in order, covering every document once."""
    lens = np.array([10, 500, 20, 20, 700, 5, 0, 30])
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    batches, big = mh._device_batches(offsets, 100)
    assert big == [(1, 2), (4, 5)]
    covered = sorted(batches + big)
    assert covered[0][0] == 0 and covered[-1][1] == len(lens)
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))
    assert all(offsets[d1] - offsets[d0] <= 100 for d0, d1 in batches)


def progression_chunks_model(flat, offsets, a0, b0, da, db, num_perm, nt, chunk, ppt=8):
    """minhash.cu's progression_chunks, loop for loop, in Python ints: work items of `chunk` shingles, per item
    `ranges` permutation ranges x `groups` shingle subsets of a block of `nt` threads, their minima met in `red`
    (groups > 1) or lowered into `out` directly (groups == 1). Starts from the shingle hashes H (the kernel
    computes them from the units the same way: test_gpu_segmentation_model_matches_the_definition)."""
    n = len(offsets) - 1
    out = [[P] * num_perm for _ in range(n)]                     # filled with EMPTY first
    ranges = -(-num_perm // ppt)
    groups = 1 if ranges >= nt else nt // ranges
    items = [(d, f) for d in range(n) for f in range(0, int(offsets[d + 1] - offsets[d]), chunk)]
    for doc, first in items:
        hs = [int(h) % P for h in flat[offsets[doc] + first:offsets[doc + 1]][:chunk]]
        v0s = [(a0 * h + b0) % P for h in hs]
        ws = [(da * h + db) % P for h in hs]
        red = {}
        for t in range(nt):
            g = t // ranges if groups > 1 else 0
            r = t % ranges if groups > 1 else t
            while g < groups and r < ranges:
                j0 = r * ppt
                lo = [P] * ppt
                for i in range(g, len(hs), groups):
                    v = (v0s[i] + ws[i] * j0) % P
                    for q in range(ppt):
                        lo[q] = min(lo[q], v)
                        v = (v + ws[i]) % P
                for q in range(ppt):
                    if groups > 1:
                        red[(g * ranges + r) * ppt + q] = lo[q]
                    elif j0 + q < num_perm:
                        out[doc][j0 + q] = min(out[doc][j0 + q], lo[q])
                r += ranges if groups > 1 else nt
        if groups > 1:
            for j in range(num_perm):
                out[doc][j] = min(out[doc][j], min(red[gg * ranges * ppt + j] for gg in range(groups)))
    return np.array(out, dtype=np.uint64)


@pytest.mark.parametrize("num_perm,nt,chunk", [(128, 256, 1024), (20, 8, 7), (40, 4, 3), (1, 16, 5), (9, 2, 4)])
def test_gpu_progression_kernel_model_matches_the_cpu(num_perm, nt, chunk):
    """The progression kernel's work split (chunks of a document, permutation ranges x shingle groups, the
    shared-memory meeting of minima, atomicMin) gives the CPU twin's signatures, for both of its paths
    (groups > 1 and groups == 1) and chunks that cut documents."""
    rng = random.Random(num_perm + nt)
    docs, cjk = _mixed(rng, 60, 60)
    docs += [b"", random_text(rng, 400).encode()]
    cjk = np.concatenate([cjk, [0, 0]]).astype(np.uint8)
    data, offsets = buffers_of(docs)
    a, b = mh.minhash_permutations(num_perm, 5)
    da, db = mh._progression_steps(a, b)
    flat, offs = mh.shingle_hashes_cpu(data, offsets, cjk)
    got = progression_chunks_model(flat, offs, int(a[0]), int(b[0]), da, db, num_perm, nt, chunk)
    assert (got == mh.minhash_cpu(data, offsets, cjk, a, b)).all()


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("num_perm", [16, 4096])
def test_gpu_both_signature_kernels_agree_with_the_cpu(num_perm):
    """minhash_gpu runs minhash_progression_* for progression permutations (4096: more ranges than threads, the
    groups == 1 path) and minhash_signatures_* for any other (a, b); long documents span many work items."""
    import cupy as cp

    rng = random.Random(23)
    docs, cjk = _mixed(rng, 400 if num_perm > 1000 else 1500, 80)
    docs += [random_text(rng, 30_000).encode(), ("数据清洗" * 3000).encode()]   # > 1 work item of 1024 shingles
    cjk = np.concatenate([cjk, [0, 1]]).astype(np.uint8)
    data, offsets = buffers_of(docs)
    gen = np.random.default_rng(23)
    general = (gen.integers(1, P, size=num_perm, dtype=np.uint64), gen.integers(0, P, size=num_perm, dtype=np.uint64))
    for a, b in (mh.minhash_permutations(num_perm, 9), general):
        got = mh.minhash_gpu(cp.asarray(data), cp.asarray(offsets), cp.asarray(cjk), a, b).get()
        assert np.array_equal(got, mh.minhash_cpu(data, offsets, cjk, a, b))
