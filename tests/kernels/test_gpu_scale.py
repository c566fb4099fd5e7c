"""The GPU kernels at the sizes where indexing goes wrong, against their CPU twins: more documents than one launch's
grid covers (the kernels' grid-stride loops: 2^20 blocks of 8 warps = 8.4M documents), a buffer over 2^31 bytes
(offsets and positions past int32, a document across the 2^31 boundary), and a document larger than a batch (sent to
the CPU twin, so the device scratch stays bounded by the batch; the results must not show it). Each
needs a CUDA device and GBs of memory: they run in profiling/gpu_check.sh and skip elsewhere."""

import numpy as np
import pytest

from gpupipe.kernels import minhash as mh
from gpupipe.kernels import text_hash as th
from gpupipe.kernels.text_hash import gpu_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA device")]


def _tiny_documents(n: int, seed: int = 0):
    """n documents of 0-4 bytes (words, CJK, separators): 9M of them are 20 MB."""
    rng = np.random.default_rng(seed)
    pieces = [b"", b"a", b"ab c", b"\xe6\x95\xb0", b"x y", b"\xe4\xb8", b" ", b"Qz"]
    choice = rng.integers(0, len(pieces), n)
    lens = np.array([len(p) for p in pieces])[choice]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    data = np.frombuffer(b"".join(pieces[i] for i in choice.tolist()), np.uint8)
    return data, offsets, (rng.random(n) < 0.3).astype(np.uint8)


def test_more_documents_than_one_grid():
    import cupy as cp

    n = 9_000_000                                   # > 2^20 blocks x 8 documents a block
    data, offsets, cjk = _tiny_documents(n)
    d_data, d_offsets, d_cjk = cp.asarray(data), cp.asarray(offsets), cp.asarray(cjk)
    a, b = mh.minhash_permutations(8, 1)
    assert np.array_equal(mh.minhash_gpu(d_data, d_offsets, d_cjk, a, b).get(),
                          mh.minhash_cpu(data, offsets, cjk, a, b))
    assert np.array_equal(th.text_hash_gpu(d_data, d_offsets).get(), th.text_hash_cpu(data, offsets))
    got, want = mh.shingle_hashes_gpu(d_data, d_offsets, d_cjk), mh.shingle_hashes_cpu(data, offsets, cjk)
    assert np.array_equal(got[0].get(), want[0]) and np.array_equal(got[1].get(), want[1])


def test_a_buffer_over_2_gib():
    import cupy as cp

    rng = np.random.default_rng(5)
    words = np.array([b"river ", b"\xe6\x95\xb0\xe6\x8d\xae", b"stone, ", b"Valley. ", b"\xf0\x9f\x98\x80 "],
                     dtype=object)
    block = np.frombuffer(b"".join(words[rng.integers(0, len(words), 200_000)]), np.uint8)[:1 << 20]
    data = np.tile(block, 2200)                     # 2.2 GiB, 1 MiB documents: number 2048 spans 2^31
    offsets = np.arange(0, data.shape[0] + 1, 1 << 20, dtype=np.int64)
    tail = offsets[-160:]                           # the last 159 documents, from 2^31 - 7 MiB on
    assert tail[0] < (1 << 31) < tail[-1]
    cjk = np.zeros(tail.shape[0] - 1, np.uint8)
    cjk[::2] = 1
    d_data = cp.asarray(data)
    a, b = mh.minhash_permutations(16, 2)
    assert np.array_equal(mh.minhash_gpu(d_data, tail, cp.asarray(cjk), a, b).get(),
                          mh.minhash_cpu(data, tail, cjk, a, b))
    assert np.array_equal(th.text_hash_gpu(d_data, cp.asarray(tail)).get(), th.text_hash_cpu(data, tail))
    got, want = mh.shingle_hashes_gpu(d_data, tail, cp.asarray(cjk), distinct=True), \
        mh.shingle_hashes_cpu(data, tail, cjk, distinct=True)
    assert np.array_equal(got[0].get(), want[0]) and np.array_equal(got[1].get(), want[1])


def test_a_document_larger_than_a_batch():
    import cupy as cp

    rng = np.random.default_rng(6)
    big = np.frombuffer(b"".join(rng.choice([b"alpha ", b"beta ", b"\xe6\x95\xb0 ", b"gamma, "], 400_000)),
                        np.uint8)
    data = np.concatenate([big[:1000], big, big[:10]])
    offsets = np.array([0, 1000, 1000 + big.shape[0], data.shape[0]], np.int64)
    cjk = np.array([0, 1, 0], np.uint8)
    a, b = mh.minhash_permutations(128, 4)
    got = mh.minhash_gpu(cp.asarray(data), offsets, cp.asarray(cjk), a, b, batch_bytes=1 << 16)
    assert np.array_equal(got.get(), mh.minhash_cpu(data, offsets, cjk, a, b))
    got = mh.shingle_hashes_gpu(cp.asarray(data), offsets, cp.asarray(cjk), batch_bytes=1 << 16)
    want = mh.shingle_hashes_cpu(data, offsets, cjk)
    assert np.array_equal(got[0].get(), want[0]) and np.array_equal(got[1].get(), want[1])
