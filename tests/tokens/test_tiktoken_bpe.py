"""tiktoken encodings by name: a local .tiktoken file (never a download) becomes a tokenizer.json that gives
tiktoken's own ids (#35 part 3). The BPE file is a real one in tiktoken's format, built here from a BPE trained on
the seeds' and this repository's text (the published cl100k_base/o200k_base files cannot be fetched here: no network)."""
from __future__ import annotations

import base64
import dataclasses
import hashlib
from pathlib import Path

import pytest
import tiktoken
import tiktoken_ext.openai_public as openai_public
from tiktoken.load import load_tiktoken_bpe

from gpupipe.tokens import tiktoken_bpe
from gpupipe.tokens.fast_bpe import _as_bytes
from gpupipe.tokens.tokenizer import EOS_TOKEN, encode_batch, encoder_info, id_space, train_byte_level_bpe
from tests.helpers.tokens import mixed_corpus, real_texts as seed_texts


@pytest.fixture(scope="module")
def bpe_file(tmp_path_factory) -> Path:
    """A .tiktoken file (`base64(bytes) rank` per line): the merges of a byte-level BPE trained on the seeds."""
    tok = train_byte_level_bpe(seed_texts(), 1500, [EOS_TOKEN])
    tokens = sorted((i, t) for t, i in tok.get_vocab(with_added_tokens=False).items() if t != EOS_TOKEN)
    path = tmp_path_factory.mktemp("tiktoken") / "small.tiktoken"
    path.write_bytes(b"".join(base64.b64encode(_as_bytes(t)) + b" %d\n" % rank
                              for rank, (_, t) in enumerate(tokens)))
    return path


def tiktoken_spec(name: str, path: Path, monkeypatch) -> dict:
    """tiktoken's own definition of encoding `name` (pattern, special tokens) with the ranks of `path`; the URL and
    hash it would download are recorded."""
    asked = {}
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")   # tiktoken caches local files too, by path: read this one

    def local(url, expected_hash=None):
        asked.update(url=url, sha256=expected_hash)
        return load_tiktoken_bpe(str(path))

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", local)
    spec = getattr(openai_public, name)()
    return {**spec, "asked": asked}


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_ids_are_tiktokens_own(name, bpe_file, monkeypatch):
    spec = tiktoken_spec(name, bpe_file, monkeypatch)
    enc = tiktoken.Encoding(name, pat_str=spec["pat_str"], mergeable_ranks=spec["mergeable_ranks"],
                            special_tokens=spec["special_tokens"])
    known = tiktoken_bpe.ENCODINGS[name]
    assert (known.url, known.sha256) == (spec["asked"]["url"], spec["asked"]["sha256"])
    assert known.special_tokens == spec["special_tokens"]
    assert known.tiktoken_pattern == spec["pat_str"]

    tok = tiktoken_bpe.load(name, str(bpe_file))
    texts = seed_texts() + mixed_corpus(300, seed=3) + ["Hello  world!!\n\n\n  don't I'M 12345678 <|endoftext|>  \r\n x", "  leading", "é\u0301"]
    got = [list(map(int, ids)) for ids in encode_batch(tok, texts)]
    assert encoder_info(tok)["encoder"] == "tiktoken"           # tiktoken itself encodes
    assert got == [enc.encode_ordinary(t) for t in texts]
    # and HF tokenizers on the tokenizer.json (what any other reader of it runs) gives the same ids
    assert [list(map(int, ids)) for ids in encode_batch(tok, texts, fast=False)] == got
    assert {s: tok.token_to_id(s) for s in spec["special_tokens"]} == spec["special_tokens"]
    assert id_space(tok) == max(spec["special_tokens"].values()) + 1     # gaps: the shards' dtype must hold it
    assert tok.decode(got[0]) == texts[0]


def test_a_missing_file_says_how_to_provide_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(tiktoken_bpe.TiktokenFileMissing) as e:
        tiktoken_bpe.find_file("cl100k_base")
    msg = str(e.value)
    url = tiktoken_bpe.ENCODINGS["cl100k_base"].url
    assert url in msg and "tiktoken_file" in msg and "downloads nothing" in msg
    assert str(tmp_path / "cache" / hashlib.sha1(url.encode()).hexdigest()) in msg


def test_tiktokens_cache_is_read_and_checked(bpe_file, tmp_path, monkeypatch):
    """A file in tiktoken's cache, under the name tiktoken gives it (sha1 of the URL), is used when it is the
    published file and refused when it is not."""
    cache = tmp_path / "cache"
    cache.mkdir()
    url = tiktoken_bpe.ENCODINGS["o200k_base"].url
    cached = cache / hashlib.sha1(url.encode()).hexdigest()
    cached.write_bytes(bpe_file.read_bytes())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    with pytest.raises(ValueError, match="not the published o200k_base.tiktoken"):
        tiktoken_bpe.find_file("o200k_base")
    # as if it were the published file: the hash tiktoken checks is the file's
    real = tiktoken_bpe.ENCODINGS["o200k_base"]
    monkeypatch.setitem(tiktoken_bpe.ENCODINGS, "o200k_base",
                        dataclasses.replace(real, sha256=hashlib.sha256(cached.read_bytes()).hexdigest()))
    assert tiktoken_bpe.find_file("o200k_base") == (cached, True)
    assert tiktoken_bpe.find_file("o200k_base", str(bpe_file)) == (bpe_file, True)


def test_not_a_tiktoken_file_is_refused(tmp_path):
    bad = tmp_path / "vocab.txt"
    bad.write_text("hello 1\nworld 2\n")
    with pytest.raises(ValueError, match="not `base64-token rank`|single bytes have no rank"):
        tiktoken_bpe.read_ranks(bad)
