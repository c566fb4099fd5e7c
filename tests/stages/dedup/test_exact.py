"""gpupipe/stages/dedup/exact.py's `level: paragraph | sentence` (seed 001's practice: md5 of paragraphs;
identical sentences of 50 characters or more kept once globally), through the engine with several partitionings."""

import json
import random
from pathlib import Path

import pandas as pd
import pytest

from gpupipe.stages.dedup.exact import ExactDedupConfig, join_pieces, split_pieces
from tests.helpers import run_config, write_jsonl

BOILER = ["Subscribe to our newsletter for weekly updates.", "All rights reserved by the publisher."]
ZH = "数据工程是大模型预训练的基础我们从网页抓取开始经过抽取清洗去重质量过滤最后切分成训练批次"


def _paragraph_texts() -> list[str]:
    rng = random.Random(5)
    words = [f"w{i}" for i in range(400)]
    own = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(60)]
    zh = ["".join(rng.choice(ZH) for _ in range(40)) for _ in range(5)]
    texts = []
    for i in range(30):
        paras = [own[2 * i], BOILER[i % 2], own[2 * i + 1]]
        if i % 3 == 0:
            paras.append(zh[i % 5])
        if i % 7 == 0:
            paras.append(own[2 * i])          # repeated inside the document: its second copy goes
        texts.append("\n\n".join(paras))
    texts.insert(12, "\n\n".join([BOILER[0], "  " + BOILER[1] + "  ", own[3]]))   # every paragraph seen before
    texts.insert(20, own[40])                                                      # a later document's paragraph: this copy, first in input order, stays
    return texts


def _reference(texts: list[str], level: str, min_chars: int) -> tuple[dict[int, str], set[int]]:
    """Input order, a set of seen folded pieces: the oracle of the rule, written apart from the stage."""
    seen, out, gone = set(), {}, set()
    for d, text in enumerate(texts):
        pieces = split_pieces(text, level)
        drop = set()
        for i, p in enumerate(pieces):
            key = " ".join(p.split())
            if not key or len(key) < min_chars:
                continue
            if key in seen:
                drop.add(i)
            seen.add(key)
        new = join_pieces(pieces, drop, level)
        if new.strip():
            out[d] = new
        else:
            gone.add(d)
    return out, gone


def _kept(run: Path) -> dict[int, str]:
    parts = sorted((run / "stages" / "01-exact_dedup").glob("part-*.parquet"))
    df = pd.concat([pd.read_parquet(p) for p in parts])
    return {int(i.split("-")[1]): t for i, t in zip(df["id"], df["text"])}


def _stats(run: Path) -> dict:
    return json.loads((run / "stages" / "01-exact_dedup" / "stats.json").read_text())


@pytest.mark.parametrize("level", ["paragraph", "sentence"])
def test_pieces_cut_first_occurrence_kept_same_for_every_partitioning(tmp_path, level):
    texts = _paragraph_texts() if level == "paragraph" else _sentence_texts()
    src = write_jsonl(tmp_path / "in.jsonl", texts)
    want, gone = _reference(texts, level, 1 if level == "paragraph" else 50)
    assert gone and any(want[d] != texts[d] for d in want)   # the corpus exercises both outcomes
    ref = run_config(tmp_path, "ref", src, [{"exact_dedup": {"level": level}}], partition_docs=100, workers=1)
    assert _kept(ref) == want
    stats = _stats(ref)
    assert stats["removed"] == {f"all_{level}s_duplicate": len(gone)}
    assert stats["docs_in"] == len(texts) == stats["docs_out"] + len(gone)
    assert stats["extra"][f"{level}s_removed"] > 0 and stats["extra"]["docs_cut"] >= len(gone)
    for name, docs, workers in (("two", 5, 2), ("one", 3, 1)):
        run = run_config(tmp_path, name, src, [{"exact_dedup": {"level": level}}], partition_docs=docs,
                         workers=workers)
        assert _kept(run) == want, name
        assert _stats(run)["removed"] == stats["removed"]


def _sentence_texts() -> list[str]:
    long_en = "The river carved a deep valley through the soft limestone over many thousands of years. "
    long_zh = "数据工程是大模型预训练的基础，我们从网页抓取开始，经过抽取、清洗、去重和质量过滤，最后切分成训练批次的数据。"
    short = "Thanks for reading. "
    texts = []
    for i in range(12):
        texts.append(f"Document {i} opens with its own sentence number {i} that is long enough to count. "
                     + (long_en if i % 2 else long_zh) + short + f"It closes with sentence {i}.")
    texts.append(long_en + long_zh)     # nothing of its own: removed
    texts.append(short + short + "Tiny.")   # short sentences are never compared: kept whole
    return texts


def test_short_pieces_are_not_compared_and_paragraph_pieces_rejoin():
    assert len("Thanks for reading.") < ExactDedupConfig(level="sentence").piece_min_chars() == 50
    assert ExactDedupConfig(level="paragraph").piece_min_chars() == 1
    assert ExactDedupConfig().level == "document"   # the default run dedups whole documents, as before
    text = "a\n\nDUP\n\nc\nd"
    assert join_pieces(split_pieces(text, "paragraph"), {2}, "paragraph") == "a\n\nc\nd"
    s = "一句话。Second one! third? 最后"
    assert "".join(split_pieces(s, "sentence")) == s and len(split_pieces(s, "sentence")) == 4


def test_bad_level_refused_before_any_work():
    from gpupipe.config_base import ConfigError
    from gpupipe.stages import build_stage_configs

    with pytest.raises(ConfigError, match="level"):
        build_stage_configs([{"exact_dedup": {"level": "line"}}], "x.yaml")
    with pytest.raises(ConfigError, match="min_chars"):
        build_stage_configs([{"exact_dedup": {"level": "sentence", "min_chars": 0}}], "x.yaml")
