"""encode_batch's fastest path, fastokens (gpupipe.tokens.fastokens_bpe): HF's ids, its proof, its fallbacks."""
from __future__ import annotations

import json
import logging
import multiprocessing
import os
import sys

import numpy as np
import pytest
from tokenizers import Tokenizer

from gpupipe.tokens import fast_bpe, fastokens_bpe
from gpupipe.tokens.tokenizer import EOS_TOKEN, encode_batch, encode_batch_flat, encoder_info, train_byte_level_bpe
from tests.helpers.tokens import byte_level, hf_ids, mixed_corpus

pytest.importorskip("fastokens")
pytest.importorskip("tiktoken")


def assert_same_as_hf(tok: Tokenizer, texts: list[str]) -> None:
    ids, offsets = encode_batch_flat(tok, texts)
    assert ids.dtype == np.uint32 and offsets.dtype == np.int64 and offsets[0] == 0 and len(offsets) == len(texts) + 1
    got = [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
    want = hf_ids(tok, texts)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a == b, f"doc {i} differs from HF tokenizers: {texts[i][:80]!r}"


STRESS = [*fastokens_bpe._FRAGMENTS, "", " ", "x", f"a page with {EOS_TOKEN} and <|pad|> in it",
          fast_bpe._SENTINEL_SPECIAL * 2]


@pytest.fixture(scope="module")
def trained() -> dict[int, Tokenizer]:
    texts = mixed_corpus(1500, seed=21) + list(fastokens_bpe._FRAGMENTS) * 3
    return {n: train_byte_level_bpe(texts, n, (EOS_TOKEN, "<|pad|>")) for n in (300, 3000)}


def fresh(tok: Tokenizer) -> Tokenizer:
    """The same tokenizer as a new object (encoders are cached per object)."""
    return Tokenizer.from_str(tok.to_str())


@pytest.mark.parametrize("vocab", [300, 3000])
def test_fastokens_is_used_and_equals_hf(trained, vocab):
    tok = trained[vocab]
    assert encoder_info(tok) == {"encoder": "fastokens"}
    assert_same_as_hf(tok, mixed_corpus(400, seed=22) + STRESS)
    arrays = encode_batch(tok, STRESS)
    assert [a.tolist() for a in arrays] == hf_ids(tok, STRESS)
    assert encode_batch(tok, []) == [] and encode_batch_flat(tok, [])[1].tolist() == [0]


def test_special_token_text_is_ordinary_bytes(trained):
    tok = trained[300]
    ids = encode_batch(tok, [f"x {EOS_TOKEN} y <|pad|>"])[0].tolist()
    assert tok.token_to_id(EOS_TOKEN) not in ids and tok.token_to_id("<|pad|>") not in ids


def test_not_plain_str_raises_like_hf(trained):
    with pytest.raises(TypeError):
        encode_batch(trained[300], ["fine", "a\ud800b"])


def test_without_fastokens_the_tiktoken_path_is_used(trained, monkeypatch):
    monkeypatch.setitem(sys.modules, "fastokens", None)
    tok = fresh(trained[3000])
    assert encoder_info(tok) == {"encoder": "tiktoken"}
    assert fastokens_bpe.fastokens_encoder(tok) == (None, "fastokens is not installed")
    assert_same_as_hf(tok, mixed_corpus(100, seed=23) + STRESS)


def test_a_proof_failure_falls_back_to_tiktoken(trained, monkeypatch, caplog):
    real = fastokens_bpe.FastokensBPE.encode_flat

    def wrong_for_fox(self, texts):  # a fastokens that gets one kind of text wrong
        ids, offsets = real(self, texts)
        ids = ids.copy()
        for i, t in enumerate(texts):
            if "fox" in t and offsets[i + 1] > offsets[i]:
                ids[offsets[i]] += 1
        return ids, offsets

    monkeypatch.setattr(fastokens_bpe.FastokensBPE, "encode_flat", wrong_for_fox)
    tok = fresh(trained[3000])
    with caplog.at_level(logging.WARNING, logger="gpupipe"):
        assert encoder_info(tok) == {"encoder": "tiktoken"}
    fo, why = fastokens_bpe.fastokens_encoder(tok)
    assert fo is None and "differs from the tiktoken path on proof text 0" in why
    assert "fastokens off" in caplog.text
    assert_same_as_hf(tok, ["the quick brown fox", *STRESS])


def test_the_proof_set_covers_every_merge_special_and_many_code_points(trained):
    spec = json.loads(trained[3000].to_str())
    texts = fastokens_bpe.proof_texts(spec)
    joined = "\n".join(texts)
    vocab_text = [fast_bpe._as_bytes(t) for t in spec["model"]["vocab"]]
    whole = [b.decode() for b in vocab_text if b.decode("utf-8", "ignore").encode() == b]
    assert len(whole) > 0.8 * len(vocab_text) and all(t in joined for t in whole)  # the rest: parts of chars
    assert EOS_TOKEN in joined and "<|pad|>" in joined
    assert len({c for c in joined if ord(c) > 0x3000}) > 7000
    assert sum(len(t.encode()) for t in texts) < 2_000_000  # it is checked whenever a tokenizer loads


def test_tiktoken_checks_failing_turn_fastokens_off_too():
    """fastokens is used only for tokenizers the tiktoken path reproduces (it is checked against it)."""
    tok = byte_level(["ab", "bc", "abc"], [("a", "b"), ("b", "c"), ("a", "bc")])
    info = encoder_info(tok)
    assert info["encoder"] == "tokenizers" and "merge 2" in info["reason"]
    assert "tiktoken fast path" in fastokens_bpe.fastokens_encoder(tok)[1]
    assert_same_as_hf(tok, ["abc", "xabcabc abc"])


def test_without_tiktoken_hf_is_used(trained, monkeypatch):
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    tok = fresh(trained[300])
    assert encoder_info(tok) == {"encoder": "tokenizers", "reason": "tiktoken is not installed"}
    assert_same_as_hf(tok, STRESS)


def test_changed_in_place_is_noticed(trained):
    from tokenizers import normalizers

    tok = fresh(trained[300])
    assert encoder_info(tok) == {"encoder": "fastokens"}
    tok.normalizer = normalizers.NFKC()
    assert encoder_info(tok)["encoder"] == "tokenizers"
    assert_same_as_hf(tok, STRESS)


def _child(conn, tok_json, texts):
    tok = Tokenizer.from_str(tok_json)
    ids, offsets = encode_batch_flat(tok, texts)
    conn.send((encoder_info(tok), ids.tolist(), offsets.tolist()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_encodes_alike(trained):
    tok = trained[3000]
    texts = mixed_corpus(300, seed=24)
    want = encode_batch_flat(tok, texts)  # the parent has used fastokens' threads
    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe()
    p = ctx.Process(target=_child, args=(there, tok.to_str(), texts))
    p.start()
    assert here.poll(60), "the forked child did not answer"
    info, ids, offsets = here.recv()
    p.join(30)
    assert info == {"encoder": "fastokens"} and ids == want[0].tolist() and offsets == want[1].tolist()


@pytest.mark.slow
def test_fastokens_splits_every_code_point_as_hf():
    """fastokens and HF tokenizers split the GPT-2 pattern alike for every code point c of planes 0-3 and 14:
    a probe vocabulary holds x+c as one token (and c's UTF-8 prefixes), so the ids show whether x and c fell in
    one piece, after x in "a1!" (a letter, a number, neither)."""
    from tokenizers import pre_tokenizers

    import fastokens

    byte_char = {b: c for c, b in fast_bpe._CHAR_TO_BYTE.items()}
    base = {c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    cps = [chr(c) for c in [*range(0x40000), *range(0xE0000, 0xF0000)] if not 0xD800 <= c <= 0xDFFF]
    for x in "a1!":
        for lo in range(0, len(cps), 16384):
            block = cps[lo:lo + 16384]
            vocab, merges = dict(base), {}
            for c in block:
                b = c.encode()
                for k in range(2, len(b) + 1):  # c's bytes, joined left to right
                    pair = ("".join(byte_char[v] for v in b[:k - 1]), byte_char[b[k - 1]])
                    merges.setdefault(pair, None)
                    vocab.setdefault(pair[0] + pair[1], len(vocab))
            for c in block:
                pair = (byte_char[ord(x)], "".join(byte_char[v] for v in c.encode()))
                merges.setdefault(pair, None)
                vocab.setdefault(pair[0] + pair[1], len(vocab))
            spec = json.loads(Tokenizer.from_str(trained_like_json()).to_str())
            spec["model"]["vocab"], spec["model"]["merges"] = vocab, [list(m) for m in merges]
            spec["added_tokens"] = []
            text = json.dumps(spec)
            hf = Tokenizer.from_str(text)
            fo = fastokens.Tokenizer.from_json_str(text)
            docs = ["\n".join(x + c for c in block[i:i + 256]) for i in range(0, len(block), 256)]
            want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
            ids, off = fo.encode_batch_flat(docs, add_special_tokens=False, split_special_tokens=True)
            ids, off = np.frombuffer(ids, np.uint32), np.frombuffer(off, np.uint64)
            for i, w in enumerate(want):
                if ids[off[i]:off[i + 1]].tolist() != w:
                    bad = [hex(ord(c)) for c in block[i * 256:(i + 1) * 256]
                           if hf.encode(x + c).ids != np.frombuffer(
                               fo.encode_batch_flat([x + c], split_special_tokens=True)[0], np.uint32).tolist()]
                    pytest.fail(f"after {x!r}, fastokens and HF split these code points differently: {bad[:10]}")


def trained_like_json() -> str:
    """A byte-level BPE tokenizer.json as train_byte_level_bpe makes them (its model is replaced)."""
    return train_byte_level_bpe(["hello world"] * 3, 260, ()).to_str()
