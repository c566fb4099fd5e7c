"""`semantic_dedup` with a real encoder made here: a BERT from a transformers config, seeded random weights, no
transformer layers and zero position/type embeddings, so that its mean-pooled embedding is a bag of (random)
word vectors: reordered copies with a few words swapped embed close together (cosine ~0.95), distinct documents
far apart. No download."""

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from gpupipe.models.encoder import Encoder  # noqa: E402
from gpupipe.run.executors import LocalExecutor  # noqa: E402
from gpupipe.stages.base import RunContext  # noqa: E402
from gpupipe.stages.dedup.semantic import SemanticDedup, SemanticDedupConfig, kmeans, similar_pairs  # noqa: E402
from tests.helpers.interleave import run_stage, write_parts  # noqa: E402

WORDS = [f"w{i}" for i in range(3000)]


@pytest.fixture(scope="module")
def bow_model(tmp_path_factory):
    from tests.helpers import bag_of_words_encoder

    return bag_of_words_encoder(tmp_path_factory.mktemp("bow") / "model", WORDS)


@pytest.fixture(scope="module")
def corpus():
    """60 distinct documents, and for 12 of them a paraphrase-like copy (shuffled, 2 words of 60 swapped)."""
    rng = np.random.default_rng(0)
    base = [list(rng.choice(WORDS, 60)) for _ in range(60)]
    texts, dup_of = [" ".join(b) for b in base], {}
    for k in range(0, 60, 5):
        c = list(base[k])
        rng.shuffle(c)
        c[:2] = rng.choice(WORDS, 2)
        dup_of[len(texts)] = k
        texts.append(" ".join(c))
    order = rng.permutation(len(texts))       # copies spread over the input
    df = pd.DataFrame({"id": [f"d{i}" for i in order], "doc_index": np.arange(len(texts)),
                       "text": [texts[i] for i in order]})
    planted = {f"d{i}" for i in dup_of}
    return df, planted


def _run(model, corpus_df, tmp, parts, buckets=3, **kw):
    stage = SemanticDedup(SemanticDedupConfig(model=str(model), threshold=0.85, max_length=128, **kw),
                          RunContext(shuffle_buckets=buckets, seed=7))
    inputs = write_parts(tmp / "in", [corpus_df.iloc[k::parts] for k in range(parts)])
    stats = run_stage(stage, inputs, tmp / "out", LocalExecutor())
    rej = sorted((tmp / "out" / "rejects").glob("*.parquet"))
    removed = set(pd.concat([pd.read_parquet(p) for p in rej])["id"]) if rej else set()
    return stats, removed


def test_embeddings_separate_copies_from_distinct_documents(bow_model, corpus):
    df, planted = corpus
    emb, _, _ = Encoder(str(bow_model), head="embed", max_length=128).embed(df["text"].tolist())
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    sim = emb @ emb.T
    np.fill_diagonal(sim, 0)
    assert sim.max() > 0.9 and np.median(sim) < 0.5


def test_finds_planted_copies_and_keeps_distinct_documents(bow_model, corpus, tmp_path):
    df, planted = corpus
    stats, removed = _run(bow_model, df, tmp_path / "a", parts=3, n_clusters=4)
    # one of each pair goes: the later one in input order (no priority), i.e. the copy or its original
    pairs_hit = len(removed)
    assert pairs_hit == len(planted), (removed, planted)
    assert stats["removed"] == {"semantic_duplicate": len(planted)} and stats["docs_out"] == 60
    x = stats["extra"]
    assert x["clusters"] == len(planted) and x["cluster_size_2"] == len(planted)
    assert x["kmeans_clusters"] == 4 and x["docs_embedded"] == 72 and x["similar_pairs"] == len(planted)
    sample = [json.loads(l) for l in open(tmp_path / "a" / "out" / "clusters_sample.jsonl")]
    assert sample and all(len(s["removed"]) == 1 for s in sample)


def test_same_removals_whatever_partitions_buckets_and_batches(bow_model, corpus, tmp_path):
    df, _ = corpus
    _, ref = _run(bow_model, df, tmp_path / "a", parts=3, n_clusters=4)
    _, other = _run(bow_model, df, tmp_path / "b", parts=5, buckets=2, n_clusters=4, batch_size=3)
    assert other == ref


def test_priority_decides_the_keeper(bow_model, corpus, tmp_path):
    df, _ = corpus
    df = df.assign(score=-df["doc_index"])               # earlier documents score higher
    _, first = _run(bow_model, df, tmp_path / "a", parts=2, n_clusters=3, priority=["score"])
    _, last = _run(bow_model, df, tmp_path / "b", parts=2, n_clusters=3, priority=["-score"])
    assert first and last and not first & last           # every pair keeps the other member


def test_kmeans_is_seeded_and_pairs_are_within_threshold():
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(4, 16))
    x = np.concatenate([c + 0.05 * rng.normal(size=(25, 16)) for c in centres]).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    a, _ = kmeans(x, 4, seed=1)
    b, _ = kmeans(x, 4, seed=1)
    assert np.array_equal(a, b) and a.shape == (4, 16)
    labels = (x @ a.T).argmax(1)
    assert sorted(np.bincount(labels, minlength=4)) == [25, 25, 25, 25]
    assert kmeans(x[:3], 10, seed=0)[0].shape == (3, 16)      # fewer points than clusters
    e = similar_pairs(x[:25], np.arange(100, 125), 0.0)
    assert len(e) == 25 * 24 // 2 and (e["u"] < e["v"]).all()
