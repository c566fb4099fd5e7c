"""gigatoken's trainer (gpupipe.tokens.fast_train) gives HF BpeTrainer's tokenizer.json, byte for byte, or steps aside."""
from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys

import pytest

from gpupipe.tokens import fast_train
from gpupipe.tokens.tokenizer import EOS_TOKEN, _train_hf, train_byte_level_bpe
from tests.helpers import ROOT as REPO
from tests.helpers.tokens import mixed_corpus

pytest.importorskip("gigatoken")

SPECIALS = [EOS_TOKEN, "<|pad|>"]


def differs(c: int) -> bool:
    return any(lo <= c <= hi for lo, hi in fast_train.PRETOKENIZER_DIFFERS)


def code_point_corpus(keep=lambda c: True) -> list[str]:
    """Every 13th code point of planes 0-3, in letter / number / punctuation / space contexts, repeated enough
    to be merged."""
    cps = [chr(c) for c in range(0, 0x40000, 13) if not 0xD800 <= c <= 0xDFFF and keep(c)]
    docs = []
    for lo in range(0, len(cps), 400):
        chunk = cps[lo:lo + 400]
        docs += ["".join(f"a{c}1{c}!{c} {c}{c}\n" for c in chunk)] * 2 + [" ".join(chunk)]
    return docs


def same_as_hf(texts, vocab_size, min_frequency=2, specials=SPECIALS, info=None) -> str:
    """Train both ways; assert byte-identical tokenizer.json; return which trainer ran (all of it in `info`)."""
    info = {} if info is None else info
    want = _train_hf(texts, vocab_size, list(specials), min_frequency).to_str(pretty=True)
    got = train_byte_level_bpe(texts, vocab_size, specials, min_frequency, info=info).to_str(pretty=True)
    assert got == want
    return info["trainer"]


@pytest.mark.parametrize("vocab_size", [300, 1000, 3000])
@pytest.mark.parametrize("min_frequency", [0, 2, 5])
def test_gigatoken_gives_hf_tokenizer_json(vocab_size, min_frequency):
    assert same_as_hf(mixed_corpus(1500, seed=vocab_size), vocab_size, min_frequency) == "gigatoken"


def test_every_script_and_one_special_token():
    assert same_as_hf(code_point_corpus(keep=lambda c: not differs(c)), 4000, specials=[EOS_TOKEN]) == "gigatoken"
    # with the code points whose class gigatoken's pre-tokenizer sees otherwise, HF's trainer runs
    info = {}
    assert same_as_hf(code_point_corpus(), 4000, specials=[EOS_TOKEN], info=info) == "tokenizers"
    assert "U+" in info["reason"] and "pre-tokenizer" in info["reason"]


@pytest.mark.slow
def test_pretokenizers_differ_only_on_the_listed_code_points():
    """gigatoken's pre-tokenizer and HF's GPT-2 regex split every code point alike, in letter / number /
    punctuation / space contexts, except those of fast_train.PRETOKENIZER_DIFFERS (which must all differ)."""
    from collections import Counter

    from gigatoken import gigatoken_rs
    from tokenizers import Regex
    from tokenizers.pre_tokenizers import Split

    from gpupipe.tokens.fast_bpe import GPT2_PATTERN

    split = Split(Regex(GPT2_PATTERN), behavior="isolated")

    def hf(docs):
        return Counter(text[a:b].encode() for text in docs for _, (a, b) in split.pre_tokenize_str(text))

    def giga(docs):
        with fast_train._quiet_fds():
            return Counter(dict(gigatoken_rs.pretokenized_counts(b"\xff".join(d.encode() for d in docs), b"\xff")))

    def doc(c):
        return f"a{chr(c)}1{chr(c)}!{chr(c)} {chr(c)}{chr(c)}\n{chr(c)}"

    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    found = []
    for lo in range(0, len(cps), 2000):
        block = cps[lo:lo + 2000]
        docs = [doc(c) for c in block]
        if hf(docs) != giga(docs):
            found += [c for c in block if hf([doc(c)]) != giga([doc(c)])]
    listed = [c for lo, hi in fast_train.PRETOKENIZER_DIFFERS for c in range(lo, hi + 1)]
    assert found == listed, f"update PRETOKENIZER_DIFFERS: now {len(found)} code points differ"


def test_exhausted_text_or_min_frequency_falls_back_to_hf():
    texts = mixed_corpus(60, seed=3)
    # gigatoken keeps merging pairs counted 0 times: those merges fail the merge check, or the last one is
    # never applied to the sample
    with pytest.raises(fast_train.NotUsed, match="merge check|applied 0 times"):
        fast_train.train_gigatoken(texts, 20000, SPECIALS, 0)
    assert same_as_hf(texts, 20000, 0) == "tokenizers"
    with pytest.raises(fast_train.NotUsed, match="applied 0 times"):  # the merges up to HF's last, and one more
        fast_train.train_gigatoken(texts, len(_train_hf(texts, 20000, SPECIALS, 0).get_vocab()) + 1, SPECIALS, 0)
    # HF stops at the first pair seen fewer than min_frequency times; gigatoken does not
    with pytest.raises(fast_train.NotUsed, match="below max"):
        fast_train.train_gigatoken(texts, 1500, SPECIALS, 50)
    assert same_as_hf(texts, 1500, 50) == "tokenizers"
    # nothing to learn, or nothing to learn from
    assert same_as_hf(texts, 258) == "tokenizers"
    assert same_as_hf([], 400) == "tokenizers"


def test_without_gigatoken_falls_back(monkeypatch):
    monkeypatch.setitem(sys.modules, "gigatoken", None)
    info = {}
    assert same_as_hf(mixed_corpus(200, seed=4), 600, info=info) == "tokenizers"
    assert info == {"trainer": "tokenizers", "reason": "gigatoken is not installed"}


def test_a_merge_that_makes_a_special_token_falls_back():
    texts = ["hello world, hello there"] * 50
    with pytest.raises(fast_train.NotUsed, match="special token"):
        fast_train.train_gigatoken(texts, 300, [EOS_TOKEN, "hello"], 2)
    assert same_as_hf(texts, 300, specials=[EOS_TOKEN, "hello"]) == "tokenizers"


def test_gigatoken_output_does_not_reach_stdout(capfd):
    info = {}
    train_byte_level_bpe(mixed_corpus(200, seed=5), 500, info=info)
    assert info["trainer"] == "gigatoken"
    out, err = capfd.readouterr()
    assert out == "" and err == ""


TRAIN_SCRIPT = r"""
import sys
from gpupipe.tokens.tokenizer import train_byte_level_bpe
from tests.helpers.tokens import mixed_corpus
info = {}
tok = train_byte_level_bpe(mixed_corpus(2000, seed=11), 2500, info=info)
assert info["trainer"] == "gigatoken", info
sys.stdout.write(tok.to_str(pretty=True))
"""


def test_deterministic_across_processes_and_thread_counts():
    outs = []
    for hash_seed, threads in (("1", "1"), ("2", "3"), ("3", "")):
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONHASHSEED=hash_seed)
        env.pop("RAYON_NUM_THREADS", None)
        if threads:
            env["RAYON_NUM_THREADS"] = threads
        outs.append(subprocess.run([sys.executable, "-c", TRAIN_SCRIPT], check=True, env=env, cwd=REPO,
                                   capture_output=True, text=True).stdout)
    here = train_byte_level_bpe(mixed_corpus(2000, seed=11), 2500).to_str(pretty=True)
    assert outs == [here] * 3
    assert len(json.loads(here)["model"]["merges"]) == 2500 - 256 - 1


def _child(conn, texts):
    info = {}
    tok = train_byte_level_bpe(texts, 500, info=info)
    conn.send((info, tok.to_str()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_child_forked_after_use_trains_with_hf():
    texts = mixed_corpus(200, seed=6)
    info = {}
    want = train_byte_level_bpe(texts, 500, info=info).to_str()  # this process has now used gigatoken's threads
    assert info["trainer"] == "gigatoken"
    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe()
    p = ctx.Process(target=_child, args=(there, texts))
    p.start()
    info, got = here.recv()
    p.join(30)
    assert info["trainer"] == "tokenizers" and "forked" in info["reason"]
    assert got == want
