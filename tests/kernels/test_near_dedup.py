"""kernels/near_dedup.py, near dedup's chain in one code for numpy and CuPy: its numpy run against a pure-Python
reference (dict buckets, Python sets, a Python union-find) on random documents (ASCII, Chinese, emoji, empty, one
word, mangled UTF-8) with edited copies; the array forms of the set and Jaccard steps against their numba twins;
and, where a GPU is present (profiling/gpu_check.sh), the device chain against the CPU's, value for value."""

import random

import numpy as np
import pytest

from gpupipe.kernels import lsh_graph as lg
from gpupipe.kernels import minhash as mh
from gpupipe.kernels import near_dedup as nd
from gpupipe.kernels.text_hash import gpu_available
from tests.helpers import ROOT, kernel_text
from tests.helpers.kernel_text import buffers_of

# a loose LSH shape: many candidate pairs below the threshold, for the Jaccard check to cut
PARAMS = nd.ChainParams(bands=16, rows=3, seed=7, word_k=5, char_k=3, threshold=0.6)


def _edit(rng: random.Random, doc: bytes) -> bytes:
    """A near copy: a few bytes changed, cut or appended (mangled UTF-8 may come out: it must be handled)."""
    out = bytearray(doc)
    for _ in range(rng.randrange(0, 3)):
        op = rng.randrange(3)
        pos = rng.randrange(len(out) + 1)
        if op == 0:
            out[pos:pos] = rng.choice([b" and more", "，再来".encode(), b"!", "😀".encode()])
        elif op == 1 and out:
            del out[pos:pos + rng.randrange(1, 4)]
        else:
            out += b" tail words here"
    return bytes(out)


def _documents(seed: int, count: int = 240):
    rng = random.Random(seed)
    fixed = ["", "one", "😀", "数据", " ,.!", "one two three four five six",
             "数据清洗是预训练语料处理的关键步骤"]
    base = kernel_text.corpus(rng, count, 80, fixed, word_share=0.55)
    docs = base + [_edit(rng, d) for d in rng.sample(base, count // 2)] + rng.sample(base, count // 8)
    rng.shuffle(docs)
    cjk = np.array([rng.random() < 0.3 for _ in docs], np.uint8)
    doc = np.array(rng.sample(range(10 * len(docs)), len(docs)), np.int64)   # ids, not row numbers
    return docs, cjk, doc


def _reference(docs, cjk, doc, p: nd.ChainParams):
    """The definition in plain Python: band keys (the kernel twin, tested against its own reference in
    test_kernels_minhash) → buckets as dicts → pairs → Python-set Jaccard → union-find → {doc: cluster}."""
    data, offsets = buffers_of(docs)
    a, b = mh.minhash_permutations(p.bands * p.rows, p.seed)
    keys = mh.band_keys(mh.minhash_cpu(data, offsets, cjk, a, b, p.word_k, p.char_k), p.bands, p.rows)
    pairs = set()
    for band in range(p.bands):
        buckets = {}
        for i in range(len(docs)):
            buckets.setdefault(int(keys[i, band]), []).append(int(doc[i]))
        for members in buckets.values():
            low = min(members)
            pairs.update((low, m) for m in members if m != low)
    flat, offs = mh.shingle_hashes_cpu(data, offsets, cjk, p.word_k, p.char_k)
    row = {int(d): i for i, d in enumerate(doc)}
    sets = {int(d): set(flat[offs[i]:offs[i + 1]].tolist()) for i, d in enumerate(doc)}

    def jac(x, y):
        union = len(sets[x] | sets[y])
        return len(sets[x] & sets[y]) / union if union else 1.0

    kept = sorted((x, y) for x, y in pairs if not p.verify or jac(x, y) >= p.threshold)
    parent = {}

    def root(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for x, y in kept:
        rx, ry = root(x), root(y)
        parent[max(rx, ry)] = min(rx, ry)
    assert all(x in row and y in row for x, y in kept)
    return {x: root(x) for x in parent}, len(pairs), len(kept)


@pytest.mark.parametrize("seed,verify", [(0, True), (1, True), (2, False)])
def test_the_chain_equals_the_reference(seed, verify):
    docs, cjk, doc = _documents(seed)
    params = PARAMS._replace(verify=verify)
    want, candidates, kept = _reference(docs, cjk, doc, params)
    data, offsets = buffers_of(docs)
    nodes, cluster, counts = nd.near_duplicate_clusters(data, offsets, cjk, doc, params)
    assert dict(zip(nodes.tolist(), cluster.tolist())) == want
    assert counts == {"candidate_edges": candidates, "verified_edges": kept}
    assert len(want) > 50 and (not verify or kept < candidates)   # the test has clusters, and cuts some pairs


def test_candidate_sets_in_several_gathers(monkeypatch):
    """The candidates' bytes are gathered GATHER_BYTES at a time: the sets do not depend on the cut."""
    docs, cjk, doc = _documents(3)
    data, offsets = buffers_of(docs, np.int32)
    rows = np.arange(len(docs))[::-1].copy()
    whole = nd.candidate_sets(data, offsets, cjk, rows, PARAMS)
    monkeypatch.setattr(nd, "GATHER_BYTES", 97)
    cut = nd.candidate_sets(data, offsets, cjk, rows, PARAMS)
    want = mh.shingle_hashes_cpu(*buffers_of([docs[r] for r in rows]), cjk[rows], PARAMS.word_k, PARAMS.char_k,
                                 distinct=True)
    for got in (whole, cut):
        assert (got[0] == want[0]).all() and (got[1] == want[1]).all()


def test_distinct_sets_and_jaccard_arrays_equal_their_numba_twins():
    docs, cjk, _ = _documents(4)
    data, offsets = buffers_of(docs)
    flat, offs = mh.shingle_hashes_cpu(data, offsets, cjk, 5, 3)
    sets = mh.shingle_hashes_cpu(data, offsets, cjk, 5, 3, distinct=True)
    got = lg.distinct_sets_array(flat, offs)
    assert (got[0] == sets[0]).all() and (got[1] == sets[1]).all()
    rng = np.random.default_rng(0)
    ia, ib = rng.integers(0, len(docs), 3000), rng.integers(0, len(docs), 3000)
    empty = np.flatnonzero(np.diff(sets[1]) == 0)
    ia[:5], ib[:5] = empty[0], empty[-1]       # two empty sets: 1.0 by definition
    want = lg.jaccard(*sets, ia, ib)
    assert (lg.jaccard_array(*sets, ia, ib) == want).all() and (want[:5] == 1.0).all()
    assert 0 < (want[5:] == 1.0).mean() < 1


requires_gpu = pytest.mark.skipif(not gpu_available(), reason="no CUDA device")


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("offset_dtype", [np.int32, np.int64])
def test_gpu_shingle_hashes_equal_the_cpu(offset_dtype):
    import cupy as cp

    docs, cjk, _ = _documents(5)
    data, offsets = buffers_of(docs, offset_dtype)
    for distinct in (False, True):
        want = mh.shingle_hashes_cpu(data, offsets, cjk, 5, 3, distinct=distinct)
        for batch in (mh.GPU_BATCH_BYTES, 300):   # one batch, and many
            flat, offs = mh.shingle_hashes_gpu(cp.asarray(data), cp.asarray(offsets), cp.asarray(cjk), 5, 3,
                                               distinct=distinct, batch_bytes=batch)
            assert (flat.get() == want[0]).all() and (offs.get() == want[1]).all()


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("seed", [0, 1])
def test_the_device_chain_equals_the_cpu_chain(seed):
    import cupy as cp

    docs, cjk, doc = _documents(seed, 600)
    data, offsets = buffers_of(docs)
    want = nd.near_duplicate_clusters(data, offsets, cjk, doc, PARAMS)
    got = nd.near_duplicate_clusters(cp.asarray(data), cp.asarray(offsets), cjk, doc, PARAMS, device="gpu")
    assert (got[0] == want[0]).all() and (got[1] == want[1]).all() and got[2] == want[2]
    assert isinstance(got[0], np.ndarray)   # only the members come back


def test_the_end_to_end_benchmark_runs_and_finds_its_planted_copies(tmp_path):
    """profiling/gpu_near_dedup_e2e.py (gpu_check.sh's 10 GB line) on the CPU at 20 MB: Parquet parts made, read,
    deduplicated; it exits 0 only when >= 95% of the planted copies are found and nothing else is merged."""
    import subprocess
    import sys

    script = ROOT / "profiling" / "gpu_near_dedup_e2e.py"
    done = subprocess.run([sys.executable, str(script), "--gb", "0.02", "--parts", "2", "--device", "cpu",
                           "--out", str(tmp_path / "corpus")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stray documents clustered 0" in done.stdout and len(list((tmp_path / "corpus").glob("*.parquet"))) == 2
    found = float(done.stdout.split("planted copies found ")[1].split(";")[0])
    assert found >= 0.95, done.stdout
