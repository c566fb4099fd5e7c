"""Tokenizer helpers shared by the tokens tests: HF's own ids, a hand-made byte-level BPE, a mixed-script corpus."""
from __future__ import annotations

import random

from tokenizers import Tokenizer, models, pre_tokenizers

from gpupipe.tokens.fastokens_bpe import _FRAGMENTS
from gpupipe.tokens.tokenizer import EOS_TOKEN


def hf_ids(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """HF tokenizers' ids of each text, special-token text encoded as ordinary text."""
    tok.encode_special_tokens = True
    try:
        return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    finally:
        tok.encode_special_tokens = False


def byte_level(vocab_extra: list[str], merges: list[tuple[str, str]], **bpe) -> Tokenizer:
    """A hand-made byte-level BPE: the 256 byte tokens, then `vocab_extra`."""
    vocab = {c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    vocab.update({t: 256 + i for i, t in enumerate(vocab_extra)})
    tok = Tokenizer(models.BPE(vocab, merges, **bpe))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return tok


def mixed_corpus(n: int, seed: int) -> list[str]:
    """Mixed scripts, odd whitespace, special-token text, long runs; fragments cut at random characters."""
    rng = random.Random(seed)
    words = ("data token stream shard the of and GPU 模型 数据 清洗 pack EOS web crawl ! . 42 1999 don't I'M "
             "Привет мир 日本語 한국어 👍🏽 \u3000 \t \n").split(" ")
    syllables = "ka ri to ne shi mo la pe zu qu ex str ing tion 数 据 清 洗 模 型 ab".split()
    words += ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(3000)]
    docs = []
    for _ in range(n):
        parts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 40)))]
        if rng.random() < 0.3:
            f = rng.choice(_FRAGMENTS)
            parts.append(f[rng.randint(0, len(f) // 3):][:400])
        if rng.random() < 0.05:
            parts.append(f"a page that says {EOS_TOKEN} literally")
        docs.append(rng.choice(["", " ", "\n", "  "]).join(parts))
    return docs


def real_texts(chunk: int = 2000) -> list[str]:
    """Real prose in Chinese and English, cut into `chunk`-character documents: the seed documents (shared/seeds,
    beside the repository) when present, and this repository's README and design notes."""
    from tests.helpers import ROOT

    files = sorted((ROOT.parent / "shared" / "seeds").glob("00*.txt")) + [ROOT / "README.md", ROOT / "docs" / "design.md"]
    texts = []
    for p in files:
        if p.is_file():
            text = p.read_text(encoding="utf-8")
            texts += [text[i:i + chunk] for i in range(0, len(text), chunk)]
    return texts
