"""gpupipe.tokens: tokenizer, EOS stream packing, shards, manifest, verify (seed 000, §18.13–18.18)."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpupipe.tokens import (
    EOS_TOKEN,
    StreamPacker,
    encode_batch,
    eos_id,
    load_tokenizer,
    read_manifest,
    save_tokenizer,
    token_dtype,
    train_byte_level_bpe,
    verify_shards,
    write_manifest,
)
from tests.helpers import ROOT as REPO


# -- helpers --------------------------------------------------------------------------------


def pack(out_dir, docs, *, seq_len, eos, dtype=np.uint16, blocks_per_shard=1024, sources=None,
         vocab_size=1000):
    """Pack token arrays and write the manifest; return (summary, manifest)."""
    packer = StreamPacker(out_dir, seq_len, eos, dtype, blocks_per_shard=blocks_per_shard)
    packer.add_many(docs, sources)
    summary = packer.finish()
    manifest = write_manifest(out_dir, summary, seq_len=seq_len, dtype=dtype, vocab_size=vocab_size,
                              eos_id=eos, tokenizer_sha256="0" * 64, tokenizer_file="tokenizer.json",
                              config_hash="test")
    return summary, manifest


def read_stream(out_dir) -> np.ndarray:
    """All shards of a directory, concatenated in manifest order."""
    m = read_manifest(out_dir)
    dt = np.dtype(m["dtype"]).newbyteorder("<")
    parts = [np.fromfile(os.path.join(out_dir, s["file"]), dtype=dt) for s in m["shards"]]
    return np.concatenate(parts) if parts else np.empty(0, dt)


def naive_stream(docs, eos) -> list[int]:
    """The seed's build_token_stream: each document followed by exactly one EOS."""
    stream = []
    for d in docs:
        stream.extend(int(t) for t in d)
        stream.append(eos)
    return stream


def adjacent_eos(stream: np.ndarray, eos: int) -> int:
    e = stream == eos
    return int(np.count_nonzero(e[1:] & e[:-1]))


def random_docs(rng, lengths, eos, high=1000):
    """Documents of the given lengths with ids in [0, high) that avoid the EOS id."""
    docs = []
    for n in lengths:
        d = rng.integers(0, high - 1, size=n)
        docs.append(np.where(d >= eos, d + 1, d))
    return docs


# -- the seed-000 lab ------------------------------------------------------------------------

LAB_RAW_DOCS = [
    "Hello world!\n\nThis is doc A.", "Hello world!\nThis is doc A.",
    "doc B about 机器学习。", "doc C about transformers and attention.",
    "doc D " * 40,
]


def lab_normalize(text: str) -> str:  # copied verbatim from the seed's lab (reference)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = "".join(ch for ch in text if ch == "\n" or ch >= " ")
    lines = [" ".join(line.split()) for line in text.split("\n")]
    return "\n".join(l for l in lines if l)


def lab_docs() -> list[str]:
    seen, keep = set(), []
    for d in map(lab_normalize, LAB_RAW_DOCS):
        h = hashlib.sha256(d.encode("utf-8")).hexdigest()
        if h not in seen:
            seen.add(h)
            keep.append(d)
    return keep


@pytest.mark.parametrize("min_frequency", [0, 2])
def test_seed_lab_reproduced(tmp_path, min_frequency):
    docs = lab_docs()
    assert len(docs) == 4  # normalize + dedup: 5 → 4

    tok = train_byte_level_bpe(docs, vocab_size=512, min_frequency=min_frequency)
    eos = eos_id(tok)
    token_lists = encode_batch(tok, docs)
    assert [list(t) for t in token_lists] == [tok.encode(d).ids for d in docs]  # same ids as the lab's encode

    summary, manifest = pack(tmp_path, token_lists, seq_len=16, eos=eos, blocks_per_shard=8,
                             dtype=token_dtype(tok.get_vocab_size()), vocab_size=tok.get_vocab_size())
    stream_len = summary["stream_tokens"]
    assert stream_len == sum(len(t) for t in token_lists) + 4
    assert summary["blocks"] == stream_len // 16
    assert summary["dropped_remainder_tokens"] == stream_len % 16
    on_disk = read_stream(tmp_path)
    assert on_disk.tolist() == naive_stream(token_lists, eos)[:summary["blocks"] * 16]
    assert np.count_nonzero(on_disk == eos) + summary["dropped_remainder_eos"] == 4  # EOS count = docs
    assert adjacent_eos(np.asarray(naive_stream(token_lists, eos)), eos) == 0
    assert verify_shards(tmp_path) == []

    if min_frequency == 0:
        # The lab's BpeTrainer leaves min_frequency at its default, 0; tokenizers 0.23 then gives
        # exactly the seed's numbers: stream 105 → 6 blocks of 16, 9 dropped, 96 tokens in 1 shard.
        assert (stream_len, summary["blocks"], summary["dropped_remainder_tokens"]) == (105, 6, 9)
        assert [s["tokens"] for s in manifest["shards"]] == [96]
    # With min_frequency=2 (our API default) pairs seen once are not merged, so the three short docs
    # encode to more tokens (154 with tokenizers 0.23); the invariants above hold all the same.


# -- determinism -----------------------------------------------------------------------------

BUILD_SCRIPT = r"""
import sys, random
import numpy as np
from gpupipe.tokens import (StreamPacker, encode_batch, eos_id, save_tokenizer, token_dtype,
                            train_byte_level_bpe, write_manifest)

def build(out_dir):
    rng = random.Random(7)
    words = ["data", "token", "stream", "shard", "the", "of", "GPU", "模型", "数据", "清洗", "a", "b",
             "pack", "EOS", "web", "crawl", "!", ".", "42", "x" * 7]
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 60))) for _ in range(300)]
    tok = train_byte_level_bpe(docs, vocab_size=700)
    sha = save_tokenizer(tok, out_dir + "/tokenizer.json")
    vocab, eos = tok.get_vocab_size(), eos_id(tok)
    packer = StreamPacker(out_dir, 64, eos, token_dtype(vocab), blocks_per_shard=4)
    packer.add_many(encode_batch(tok, docs), ["web" if i % 3 else "books" for i in range(len(docs))])
    summary = packer.finish()
    write_manifest(out_dir, summary, seq_len=64, dtype=token_dtype(vocab), vocab_size=vocab, eos_id=eos,
                   tokenizer_sha256=sha, tokenizer_file="tokenizer.json", config_hash="cfg")

if __name__ == "__main__":
    build(sys.argv[1])
"""


def dir_bytes(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_deterministic_in_process_and_across_processes(tmp_path):
    script = tmp_path / "build.py"
    script.write_text(BUILD_SCRIPT)
    outs = []
    # two processes with different hash seeds, one Rust-parallel and one sequential
    for i, (hash_seed, parallel) in enumerate([("1", "true"), ("2", "false")]):
        out = tmp_path / f"proc{i}"
        out.mkdir()
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONHASHSEED=hash_seed, TOKENIZERS_PARALLELISM=parallel)
        subprocess.run([sys.executable, str(script), str(out)], check=True, env=env)
        outs.append(out)
    namespace: dict = {}
    exec(compile(BUILD_SCRIPT, "build", "exec"), namespace)
    for i in range(2):
        out = tmp_path / f"inproc{i}"
        out.mkdir()
        namespace["build"](str(out))
        outs.append(out)

    reference = dir_bytes(outs[0])
    assert {"tokenizer.json", "manifest.json", "shard-00000.bin", "shard-00001.bin"} <= set(reference)
    for out in outs[1:]:
        assert dir_bytes(out) == reference
    assert verify_shards(outs[0]) == []  # also checks the tokenizer sha256 recorded in the manifest


# -- packing -------------------------------------------------------------------------------------


def test_documents_span_block_and_shard_boundaries(tmp_path):
    eos, seq_len = 999, 8
    rng = np.random.default_rng(0)
    docs = random_docs(rng, [3, 20, 1, 7, 30, 2, 5], eos)  # 68 tokens + 7 EOS = 75 → 9 blocks, 3 dropped
    sources = ["a", "b", "a", "c", "b", "a", "c"]
    summary, manifest = pack(tmp_path, docs, seq_len=seq_len, eos=eos, blocks_per_shard=2, sources=sources)

    assert summary["documents"] == 7
    assert summary["stream_tokens"] == 75
    assert summary["blocks"] == 9
    assert summary["dropped_remainder_tokens"] == 3
    assert [s["sequences"] for s in summary["shards"]] == [2, 2, 2, 2, 1]
    expected = naive_stream(docs, eos)
    assert read_stream(tmp_path).tolist() == expected[:72]
    assert summary["dropped_remainder_eos"] == expected[72:].count(eos) == 1
    assert summary["tokens_per_source"] == {"a": 3 + 1 + 1 + 1 + 2 + 1, "b": 21 + 31, "c": 8 + 6}
    for s in summary["shards"]:
        path = tmp_path / s["file"]
        assert path.stat().st_size == s["tokens"] * 2
        assert s["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert s["eos"] == int(np.count_nonzero(np.fromfile(path, "<u2") == eos))
    assert manifest["sequences"] == 9 and manifest["tokens"] == 72
    assert verify_shards(tmp_path) == []


def test_shard_size_does_not_change_the_stream(tmp_path):
    eos = 5
    docs = random_docs(np.random.default_rng(1), np.random.default_rng(2).integers(1, 50, 200), eos)
    streams, summaries = [], []
    for bps in (1, 3):
        out = tmp_path / f"bps{bps}"
        summary, _ = pack(out, docs, seq_len=16, eos=eos, blocks_per_shard=bps)
        streams.append(read_stream(out))
        summaries.append({k: v for k, v in summary.items() if k != "shards"})
        assert verify_shards(out) == []
    assert np.array_equal(streams[0], streams[1])
    assert summaries[0] == summaries[1]
    assert len(streams[0]) == summaries[0]["blocks"] * 16


def test_add_one_by_one_equals_add_many(tmp_path):
    eos = 7
    docs = random_docs(np.random.default_rng(3), [4, 40, 1, 9], eos)
    packer = StreamPacker(tmp_path / "one", 8, eos, np.uint16, blocks_per_shard=2)
    for d in docs:
        packer.add(d, source="s")
    one = packer.finish()
    many, _ = pack(tmp_path / "many", docs, seq_len=8, eos=eos, blocks_per_shard=2, sources="s")
    assert one == many


def test_bad_documents_rejected(tmp_path):
    packer = StreamPacker(tmp_path, 8, 0, np.uint16)
    with pytest.raises(ValueError, match="empty document"):
        packer.add(np.array([], dtype=np.uint32))
    with pytest.raises(ValueError, match="EOS"):
        packer.add(np.array([3, 0, 4]))  # a stray EOS would be a false boundary
    with pytest.raises(ValueError, match="out of range"):
        packer.add(np.array([70000]))  # would wrap around in uint16
    packer.add(np.array([1, 2]))
    assert packer.finish()["documents"] == 1  # rejected documents left no trace


def test_uint32_for_large_vocab(tmp_path):
    assert token_dtype(512) == np.uint16
    assert token_dtype(65535) == np.uint16
    assert token_dtype(65536) == np.uint32
    assert token_dtype(70000) == np.uint32
    vocab, eos = 70000, 69999
    docs = [np.array([65536, 69998, 1]), np.array([2, 69000])]
    summary, manifest = pack(tmp_path, docs, seq_len=4, eos=eos, dtype=token_dtype(vocab), vocab_size=vocab)
    assert manifest["dtype"] == "uint32"
    shard = tmp_path / summary["shards"][0]["file"]
    assert shard.stat().st_size == 4 * 4  # one block of 4 tokens, 4 bytes each
    assert np.fromfile(shard, "<u4").tolist() == [65536, 69998, 1, eos]
    assert verify_shards(tmp_path) == []


def test_packer_clears_stale_outputs(tmp_path):
    eos = 1
    pack(tmp_path, [np.full(100, 3)], seq_len=4, eos=eos, blocks_per_shard=2)
    assert (tmp_path / "shard-00010.bin").exists()
    pack(tmp_path, [np.full(20, 3)], seq_len=4, eos=eos, blocks_per_shard=2)  # 21 tokens → 5 blocks
    assert sorted(p.name for p in tmp_path.glob("shard-*")) == [f"shard-0000{i}.bin" for i in range(3)]
    assert verify_shards(tmp_path) == []


# -- tokenizer ----------------------------------------------------------------------------------


def test_tokenizer_save_load_roundtrip(tmp_path):
    tok = train_byte_level_bpe(lab_docs(), vocab_size=300)
    sha = save_tokenizer(tok, tmp_path / "tokenizer.json")
    assert sha == hashlib.sha256((tmp_path / "tokenizer.json").read_bytes()).hexdigest()
    loaded = load_tokenizer(tmp_path)  # a directory means its tokenizer.json
    assert loaded.to_str() == tok.to_str()
    assert loaded.decode(loaded.encode("doc B about 机器学习。").ids) == "doc B about 机器学习。"
    assert eos_id(loaded) == tok.token_to_id(EOS_TOKEN)


def test_tokenizer_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_tokenizer(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        load_tokenizer(tmp_path / "bad.json")
    tok = train_byte_level_bpe(["abc abc"], vocab_size=300, special_tokens=["<pad>"])
    with pytest.raises(ValueError, match=r"<\|endoftext\|>"):
        eos_id(tok)
    with pytest.raises(ValueError, match="vocab_size"):
        train_byte_level_bpe(["abc"], vocab_size=200)


def test_encode_batch_treats_special_text_as_text():
    tok = train_byte_level_bpe(["hello world", "hello there"] * 5, vocab_size=300)
    eos = eos_id(tok)
    ids = encode_batch(tok, ["a web page that says <|endoftext|> literally", "hello"])
    assert all(a.dtype == np.uint32 for a in ids)
    assert all(not np.any(a == eos) for a in ids)
    assert tok.encode(EOS_TOKEN).ids == [eos]  # the tokenizer itself is left as it was


# -- verify -----------------------------------------------------------------------------------


@pytest.fixture
def shard_dir(tmp_path):
    eos = 999
    docs = random_docs(np.random.default_rng(4), np.random.default_rng(5).integers(1, 30, 60), eos)
    pack(tmp_path, docs, seq_len=16, eos=eos, blocks_per_shard=4)
    assert len(read_manifest(tmp_path)["shards"]) >= 3
    return tmp_path


def edit_manifest(d: Path, **changes):
    m = json.loads((d / "manifest.json").read_text())
    m.update(changes)
    (d / "manifest.json").write_text(json.dumps(m))


def test_verify_clean(shard_dir):
    assert verify_shards(shard_dir) == []


def test_verify_flipped_byte(shard_dir):
    path = shard_dir / "shard-00001.bin"
    data = bytearray(path.read_bytes())
    data[10] ^= 0x01
    path.write_bytes(bytes(data))
    problems = verify_shards(shard_dir)
    assert any("shard-00001.bin" in p and "sha256" in p for p in problems)
    assert all("shard-00000.bin" not in p for p in problems)


def test_verify_deleted_shard(shard_dir):
    (shard_dir / "shard-00002.bin").unlink()
    assert "shard-00002.bin: missing" in verify_shards(shard_dir)


def test_verify_truncated_shard(shard_dir):
    path = shard_dir / "shard-00001.bin"
    path.write_bytes(path.read_bytes()[:-6])
    problems = verify_shards(shard_dir)
    assert any("shard-00001.bin" in p and "whole number" in p for p in problems)
    assert any("shard-00001.bin" in p and "tokens" in p for p in problems)


def test_verify_edited_documents_packed(shard_dir):
    m = read_manifest(shard_dir)
    edit_manifest(shard_dir, documents_packed=m["documents_packed"] + 1)
    problems = verify_shards(shard_dir)
    assert len(problems) == 1 and "documents_packed" in problems[0]


def test_verify_edited_remainder_and_totals(shard_dir):
    m = read_manifest(shard_dir)
    edit_manifest(shard_dir, dropped_remainder_tokens=m["dropped_remainder_tokens"] + 16,
                  sequences=m["sequences"] + 1)
    problems = "\n".join(verify_shards(shard_dir))
    assert "mod seq_len" in problems and "sequences" in problems


def test_verify_unlisted_shard_and_bad_ids(shard_dir):
    (shard_dir / "shard-00099.bin").write_bytes(b"\0\0" * 16)
    edit_manifest(shard_dir, vocab_size=998, eos_id=997)
    problems = "\n".join(verify_shards(shard_dir))
    assert "shard-00099.bin: shard file on disk but not in manifest.json" in problems
    assert "token id(s) >= vocab_size 998" in problems


def test_verify_missing_or_invalid_manifest(tmp_path):
    assert "manifest.json" in verify_shards(tmp_path)[0]
    (tmp_path / "manifest.json").write_text("[]")
    assert "gpupipe-shards/1" in verify_shards(tmp_path)[0]


def write_raw_shards(d: Path, shards: list[list[int]], *, seq_len: int, eos: int, dropped: list[int] = ()):
    """Hand-written shards with an honest manifest: only the stream itself can be wrong."""
    d.mkdir(exist_ok=True)
    entries = []
    for i, tokens in enumerate(shards):
        data = np.asarray(tokens, dtype="<u2").tobytes()
        (d / f"shard-{i:05d}.bin").write_bytes(data)
        entries.append({"file": f"shard-{i:05d}.bin", "sequences": len(tokens) // seq_len, "tokens": len(tokens),
                        "sha256": hashlib.sha256(data).hexdigest(), "eos": tokens.count(eos)})
    in_shards = sum(len(t) for t in shards)
    summary = {"documents": sum(e["eos"] for e in entries) + list(dropped).count(eos),
               "stream_tokens": in_shards + len(dropped), "blocks": in_shards // seq_len,
               "dropped_remainder_tokens": len(dropped), "dropped_remainder_eos": list(dropped).count(eos),
               "tokens_per_source": {"x": in_shards + len(dropped)}, "shards": entries}
    write_manifest(d, summary, seq_len=seq_len, dtype=np.uint16, vocab_size=100, eos_id=eos,
                   tokenizer_sha256="0" * 64, tokenizer_file="tokenizer.json", config_hash="hand")


def test_verify_adjacent_eos_written_by_hand(tmp_path):
    E = 0
    # EOS used as padding inside a block
    write_raw_shards(tmp_path / "pad", [[5, 6, 7, E, E, E, E, E]], seq_len=4, eos=E)
    problems = verify_shards(tmp_path / "pad")
    assert len(problems) == 1 and "shard-00000.bin: 4 adjacent EOS" in problems[0]
    # adjacent across a block boundary, then across a shard boundary
    write_raw_shards(tmp_path / "block", [[5, 6, 7, E, E, 8, 9, E]], seq_len=4, eos=E)
    assert "adjacent EOS" in "\n".join(verify_shards(tmp_path / "block"))
    write_raw_shards(tmp_path / "shard", [[5, 6, 7, E], [E, 8, 9, E]], seq_len=4, eos=E)
    problems = verify_shards(tmp_path / "shard")
    assert problems == ["shard-00001.bin: starts with EOS right after the EOS ending shard-00000.bin"]
    # and the well-formed version of the same stream passes
    write_raw_shards(tmp_path / "ok", [[5, 6, 7, E], [3, 8, 9, E]], seq_len=4, eos=E, dropped=[4, E])
    assert verify_shards(tmp_path / "ok") == []


def test_verify_stream_ends(tmp_path):
    E = 0
    write_raw_shards(tmp_path / "start", [[E, 6, 7, E]], seq_len=4, eos=E)
    assert "starts with EOS" in "\n".join(verify_shards(tmp_path / "start"))
    write_raw_shards(tmp_path / "end", [[5, 6, 7, E]], seq_len=4, eos=E, dropped=[4, 4])
    assert "dropped remainder holds no EOS" in "\n".join(verify_shards(tmp_path / "end"))
