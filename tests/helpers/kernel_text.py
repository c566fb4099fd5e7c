"""Random test documents for the kernels that decode UTF-8 into units (minhash, ngram_hash): words, punctuation,
CJK runs, emoji, and invalid byte sequences, as Arrow-style (data, offsets) buffers."""

import random

import numpy as np

WORDS = ["the", "Quick", "brown", "FOX", "jumps", "över", "läzy", "dogs", "naïve", "x1", "42"]
CJK_TEXT = "数据清洗是预训练语料处理的关键步骤，我们需要去除重复内容。"
PIECES = [" ", "  ", "\n", "\t", ",", ", ", ".", "!", "?", "-", "'", "—", "“", "”", "…", "。", "，",
          "、", "《", "》", "（", "）", "\u3000", "：", "！", "😀", "🎉", "\u00a0", "€", "\x00", "_", "#"]
INVALID = [b"\xe4\xb8", b"\x80\x80 abc", b"abc \xe2\x80", b"x\xef\xbc", b"\xed\xa0\x80\xf4\x90\x80\x80"]


def random_text(rng: random.Random, n_pieces: int, word_share: float) -> str:
    """Pieces: a word (word_share), punctuation/space/emoji (the next quarter), else a CJK run."""
    parts = []
    for _ in range(n_pieces):
        r = rng.random()
        if r < word_share:
            parts.append(rng.choice(WORDS))
        elif r < word_share + 0.25:
            parts.append(rng.choice(PIECES))
        else:
            i = rng.randrange(len(CJK_TEXT))
            parts.append(CJK_TEXT[i:i + rng.randrange(1, 6)])
    return "".join(parts)


def mangle(rng: random.Random, raw: bytes) -> bytes:
    """Invalid UTF-8: lone continuation/lead bytes, cut sequences, overlongs, surrogates, > U+10FFFF."""
    junk = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1", b"\xe4\xb8", b"\xe0\x80\xaf", b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xf0\x9f\x98", b"\xe2\x80", b"\xef\xbc"]
    out = bytearray(raw)
    for _ in range(rng.randrange(1, 4)):
        pos = rng.randrange(len(out) + 1)
        out[pos:pos] = rng.choice(junk)
    return bytes(out)


def corpus(rng: random.Random, count: int, max_pieces: int, fixed: list[str], word_share: float) -> list[bytes]:
    """The fixed edge cases, the invalid ones, then `count` random documents (every 4th mangled)."""
    docs = [s.encode() for s in fixed] + list(INVALID)
    for i in range(count):
        raw = random_text(rng, rng.randrange(max_pieces + 1), word_share).encode()
        docs.append(mangle(rng, raw) if i % 4 == 3 else raw)
    return docs


def buffers_of(docs: list[bytes], offset_dtype=np.int64):
    data = np.frombuffer(b"".join(docs), dtype=np.uint8)
    offsets = np.zeros(len(docs) + 1, dtype=offset_dtype)
    np.cumsum([len(d) for d in docs], out=offsets[1:])
    return data, offsets
