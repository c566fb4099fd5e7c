"""SimHash dedup: the fingerprint definition (CPU twin against a plain-Python reference; GPU against CPU where a
device is), the permuted-block tables' pigeonhole guarantee, the Hamming search against all pairs, and the stage
through the engine: near copies removed, the same removals whatever the workers and partitions."""

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpupipe.kernels import minhash as mh
from gpupipe.kernels.lsh_graph import components
from gpupipe.kernels.simhash import (fingerprints_cpu, hamming, hamming_edges, simhash, table_keys,
                                     table_masks)
from gpupipe.stages.dedup.simhash import SimHashDedupConfig, find_duplicates
from tests.helpers import run_config, write_jsonl
from tests.helpers.kernel_text import buffers_of, corpus


def _reference(hashes: list[int]) -> int:
    """Seed 001 §2.4.5 as written: v_j += w for a 1 bit, -= w for a 0 bit (w = 1 per occurrence); bit j = v_j > 0."""
    v = [0] * 64
    for h in hashes:
        for j in range(64):
            v[j] += 1 if (h >> j) & 1 else -1
    return sum(1 << j for j in range(64) if v[j] > 0)


def test_fingerprints_follow_the_definition():
    rng = np.random.default_rng(3)
    sizes = [0, 1, 2, 3, 64, 1000, 7]
    flat = rng.integers(0, 2**64, size=sum(sizes), dtype=np.uint64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    got = fingerprints_cpu(flat, offsets)
    want = [_reference([int(x) for x in flat[offsets[d]:offsets[d + 1]]]) for d in range(len(sizes))]
    assert [int(x) for x in got] == want
    assert got[0] == 0   # no shingles: 0


def test_simhash_tokens_are_minhash_shingles_and_weights_count():
    texts = ["the cat sat on the mat", "The cat, sat on the mat!", "北京欢迎你北京", "a b c d e f g"]
    data, offsets = buffers_of([t.encode() for t in texts])
    cjk = np.array([0, 0, 1, 0], np.uint8)
    fp = simhash(texts, cjk, word_k=1, char_k=2)
    flat, offs = mh.shingle_hashes_cpu(data, offsets, cjk, 1, 2)
    assert [int(x) for x in fp] == [_reference([int(h) for h in flat[offs[d]:offs[d + 1]]]) for d in range(4)]
    assert fp[0] == fp[1]   # case and punctuation are not tokens (minhash's units)
    sets, soffs = mh.shingle_hashes_cpu(data, offsets, cjk, 1, 2, distinct=True)
    distinct = simhash(texts, cjk, word_k=1, char_k=2, distinct=True)
    assert [int(x) for x in distinct] == [_reference([int(h) for h in sets[soffs[d]:soffs[d + 1]]])
                                          for d in range(4)]


@pytest.mark.parametrize("k,levels,tables,bits", [(3, 1, 4, 16), (3, 2, 16, 28), (2, 2, 9, 36), (0, 1, 1, 64)])
def test_tables_catch_every_pair_within_distance(k, levels, tables, bits):
    masks = table_masks(k, levels)
    assert len(masks) == tables and {bin(int(m)).count("1") for m in masks} <= {bits, bits + 1, bits - 1}
    rng = np.random.default_rng(k * 10 + levels)
    a = rng.integers(0, 2**64, size=3000, dtype=np.uint64)
    b = a.copy()
    for i in range(len(b)):       # flip exactly k distinct bits, placed at random
        for j in rng.choice(64, size=k, replace=False):
            b[i] ^= np.uint64(1) << np.uint64(j)
    assert (hamming(a, b) == k).all()
    (_, ka), (_, kb) = table_keys(a, masks), table_keys(b, masks)
    assert (ka.reshape(tables, -1) == kb.reshape(tables, -1)).any(axis=0).all()


def _clusters(u, v) -> dict:
    nodes, cluster = components(np.asarray(u, np.int64), np.asarray(v, np.int64))
    return dict(zip(nodes.tolist(), cluster.tolist()))


@pytest.mark.parametrize("levels", [1, 2])
def test_hamming_search_finds_what_all_pairs_find(levels):
    rng = np.random.default_rng(5)
    base = rng.integers(0, 2**64, size=60, dtype=np.uint64)
    fp = [base]
    for flips in (0, 1, 2, 3, 4, 6):   # copies at each distance: those up to 3 belong to their original
        copy = base.copy()
        for i in range(len(copy)):
            for j in rng.choice(64, size=flips, replace=False):
                copy[i] ^= np.uint64(1) << np.uint64(j)
        fp.append(copy)
    fp = np.concatenate(fp)
    doc = rng.permutation(len(fp)).astype(np.int64) * 7   # any doc numbers, any order
    masks = table_masks(3, levels)
    table, key = table_keys(fp, masks)
    u, v = hamming_edges(table, key, np.tile(fp, len(masks)), np.tile(doc, len(masks)), 3)
    assert (u < v).all()
    ii, jj = np.triu_indices(len(fp), 1)
    close = hamming(fp[ii], fp[jj]) <= 3
    want = _clusters(np.minimum(doc[ii][close], doc[jj][close]), np.maximum(doc[ii][close], doc[jj][close]))
    assert _clusters(u, v) == want and len(want) >= 4 * 60
    pos = {d: i for i, d in enumerate(doc.tolist())}
    assert (hamming(fp[[pos[x] for x in u.tolist()]], fp[[pos[x] for x in v.tolist()]]) <= 3).all()


def _near_copies(n: int, seed: int, length: int = 800) -> list[str]:
    """n documents of `length` random words: the first n // 2 distinct, the rest near copies (one word changed).
    One changed word in 150 moves a fingerprint by more than 3 bits about one time in seven (SimHash's Hamming 3 of
    64 is strict: profiling/bench_simhash.py); in 800 words, about one time in 200."""
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(3000)])
    base = [rng.choice(words, size=length).tolist() for _ in range(n // 2)]
    out = []
    for i in range(n):
        t = list(base[i % len(base)])
        if i >= len(base):
            t[length // 2] = "changed"
        out.append(" ".join(t))
    return out


def test_find_duplicates_keeps_the_first_of_each_cluster():
    # ... and documents without tokens (empty, punctuation only) are never near duplicates, of each other either
    texts = _near_copies(40, seed=2) + ["short unrelated text", "short unrelated text", "", "...", "", None]
    df = pd.DataFrame({"doc_index": np.arange(len(texts)) * 3, "text": texts})
    got = find_duplicates(df, SimHashDedupConfig())
    removed = set(got.loc[~got["keep"], "doc_index"])
    assert removed == {3 * i for i in range(20, 40)} | {3 * 41}
    assert (got.groupby("cluster")["keep"].sum() == 1).all()
    first = find_duplicates(df, SimHashDedupConfig(priority=["-doc_index"]))
    assert set(first.loc[~first["keep"], "doc_index"]) == {3 * i for i in range(0, 20)} | {3 * 40}


def _texts() -> list[str]:
    """Near copies (one word changed), exact copies, Chinese near copies (one character changed) and unrelated
    documents, so that copies land in other partitions than their originals."""
    rng = random.Random(11)
    zh = "数据工程是大模型预训练的基础我们从网页抓取开始经过抽取清洗去重质量过滤最后切分成训练批次"
    out = _near_copies(60, seed=4)
    for i in range(8):
        base = "".join(rng.choice(zh) for _ in range(1500))
        out.append(base)
        out.append(base[:750] + "网" + base[751:])
    out += [out[3], out[7]]
    return out


def _removed(run: Path, n: int) -> list[str]:
    rej = sorted((run / "stages" / f"{n:02d}-simhash_dedup" / "rejects").glob("*.parquet"))
    return sorted(pd.concat([pd.read_parquet(p) for p in rej])["id"]) if rej else []


def test_stage_through_the_engine_same_whatever_workers_and_partitions(tmp_path):
    texts = _texts()
    src = write_jsonl(tmp_path / "in.jsonl", texts)
    ref = run_config(tmp_path, "ref", src, [{"simhash_dedup": {}}], partition_docs=100, workers=1)
    removed = _removed(ref, 1)
    planted = {f"doc-{i}" for i in range(30, 60)} | {f"doc-{60 + 2 * i + 1}" for i in range(8)} | {"doc-76", "doc-77"}
    assert set(removed) == planted
    stats = json.loads((ref / "stages" / "01-simhash_dedup" / "stats.json").read_text())
    assert stats["docs_in"] == len(texts) and stats["docs_out"] == len(texts) - len(planted)
    assert stats["removed"] == {"near_duplicate": len(planted)}
    assert stats["extra"]["tables"] == 16 and stats["extra"]["clusters"] == 30 + 8
    sample = [json.loads(line) for line in open(ref / "stages" / "01-simhash_dedup" / "clusters_sample.jsonl")]
    assert sample and all(s["kept"]["text"] and s["removed"] for s in sample)
    for name, docs, workers in (("two", 13, 2), ("small", 7, 1), ("one-level", 29, 2)):
        params = {"levels": 1} if name == "one-level" else {}
        run = run_config(tmp_path, name, src, [{"simhash_dedup": params}], partition_docs=docs, workers=workers)
        assert _removed(run, 1) == removed, name
        kept = lambda r: pd.concat([pd.read_parquet(p) for p in sorted((r / "stages" / "01-simhash_dedup")
                                                                       .glob("part-*.parquet"))])
        assert kept(run)["doc_index"].tolist() == kept(ref)["doc_index"].tolist()


def test_bad_config_refused_before_any_work(tmp_path):
    from gpupipe.config_base import ConfigError
    from gpupipe.stages import build_stage_configs

    with pytest.raises(ConfigError, match="hamming"):
        build_stage_configs([{"simhash_dedup": {"hamming": -1}}], "x.yaml")
    with pytest.raises(ConfigError, match="levels"):
        build_stage_configs([{"simhash_dedup": {"levels": 3}}], "x.yaml")


requires_gpu = pytest.mark.skipif(not mh.gpu_available(), reason="no CUDA device")


@requires_gpu
def test_gpu_fingerprints_equal_the_cpu_twin():
    import cupy as cp

    from gpupipe.kernels.simhash import fingerprints_gpu

    rng = random.Random(9)
    docs = corpus(rng, 400, 60, ["", " ", "北京", "dup dup dup"], 0.7)
    data, offsets = buffers_of(docs)
    cjk = np.array([i % 3 == 0 for i in range(len(docs))], np.uint8)
    for k in (1, 3):
        for distinct in (False, True):
            flat, offs = mh.shingle_hashes_cpu(data, offsets, cjk, k, 2, distinct=distinct)
            want = fingerprints_cpu(flat, offs)
            assert (fingerprints_gpu(cp.asarray(flat), cp.asarray(offs)).get() == want).all()
            got = simhash(docs, cjk, k, 2, distinct=distinct, device="gpu")
            assert (got == simhash(docs, cjk, k, 2, distinct=distinct, device="cpu")).all()
