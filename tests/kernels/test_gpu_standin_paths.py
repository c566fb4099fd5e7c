"""Every GPU host path of gpupipe run in CI through the CuPy stand-in (tests/gpu_standin): CuPy calls, streams
(each read ordered after its buffer's last write), shapes, batching and routing, with results equal to the CPU
path value for value. The kernels run as emulators of the CPU twins' arithmetic; what only a device proves (the
CUDA C's own races and bounds, real CuPy, speed) is profiling/gpu_check.sh's part."""

import random

import numpy as np
import pandas as pd
import pytest

from gpupipe.kernels import lsh_graph as lg
from gpupipe.kernels import minhash as mh
from gpupipe.kernels import near_dedup as nd
from gpupipe.kernels import ngram_hash as ng
from gpupipe.kernels import text_hash as th
from tests.gpu_standin.streams import HazardError
from tests.helpers.kernel_text import buffers_of, corpus
from tests.kernels.test_near_dedup import PARAMS, _documents
from tests.stages.filters.test_decontam import CN_ITEM, FILLER, GSM, index_path, run, stage  # noqa: F401 (fixture)


def _mixed(seed, count=300, max_pieces=60):
    rng = random.Random(seed)
    docs = corpus(rng, count, max_pieces, ["", "one", "😀", " ,.!", "数据清洗是预训练语料处理的关键步骤"], word_share=0.5)
    return docs, np.array([rng.random() < 0.4 for _ in docs], np.uint8)


# ---- the near dedup chain ------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("where", ["host", "device"])
def test_the_device_chain_equals_the_cpu_chain(gpu_standin, overlap, where):
    """Host buffers (staged through pinned memory on a copy stream) and device buffers made on the caller's
    stream (as cuDF's are) both: the clusters and counts of the CPU chain, and no unordered access on the way."""
    cp = gpu_standin
    docs, cjk, doc = _documents(3, 300)
    data, offsets = buffers_of(docs)
    want = nd.near_duplicate_clusters(data, offsets, cjk, doc, PARAMS)
    if where == "device":
        data, offsets = cp.asarray(data), cp.asarray(offsets)
    got = nd.near_duplicate_clusters(data, offsets, cjk, doc, PARAMS, device="gpu", overlap=overlap)
    assert isinstance(got[0], np.ndarray) and got[2] == want[2] and want[2]["verified_edges"] > 20
    assert (got[0] == want[0]).all() and (got[1] == want[1]).all()
    assert cp.STATE.stats.launches["minhash_progression_i64"] >= 1


def test_many_batches_overlap_copies_and_kernels(gpu_standin, monkeypatch):
    """Small batches: each batch's copy (copy stream, two pinned buffers in turn) overlaps the previous batch's
    kernels (compute stream); a staging buffer rewritten before its copy finished, or a kernel reading a batch
    before its copy, raises in the stand-in."""
    docs, cjk, doc = _documents(4, 300)
    data, offsets = buffers_of(docs)
    want = nd.near_duplicate_clusters(data, offsets, cjk, doc, PARAMS)
    monkeypatch.setattr(mh, "GPU_BATCH_BYTES", 2000)
    got = nd.near_duplicate_clusters(data, offsets, cjk, doc, PARAMS, device="gpu")
    assert (got[0] == want[0]).all() and (got[1] == want[1]).all()
    assert gpu_standin.STATE.stats.launches["minhash_units_i64"] > 10


def test_the_stand_in_catches_a_missing_event(gpu_standin, monkeypatch):
    """The overlapped loop without `compute.wait_event(copied)`: the kernels would read a batch still being
    copied. The stand-in must say so (this is what makes the tests above mean something)."""
    cp = gpu_standin
    docs, cjk, doc = _documents(5, 120)
    data, offsets = buffers_of(docs)
    monkeypatch.setattr(cp.cuda.Stream, "wait_event", lambda self, event: None)
    with pytest.raises(HazardError, match="minhash_units"):
        nd.near_duplicate_clusters(data, offsets, cjk, doc, PARAMS, device="gpu")


def test_find_duplicates_on_the_gpu_equals_the_cpu(gpu_standin):
    from gpupipe.stages.dedup.fuzzy import FuzzyDedupConfig, find_duplicates

    docs, _, _ = _documents(6, 300)
    texts = [d.decode("utf-8", "replace") for d in docs]
    df = pd.DataFrame({"doc_index": np.arange(len(texts), dtype=np.int64) * 3 + 1, "text": texts,
                       "lang": ["zh" if i % 5 == 0 else "en" for i in range(len(texts))]})
    cfg = FuzzyDedupConfig(bands=16, rows=3, threshold=0.6)
    want = find_duplicates(df, cfg, seed=7)
    got = find_duplicates(df, cfg, seed=7, device="gpu")
    assert len(want) > 20
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))


def test_fuzzy_stage_device_steps_equal_the_cpu(gpu_standin):
    """The fuzzy_dedup station's device steps: star edges of (band, hash, doc) rows, connected components."""
    from gpupipe.stages.dedup.fuzzy import connected_components, star_edges

    rng = np.random.default_rng(0)
    keys = pd.DataFrame({"band": rng.integers(0, 8, 5000), "hash": rng.integers(0, 300, 5000).astype(np.uint64),
                         "doc_index": rng.permutation(20000)[:5000].astype(np.int64)})
    want = star_edges(keys)
    got = star_edges(keys, device="gpu")
    assert len(want) > 1000
    pd.testing.assert_frame_equal(got, want)
    pd.testing.assert_frame_equal(connected_components(got, device="gpu"), connected_components(want))


# ---- kernels and their entry points ---------------------------------------------------------------------------


@pytest.mark.parametrize("offset_dtype", [np.int32, np.int64])
def test_minhash_and_shingles_equal_the_cpu(gpu_standin, offset_dtype):
    """Signatures (progression and general permutations), band keys and shingle sets; several batches and a
    document larger than a batch (routed to the CPU twin)."""
    cp = gpu_standin
    docs, cjk = _mixed(1)
    docs[7] = b"long document " * 400
    data, offsets = buffers_of(docs, offset_dtype)
    rng = np.random.default_rng(5)
    general = tuple(rng.integers(1, mh.EMPTY, 40, dtype=np.uint64) for _ in range(2))   # not progressions
    for a, b in (mh.minhash_permutations(40, 3), general):
        want = mh.minhash_cpu(data, offsets, cjk, a, b)
        for batch in (mh.GPU_BATCH_BYTES, 3000):
            got = mh.minhash_gpu(cp.asarray(data), cp.asarray(offsets), cp.asarray(cjk), a, b, batch_bytes=batch)
            assert (got.get() == want).all()
    assert cp.STATE.stats.launches[f"minhash_signatures_{'i32' if offset_dtype == np.int32 else 'i64'}"] >= 1
    assert (mh.minhash_bands(docs, cjk.astype(bool), 8, 5, device="gpu") == mh.minhash_bands(docs, cjk.astype(bool), 8, 5)).all()
    for distinct in (False, True):
        want = mh.shingle_hashes_cpu(data, offsets, cjk, distinct=distinct)
        flat, offs = mh.shingle_hashes_gpu(cp.asarray(data), cp.asarray(offsets), cjk, distinct=distinct,
                                           batch_bytes=3000)
        assert (flat.get() == want[0]).all() and (offs.get() == want[1]).all()


def test_text_hash_and_exact_dedup_keys_equal_the_cpu(gpu_standin):
    from gpupipe.stages.base import RunContext
    from gpupipe.stages.dedup.exact import ExactDedup, ExactDedupConfig

    docs, _ = _mixed(2)
    texts = [d.decode("utf-8", "replace") for d in docs]
    assert (th.text_hash(texts, device="gpu") == th.text_hash(texts)).all()
    df = pd.DataFrame({"doc_index": np.arange(len(texts), dtype=np.int64), "text": texts + []})
    df.loc[3, "text"] = None
    want = ExactDedup(ExactDedupConfig(), RunContext()).keys(df)
    got = ExactDedup(ExactDedupConfig(), RunContext(device="gpu")).keys(df)
    pd.testing.assert_frame_equal(got, want)


def test_ngram_lookup_equals_the_cpu_with_a_document_larger_than_a_batch(gpu_standin):
    """Decontamination's lookup: hits equal the CPU's; a document larger than a batch goes to the CPU twin, so the
    device scratch stays bounded by the batch (16 bytes per text byte), not by the longest document."""
    cp = gpu_standin
    docs, cjk = _mixed(3, 200, 80)
    big = b" ".join(docs[:60]) * 4
    docs.insert(50, big)
    cjk = np.insert(cjk, 50, 0)
    data, offsets = buffers_of(docs)
    word, char = (3, 2), (4, 2)
    parts = [ng.gram_hashes_cpu(data, offsets, cjk, np.where(cjk, char[j], word[j]))[0] for j in (0, 1)]
    grams = np.unique(np.concatenate(parts))
    table = ng.NgramTable(grams[::2])
    want = ng.ngram_lookup_cpu(data, offsets, cjk, table, word, char)
    batch = 4000
    assert len(big) > 4 * batch and int(want.hit_offsets[51] - want.hit_offsets[50]) > 100
    d_data, d_offsets = cp.asarray(data), cp.asarray(offsets)
    live = cp.STATE.stats.live_bytes
    cp.STATE.stats.reset_peak()
    got = ng.ngram_lookup_gpu(d_data, d_offsets, cjk, table, word, char, batch_bytes=batch).get()
    for name in ("hit_offsets", "pos", "start", "end"):
        assert (getattr(got, name) == getattr(want, name)).all(), name
    scratch = cp.STATE.stats.peak_bytes - live - 4 * 8 * int(want.hit_offsets[-1])   # less the hits themselves
    assert scratch < 16 * len(big), f"{scratch} bytes of device scratch for a {len(big)}-byte document"


def test_decontamination_stage_on_the_gpu_equals_the_cpu(gpu_standin, index_path):
    """The decontaminate station with device "gpu" (ngram_lookup_gpu on the partition's buffers): its kept part,
    rejects and matches are the CPU station's (the inputs of tests/stages/filters/test_decontam.py's GPU test)."""
    from gpupipe.stages.base import RunContext
    from gpupipe.stages.filters.decontam import DecontamConfig, Decontaminate

    q = GSM[0]["question"]
    texts = [FILLER, FILLER + q, q.upper(), FILLER + CN_ITEM, "", "\u4e2d" * 30 + q] * 20
    cpu = run(stage(index_path, policy="cut"), texts)
    gpu = run(Decontaminate(DecontamConfig(index=str(index_path), policy="cut"), RunContext(device="gpu")), texts)
    assert len(cpu[3]) > 0 and any(k.startswith("ngram_fill") for k in gpu_standin.STATE.stats.launches)
    for a, b in zip(cpu[:2], gpu[:2]):
        pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(cpu[3], gpu[3])


# ---- the defects of issue #31, each caught where the stand-in can -------------------------------------------


def test_device_constants_are_readable_from_any_stream(gpu_standin):
    """Constants cached on the device at first use (MinHash/text_hash params, an n-gram table) are read later on
    whatever stream is current: copied synchronously, never ordered on the first caller's stream alone. Each is
    made on one non-blocking stream that nobody synchronizes, then used on another."""
    cp = gpu_standin
    docs, cjk = _mixed(8, 40)
    data, offsets = buffers_of(docs)
    a, b = mh.minhash_permutations(16, 0)
    table = ng.NgramTable(np.unique(ng.gram_hashes_cpu(data, offsets, cjk, 3)[0])[::3].copy())
    d_data, d_offsets = cp.asarray(data), cp.asarray(offsets)
    cp.cuda.Device().synchronize()               # the inputs are ready for every stream
    first, second = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with first:
        mh._gpu_params_on_device(0)
        th._gpu_params_on_device(th.GPU_CHUNK, 0)
        table.on_device()
    with second:
        assert (mh.minhash_gpu(d_data, offsets, cjk, a, b).get() == mh.minhash_cpu(data, offsets, cjk, a, b)).all()
        assert (th.text_hash_gpu(d_data, d_offsets).get() == th.text_hash_cpu(data, offsets)).all()
        hits = ng.ngram_lookup_gpu(d_data, offsets, cjk, table, (3, 3), (3, 3)).get()
        assert (hits.pos == ng.ngram_lookup_cpu(data, offsets, cjk, table, (3, 3), (3, 3)).pos).all()


def test_constants_cached_on_a_stream_race_without_a_blocking_copy(gpu_standin):
    """What the test above guards against, shown on the stand-in: an async copy on one non-blocking stream read
    from another with nothing between them raises."""
    cp = gpu_standin
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with s1:
        x = cp.asarray(np.arange(8))
    with s2, pytest.raises(HazardError):
        (x + 1).get()


def test_minhash_syncs_do_not_grow_with_batches(gpu_standin):
    """No host sync per batch: offsets are checked on the host once and work items are planned from byte counts
    (the old code synced twice a batch: the device offsets' check and the work-item count)."""
    cp = gpu_standin
    docs, cjk = _mixed(9, 300)
    data, offsets = buffers_of(docs)
    a, b = mh.minhash_permutations(32, 1)
    d_data, d_offsets, d_cjk = cp.asarray(data), cp.asarray(offsets), cp.asarray(cjk)
    mh.minhash_gpu(d_data, offsets, d_cjk, a, b)    # the constants' one-time copy
    syncs = []
    for batch in (mh.GPU_BATCH_BYTES, 600):
        before = cp.STATE.stats.syncs
        got = mh.minhash_gpu(d_data, offsets, d_cjk, a, b, batch_bytes=batch)
        syncs.append(cp.STATE.stats.syncs - before)
        assert (got.get() == mh.minhash_cpu(data, offsets, cjk, a, b)).all()
    assert len(mh._gpu_batches(offsets, 600)) > 20
    assert syncs == [0, 0], syncs


def test_components_hook_roots_long_chains_take_few_rounds(monkeypatch):
    """components_array (the GPU's connected components; numpy runs the same code) on a long path whose labels
    are shuffled: hooking roots (FastSV) needs a handful of rounds where hooking endpoints moved a label one hop
    per round. Same clusters as union-find."""
    rounds = []
    real = lg._scatter_min
    monkeypatch.setattr(lg, "_scatter_min", lambda xp, a, i, v: (rounds.append(1), real(xp, a, i, v)))
    rng = np.random.default_rng(0)
    order = rng.permutation(4000).astype(np.int64) * 7
    u, v = order[:-1], order[1:]
    flip = rng.random(u.shape[0]) < 0.5
    u, v = np.where(flip, v, u), np.where(flip, u, v)
    nodes, cluster = lg.components_array(u, v)
    want = lg.components(u, v)
    assert (nodes == want[0]).all() and (cluster == want[1]).all() and (cluster == order.min()).all()
    per_round = 4 if len(rounds) % 4 == 0 else 2
    assert len(rounds) // per_round <= 30, f"{len(rounds) // per_round} rounds on a 4000-node chain"


def _hub_and_star(count=400):
    """One hub document and `count` near copies of it: every candidate edge holds the hub's set."""
    rng = random.Random(11)
    words = [f"w{i}" for i in range(3000)]
    hub = " ".join(rng.choice(words) for _ in range(600))
    docs = [hub] + [hub + f" tail{i} extra{i}" for i in range(count)]
    return [d.encode() for d in docs]


def test_the_in_memory_chain_stays_under_its_device_memory_bound(gpu_standin, monkeypatch):
    """A hub-and-star input: the Jaccard step gathers the hub's set once per edge and the star step builds rows x
    bands; both go in rounds under lsh_graph.GRAPH_BYTES, so the device's peak stays near the bound (counted by
    the stand-in, byte for byte) while the result is the CPU's."""
    cp = gpu_standin
    docs = _hub_and_star()
    data, offsets = buffers_of(docs)
    cjk = np.zeros(len(docs), np.uint8)
    doc = np.arange(len(docs), dtype=np.int64)
    params = nd.ChainParams(bands=20, rows=2, seed=1, threshold=0.5)
    want = nd.near_duplicate_clusters(data, offsets, cjk, doc, params)
    assert want[2]["candidate_edges"] >= 400
    bound = 256 << 10
    monkeypatch.setattr(lg, "GRAPH_BYTES", bound, raising=False)
    d_data, d_offsets = cp.asarray(data), cp.asarray(offsets)
    flat, set_offsets = mh.shingle_hashes_gpu(d_data, d_offsets, cjk, distinct=True)
    u, v = cp.asarray(want[0][1:] * 0), cp.asarray(want[0][1:])      # hub (0) to every copy
    held = cp.STATE.stats.live_bytes
    cp.STATE.stats.reset_peak()
    jac = lg.jaccard(flat, set_offsets, u, v)
    extra = cp.STATE.stats.peak_bytes - held - jac.nbytes
    assert (jac.get() == lg.jaccard(flat.get(), set_offsets.get(), u.get(), v.get())).all()
    gathered = 2 * int(u.shape[0]) * int(set_offsets[1] - set_offsets[0]) * 8
    assert gathered > 8 * bound and extra <= 2 * bound, (extra, bound, gathered)
    keys = mh.band_keys_array(mh.minhash_gpu(d_data, d_offsets, cjk, *mh.minhash_permutations(40, 1)), 20, 2)
    bound = 64 << 10                             # the key matrix is small: a bound that its rows exceed
    monkeypatch.setattr(lg, "GRAPH_BYTES", bound, raising=False)
    d_doc = cp.asarray(doc)
    held = cp.STATE.stats.live_bytes
    cp.STATE.stats.reset_peak()
    eu, ev = lg.star_edges_keys(keys, d_doc)
    extra = cp.STATE.stats.peak_bytes - held - eu.nbytes - ev.nbytes
    assert keys.size * 112 > 8 * bound and extra <= 2 * bound, (extra, bound)
    cu, cv = lg.star_edges_keys(keys.get(), doc)
    assert (eu.get() == cu).all() and (ev.get() == cv).all()
    got = nd.near_duplicate_clusters(data, offsets, cjk, doc, params, device="gpu")
    assert (got[0] == want[0]).all() and (got[1] == want[1]).all() and got[2] == want[2]


def test_gpu_checks_end_to_end_script_at_small_size(gpu_standin, tmp_path, monkeypatch, capsys):
    """profiling/gpu_near_dedup_e2e.py (gpu_check.sh's end-to-end row) with --device gpu, in this process through
    the stand-in, both the overlapped and the step-by-step chain: it exits 0 only when the planted copies are found
    and nothing else is merged."""
    import importlib.util

    from tests.helpers import ROOT

    spec = importlib.util.spec_from_file_location("gpu_near_dedup_e2e", ROOT / "profiling" / "gpu_near_dedup_e2e.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr("sys.argv", ["gpu_near_dedup_e2e.py", "--gb", "0.004", "--parts", "2", "--device", "gpu",
                                     "--out", str(tmp_path / "corpus")])
    assert script.main() == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "overlapped" in out and "step by step" in out


def test_gpu_kernel_smoke_script_at_small_size(gpu_standin, monkeypatch, capsys):
    """profiling/gpu_kernel_smoke.py (gpu_check.sh's smoke and compute-sanitizer rows) in this process through the
    stand-in: it finds the tests' document maker (on a device it once failed on that import alone) and every kernel
    it launches agrees with its CPU twin."""
    import importlib.util

    from tests.helpers import ROOT

    spec = importlib.util.spec_from_file_location("gpu_kernel_smoke", ROOT / "profiling" / "gpu_kernel_smoke.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr("sys.argv", ["gpu_kernel_smoke.py", "--mb", "0.02"])
    assert script.main() == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "0 of " in out and "checks failed" in out and "ok   jaccard" in out


# ---- a whole run -----------------------------------------------------------------------------------------------


def test_a_whole_run_on_the_gpu_writes_the_cpu_run_s_shards(gpu_standin, tmp_path):
    """`gpupipe run` with device gpu, several partitions (the device stations' maps: the first task alone, then the
    rest on threads) writes byte for byte the shards of the same run on the CPU."""
    import hashlib
    import json

    from gpupipe.config import validate_config
    from gpupipe.run.pipeline import run_pipeline

    rng = random.Random(5)
    texts = [" ".join(rng.choice(["數據", "clean", "data", "tokens", "the", "模型", "pack", "shard"])
                      for _ in range(rng.randint(20, 200))) for _ in range(300)]
    texts += texts[:30] + [t + " extra words at the end" for t in texts[30:60]]   # exact and near copies
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)))

    def shards(device):
        cfg = validate_config({"input": {"path": str(src)}, "output": str(tmp_path / device), "device": device,
                               "executor": {"partition_docs": 100},
                               "stages": [{"exact_dedup": {}}, {"fuzzy_dedup": {}}, {"tokenize": {"vocab_size": 300}},
                                          {"pack": {"seq_len": 64}}]}, "test")
        stats = run_pipeline(cfg)
        assert stats["device"] == device and stats["conservation_ok"]
        files = sorted((tmp_path / device / "shards").glob("*.bin"))
        return stats, {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}

    cpu_stats, cpu = shards("cpu")
    launches = dict(gpu_standin.STATE.stats.launches)
    gpu_stats, gpu = shards("gpu")
    assert cpu and gpu == cpu
    assert cpu_stats["output_docs"] == gpu_stats["output_docs"] < len(texts)
    ran = {k: v - launches.get(k, 0) for k, v in gpu_standin.STATE.stats.launches.items()}
    assert any(k.startswith("text_hash") and v >= 4 for k, v in ran.items()), ran   # exact dedup, every partition
    assert any(k.startswith("minhash") and v >= 4 for k, v in ran.items()), ran     # near dedup, every partition


def test_gpu_paths_turn_cupy_s_cub_block_reductions_off_unless_the_user_chose(gpu_standin, monkeypatch):
    """kernels/_cuda.cupy_module: CuPy's CUB block reductions compile a kernel per block size, which CuPy sizes by
    the reduced length below 2,048 elements (a partition of other size, another compile). Every GPU path gets CuPy
    through cupy_module, which turns them off; a user's own CUPY_ACCELERATORS is left as it is."""
    cp = gpu_standin
    data, offsets = buffers_of([b"one document", b"another one", b""])
    monkeypatch.setenv("CUPY_ACCELERATORS", "cub")
    th.text_hash_gpu(cp.asarray(data), cp.asarray(offsets))
    assert cp._core.get_reduction_accelerators() == ["cub"]
    monkeypatch.delenv("CUPY_ACCELERATORS")
    got = th.text_hash_gpu(cp.asarray(data), cp.asarray(offsets)).get()
    assert cp._core.get_reduction_accelerators() == []
    assert (got == th.text_hash_cpu(data, offsets)).all()
