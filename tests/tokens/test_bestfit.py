"""Best-fit packing: documents whole in padded blocks, pad never EOS, boundaries recoverable, verify's checks."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from gpupipe.cli import main
from gpupipe.io.parts import part_paths
from gpupipe.tokens.bestfit import PAD_TOKEN, BestFitPacker, unpack_documents
from gpupipe.tokens.manifest import write_manifest
from gpupipe.tokens.tokenizer import EOS_TOKEN
from gpupipe.tokens.verify import verify_shards

EOS, PAD = 0, 1


def pack_bestfit(out, docs, *, seq_len, window=1024, blocks_per_shard=1024, sources="s", vocab=1000):
    packer = BestFitPacker(out, seq_len, EOS, PAD, np.uint16, blocks_per_shard=blocks_per_shard, window_docs=window)
    packer.add_many(docs, sources)
    summary = packer.finish()
    extra = {"packing": "bestfit", "pad_id": PAD, "padding_tokens": summary["padding_tokens"],
             "padding_rate": summary["padding_rate"]}
    write_manifest(out, summary, seq_len=seq_len, dtype="uint16", vocab_size=vocab, eos_id=EOS,
                   tokenizer_sha256="0" * 64, tokenizer_file="tokenizer.json", config_hash="test", extra=extra)
    return summary


def all_tokens(out) -> np.ndarray:
    files = sorted(Path(out).glob("shard-*.bin"))
    return np.concatenate([np.fromfile(f, dtype="<u2") for f in files]) if files else np.zeros(0, "<u2")


def random_docs(n, lo, hi, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(2, 1000, size=int(k)) for k in rng.integers(lo, hi, size=n)]


def as_sorted(docs):
    return sorted(tuple(np.asarray(d).tolist()) for d in docs)


def test_best_fit_decreasing_layout(tmp_path):
    """Longest first, each into the fullest block that still holds it; blocks written in opening order."""
    docs = [np.full(4, 10), np.full(2, 11), np.full(3, 12), np.full(6, 13), np.full(1, 14)]
    summary = pack_bestfit(tmp_path, docs, seq_len=8)
    blocks = all_tokens(tmp_path).reshape(-1, 8).tolist()
    assert blocks == [[13] * 6 + [EOS, PAD],
                      [10] * 4 + [EOS] + [11] * 2 + [EOS],
                      [12] * 3 + [EOS, 14, EOS, PAD, PAD]]
    assert summary["padding_tokens"] == 3 and summary["padding_rate"] == round(3 / 24, 6)
    assert summary["stream_tokens"] == 21 and summary["dropped_remainder_tokens"] == 0
    assert verify_shards(tmp_path) == []


@pytest.mark.parametrize("window", [1, 7, 1000])
def test_every_document_recovered_whole(tmp_path, window):
    docs = random_docs(400, 1, 50, seed=window)
    summary = pack_bestfit(tmp_path, docs, seq_len=32, window=window, blocks_per_shard=5)
    stream = all_tokens(tmp_path)
    assert np.count_nonzero(stream == EOS) == len(docs) == summary["documents"]
    assert as_sorted(unpack_documents(stream, EOS, PAD)) == as_sorted(docs)
    assert summary["padding_tokens"] == np.count_nonzero(stream == PAD)
    assert summary["split_documents"] == sum(d.size + 1 > 32 for d in docs)
    assert verify_shards(tmp_path) == []
    if window == 1:  # one document per window: packing order is input order
        assert [tuple(d) for d in unpack_documents(stream, EOS, PAD)] == [tuple(d) for d in docs]


def test_documents_that_fit_are_never_cut(tmp_path):
    docs = random_docs(300, 1, 31, seed=5)  # + EOS: at most 31 <= seq_len
    pack_bestfit(tmp_path, docs, seq_len=32)
    for block in all_tokens(tmp_path).reshape(-1, 32):
        content = block[block != PAD]
        assert content[-1] == EOS  # every block ends a document: none continues into the next
        assert np.all(block[content.size:] == PAD)


@pytest.mark.parametrize("n", [7, 8, 9, 15, 16, 17, 23, 40])
def test_long_documents_split_contiguously(tmp_path, n):
    """n + 1 > seq_len: whole blocks of the document, then its tail opens the next block (even a lone EOS)."""
    long_doc, short = np.arange(2, 2 + n), np.full(3, 500)
    pack_bestfit(tmp_path, [short, long_doc, short], seq_len=8)
    stream = all_tokens(tmp_path)
    docs = unpack_documents(stream, EOS, PAD)
    assert as_sorted(docs) == as_sorted([short, long_doc, short])
    assert not np.any((stream[1:] == EOS) & (stream[:-1] == EOS))
    if n + 1 > 8:
        start = int(np.flatnonzero(stream == 2)[0])
        assert start % 8 == 0  # the split document starts a block, and runs on unbroken
        assert np.array_equal(stream[start:start + n + 1], np.append(long_doc, EOS))
    assert verify_shards(tmp_path) == []


def test_same_input_same_bytes(tmp_path):
    docs = random_docs(200, 1, 60, seed=9)
    pack_bestfit(tmp_path / "a", docs, seq_len=32, window=33, blocks_per_shard=4)
    pack_bestfit(tmp_path / "b", docs, seq_len=32, window=33, blocks_per_shard=4)
    a, b = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in "ab")
    assert a["shards"] == b["shards"]


def test_packer_rejects_pad_as_eos_and_stray_ids(tmp_path):
    with pytest.raises(ValueError, match="pad_id equals eos_id"):
        BestFitPacker(tmp_path, 8, 0, 0, np.uint16)
    packer = BestFitPacker(tmp_path, 8, EOS, PAD, np.uint16)
    for bad in (np.array([3, PAD, 4]), np.array([3, EOS]), np.array([], dtype=np.int64), np.array([70000])):
        with pytest.raises(ValueError):
            packer.add(bad)
    packer.add(np.array([5, 6]))
    assert packer.finish()["documents"] == 1


def test_padding_rate_falls_with_a_wider_window(tmp_path):
    docs = random_docs(2000, 1, 200, seed=2)
    narrow = pack_bestfit(tmp_path / "n", docs, seq_len=256, window=4)
    wide = pack_bestfit(tmp_path / "w", docs, seq_len=256, window=2000)
    assert wide["padding_rate"] < narrow["padding_rate"]
    assert wide["padding_rate"] < 0.05


# -- verify catches what breaks the rules ---------------------------------------------------------


@pytest.fixture
def packed(tmp_path):
    docs = [np.full(4, 10), np.full(2, 11), np.full(3, 12), np.full(6, 13), np.full(1, 14)]
    pack_bestfit(tmp_path, docs, seq_len=8)
    return tmp_path  # blocks: [13*6 E P] [10*4 E 11 11 E] [12*3 E 14 E P P]


def corrupt(shard_dir, edits: dict[int, int]) -> list[str]:
    path = shard_dir / "shard-00000.bin"
    tokens = np.fromfile(path, dtype="<u2")
    for pos, val in edits.items():
        tokens[pos] = val
    tokens.tofile(path)
    return verify_shards(shard_dir)


def has(problems, text):
    return any(text in p for p in problems), problems


def test_verify_pad_inside_a_block(packed):
    assert has(corrupt(packed, {16: PAD}), "pad not only at the block end")


def test_verify_pad_after_a_document_token(packed):
    assert has(corrupt(packed, {6: 13}), "pad not right after an EOS")  # block 0: 13*7 then PAD


def test_verify_eos_as_padding(packed):
    problems = corrupt(packed, {22: EOS, 23: EOS})
    assert has(problems, "adjacent EOS")
    assert has(problems, "pad tokens in the file")


def test_verify_all_pad_block(packed):
    assert has(corrupt(packed, {i: PAD for i in range(16, 24)}), "all-pad block")


def test_verify_document_cut_at_a_block_edge(packed):
    """A block ending inside a document while holding an EOS: a stream cut, not a best-fit split."""
    assert has(corrupt(packed, {22: 99, 23: 99}), "ends inside a document yet holds an EOS")


def test_verify_empty_document_after_padding(packed):
    assert has(corrupt(packed, {8: EOS}), "starts with EOS after padding")


def test_verify_manifest_padding_fields(packed):
    m = json.loads((packed / "manifest.json").read_text())
    m.update(padding_tokens=m["padding_tokens"] + 1, pad_id=EOS)
    (packed / "manifest.json").write_text(json.dumps(m))
    problems = verify_shards(packed)
    assert has(problems, "pad_id == eos_id")
    assert has(problems, "padding_tokens")


# -- the pack stage ---------------------------------------------------------------------------------


def write_jsonl(path: Path, n: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu 数据 管线".split()
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            text = " ".join(rng.choice(words, size=int(rng.integers(1, 60))))
            f.write(json.dumps({"id": f"d{i}", "text": text}, ensure_ascii=False) + "\n")
    return path


def run_pack(tmp_path: Path, pack: dict, special=(EOS_TOKEN, PAD_TOKEN)) -> Path:
    src = write_jsonl(tmp_path / "in.jsonl", 80)
    cfg = {"input": {"path": str(src)}, "output": str(tmp_path / "run"), "device": "cpu",
           "executor": {"kind": "local", "partition_docs": 25},
           "stages": [{"tokenize": {"vocab_size": 400, "min_frequency": 0, "special_tokens": list(special)}},
                      {"pack": pack}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True))
    assert main(["run", str(tmp_path / "c.yaml")]) == 0
    return tmp_path / "run"


def tokenized_docs(run: Path) -> list[np.ndarray]:
    tables = [pq.read_table(p, columns=["tokens"]) for p in part_paths(run / "stages" / "01-tokenize")]
    return [np.asarray(t, dtype=np.int64) for table in tables for t in table.column("tokens").to_pylist()]


def test_pack_stage_bestfit(tmp_path):
    run = run_pack(tmp_path, {"seq_len": 64, "blocks_per_shard": 4, "mode": "bestfit", "bestfit_window": 16})
    m = json.loads((run / "shards" / "manifest.json").read_text())
    assert m["packing"] == "bestfit" and m["pad_id"] != m["eos_id"] and m["bestfit_window"] == 16
    assert m["documents_packed"] == 80 and m["dropped_remainder_tokens"] == 0
    stream = all_tokens(run / "shards")
    assert m["padding_tokens"] == np.count_nonzero(stream == m["pad_id"])
    assert m["padding_rate"] == round(m["padding_tokens"] / stream.size, 6)
    got = unpack_documents(stream, m["eos_id"], m["pad_id"])
    assert as_sorted(got) == as_sorted(tokenized_docs(run))
    stats = json.loads((run / "stats.json").read_text())
    assert stats["stages"][-1]["extra"]["padding_tokens"] == m["padding_tokens"]
    assert main(["verify", str(run / "shards")]) == 0


def test_pack_stage_bestfit_needs_the_pad_token(tmp_path, capsys):
    """Refused when the config is read, before tokenizing: the pad token is not among tokenize's special tokens."""
    with pytest.raises(AssertionError):
        run_pack(tmp_path, {"seq_len": 64, "mode": "bestfit"}, special=(EOS_TOKEN,))
    err = capsys.readouterr().err
    assert "stages.1.pack.pad_token" in err and "<|pad|>" in err
    assert not (tmp_path / "run" / "stages").exists()
