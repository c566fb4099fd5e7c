"""Seed 002's language-plus-code targets (zh 0.25, en 0.55, code 0.15, other 0.05) through `gpupipe run` (#34):
langid with the seed's threshold keys labels real source files `code`, and the mixture, grouped by `lang`, packs
each group's share within 0.5 percentage points. The input is built here from what is installed: source files and
docs of site-packages, Chinese, Japanese and Korean prose of CPython's test data, OpenCC's Chinese test phrases."""

import json
from pathlib import Path

import pandas as pd
import pytest

from gpupipe.run.pipeline import check_conservation
from gpupipe.tokens.tokenizer import EOS_TOKEN
from gpupipe.tokens.verify import verify_shards
from tests.helpers import run_config
from tests.helpers.installed_text import cjk_paragraphs, installed_samples, opencc_sentences

TARGETS = {"zh": 0.25, "en": 0.55, "code": 0.15, "other": 0.05}
MAX_CHARS = 6000     # whole documents only: a group's share is within half a document of its target


def mixed_input(path: Path) -> dict[str, int]:
    files = [s for s in installed_samples() if s.kind != "docstring" and len(s.text) <= MAX_CHARS]
    docs = {"code": [s.text for s in files if s.label == 1][:120], "docs": [s.text for s in files if s.label == 0][:120],
            "zh": cjk_paragraphs("zh") + opencc_sentences()[:150], "cjk": cjk_paragraphs("other")}
    if not docs["cjk"]:
        pytest.skip("this Python ships without Lib/test/cjkencodings (the Japanese and Korean prose)")
    with open(path, "w", encoding="utf-8") as f:
        for kind, texts in docs.items():
            for i, text in enumerate(texts):
                f.write(json.dumps({"id": f"{kind}-{i}", "text": text}, ensure_ascii=False) + "\n")
    return {k: len(v) for k, v in docs.items()}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("code_targets")
    sizes = mixed_input(tmp / "in.jsonl")
    stages = [{"langid": {"min_score": {"zh": 0.65, "en": 0.80, "code": 0.50, "other": 0.85}}},
              {"tokenize": {"vocab_size": 1000, "min_frequency": 0, "special_tokens": [EOS_TOKEN]}},
              {"mixture": {"by": "lang", "total_tokens": 1_000_000,
                           "sources": {g: {"weight": w, "epochs": None} for g, w in TARGETS.items()}}},
              {"pack": {"seq_len": 256, "blocks_per_shard": 512}}]
    return run_config(tmp, "run", tmp / "in.jsonl", stages, partition_docs=200), sizes


def test_language_and_code_targets_land_within_half_a_point(run):
    out, sizes = run
    shards = out / "shards"
    assert verify_shards(shards) == []
    m = json.loads((shards / "manifest.json").read_text())
    packed = m["tokens_per_group"]
    assert set(packed) == set(TARGETS)
    total = sum(packed.values())
    for group, target in TARGETS.items():
        assert abs(100 * packed[group] / total - 100 * target) <= 0.5, (group, packed)
        row = m["mixture"]["sources"][group]
        assert row["tokens"] == packed[group] and abs(row["share_error_pp"]) <= 0.5
    assert m["mixture"]["by"] == "lang" and m["mixture"]["notes"] == []
    stats = json.loads((out / "stats.json").read_text())
    assert check_conservation(stats["stages"]) == [] and stats["conservation_ok"]
    assert stats["stages"][0]["docs_in"] == sum(sizes.values())


def test_source_files_are_the_code_group(run):
    out, _ = run
    mixture = next(p for p in sorted((out / "stages").iterdir()) if p.name.endswith("-mixture"))
    kept = pd.concat([pd.read_parquet(p, columns=["id", "lang", "lang_raw"])
                      for p in sorted(mixture.glob("*.parquet"))])
    kind = kept["id"].str.split("-").str[0]
    assert (kept.loc[kind == "code", "lang"] == "code").mean() >= 0.95
    assert (kept.loc[kind == "docs", "lang"] == "code").mean() <= 0.05
    assert (kept.loc[kind == "zh", "lang"] == "zh").mean() >= 0.95
    assert "code" not in set(kept.loc[kind.isin(["zh", "cjk"]), "lang"])
    assert "code" not in set(kept["lang_raw"])
