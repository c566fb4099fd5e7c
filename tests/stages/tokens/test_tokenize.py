"""The tokenizer's training sample: seeded by doc_index, bounded in bytes, the same whatever the partitioning."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml

from gpupipe.cli import main
from gpupipe.io.parts import part_paths
from gpupipe.stages.tokens.tokenize import TokenizeConfig, iter_texts, sample_bytes, sample_shares


def run(tmp: Path, name: str, src: Path, tokenize: dict, partition_bytes: str) -> Path:
    cfg = {"input": {"path": str(src)}, "output": str(tmp / name), "device": "cpu",
           "executor": {"partition_bytes": partition_bytes},
           "stages": [{"normalize": {}}, {"tokenize": tokenize}, {"pack": {"seq_len": 64}}]}
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", str(tmp / f"{name}.yaml")]) == 0
    return tmp / name


def corpus(path: Path, n: int = 600) -> Path:
    rng = np.random.default_rng(0)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron 数据 管线 训练".split()
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"id": str(i), "text": " ".join(rng.choice(words, int(rng.integers(20, 80))))},
                               ensure_ascii=False) + "\n")
    return path


def test_sample_is_bounded_seeded_and_independent_of_partitioning(tmp_path):
    src = corpus(tmp_path / "in.jsonl")
    tok = {"vocab_size": 300, "train_sample_bytes": 30_000}
    one = run(tmp_path, "one", src, tok, "1GiB")
    many = run(tmp_path, "many", src, tok, "20kB")
    assert len(part_paths(many / "stages" / "01-normalize")) > 5
    tok_one = (one / "stages" / "02-tokenize" / "tokenizer.json").read_bytes()
    assert tok_one == (many / "stages" / "02-tokenize" / "tokenizer.json").read_bytes()
    assert (one / "shards" / "shard-00000.bin").read_bytes() == (many / "shards" / "shard-00000.bin").read_bytes()
    tokenize = json.loads((one / "stats.json").read_text())["stages"][2]
    assert tokenize["extra"]["trained_with_gigatoken"] == 1    # the stats say which trainer made tokenizer.json
    everything = run(tmp_path, "all", src, {"vocab_size": 300, "train_sample_bytes": 0}, "1GiB")
    assert (everything / "stages" / "02-tokenize" / "tokenizer.json").read_bytes() != tok_one

    parts = part_paths(one / "stages" / "01-normalize")
    total = sum(len(t.encode()) for p in parts for t in pq.read_table(p)["text"].to_pylist())
    sample = list(iter_texts(parts, None, 30_000, seed=0))
    got = sum(len(t.encode()) for t in sample)
    assert 0.6 * 30_000 < got < 1.4 * 30_000 < total       # about the budget, far below the whole
    assert sample == list(iter_texts(parts, None, 30_000, seed=0))
    assert sample != list(iter_texts(parts, None, 30_000, seed=1))
    all_texts = [t for p in parts for t in pq.read_table(p)["text"].to_pylist()]
    positions = [all_texts.index(t) for t in sample[:50]]
    assert positions == sorted(positions)                    # fed in input order
    assert max(all_texts.index(t) for t in sample) > len(all_texts) * 0.8   # spread over the corpus, not a prefix


def test_sample_shares_are_uniform_and_default_budget_scales_with_vocab():
    u = sample_shares(np.arange(200_000, dtype=np.int64) << 3, seed=5)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    assert abs((u < 0.1).mean() - 0.1) < 0.005
    assert sample_bytes(TokenizeConfig(vocab_size=4096)) == 4 << 20
    assert sample_bytes(TokenizeConfig(vocab_size=32768)) == 32 << 20
    assert sample_bytes(TokenizeConfig(vocab_size=300)) == 4 << 20
    assert sample_bytes(TokenizeConfig(vocab_size=300, train_sample_bytes=0)) is None
