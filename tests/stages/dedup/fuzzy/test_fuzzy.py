"""Near dedup: clustering pieces, ground-truth quality on the synthetic crawl, and partition independence."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import yaml

from gpupipe.cli import main
from gpupipe.io.parts import part_paths
from gpupipe.stages.dedup.fuzzy import (FuzzyDedupConfig, choose_keepers, connected_components, find_duplicates,
                                  identical_texts, shingle_sets, star_edges, verify_edges)
from gpupipe.kernels.lsh_graph import _star_matrix


def test_star_edges_and_components():
    keys = pd.DataFrame({"band": [0, 0, 0, 1, 1, 1, 2], "hash": [5, 5, 9, 7, 7, 3, 4],
                         "doc_index": [30, 10, 20, 20, 40, 50, 60]})
    edges = star_edges(keys)
    assert sorted(map(tuple, edges[["u", "v"]].to_numpy())) == [(10, 30), (20, 40)]
    edges = pd.concat([edges, pd.DataFrame({"u": [40], "v": [70]})])
    cc = connected_components(edges).set_index("doc_index")["cluster"].to_dict()
    assert cc == {10: 10, 30: 10, 20: 20, 40: 20, 70: 20}


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_band_matrix_gives_the_same_edges_as_band_rows(workers):
    # find_duplicates' path (an (n, bands) key matrix, one table per worker) against the stage's (band, hash, doc) rows
    rng = np.random.default_rng(3)
    n, bands = 3000, 7
    keys = rng.integers(0, 400, size=(n, bands)).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # collisions
    doc = rng.permutation(10 * n)[:n].astype(np.int64)  # doc_index is not the row number
    rows = pd.DataFrame({"band": np.repeat(np.arange(bands), n), "hash": keys.T.reshape(-1),
                         "doc_index": np.tile(doc, bands)})
    want = star_edges(rows)
    u, v = _star_matrix(keys, doc, workers)
    got = pd.DataFrame({"u": u, "v": v}).drop_duplicates().sort_values(["u", "v"], ignore_index=True)
    assert len(want) > n and got.equals(want.reset_index(drop=True))


def test_keeper_priority_then_input_order():
    m = pd.DataFrame({"doc_index": [1, 2, 3, 4], "cluster": [1, 1, 1, 4], "q": [0.5, 0.9, 0.9, 0.1],
                      "length": [10, 5, 50, 7]})
    assert choose_keepers(m, [])["keep"].tolist() == [True, False, False, True]
    assert choose_keepers(m, ["-q"])["keep"].tolist() == [False, True, False, True]
    assert choose_keepers(m, ["-q", "-length"])["keep"].tolist() == [False, False, True, True]
    with pytest.raises(KeyError, match="nope"):
        choose_keepers(m, ["nope"])


def _article(rng, words, n=120):
    return " ".join(rng.choice(words, size=n))


def test_find_duplicates_on_edited_copies():
    rng = np.random.default_rng(0)
    words = np.array([f"w{i}" for i in range(5000)])
    base = [_article(rng, words) for _ in range(30)]
    edited = []
    for t in base[:10]:
        toks = t.split()
        toks[60] = "changed"
        edited.append(" ".join(toks))
    texts = base + edited + ["短文本测试内容，这是中文的一段话，用于检验字符级别的切分。" * 3] * 2
    df = pd.DataFrame({"text": texts, "doc_index": np.arange(len(texts), dtype=np.int64),
                       "lang": ["en"] * 40 + ["zh", "zh"]})
    res = find_duplicates(df, FuzzyDedupConfig(threshold=0.8), seed=1)
    removed = set(res.loc[~res["keep"], "doc_index"])
    assert removed == set(range(30, 40)) | {41}
    assert set(res.loc[res["keep"], "doc_index"]) == set(range(10)) | {40}


def test_identical_texts_skip_the_shingle_sets():
    texts = pa.array(["one two three four five six", "one two three four five six", "one two three four five",
                      "", "", "one two three four five siX"], pa.large_string())
    doc = np.array([10, 11, 12, 13, 14, 15], np.int64)
    edges = pd.DataFrame({"u": [10, 10, 13, 10], "v": [11, 12, 14, 15]})
    same = identical_texts(edges, texts, doc)
    assert same.tolist() == [True, False, True, False]  # byte for byte: "siX" is not "six"
    cfg = FuzzyDedupConfig(threshold=0.5)
    # sets only for the docs of the edges that are not identical: 10, 12, 15
    sets = shingle_sets(texts.take(pa.array([0, 2, 5])), np.zeros(3, np.uint8), doc[[0, 2, 5]], cfg)
    kept = verify_edges(edges, sets, 0.5, same)
    everything = verify_edges(edges, shingle_sets(texts, np.zeros(6, np.uint8), doc, cfg), 0.5)
    assert kept.equals(everything)  # the same edges and Jaccards as with every set computed
    assert kept["jaccard"].tolist() == [1.0, 0.5, 1.0, 1.0]  # 10-15: words are case-folded, the same shingles
    with pytest.raises(KeyError, match="shingle set"):
        verify_edges(edges, sets, 0.5)  # without `same`, docs 11, 13, 14 need sets


def _run(tmp: Path, name: str, crawl: dict, partition_docs: int, kind: str = "local", workers: int = 1) -> Path:
    cfg = {"input": {"path": crawl["warc"]}, "output": str(tmp / name), "device": "cpu",
           "executor": {"kind": kind, "workers": workers, "partition_docs": partition_docs, "shuffle_buckets": 3},
           "stages": [{"extract": {}}, {"normalize": {}}, {"langid": {}}, {"exact_dedup": {}},
                      {"fuzzy_dedup": {"threshold": 0.8}}]}
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", str(tmp / f"{name}.yaml")]) == 0
    return tmp / name


def _removed(run: Path) -> set:
    rej = sorted((run / "stages" / "05-fuzzy_dedup" / "rejects").glob("*.parquet"))
    return set(pd.concat([pd.read_parquet(p) for p in rej])["id"]) if rej else set()


@pytest.fixture(scope="module")
def fuzzy_run(tmp_path_factory, synth_crawl):
    tmp = tmp_path_factory.mktemp("fuzzy")
    return _run(tmp, "ref", synth_crawl, partition_docs=40)


def test_ground_truth_precision_recall(fuzzy_run, synth_crawl):
    truth = {t["record_id"]: t for t in map(json.loads, open(synth_crawl["truth"], encoding="utf-8"))}
    entered = set(pd.concat([pd.read_parquet(p, columns=["id"])
                             for p in part_paths(fuzzy_run / "stages" / "04-exact_dedup")])["id"])
    planted = {i for i in entered if truth[i]["kind"] == "near_duplicate" and truth[i]["duplicate_of"] in entered}
    # Spam pages come from a few templates: near copies of each other that the truth does not plant, so they
    # count neither way (a pipeline's document filters drop them before dedup).
    removed = {i for i in _removed(fuzzy_run) if truth[i]["kind"] != "spam"}
    assert planted, "the synthetic crawl should carry near duplicates"
    tp = len(removed & planted)
    assert tp / len(removed) >= 0.95, f"precision {tp}/{len(removed)}"
    assert tp / len(planted) >= 0.95, f"recall {tp}/{len(planted)}"
    stats = json.loads((fuzzy_run / "stages" / "05-fuzzy_dedup" / "stats.json").read_text())
    assert stats["removed"] == {"near_duplicate": len(_removed(fuzzy_run))}
    assert stats["extra"]["clusters"] >= 1 and stats["extra"]["peak_rss_mb_worker"] > 0
    sample = [json.loads(l) for l in open(fuzzy_run / "stages" / "05-fuzzy_dedup" / "clusters_sample.jsonl")]
    assert sample and all(s["kept"]["text"] and s["removed"] for s in sample)


@pytest.mark.slow
def test_same_removals_whatever_workers_and_partitions(fuzzy_run, synth_crawl, tmp_path):
    ref = _removed(fuzzy_run)
    assert _removed(_run(tmp_path, "small", synth_crawl, partition_docs=7)) == ref
    assert _removed(_run(tmp_path, "dask2", synth_crawl, partition_docs=25, kind="dask", workers=2)) == ref


def test_two_partitions_apply_interleaved_on_one_stage_instance(tmp_path, monkeypatch):
    """Partitions' apply tasks on two threads, taking turns, on the one cached worker instance: each partition's
    output is what it is alone (its removals are handed in, nothing is kept on the stage)."""
    from gpupipe.stages.base import RunContext
    from gpupipe.stages.dedup.fuzzy import FuzzyDedup
    from tests.helpers.interleave import assert_no_partition_state, check_interleaved, write_parts

    rng = np.random.default_rng(8)
    words = np.array([f"w{i}" for i in range(5000)])
    base = [_article(rng, words) for _ in range(24)]
    edited = []
    for t in base:
        toks = t.split()
        toks[60] = "changed"
        edited.append(" ".join(toks))
    texts = base + edited
    df = pd.DataFrame({"id": [f"d{i}" for i in range(len(texts))], "doc_index": np.arange(len(texts)),
                       "text": texts})
    inputs = write_parts(tmp_path / "in", [df.iloc[k::4].reset_index(drop=True) for k in range(4)])
    stage = FuzzyDedup(FuzzyDedupConfig(), RunContext(shuffle_buckets=3))
    res = check_interleaved(stage, inputs, tmp_path, monkeypatch)
    assert res["alone"]["removed"] == {"near_duplicate": 24}
    rejected = pd.concat([v for k, v in res["files"].items() if k.startswith("rejects/")])
    assert sorted(rejected["doc_index"]) == list(range(24, 48))
    assert_no_partition_state(res["instance"])
