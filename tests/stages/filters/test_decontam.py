"""Benchmark decontamination: readers, the index, each policy, evasion, Chinese, the report, and the
synthetic crawl's planted leaks (recall 100%, no clean page flagged)."""

import argparse
import csv
import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpupipe.stages.base import RunContext
from gpupipe.stages.filters.decontam import (BenchmarkSource, DecontamConfig, DecontamIndex, Decontaminate,
                                     add_decontam_index_parser, build_index, cut_spans, decontam_index_main)
from tests.helpers import run_stage, set_up

GSM = [{"question": "Tara has 12 red apples and buys 7 green apples at the farm market on Sunday. She gives "
                    "half of all her apples to her cousin. How many apples does Tara keep for herself?",
        "answer": "Tara has 12+7=<<12+7=19>>19 apples.\nShe keeps 19/2 apples.\n#### 9"},
       {"question": "A shop sells pencils in boxes of ten today.", "answer": "#### 3"},
       {"question": "Too short to index here.", "answer": "#### 1"}]
CN_ITEM = "小明家养了十二只鸡和八只鸭，妈妈又买回来六只鹅，请问小明家一共养了多少只家禽？"
FILLER = ("The committee met on a rainy afternoon to review the budget for the new library wing, and after a "
          "long discussion about heating costs and the price of oak shelving the members agreed to postpone "
          "the vote until the spring meeting. ")


def write_jsonl(path: Path, records, gz=False) -> Path:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def index_path(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("index")
    gsm = write_jsonl(tmp / "test.jsonl.gz", GSM, gz=True)
    cn = write_jsonl(tmp / "cn.jsonl", [{"question": CN_ITEM, "answer": "12+8+6=26"}])
    out = tmp / "index.parquet"
    assert decontam_index_main(["--out", str(out), f"gsm8k={gsm}", f"cmath={cn}:jsonl:question"]) == 0
    return out


def stage(index_path, **cfg) -> Decontaminate:
    s = Decontaminate(DecontamConfig(index=str(index_path), **cfg), RunContext())
    s.setup()
    return s


def run(st: Decontaminate, texts):
    df = pd.DataFrame({"id": [f"d{i}" for i in range(len(texts))], "doc_index": np.arange(len(texts)),
                       "text": pd.Series(texts, dtype="string[pyarrow]")})
    kept, rejects, stats, side = st.partition_outputs(df)
    matches = side["matches"]
    assert stats.docs_in == stats.docs_out + sum(stats.removed.values())
    return kept, rejects, stats, matches


# ---------------------------------------------------------------------------- readers and index
def test_source_spec_parsing():
    s = BenchmarkSource.parse("gsm8k=/data/gsm8k/test.jsonl.gz:jsonl:question,answer")
    assert (s.name, s.path, s.format, s.fields) == ("gsm8k", "/data/gsm8k/test.jsonl.gz", "jsonl",
                                                    ("question", "answer"))
    s = BenchmarkSource.parse("/data/mmlu/test:csv")
    assert (s.name, s.path, s.format, s.fields) == (None, "/data/mmlu/test", "csv", None)
    assert s.default_name() == "mmlu"  # a generic folder name: its parent's
    assert BenchmarkSource.parse("x/HumanEval.jsonl.gz").default_name() == "humaneval"
    assert BenchmarkSource.parse("notes.txt").format == "auto"


def test_readers(tmp_path):
    gsm = list(BenchmarkSource.parse(str(write_jsonl(tmp_path / "test.jsonl.gz", GSM, gz=True))).items())
    assert [i.item_id for i in gsm] == ["0", "1", "2"]
    assert gsm[0].benchmark == tmp_path.name.lower()  # "test" says nothing: the folder's name
    assert "Tara has 12+7=19 apples.\nShe keeps 19/2 apples.\n#### 9" in gsm[0].passages  # no <<notes>>
    he = write_jsonl(tmp_path / "HumanEval.jsonl", [{"task_id": "HumanEval/0", "prompt": "def f(x):\n",
                                                    "canonical_solution": "    return x\n", "test": "no"}])
    (item,) = BenchmarkSource.parse(str(he)).items()
    assert item.item_id == "HumanEval/0" and item.text == "def f(x):\n\n    return x\n"
    mmlu = tmp_path / "mmlu" / "test"
    mmlu.mkdir(parents=True)
    with gzip.open(mmlu / "astronomy_test.csv.gz", "wt", encoding="utf-8") as fh:
        csv.writer(fh).writerows([["Which planet is red, dusty and cold?", "Mars", "Venus", "Jupiter",
                                   "Saturn", "A"], ['A "quoted", comma question?', "1", "2", "3", "4", "D"]])
    (mmlu / "virology_test.csv").write_text("What is a virus?,a,b,c,d,B\n")
    items = list(BenchmarkSource.parse(f"{mmlu}:csv").items())
    assert [(i.benchmark, i.item_id) for i in items] == [("mmlu", "astronomy_test/0"), ("mmlu", "astronomy_test/1"),
                                                         ("mmlu", "virology_test/0")]
    assert items[0].text == "Which planet is red, dusty and cold?\nMars\nVenus\nJupiter\nSaturn"  # no answer
    assert "Which planet is red, dusty and cold?\nA. Mars\nB. Venus\nC. Jupiter\nD. Saturn" in items[0].passages
    txt = tmp_path / "items.txt"
    txt.write_text("first item line\n\nsecond item\nline two\n\n\nthird\n")
    assert [i.text for i in BenchmarkSource.parse(str(txt)).items()] == ["first item line", "second item",
                                                                        "line two", "third"]
    assert [i.text for i in BenchmarkSource.parse(f"{txt}:paragraphs").items()] == [
        "first item line", "second item\nline two", "third"]
    with pytest.raises(ValueError):
        list(BenchmarkSource.parse(str(write_jsonl(tmp_path / "odd.jsonl", [{"foo": "bar"}]))).items())
    with pytest.raises(FileNotFoundError):
        list(BenchmarkSource.parse(str(tmp_path / "missing.jsonl")).items())


def test_index_lengths_refs_and_roundtrip(tmp_path, index_path):
    idx = DecontamIndex.load(index_path)
    items = idx.items.set_index("item_id")
    assert idx.params == {"n": 13, "min_n": 8, "cjk_n": 20, "cjk_min_n": 12, "form": "NFC"}
    assert items.loc["2", "grams"] == 0  # 5 words: not indexed
    assert items.loc["1", "grams"] > 0  # 12+ words with the answer: indexed
    assert idx.summary()["gsm8k"] == {"items": 3, "indexed": 2, "hashes": idx.summary()["gsm8k"]["hashes"]}
    assert idx.summary()["cmath"]["indexed"] == 1
    # the same text in two benchmarks: one hash, a reference to each item
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": GSM[0]["question"]}])
    both = build_index([f"a={src}", f"b={src}"])
    refs = np.diff(both.ref_offsets)
    assert (refs == 2).all() and set(both.items["benchmark"]) == {"a", "b"}
    both.save(tmp_path / "both.parquet")
    again = DecontamIndex.load(tmp_path / "both.parquet")
    assert (again.table.hashes == both.table.hashes).all() and (again.ref_items == both.ref_items).all()
    with pytest.raises(ValueError):
        build_index([f"a={src}", f"a={src}"])  # the same item twice


def test_cli_parser_wiring(tmp_path):
    parser = argparse.ArgumentParser(prog="gpupipe")
    sub = parser.add_subparsers(dest="command", required=True)
    add_decontam_index_parser(sub)
    src = write_jsonl(tmp_path / "b.jsonl", GSM)
    args = parser.parse_args(["decontam-index", "--out", str(tmp_path / "i.parquet"), "--n", "10", str(src)])
    assert args.fn(args) == 0
    assert DecontamIndex.load(tmp_path / "i.parquet").params["n"] == 10
    assert decontam_index_main(["--out", str(tmp_path / "x.parquet"), str(tmp_path / "nope.jsonl")]) == 2


# ---------------------------------------------------------------------------- policies
def test_drop_policy(index_path):
    leak = FILLER + GSM[0]["question"] + " " + FILLER
    kept, rejects, stats, matches = run(stage(index_path), [FILLER, leak, "", FILLER * 3])
    assert kept["id"].tolist() == ["d0", "d2", "d3"] and rejects["id"].tolist() == ["d1"]
    assert rejects["reason"].tolist() == ["benchmark_leak"] and stats.removed == {"benchmark_leak": 1}
    assert kept["decontam_hits"].tolist() == [0, 0, 0] and rejects["decontam_hits"].iloc[0] > 10
    assert rejects["decontam_items"].iloc[0] == '["gsm8k:0"]' and kept["decontam_items"].iloc[0] == "[]"
    assert matches[["id", "benchmark", "item_id"]].values.tolist() == [["d1", "gsm8k", "0"]]
    assert GSM[0]["question"] in matches["snippet"].iloc[0]
    assert stats.extra["docs_with_leaks"] == 1


def test_cut_policy_merges_margins(index_path):
    q = GSM[0]["question"]
    gap = "Filler words between the two copies. " * 5  # < 2 x margin: the two cuts merge
    text = FILLER * 4 + q + gap + q.upper() + " " + FILLER * 4
    kept, rejects, stats, _ = run(stage(index_path, policy="cut", margin_chars=200), [text])
    assert rejects.empty and stats.extra["docs_cut"] == 1
    out = kept["text"].iloc[0]
    pieces = out.split("\n\n")
    assert len(pieces) == 2  # one merged cut in the middle
    assert "apples" not in out.lower() and "Filler" not in out
    # spans run from the first unit's first byte to the last unit's last: "?" is not part of them
    s, e = text.index(q) - 200, text.rindex(q.upper()) + len(q.rstrip("?")) + 200
    while not text[s - 1].isspace():  # widened to whole words
        s -= 1
    while not text[e].isspace():
        e += 1
    assert pieces == [text[:s].strip(), text[e:].strip()]
    assert kept["decontam_hits"].iloc[0] > 0 and json.loads(kept["decontam_items"].iloc[0]) == ["gsm8k:0"]


def test_cut_policy_fragmented_and_too_short(index_path):
    q = GSM[0]["question"]
    many = (FILLER * 3 + q + " ") * 12 + FILLER * 3  # 12 separate leaks → 13 pieces
    short = FILLER[:100] + q + " ok"                 # little left after the cut
    fine = FILLER * 5 + q + FILLER * 5
    kept, rejects, stats, _ = run(stage(index_path, policy="cut", margin_chars=50),
                                  [many, short, fine, FILLER])
    assert dict(zip(rejects["id"], rejects["reason"])) == {"d0": "leak_fragmented", "d1": "leak_too_short"}
    assert rejects.set_index("id").loc["d1", "text"] == short  # rejects keep the leak for audits
    assert kept["id"].tolist() == ["d2", "d3"] and q not in kept["text"].iloc[0]
    assert stats.removed == {"leak_fragmented": 1, "leak_too_short": 1}
    lenient = stage(index_path, policy="cut", margin_chars=50, max_pieces=20, min_remaining_chars=0)
    kept, rejects, _, _ = run(lenient, [many, short])
    assert rejects.empty and len(kept) == 2 and q not in "".join(kept["text"])
    frac = stage(index_path, policy="cut", margin_chars=0, min_remaining_chars=0, min_remaining_fraction=0.95)
    _, rejects, _, _ = run(frac, [fine])
    assert rejects["reason"].tolist() == ["leak_too_short"]


def test_cut_spans_helper():
    text = "aaaa bbbb cccc dddd eeee ffff"
    cut = cut_spans(text, [10], [14], 2)  # "cccc" ± 2 chars, widened to whole words
    assert cut.text == "aaaa\n\neeee ffff" and cut.pieces == 2
    cut = cut_spans(text, [0, 20], [4, 24], 0)
    assert cut.text == "bbbb cccc dddd\n\nffff" and cut.pieces == 2
    assert cut_spans(text, [0], [len(text)], 0).pieces == 0


# ---------------------------------------------------------------------------- what it catches
def test_trivial_evasion_is_caught(index_path):
    q = GSM[0]["question"]
    variants = [q.lower(), q.upper(), q.replace(",", "").replace(".", "").replace("?", ""),
                "  ".join(q.split()), q.replace(" ", "\n"), q.replace(". ", "! ").replace(" ", " \t "),
                q.replace("'", "’"), "„" + q.replace(" ", " — ") + "“"]
    _, rejects, _, _ = run(stage(index_path), [FILLER + v + FILLER for v in variants])
    assert len(rejects) == len(variants)


def test_paraphrase_of_a_few_words_in_a_long_item_still_matches(index_path):
    words = GSM[0]["question"].split()  # 34 words
    changed = list(words)
    for i, w in ((1, "owns"), (2, "twelve"), (30, "she")):
        changed[i] = w
    kept, rejects, _, _ = run(stage(index_path), [" ".join(changed)])
    assert len(rejects) == 1 and rejects["decontam_hits"].iloc[0] >= 1
    # the limit: change every 10th word and no 13 words in a row survive
    sparse = [w if i % 10 else "zzz" for i, w in enumerate(words)]
    assert run(stage(index_path), [" ".join(sparse)])[1].empty


def test_short_item_uses_min_n(index_path):
    item = GSM[1]["question"]  # 9 words, 10 with its answer: 8-grams
    _, rejects, _, _ = run(stage(index_path), [FILLER + item + " " + FILLER])
    assert json.loads(rejects["decontam_items"].iloc[0]) == ["gsm8k:1"]
    _, rejects, _, _ = run(stage(index_path), [FILLER + "Too short to index here. #### 1 " + FILLER])
    assert rejects.empty


def test_chinese_character_ngrams(index_path):
    st = stage(index_path)
    pad = "今天的天气非常好，我们一起去公园散步，看到了很多美丽的花朵。" * 3
    spaced = " ".join(CN_ITEM.replace("，", ",").replace("？", "?"))
    half = CN_ITEM[:19]  # 18 characters without the comma: fewer than cjk_n = 20
    english = FILLER + CN_ITEM + " " + FILLER  # mostly English: found by the second, character pass
    kept, rejects, _, _ = run(st, [pad + CN_ITEM + pad, pad + spaced + pad, pad + half + pad, pad, english])
    assert rejects["id"].tolist() == ["d0", "d1", "d4"]
    assert list(map(json.loads, rejects["decontam_items"])) == [["cmath:0"]] * 3
    assert kept["id"].tolist() == ["d2", "d3"]
    # and the reverse: an English item quoted in a Chinese page
    _, rejects, _, _ = run(st, [pad + GSM[0]["question"] + pad])
    assert list(map(json.loads, rejects["decontam_items"])) == [["gsm8k:0"]]


def test_index_parameters_are_used(tmp_path):
    src = write_jsonl(tmp_path / "b.jsonl", [{"text": "one two three four five six"}])
    out = tmp_path / "i.parquet"
    assert decontam_index_main(["--out", str(out), "--n", "6", "--min-n", "4", str(src)]) == 0
    _, rejects, _, _ = run(stage(out), ["x one two three four five six y", "one two three four five"])
    assert rejects["id"].tolist() == ["d0"]


# ---------------------------------------------------------------------------- execute and report
def test_execute_writes_parts_matches_and_report(index_path, tmp_path, monkeypatch):
    from gpupipe.io.parts import part_paths, read_part, write_part
    from gpupipe.stages import STAGES

    monkeypatch.setitem(STAGES, "decontaminate", Decontaminate)
    q = GSM[0]["question"]
    parts = []
    for p, texts in enumerate([[FILLER, FILLER + q], [q.upper(), FILLER + CN_ITEM, FILLER]]):
        df = pd.DataFrame({"id": [f"p{p}d{i}" for i in range(len(texts))],
                           "doc_index": np.arange(len(texts)) + 10 * p, "text": texts})
        parts.append(tmp_path / "in" / f"part-{p:05d}.parquet")
        write_part(df, parts[-1])
    out = tmp_path / "out"
    st = Decontaminate(DecontamConfig(index=str(index_path), examples_per_benchmark=1), RunContext())
    stats = run_stage(st, parts, out)
    assert stats.docs_in == 5 and stats.docs_out == 2 and stats.removed == {"benchmark_leak": 3}
    assert len(part_paths(out)) == 2 and len(list((out / "matches").glob("part-*.parquet"))) == 2
    kept = pd.concat([read_part(p) for p in part_paths(out)])
    assert kept["id"].tolist() == ["p0d0", "p1d2"] and kept["decontam_items"].tolist() == ["[]", "[]"]
    report = json.loads((out / "decontam_report.json").read_text())
    g = report["benchmarks"]["gsm8k"]
    assert (g["items"], g["items_indexed"], g["items_found"], g["documents"]) == (3, 2, 1, 2)
    assert len(g["examples"]) == 1 and g["examples"][0]["benchmark_item"].startswith("Tara has 12")
    assert q in g["examples"][0]["training_snippet"]
    assert report["benchmarks"]["cmath"]["items_found"] == 1 and report["documents_with_leaks"] == 3


# ---------------------------------------------------------------------------- the synthetic crawl
def test_synthetic_crawl_leaks_recall_and_no_false_positives(synth_crawl, tmp_path):
    truth = [json.loads(line) for line in open(synth_crawl["truth"], encoding="utf-8")]
    pages = [t for t in truth if t["main_text"]]
    planted = [t for t in pages if t["leaks"]]
    assert len(planted) >= 3 and {t["lang"] for t in planted} == {"en", "zh"}
    assert all(t["kind"] == "clean" for t in planted)
    assert all(t["leaks"] == [] and t["repeated_paragraphs"] == [] for t in truth if not t["main_text"])
    out = tmp_path / "synth_index.parquet"
    assert decontam_index_main(["--out", str(out), synth_crawl["benchmark"]]) == 0
    df = pd.DataFrame({"id": [t["record_id"] for t in pages], "text": [t["main_text"] for t in pages]})
    kept, rejects, _, side = set_up(Decontaminate(DecontamConfig(index=str(out)), RunContext())).partition_outputs(df)
    matches = side["matches"]
    flagged = dict(zip(rejects["id"], map(json.loads, rejects["decontam_items"])))
    for t in planted:  # recall 100%, attributed to the right item
        assert t["record_id"] in flagged, t["main_text"]
        assert flagged[t["record_id"]] == [f"{x['benchmark']}:{x['item_id']}" for x in t["leaks"]]
    assert set(flagged) == {t["record_id"] for t in planted}  # nothing else flagged
    assert len(kept) == len(pages) - len(planted)


def test_synthetic_crawl_repeated_paragraphs(synth_crawl):
    truth = [json.loads(line) for line in open(synth_crawl["truth"], encoding="utf-8")]
    hosts = [t for t in truth if t["repeated_paragraphs"]]
    assert hosts and all(t["kind"] == "clean" and not t["leaks"] for t in hosts)
    seen = {}
    for t in hosts:
        for p in t["repeated_paragraphs"]:
            assert len(p.encode()) >= 400 and p in t["main_text"].split("\n\n")
            seen[p] = seen.get(p, 0) + 1
    assert all(n >= 2 for n in seen.values())
    others = [t for t in truth if t["main_text"] and not t["repeated_paragraphs"]]
    assert not any(p in t["main_text"] for p in seen for t in others)
    assert Path(synth_crawl["benchmark"]).name == "crawl.benchmark.jsonl"


def test_empty_index_and_empty_partition(tmp_path):
    from gpupipe.stages.filters.decontam import build_index_from_items

    empty = build_index_from_items([])
    assert len(empty.table) == 0 and empty.items.empty
    empty.save(tmp_path / "e.parquet")
    kept, rejects, stats, matches = run(stage(tmp_path / "e.parquet"), [FILLER, ""])
    assert len(kept) == 2 and rejects.empty and matches.empty
    kept, rejects, stats, matches = run(stage(tmp_path / "e.parquet"), [])
    assert kept.empty and stats.docs_in == 0


@pytest.mark.gpu
def test_gpu_stage_matches_cpu(index_path):
    q = GSM[0]["question"]
    texts = [FILLER, FILLER + q, q.upper(), FILLER + CN_ITEM, "", "\u4e2d" * 30 + q] * 50
    cpu = run(stage(index_path, policy="cut"), texts)
    gpu_stage = Decontaminate(DecontamConfig(index=str(index_path), policy="cut"), RunContext(device="gpu"))
    gpu = run(gpu_stage, texts)
    for a, b in zip(cpu[:2], gpu[:2]):
        pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(cpu[3], gpu[3])


@pytest.mark.parametrize("policy", ["drop", "cut"])
def test_two_partitions_interleaved_on_one_stage_instance(index_path, tmp_path, monkeypatch, policy):
    """Partitions on two threads, taking turns inside their hooks, on the one cached worker instance (which holds
    the index and nothing else): each partition's parts, rejects and matches are what they are alone."""
    from gpupipe.stages import STAGES
    from gpupipe.stages.filters import decontam
    from tests.helpers.interleave import assert_no_partition_state, check_interleaved, write_parts

    monkeypatch.setitem(STAGES, "decontaminate", Decontaminate)
    q = GSM[0]["question"]
    parts = [[FILLER * 3 + q + FILLER * 3, FILLER], [FILLER * 4, q.upper() + FILLER * 2, FILLER + CN_ITEM],
             [FILLER * 2 + q + " " + FILLER * 2], [FILLER, FILLER * 5 + CN_ITEM + FILLER * 5]]
    frames = [pd.DataFrame({"id": [f"p{p}d{i}" for i in range(len(t))], "doc_index": np.arange(len(t)) + 10 * p,
                            "text": t}) for p, t in enumerate(parts)]
    inputs = write_parts(tmp_path / "in", frames)
    st = Decontaminate(DecontamConfig(index=str(index_path), policy=policy), RunContext())
    res = check_interleaved(st, inputs, tmp_path, monkeypatch, gate=[(decontam, "cut_spans"),
                                                                     (decontam, "script_counts")])
    assert res["alone"]["extra"]["docs_with_leaks"] == 5
    assert len([k for k in res["files"] if k.startswith("matches/")]) == 4
    assert_no_partition_state(res["instance"], allowed=("config", "ctx", "index"))
