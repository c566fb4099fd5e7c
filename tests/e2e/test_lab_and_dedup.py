"""Seed 000's lab through the real pipeline, and exact dedup's order independence."""

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from gpupipe.cli import main
from gpupipe.io.parts import part_paths
from tests.helpers import run_config, write_jsonl

LAB_DOCS = [
    "Hello world!\n\nThis is doc A.", "Hello world!\nThis is doc A.",
    "doc B about 机器学习。", "doc C about transformers and attention.",
    "doc D " * 40,
]


def test_seed_000_lab(tmp_path):
    """5 raw docs → 4 after normalize + dedup; stream 105 → 6 blocks of 16, 9 dropped; invariants hold."""
    src = write_jsonl(tmp_path / "lab.jsonl", LAB_DOCS)
    run = run_config(tmp_path, "lab", src, [
        {"normalize": {}}, {"exact_dedup": {}},
        # The lab's BpeTrainer keeps tokenizers' default min_frequency (0).
        {"tokenize": {"vocab_size": 512, "min_frequency": 0}}, {"pack": {"seq_len": 16}}])
    stats = json.loads((run / "stats.json").read_text())
    assert stats["input_records"] == 5 and stats["output_docs"] == 4
    assert stats["stages"][2]["removed"] == {"exact_duplicate": 1}
    m = json.loads((run / "shards" / "manifest.json").read_text())
    assert (m["stream_tokens"], m["sequences"], m["dropped_remainder_tokens"]) == (105, 6, 9)
    assert m["documents_packed"] == 4 and m["dtype"] == "uint16"
    tokens = np.fromfile(run / "shards" / "shard-00000.bin", dtype=np.uint16)
    eos = m["eos_id"]
    assert len(tokens) == 96
    assert (tokens == eos).sum() + m["dropped_remainder_eos"] == 4
    assert not np.any((tokens[1:] == eos) & (tokens[:-1] == eos))
    assert main(["verify", str(run / "shards")]) == 0


@pytest.mark.parametrize("partition_docs", [1, 3, 7])
def test_exact_dedup_first_occurrence_wins_whatever_the_partitioning(tmp_path, partition_docs):
    rng = np.random.default_rng(3)
    base = [f"document number {i} says something different {i * 7919}" for i in range(20)]
    texts = [base[j] for j in rng.integers(0, 20, size=60)]
    texts = [t if k % 3 else "  " + t.replace(" ", "   ") + "\n" for k, t in enumerate(texts)]  # spacing hides nothing
    src = write_jsonl(tmp_path / "dups.jsonl", texts)
    run = run_config(tmp_path, f"p{partition_docs}", src, [{"normalize": {}}, {"exact_dedup": {}}],
                     partition_docs=partition_docs)
    kept = pd.concat([pd.read_parquet(p) for p in part_paths(run / "stages" / "02-exact_dedup")])
    expected, seen = [], set()
    for i, t in enumerate(texts):
        key = " ".join(t.split())
        if key not in seen:
            seen.add(key)
            expected.append(f"doc-{i}")
    assert kept["id"].tolist() == expected
    stats = json.loads((run / "stats.json").read_text())
    assert stats["stages"][2]["removed"] == {"exact_duplicate": len(texts) - len(expected)}
    counts = Counter(" ".join(t.split()) for t in texts)
    assert stats["stages"][2]["extra"]["duplicate_groups"] == sum(1 for c in counts.values() if c > 1)


def test_seed000_lab_config_gives_the_seed_numbers_and_min_frequency_is_the_setting(tmp_path, monkeypatch):
    """configs/seed000_lab.yaml as shipped (run from the repository root): the lab's accepted output. The same
    config with tokenize's default min_frequency (2) gives other numbers: the README names it as the setting."""
    from tests.helpers import ROOT

    monkeypatch.chdir(ROOT)
    assert main(["run", "configs/seed000_lab.yaml", "--output", str(tmp_path / "lab")]) == 0
    stats = json.loads((tmp_path / "lab" / "stats.json").read_text())
    assert (stats["input_records"], stats["output_docs"]) == (5, 4)
    m = json.loads((tmp_path / "lab" / "shards" / "manifest.json").read_text())
    assert (m["stream_tokens"], m["sequences"], m["dropped_remainder_tokens"]) == (105, 6, 9)
    assert m["tokens"] == 96 and len(m["shards"]) == 1 and m["dtype"] == "uint16"
    assert m["stream_tokens"] % 16 == m["dropped_remainder_tokens"]
    assert main(["verify", str(tmp_path / "lab" / "shards")]) == 0

    import yaml
    cfg = yaml.safe_load((ROOT / "configs" / "seed000_lab.yaml").read_text())
    cfg["stages"][2]["tokenize"].pop("min_frequency")
    cfg["output"] = str(tmp_path / "default-min-frequency")
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", str(tmp_path / "other.yaml")]) == 0
    other = json.loads((tmp_path / "default-min-frequency" / "shards" / "manifest.json").read_text())
    assert other["stream_tokens"] != 105
