"""Exact-substring dedup: the definition (against a brute-force reference), planted paragraphs, Chinese cut points,
exact duplicates, document edges, conservation, and independence from partitioning and group size."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from gpupipe import stages as stages_pkg
from gpupipe.io.parts import part_paths
from gpupipe.stages.dedup.substring import (REASON, SubstringDedup, SubstringDedupConfig, duplicate_ranges,
                                      anchor_k, substring_dedup, winnow_anchors)
from tests.helpers import run_config, write_jsonl


REGISTERED = "substring_dedup" in stages_pkg.STAGES   # by the registry itself, so Dask workers know it too


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    """Until the lead registers the stage, the tests do (harmless once it is)."""
    monkeypatch.setitem(stages_pkg.STAGES, "substring_dedup", SubstringDedup)


def reference_masks(texts: list[str], L: int, within: bool) -> list[np.ndarray]:
    """The module docstring's definition, by brute force: bytes covered by a duplicate window occurrence."""
    data = [t.encode() for t in texts]
    first_doc: dict[bytes, int] = {}
    for d, b in enumerate(data):
        for p in range(len(b) - L + 1):
            first_doc.setdefault(b[p:p + L], d)
    seen: set[bytes] = set()
    masks = []
    for d, b in enumerate(data):
        m = np.zeros(len(b), dtype=bool)
        for p in range(len(b) - L + 1):
            w = b[p:p + L]
            if (w in seen) if within else (first_doc[w] != d):
                m[p:p + L] = True
            seen.add(w)
        masks.append(m)
    return masks


def reference_texts(texts: list[str], L: int, within: bool) -> list[str]:
    """Cut the covered bytes, keeping a character unless all its bytes are covered (ASCII/CJK-safe decode)."""
    out = []
    for t, m in zip(texts, reference_masks(texts, L, within)):
        b, kept, i = t.encode(), bytearray(), 0
        for ch in t:
            n = len(ch.encode())
            if not m[i:i + n].all():
                kept += b[i:i + n]
            i += n
        out.append(kept.decode())
    return out


def words(rng, n: int) -> str:
    vocab = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "amber", "north", "quiet", "lamp", "seed",
             "orbit", "maple", "tiger", "violet", "harbor", "pixel", "cedar", "ember"]
    return " ".join(rng.choice(vocab, size=n))


# ---------------------------------------------------------------------------------------------------------------
# The definition
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("within", [False, True])
def test_marks_match_brute_force_definition(within):
    rng = np.random.default_rng(1)
    for _ in range(200):  # a two-letter alphabet makes long repeats everywhere, within and across documents
        texts = ["".join(rng.choice(["a", "b"], size=rng.integers(0, 50))) for _ in range(rng.integers(1, 8))]
        L = int(rng.integers(16, 22))
        seg, s, e = duplicate_ranges(pa.array(texts), L, within)
        got = [np.zeros(len(t), dtype=bool) for t in texts]
        for d, a, b in zip(seg, s, e):
            got[d][a:b] = True
        for g, want in zip(got, reference_masks(texts, L, within)):
            assert (g == want).all()


def test_cuts_match_reference_on_multibyte_text():
    rng = np.random.default_rng(2)
    alphabet = ["中", "席", "丮", "a", "é", "😀"]  # 中/席 share trailing bytes, 中/丮 leading ones
    for _ in range(150):
        texts = ["".join(rng.choice(alphabet, size=rng.integers(0, 30))) for _ in range(rng.integers(1, 7))]
        out, _ = substring_dedup(texts, SubstringDedupConfig(min_length=16))
        assert out == reference_texts(texts, 16, False)


def test_anchors_are_shared_by_equal_windows():
    """Winnowing: every L-window owns an anchor; equal windows own anchors with equal hash at equal offsets."""
    rng = np.random.default_rng(3)
    p = words(rng, 60)
    texts = [words(rng, 5) + " " + p, p + " " + words(rng, 9)]
    rows, offs, hashes = winnow_anchors(pa.array(texts), 200)
    shift = len(texts[0].encode()) - len(p.encode())
    a0 = {(o - shift, h) for r, o, h in zip(rows, offs, hashes) if r == 0 and o >= shift}
    a1 = {(o, h) for r, o, h in zip(rows, offs, hashes) if r == 1}
    for start in range(0, len(p) - 200 + 1):  # each window of the shared paragraph, seen in both texts
        in0 = {x for x in a0 if start <= x[0] <= start + 200 - anchor_k(200)}
        assert in0 and in0 <= a1


# ---------------------------------------------------------------------------------------------------------------
# Behaviour on documents
# ---------------------------------------------------------------------------------------------------------------

def test_planted_paragraphs_removed_from_all_but_first():
    rng = np.random.default_rng(4)
    boiler = ["Subscribe to our newsletter for weekly updates on " + words(rng, 40),
              "Copyright notice: all material on this site is " + words(rng, 45)]
    assert all(len(b.encode()) >= 200 for b in boiler)
    docs, uniques = [], []
    for i in range(12):
        x = chr(ord("A") + i)   # page-specific first and last letters: a repeat cannot extend into unique text
        u = [f"{x}{j} " + words(rng, 25) + f" {j}{x}" for j in range(3)]
        paras = list(u)
        if i % 3 == 1:
            paras.insert(1, boiler[0])
        if i % 4 == 2:
            paras.append(boiler[1])
        docs.append("\n\n".join(paras))
        uniques.append(u)
    out, stats = substring_dedup(docs, SubstringDedupConfig())
    first = {0: 1, 1: 2}
    for i, (before, after) in enumerate(zip(docs, out)):
        for k, b in enumerate(boiler):
            if b in before:
                assert (b in after) == (i == first[k])
        for u in uniques[i]:
            assert u in after                       # unique text untouched
        if i in first.values():
            assert after == before
    assert stats["docs_modified"] == sum(1 for i, d in enumerate(docs) if d != out[i]) > 0
    assert out == reference_texts(docs, 200, False)


def test_spans_shorter_than_min_length_untouched():
    rng = np.random.default_rng(5)
    span = ("x" + words(rng, 60))[:199]
    docs = [words(rng, 10) + chr(65 + i) + span + chr(97 + i) + words(rng, 10) for i in range(5)]
    out, stats = substring_dedup(docs, SubstringDedupConfig())
    assert out == docs and stats["bytes_cut"] == 0


def test_chinese_cut_points_on_character_boundaries():
    p = "机器学习是人工智能的一个分支，它使计算机能够从数据中学习而无需明确编程。" * 3
    assert len(p.encode()) >= 200
    a = "第一篇文章介绍了背景中" + p + "中结束语在这里"
    b = "另一篇完全不同的开头席" + p + "丮后面是独特的内容"   # 席 ends like 中, 丮 starts like 中
    seg, s, e = duplicate_ranges(pa.array([a, b]), 200, False)
    head = len("另一篇完全不同的开头席".encode())
    assert list(seg) == [1] and (s[0], e[0]) == (head - 2, head + len(p.encode()) + 2)   # raw repeat: mid-character
    for snap in (False, True):   # no whitespace near the cuts: snapping falls back to character boundaries
        out, _ = substring_dedup([a, b], SubstringDedupConfig(snap_to_whitespace=snap))
        assert out[0] == a
        assert out[1] == "另一篇完全不同的开头席" + "丮后面是独特的内容"


def test_exact_duplicate_documents_fully_removed_first_kept():
    rng = np.random.default_rng(6)
    a, b = words(rng, 80), words(rng, 70)
    out, _ = substring_dedup([a, b, a, a], SubstringDedupConfig())
    assert out[0] == a and out[1] == b and out[2] == "" and out[3] == ""


def test_repeats_at_document_start_and_end():
    rng = np.random.default_rng(7)
    p = "HEADER " + words(rng, 50)
    first = words(rng, 20) + " " + p + " " + words(rng, 20)
    at_start = p + " tail " + words(rng, 20)
    at_end = words(rng, 20) + " lead " + p
    out, _ = substring_dedup([first, at_start, at_end], SubstringDedupConfig())
    assert out[0] == first
    assert p not in out[1] and out[1].endswith(at_start[len(p) + 1:])
    assert p not in out[2] and out[2].startswith(at_end[: -len(p) - 1])
    assert out == reference_texts([first, at_start, at_end], 200, False)


def test_within_document_option():
    rng = np.random.default_rng(8)
    p = words(rng, 50)
    doc = words(rng, 10) + " " + p + " middle " + p + " " + words(rng, 10)
    assert substring_dedup([doc], SubstringDedupConfig())[0] == [doc]
    out = substring_dedup([doc], SubstringDedupConfig(within_document=True))[0][0]
    assert out.count(p) == 1 and out == reference_texts([doc], 200, True)[0]


def test_snap_to_whitespace_keeps_words_whole():
    rng = np.random.default_rng(9)
    p = words(rng, 50)
    a = "zebra " + p + " yak"
    b = "wanted " + p + " store"   # the repeat is " " + p + " ": cut it between words
    out, _ = substring_dedup([a, b], SubstringDedupConfig(snap_to_whitespace=True))
    assert out[1] == "wanted store"


# ---------------------------------------------------------------------------------------------------------------
# Through the pipeline: conservation, drops, partition and group independence, cross-group repeats
# ---------------------------------------------------------------------------------------------------------------

def run_substring(tmp_path: Path, name: str, texts: list[str], partition_docs: int,
                  **params) -> tuple[dict, pd.DataFrame]:
    src = write_jsonl(tmp_path / f"{name}.jsonl", texts)
    run = run_config(tmp_path, name, src, [{"substring_dedup": params}], partition_docs=partition_docs)
    stats = json.loads((run / "stats.json").read_text())["stages"][1]
    folder = run / "stages" / "01-substring_dedup"
    kept = pd.concat([pd.read_parquet(p) for p in part_paths(folder)], ignore_index=True)
    rejects = list((folder / "rejects").glob("*.parquet"))
    if rejects:
        rej = pd.concat([pd.read_parquet(p) for p in rejects])
        assert set(rej["reason"]) == {REASON}
    return stats, kept


def corpus(seed: int, n: int = 40) -> list[str]:
    rng = np.random.default_rng(seed)
    shared = [words(rng, 45) for _ in range(6)]
    texts = []
    for i in range(n):
        paras = [f"doc {i}: " + words(rng, int(rng.integers(5, 40)))]
        for j in rng.choice(6, size=int(rng.integers(0, 3)), replace=False):
            paras.insert(int(rng.integers(0, len(paras) + 1)), shared[j])
        texts.append("\n".join(paras))
    texts[17] = texts[3]                 # an exact duplicate
    texts[25] = shared[0]                # a page that is only boilerplate
    return texts


def expected(texts: list[str], L: int, min_chars: int) -> list[tuple[str, str]]:
    out = reference_texts(texts, L, False)
    return [(f"doc-{i}", t) for i, (t, orig) in enumerate(zip(out, texts))
            if t == orig or len(t.strip()) >= max(min_chars, 1)]


@pytest.mark.parametrize("partition_docs,group_bytes", [(100, 2**28), (7, 2**28), (3, 1500), (1, 1)])
def test_pipeline_conservation_and_partition_independence(tmp_path, partition_docs, group_bytes):
    texts = corpus(11)
    stats, kept = run_substring(tmp_path, f"p{partition_docs}", texts, partition_docs, group_bytes=group_bytes)
    assert list(zip(kept["id"], kept["text"])) == expected(texts, 200, 50)
    assert stats["docs_in"] == len(texts) == stats["docs_out"] + sum(stats["removed"].values())
    assert stats["removed"][REASON] >= 2          # doc 17 (copy of 3) and doc 25 (only boilerplate)
    assert stats["extra"]["docs_dropped"] == stats["removed"][REASON]
    assert stats["extra"]["bytes_cut"] > 0 and stats["extra"]["docs_modified"] >= stats["removed"][REASON]
    if group_bytes == 1:
        assert stats["extra"]["groups"] == len(texts) and stats["extra"]["cross_group_anchors"] > 0


@pytest.mark.skipif(not REGISTERED, reason="Dask workers import the registry: needs substring_dedup registered")
def test_pipeline_on_dask_workers(tmp_path):
    texts = corpus(13)
    src = write_jsonl(tmp_path / "in.jsonl", texts)
    run = run_config(tmp_path, "dask", src, [{"substring_dedup": {"group_bytes": 1500}}], partition_docs=5,
                     kind="dask")
    kept = pd.concat([pd.read_parquet(p) for p in part_paths(run / "stages" / "01-substring_dedup")])
    assert list(zip(kept["id"], kept["text"])) == expected(texts, 200, 50)


def test_cross_group_pass_is_exact_on_dense_repeats(tmp_path):
    """Tiny alphabet, one document per group: every repeat crosses groups, pass 2 must find them all."""
    rng = np.random.default_rng(12)
    texts = ["".join(rng.choice(["ab", "ba", "c", "中"], size=int(rng.integers(5, 40)))) for _ in range(30)]
    _, kept = run_substring(tmp_path, "dense", texts, 1, min_length=16, group_bytes=1, min_remaining_chars=0)
    assert list(zip(kept["id"], kept["text"])) == expected(texts, 16, 0)


def test_synthetic_crawl_repeated_paragraphs(synth_crawl):
    """The crawl's planted boilerplate paragraphs survive only on the first page that has them."""
    records = [json.loads(line) for line in Path(synth_crawl["truth"]).read_text(encoding="utf-8").splitlines()]
    pages = [r for r in records if r.get("main_text")]
    if not any(r.get("repeated_paragraphs") for r in pages):
        pytest.skip("the synthetic crawl's truth has no repeated_paragraphs yet")
    out, _ = substring_dedup([r["main_text"] for r in pages], SubstringDedupConfig())
    seen: set[str] = set()
    checked = 0
    for page, after in zip(pages, out):
        for para in page.get("repeated_paragraphs") or []:
            if len(para.encode()) >= 200:
                assert (para in after) == (para not in seen)
                checked += 1
            seen.add(para)
    assert checked


@pytest.mark.parametrize("group_bytes", [2**28, 1500])
def test_two_partitions_cut_interleaved_on_one_stage_instance(tmp_path, monkeypatch, group_bytes):
    """Partitions' apply tasks on two threads, taking turns inside their hooks, on the one cached worker instance:
    each partition's output is what it is alone (its ranges are handed in, nothing is kept on the stage)."""
    from gpupipe.stages.base import RunContext
    from gpupipe.stages.dedup.substring import cuts
    from tests.helpers.interleave import assert_no_partition_state, check_interleaved, write_parts

    texts = corpus(21)
    df = pd.DataFrame({"id": [f"doc-{i}" for i in range(len(texts))], "doc_index": np.arange(len(texts)),
                       "text": texts})
    inputs = write_parts(tmp_path / "in", [df.iloc[k * 10:(k + 1) * 10] for k in range(4)])
    stage = SubstringDedup(SubstringDedupConfig(group_bytes=group_bytes), RunContext())
    res = check_interleaved(stage, inputs, tmp_path, monkeypatch, gate=[(cuts, "final_cuts"), (cuts, "apply_cuts")])
    kept = pd.concat([res["files"][f"part-{k:05d}.parquet"] for k in range(4)])
    assert list(zip(kept["id"], kept["text"])) == expected(texts, 200, 50)
    assert res["alone"]["extra"]["docs_modified"] > 0
    assert_no_partition_state(res["instance"])
