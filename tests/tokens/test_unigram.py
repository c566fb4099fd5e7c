"""SentencePiece-style Unigram tokenizers (#35 part 3): trained on real text, byte fallback, character coverage,
the tokenizer.json encoding as SentencePiece's own model does, reproducible across processes."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter

import pytest

from gpupipe.tokens.tokenizer import EOS_TOKEN, encode_batch
from gpupipe.tokens.unigram import BYTE_PIECES, UNK_TOKEN, covered_chars, train_unigram
from tests.helpers import ROOT
from tests.helpers.tokens import real_texts

spm = pytest.importorskip("sentencepiece")   # the [sentencepiece] extra, in [dev]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return real_texts()


@pytest.fixture(scope="module")
def trained(texts):
    info = {}
    tok = train_unigram(texts, 3000, [EOS_TOKEN], byte_fallback=True, character_coverage=0.9995, info=info)
    return tok, spm.SentencePieceProcessor(model_proto=info["sentencepiece_model"])


def test_ids_are_sentencepieces_own(trained, texts):
    tok, sp = trained
    assert tok.get_vocab_size() == 3000 == sp.get_piece_size()
    assert [tok.id_to_token(i) for i in range(2)] == [UNK_TOKEN, EOS_TOKEN]
    assert [tok.token_to_id(b) for b in BYTE_PIECES] == list(range(2, 258))
    docs = texts + ["  leading spaces", "\n\n  x  y\t\n", "稀有 𠀀 ok"]
    got = [list(map(int, ids)) for ids in encode_batch(tok, docs)]
    assert got == [sp.encode(t) for t in docs]
    # byte fallback: every text comes back, but for a literal "▁" (U+2581), which reads as a space (SentencePiece too)
    assert [tok.decode(ids) for ids, t in zip(got, docs) if "▁" not in t] == [t for t in docs if "▁" not in t]
    assert any("▁" in t for t in docs)


def test_rare_characters_fall_back_to_bytes_or_unk(trained, texts):
    tok, _ = trained
    counts = Counter(c for t in texts for c in t)
    keep = covered_chars(texts, 0.9995)
    # "▁" is SentencePiece's word boundary, a piece whatever its count (this README spells it once)
    rare = sorted(c for c in counts if c not in keep and c not in " ▁")
    assert rare and all(c not in tok.get_vocab() for c in rare)        # left out of every piece
    # characters above the coverage boundary's count are pieces (at the boundary SentencePiece's own count, with
    # line breaks and spaces as ▁, may break the tie the other way)
    boundary = min(counts[c] for c in keep)
    assert all(c in tok.get_vocab() or "▁" + c in tok.get_vocab() for c in sorted(keep)[:200] if counts[c] > boundary)
    common = "".join(sorted((c for c in keep if not c.isspace()), key=lambda c: (-counts[c], c))[:2])
    text = common + rare[0] + "𠀀"
    ids = list(map(int, encode_batch(tok, [text])[0]))
    pieces = [tok.id_to_token(i) for i in ids]
    assert sum(p in BYTE_PIECES for p in pieces) == len((rare[0] + "𠀀").encode())
    assert tok.decode(ids) == text
    assert tok.token_to_id(UNK_TOKEN) not in ids

    no_fallback = train_unigram(texts, 2000, [EOS_TOKEN], byte_fallback=False, character_coverage=0.9995)
    assert "<0x41>" not in no_fallback.get_vocab()
    ids = list(map(int, encode_batch(no_fallback, [text])[0]))
    assert ids.count(no_fallback.token_to_id(UNK_TOKEN)) >= 1


def test_full_coverage_keeps_every_character(texts):
    tok = train_unigram(texts, 3000, [EOS_TOKEN], character_coverage=1.0)
    pieces = set(tok.get_vocab())
    chars = {c for t in texts for c in t if c != " "}
    assert all(any(c in p for p in pieces if p not in BYTE_PIECES) for c in chars)


def test_text_that_spells_a_byte_piece_or_special_token_is_text(trained):
    tok, _ = trained
    text = "x <0x41> <|endoftext|> <unk>"
    ids = list(map(int, encode_batch(tok, [text])[0]))
    assert not {tok.token_to_id(t) for t in ("<0x41>", EOS_TOKEN, UNK_TOKEN)} & set(ids)
    assert tok.decode(ids) == text


def test_special_token_text_stays_text_when_threads_share_the_tokenizer(trained):
    """The local executor runs a stage's encode on threads that share one Tokenizer; HF's path flips its
    encode_special_tokens flag per call, and an unguarded flip let one thread encode "<|endoftext|>" as EOS
    (CI, session 12: 'document contains the EOS id 1')."""
    import concurrent.futures

    tok, _ = trained
    eos = tok.token_to_id(EOS_TOKEN)
    texts = [f"page {i} says <|endoftext|> here " * 20 for i in range(64)]

    def eos_count(_):
        return sum(int((ids == eos).sum()) for ids in encode_batch(tok, texts))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(eos_count, range(400))) == [0] * 400
    assert tok.encode_special_tokens is False   # the flag is as the caller left it


def test_same_tokenizer_json_in_every_process(tmp_path):
    code = ("import hashlib, sys; from gpupipe.tokens.unigram import train_unigram; "
            "from tests.helpers.tokens import real_texts; "
            "t = train_unigram(real_texts(), 1500, ['<|endoftext|>']); "
            "print(hashlib.sha256(t.to_str().encode()).hexdigest())")
    out = {subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout for _ in range(2)}
    assert len(out) == 1


def test_hf_unigram_trainer_trains_the_same_form(texts):
    tok = train_unigram(texts, 2000, [EOS_TOKEN], trainer="tokenizers")
    assert tok.get_vocab_size() == 2000
    assert [tok.id_to_token(i) for i in range(3)] == [UNK_TOKEN, EOS_TOKEN, BYTE_PIECES[0]]
    docs = [t for t in texts if "▁" not in t][:20] + ["  稀有字 𠀀 ok"]
    assert [tok.decode(list(map(int, ids))) for ids in encode_batch(tok, docs)] == docs
    assert hashlib.sha256(tok.to_str().encode()).hexdigest()   # a tokenizer.json (not reproducible run to run)


def test_vocab_too_small_is_refused(texts):
    with pytest.raises(ValueError, match="leaves no room"):
        train_unigram(texts, 258, [EOS_TOKEN])
