"""The tokenizer's training sample: seeded by doc_index, bounded in bytes, the same whatever the partitioning."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from gpupipe.cli import main
from gpupipe.config_base import ConfigError
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


# -- tiktoken encodings by name, Unigram training, the small-vocabulary warning (#35 part 3) ----------------------

def real_corpus(path: Path) -> Path:
    from tests.helpers.tokens import real_texts

    with open(path, "w", encoding="utf-8") as f:
        for i, text in enumerate(real_texts(1000)):
            f.write(json.dumps({"id": str(i), "text": text}, ensure_ascii=False) + "\n")
    return path


def tiktoken_file(path: Path, texts: list[str]) -> Path:
    """A real .tiktoken table (`base64(bytes) rank` lines): a byte-level BPE trained on `texts`."""
    import base64

    from gpupipe.tokens.fast_bpe import _as_bytes
    from gpupipe.tokens.tokenizer import EOS_TOKEN, train_byte_level_bpe

    tok = train_byte_level_bpe(texts, 800, [EOS_TOKEN])
    tokens = sorted((i, t) for t, i in tok.get_vocab(with_added_tokens=False).items() if t != EOS_TOKEN)
    path.write_bytes(b"".join(base64.b64encode(_as_bytes(t)) + b" %d\n" % r for r, (_, t) in enumerate(tokens)))
    return path


def shard_stream(run_dir: Path) -> tuple[dict, np.ndarray]:
    m = json.loads((run_dir / "shards" / "manifest.json").read_text())
    return m, np.concatenate([np.fromfile(run_dir / "shards" / s["file"], dtype=m["dtype"]) for s in m["shards"]])


def test_tiktoken_encoding_by_name_packs_tiktokens_ids(tmp_path, monkeypatch):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    from gpupipe.tokens.tiktoken_bpe import ENCODINGS

    src = real_corpus(tmp_path / "in.jsonl")
    texts = [json.loads(line)["text"] for line in src.read_text(encoding="utf-8").splitlines()]
    table = tiktoken_file(tmp_path / "cl100k_small.tiktoken", texts)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")   # tiktoken caches even local files (by path): read this one
    cfg = {"input": {"path": str(src)}, "output": str(tmp_path / "run"), "device": "cpu",
           "stages": [{"tokenize": {"tokenizer": "cl100k_base", "tiktoken_file": str(table)}},
                      {"pack": {"seq_len": 64}}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", str(tmp_path / "c.yaml")]) == 0
    m, stream = shard_stream(tmp_path / "run")
    eos = ENCODINGS["cl100k_base"].special_tokens["<|endoftext|>"]
    assert (m["eos_id"], m["dtype"], m["vocab_size"]) == (100257, "uint32", 100277)
    enc = tiktoken.Encoding("cl100k_small", pat_str=_cl100k_pattern(monkeypatch, table),
                            mergeable_ranks=load_tiktoken_bpe(str(table)), special_tokens={"<|endoftext|>": eos})
    expected = np.array([i for t in texts for i in [*enc.encode_ordinary(t), eos]], dtype=np.uint32)
    n = len(stream)
    assert n == len(expected) // 64 * 64 and (stream == expected[:n]).all()
    assert main(["verify", str(tmp_path / "run" / "shards")]) == 0
    extra = json.loads((tmp_path / "run" / "stats.json").read_text())["stages"][1]["extra"]
    assert extra["tiktoken_cl100k_base"] == 1 and extra["docs_encoded_tiktoken"] == len(texts)


def _cl100k_pattern(monkeypatch, table: Path) -> str:
    """tiktoken's own cl100k_base pattern (its constructor run on a local table instead of the download)."""
    import tiktoken_ext.openai_public as openai_public
    from tiktoken.load import load_tiktoken_bpe

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe",
                        lambda url, expected_hash=None: load_tiktoken_bpe(str(table)))
    return openai_public.cl100k_base()["pat_str"]


def test_tiktoken_name_without_its_file_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    src = real_corpus(tmp_path / "in.jsonl")
    cfg = {"input": {"path": str(src)}, "output": str(tmp_path / "run"), "device": "cpu",
           "stages": [{"tokenize": {"tokenizer": "o200k_base"}}, {"pack": {"seq_len": 64}}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert "o200k_base" in err and "tiktoken_file" in err and "o200k_base.tiktoken" in err
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="tiktoken_file.*say whose pattern"):
        validate_stage({"tiktoken_file": str(src)})


def validate_stage(params: dict):
    from gpupipe.config import validate_config

    return validate_config({"input": {"path": "x"}, "output": "y", "stages": [{"tokenize": params}]})


def test_unigram_tokenizer_trains_in_a_run_and_is_reproducible(tmp_path, caplog):
    pytest.importorskip("sentencepiece")
    import logging

    from gpupipe.tokens.tokenizer import encode_batch, load_tokenizer

    src = real_corpus(tmp_path / "in.jsonl")
    tok = {"model": "unigram", "vocab_size": 1200, "character_coverage": 0.999}
    with caplog.at_level(logging.WARNING, logger="gpupipe"):
        one = run(tmp_path, "one", src, tok, "1GiB")
    assert "under 32K" in caplog.text
    many = run(tmp_path, "many", src, tok, "20kB")
    path = one / "stages" / "02-tokenize" / "tokenizer.json"
    assert path.read_bytes() == (many / "stages" / "02-tokenize" / "tokenizer.json").read_bytes()
    assert (one / "shards" / "shard-00000.bin").read_bytes() == (many / "shards" / "shard-00000.bin").read_bytes()
    stats = json.loads((one / "stats.json").read_text())["stages"][2]
    assert stats["extra"]["trained_unigram_with_sentencepiece"] == 1
    assert stats["extra"]["vocabulary_under_32k"] == 1
    t = load_tokenizer(path)
    assert json.loads(t.to_str())["model"]["type"] == "Unigram" and t.token_to_id("<0xE4>") is not None
    m, stream = shard_stream(one)
    texts = [t for p in part_paths(one / "stages" / "01-normalize") for t in pq.read_table(p)["text"].to_pylist()]
    expected = np.concatenate([np.append(ids, m["eos_id"]) for ids in encode_batch(t, texts)])
    assert (stream == expected[:len(stream)]).all()
