"""text_hash: the numba twin against a pure-Python reference, the GPU kernel against the twin."""

import random

import numpy as np
import pyarrow as pa
import pytest

from gpupipe.kernels import _mersenne, text_hash as th
from gpupipe.kernels._cuda import cuda_source
from tests.helpers.kernel_text import buffers_of

P = (1 << 61) - 1
M64 = (1 << 64) - 1


# ---- pure-Python reference (Python ints, exact %) -------------------------------------------


def fmix64_ref(k):
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & M64
    return k ^ (k >> 33)


def text_hash_ref(b: bytes):
    h1 = h2 = 0
    for x in b:
        h1 = (h1 * th.B1 + x + 1) % P
        h2 = (h2 * th.B2 + x + 1) % P
    n = len(b)
    return fmix64_ref(h1 ^ (n * th.C1 & M64)), fmix64_ref(h2 ^ (n * th.C2 & M64))


def warp_hash_ref(b: bytes, base: int, chunk: int) -> int:
    """The GPU kernel's order of work (end-aligned tiles, per-lane runs, lane tree), in Python."""
    n, tile = len(b), 32 * chunk
    n_tiles = -(-n // tile)
    pad = n_tiles * tile - n
    lanes = [0] * 32
    for t in range(n_tiles):
        for lane in range(32):
            seg = 0
            for j in range(t * tile + lane * chunk - pad, t * tile + (lane + 1) * chunk - pad):
                if j >= 0:
                    seg = (seg * base + b[j] + 1) % P
            lanes[lane] = (lanes[lane] * pow(base, tile, P) + seg) % P
    for r in range(5):
        w = 1 << r
        shifted = [lanes[l + w] if l + w < 32 else lanes[l] for l in range(32)]  # __shfl_down_sync
        lanes = [(lanes[l] * pow(base, w * chunk, P) + shifted[l]) % P for l in range(32)]
    return lanes[0]


def random_docs(rng: random.Random, count: int, max_len: int) -> list[bytes]:
    """Random byte strings plus valid UTF-8 with 2-, 3- and 4-byte characters."""
    alphabet = "abc xyz\n\té€中文😀\x00"
    docs = []
    for i in range(count):
        n = rng.randrange(max_len + 1)
        if i % 2:
            docs.append(bytes(rng.getrandbits(8) for _ in range(n)))
        else:
            docs.append("".join(rng.choice(alphabet) for _ in range(n)).encode()[:n])
    return docs


# ---- mod-p arithmetic -----------------------------------------------------------------------

EDGES = [0, 1, 2, 3, 255, 256, (1 << 29) - 1, 1 << 29, (1 << 32) - 1, 1 << 32, (1 << 33) + 1,
         1 << 60, (1 << 61) - 3, P - 2, P - 1]


def test_mulmod61_edges_and_random():
    rng = random.Random(1)
    pairs = [(a, b) for a in EDGES for b in EDGES]
    pairs += [(rng.randrange(P), rng.randrange(P)) for _ in range(20000)]
    for a, b in pairs:
        assert _mersenne.mulmod61(np.uint64(a), np.uint64(b)) == a * b % P, (a, b)
        assert _mersenne.addmod61(np.uint64(a), np.uint64(b)) == (a + b) % P, (a, b)


def test_powmod61_and_reduce61():
    rng = random.Random(2)
    for _ in range(2000):
        a, e = rng.randrange(P), rng.randrange(1 << 64)
        assert _mersenne.powmod61(np.uint64(a), np.uint64(e)) == pow(a, e, P)
    for x in [0, P - 1, P, P + 1, (1 << 62) - 1, M64] + [rng.getrandbits(64) for _ in range(2000)]:
        assert _mersenne.reduce61(np.uint64(x)) == x % P


def test_fmix64_matches_reference():
    rng = random.Random(3)
    for x in [0, 1, M64] + [rng.getrandbits(64) for _ in range(1000)]:
        assert _mersenne.fmix64(np.uint64(x)) == fmix64_ref(x)


def test_constants_are_fixed_odd_and_below_p():
    for base in (th.B1, th.B2):
        assert 256 < base < P and base % 2 == 1
    assert th.B1 != th.B2
    # pinned: changing them changes every stored hash
    assert th.text_hash(["gpupipe"]).tolist() == [list(text_hash_ref(b"gpupipe"))]


# ---- CPU twin vs reference ------------------------------------------------------------------


@pytest.mark.parametrize("offset_dtype", [np.int32, np.int64])
def test_cpu_matches_reference(offset_dtype):
    rng = random.Random(4)
    docs = [b"", b"a", b"\x00", b"\x00\x00", bytes(range(256))]
    docs += [bytes(rng.getrandbits(8) for _ in range(n)) for n in range(1, 40)]  # every tail length
    docs += random_docs(rng, 60, 5000)
    data, offsets = buffers_of(docs, offset_dtype)
    got = th.text_hash_cpu(data, offsets)
    assert got.dtype == np.uint64 and got.shape == (len(docs), 2)
    assert [tuple(row) for row in got.tolist()] == [text_hash_ref(d) for d in docs]


def test_empty_inputs():
    assert th.text_hash_cpu(np.empty(0, np.uint8), np.zeros(1, np.int64)).shape == (0, 2)
    assert th.text_hash([""]).tolist() == [[0, 0]]  # fmix64(0) == 0, documented
    assert th.text_hash(pa.array([], pa.string())).shape == (0, 2)
    assert th.text_hash([None, None]).tolist() == [[0, 0], [0, 0]]  # Arrow type null


def test_sliced_arrow_array_has_nonzero_offsets():
    rng = random.Random(5)
    strings = [d.decode("utf-8", "replace") for d in random_docs(rng, 200, 300)]
    for typ in (pa.string(), pa.large_string()):
        sliced = pa.array(strings, typ).slice(37, 100)
        data, offsets = th.arrow_buffers(sliced)
        assert offsets[0] > 0 and len(offsets) == 101
        want = [text_hash_ref(s.encode()) for s in strings[37:137]]
        assert [tuple(r) for r in th.text_hash_cpu(data, offsets).tolist()] == want


def test_arrow_buffers_are_zero_copy():
    arr = pa.array(["hello", "world", None, "!"])
    data, offsets = th.arrow_buffers(arr)
    assert data.ctypes.data == arr.buffers()[2].address
    assert offsets.ctypes.data == arr.buffers()[1].address
    assert offsets.dtype == np.int32
    assert th.arrow_buffers(arr.cast(pa.large_string()))[1].dtype == np.int64


def test_nulls_hash_as_empty_string_even_when_their_slot_holds_bytes():
    # Arrow allows a null slot to span bytes; build one by hand: "ab", null over "cd", "e"
    values = pa.py_buffer(b"abcde")
    offsets = pa.py_buffer(np.array([0, 2, 4, 5], np.int32).tobytes())
    validity = pa.py_buffer(bytes([0b101]))
    arr = pa.Array.from_buffers(pa.string(), 3, [validity, offsets, values], null_count=1)
    assert th.text_hash(arr).tolist() == th.text_hash(["ab", "", "e"]).tolist()
    assert th.text_hash(pa.array(["x", None])).tolist() == th.text_hash(["x", ""]).tolist()


def test_input_kinds_agree():
    import pandas as pd

    strings = ["first", "ça va", "", "漢字", "first"]
    want = th.text_hash(pa.array(strings))
    chunked = pa.chunked_array([pa.array(strings[:2]), pa.array(strings[2:])])
    for kind in (strings, chunked, pd.Series(strings), pd.Series(strings, dtype="string[pyarrow]"),
                 pd.Series(strings, dtype=pd.ArrowDtype(pa.large_string())),
                 pa.array([s.encode() for s in strings], pa.binary())):
        assert (th.text_hash(kind) == want).all()
    if hasattr(pa, "string_view"):
        assert (th.text_hash(pa.array(strings, pa.string_view())) == want).all()
    assert (want[0] == want[4]).all() and (want[0] != want[1]).any()


def test_no_collisions_on_100k_random_strings():
    rng = np.random.default_rng(6)
    lengths = rng.integers(0, 64, 100_000)
    data = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    docs = {data[offsets[i]:offsets[i + 1]].tobytes() for i in range(len(lengths))}
    hashes = th.text_hash_cpu(data, offsets)
    distinct_rows = {tuple(r) for r in hashes.tolist()}
    assert len(distinct_rows) == len(docs)  # equal strings (e.g. the empties) share a hash
    assert len(set(hashes[:, 0].tolist())) == len(docs)  # even each 64-bit half alone


@pytest.mark.parametrize("chunk", [1, 3, 8, 16])
def test_warp_order_of_work_gives_the_same_polynomial(chunk):
    """Checks the GPU kernel's algebra (tiles, padding, lane tree) on the CPU."""
    rng = random.Random(7 + chunk)
    lengths = [0, 1, chunk, 32 * chunk - 1, 32 * chunk, 32 * chunk + 1, 3 * 32 * chunk + 5, 777]
    for n in lengths:
        b = bytes(rng.getrandbits(8) for _ in range(n))
        for base in (th.B1, th.B2):
            horner = 0
            for x in b:
                horner = (horner * base + x + 1) % P
            assert warp_hash_ref(b, base, chunk) == horner, (n, chunk)


def test_gpu_params_layout():
    params = th._gpu_params(8)
    assert params.shape == (2, 8) and params.dtype == np.uint64
    assert int(params[0, 0]) == th.B1 and int(params[0, 6]) == pow(th.B1, 256, P)
    assert int(params[1, 7]) == th.C2


def test_cuda_source_inlines_the_header():
    src = cuda_source("text_hash.cu")
    assert '#include "mersenne.cuh"' not in src and "mulmod61" in src


# ---- GPU vs CPU, bit for bit ----------------------------------------------------------------

requires_gpu = pytest.mark.skipif(not th.gpu_available(), reason="no CUDA device")


def _gpu_vs_cpu(data, offsets, **kw):
    import cupy as cp

    got = th.text_hash_gpu(cp.asarray(data), cp.asarray(offsets), **kw).get()
    np.testing.assert_array_equal(got, th.text_hash_cpu(data, offsets))


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("offset_dtype", [np.int32, np.int64])
def test_gpu_matches_cpu_random(offset_dtype):
    rng = np.random.default_rng(8)
    # empties, short, around tile sizes (32 * chunk bytes), and far longer than one tile
    lengths = np.concatenate([np.zeros(50, int), rng.integers(0, 300, 3000),
                              rng.integers(200, 20_000, 300),
                              [127, 128, 129, 255, 256, 257, 511, 512, 513]])
    rng.shuffle(lengths)
    data = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(offset_dtype)
    _gpu_vs_cpu(data, offsets)
    _gpu_vs_cpu(data, offsets[100:2101])  # sliced: offsets start above 0


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("chunk", [1, 8, 16, 32])
def test_gpu_chunk_is_only_a_tuning_knob(chunk):
    rng = np.random.default_rng(9)
    lengths = rng.integers(0, 5000, 500)
    data = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    _gpu_vs_cpu(data, offsets, chunk=chunk)


@pytest.mark.gpu
@requires_gpu
def test_gpu_one_million_small_docs():
    rng = np.random.default_rng(10)
    lengths = rng.integers(0, 64, 1_000_000)
    data = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    _gpu_vs_cpu(data, offsets)


@pytest.mark.gpu
@requires_gpu
def test_gpu_convenience_path_with_nulls():
    arr = pa.array(["a", None, "", "ü" * 1000, "😀"] * 100)
    np.testing.assert_array_equal(th.text_hash(arr, device="gpu"), th.text_hash(arr, device="cpu"))
    assert th.text_hash_gpu(np.empty(0, np.uint8), np.zeros(1, np.int32)).shape == (0, 2)
