"""Fastest exact path of `encode_batch`: fastokens (a Rust re-implementation of HF tokenizers' pipeline).

On this project's curated corpus (19.8 MB, 18,396 en+zh documents, vocab 4096, 2 cores) HF `encode_batch_fast`
runs at 3-4 MB/s, the tiktoken path of gpupipe.tokens.fast_bpe at 16-18 MB/s, fastokens' `encode_batch_flat` at
130 MB/s on a fresh tokenizer and 190-210 MB/s warm, with the same ids as HF on every document. (gigatoken's
encoder is about as fast but emits special-token ids for special-token text, which this project encodes as
ordinary bytes; it is not used for encoding.)

fastokens is a black box, so it is used only for what is already proven and then checked:
  1. the tokenizer passes every check of the tiktoken fast path (`fast_bpe.fast_encoder`: a plain byte-level
     BPE whose merges satisfy condition (C), so tiktoken's ids are HF's ids, proven there);
  2. when it loads, fastokens and that tiktoken encoder give the same ids on a proof set (`proof_texts`): every
     vocabulary token's text (every merge, in and out of context), mixed-script and odd-whitespace fragments,
     every special token's text, and about 21,000 code points in runs and in letter / number / punctuation /
     space contexts (all of U+0000-U+2FFF, every 31st code point of planes 0-3 above, tags and variation
     selectors);
  3. tests/test_tokens_encoders.py compares fastokens with HF on every code point and on the benchmark's kind of
     text, and covers both fallbacks.
Where fastokens is not installed or the proof set differs, encode_batch uses the tiktoken path (and says why).
"""
from __future__ import annotations

import json
import logging
from collections.abc import Sequence

import numpy as np

from .fast_bpe import _SENTINEL_SPECIAL, FastBPE, Unsupported, _as_bytes, fast_encoder, per_tokenizer

log = logging.getLogger("gpupipe")

# Text that stresses a pre-tokenizer: contractions in both cases, numbers and punctuation, code, CJK and other
# scripts, combining marks, emoji sequences, every kind of whitespace, controls, private use, noncharacters.
_FRAGMENTS = (
    "The quick brown fox doesn't jump; it's tired and we'll see. I'M SURE THEY'RE FINE, y'all've 'S 'T 'LL",
    "In 1987 GNP rose 3.5 pct to 1,234,567.89 dlrs (vs. 3.9%) -- e-mail: a.b@c.org, http://x.y/z?q=1&r=2",
    "def f(x):\n    return x**2  # comment\n\tif x != 0: print(f'{x!r}')\r\n\r\n\n  \t",
    "体验一般，国产1500价格本身不低，苹果mini 2也才1700多，买来给老人学习跳舞用的。中华人民共和国成立于1949年",
    "日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다. Привет, мир! Γειά σου Κόσμε",
    "مرحبا بالعالم ٣٤٥ שלום עולם नमस्ते दुनिया १२३ สวัสดีชาวโลก ＡＢＣ１２３ ² ³ ½ Ⅻ",
    "e\u0301 Z\u0324\u0354\u0367a\u0308\u0356 cafe\u0301 n\u0303o",
    "👩‍👩‍👧‍👦 🇫🇷🇩🇪 👍🏽 ❤️ ☕️🍵 😀😀😀 🤖!",
    "a\u00a0b\u2009c\u3000d\u200be\u2028f\u2029g\x0bh\x0ci\x85j  \t \n\n \u3000 end  ",
    "\x00\x1b[31mred\x1b[0m \ue000\uf8ff \uffff \U0010ffff \u0378 \U0002ebf0\U0002ebf1 \U00010d50\U00010d51",
    "a" * 700 + " " + "ab" * 300 + " " + "的" * 300 + "-" * 500 + " " * 300 + "x" + "\n" * 100 + "1234567890" * 30,
)
_CONTEXTS = ("a{c}", "1{c}", "!{c}", " {c}", "{c}{c}", "{c}\n")


def _code_points() -> list[int]:
    cps = [*range(0x3000), *range(0x3000, 0x40000, 31), *range(0xE0000, 0xE0080), *range(0xE0100, 0xE01F0)]
    return [c for c in cps if not 0xD800 <= c <= 0xDFFF]


def proof_texts(spec: dict) -> list[str]:
    """The documents on which fastokens must give the tiktoken path's ids before it is used (see the docstring)."""
    texts = list(_FRAGMENTS)
    specials = [t["content"] for t in spec.get("added_tokens", [])] + [_SENTINEL_SPECIAL]
    texts += [f"x{s}y {s}{s} {s[:-1]} {s}\n" for s in specials]
    tokens = []
    for token in spec["model"]["vocab"]:
        try:
            tokens.append(_as_bytes(token).decode("utf-8"))
        except (Unsupported, UnicodeDecodeError):  # part of a character: reached through whole ones
            pass
    for lo in range(0, len(tokens), 512):
        chunk = tokens[lo:lo + 512]
        texts += [" ".join(chunk), "".join(chunk), "\n".join(reversed(chunk))]
    cps = _code_points()
    contexts = " ".join(_CONTEXTS) + " "
    for lo in range(0, len(cps), 1024):
        chunk = [chr(c) for c in cps[lo:lo + 1024]]
        texts += ["".join(chunk), "".join(contexts.format(c=c) for c in chunk)]
    return texts


class FastokensBPE:
    """fastokens' encoder for a tokenizer that the tiktoken fast path reproduces, checked against it."""

    name = "fastokens"

    def __init__(self, tok_json: str, reference: FastBPE, spec: dict):
        try:
            import fastokens
        except ImportError:
            raise Unsupported("fastokens is not installed") from None
        try:
            self._tok = fastokens.Tokenizer.from_json_str(tok_json)
        except Exception as exc:  # the Rust side raises its own errors
            raise Unsupported(f"fastokens cannot load the tokenizer: {exc}") from None
        texts = proof_texts(spec)
        want_ids, want_off = reference.encode_flat(texts)
        got_ids, got_off = self.encode_flat(texts)
        if not (np.array_equal(got_off, want_off) and np.array_equal(got_ids, want_ids)):
            bad = next(i for i in range(len(texts))
                       if not np.array_equal(got_ids[got_off[i]:got_off[i + 1]], want_ids[want_off[i]:want_off[i + 1]]))
            raise Unsupported(f"fastokens {getattr(fastokens, '__version__', '?')} differs from the tiktoken path on "
                              f"proof text {bad} ({texts[bad][:40]!r}...)")

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All documents' ids as one uint32 array and int64 offsets (len(texts) + 1), special-token text as bytes."""
        if not isinstance(texts, list):
            texts = list(texts)
        ids, offsets = self._tok.encode_batch_flat(texts, add_special_tokens=False, split_special_tokens=True)
        return np.frombuffer(ids, dtype=np.uint32), np.frombuffer(offsets, dtype=np.uint64).astype(np.int64)


@per_tokenizer
def fastokens_encoder(tok) -> tuple[FastokensBPE | None, str | None]:
    """(the fastokens encoder, None) for a tokenizer it reproduces (see the docstring), else (None, the reason)."""
    reference, why = fast_encoder(tok)
    if reference is None:
        return None, f"needs the tiktoken fast path's checks, which fail: {why}"
    try:
        tok_json = tok.to_str()
        return FastokensBPE(tok_json, reference, json.loads(tok_json)), None
    except Unsupported as exc:
        (log.info if "not installed" in str(exc) else log.warning)(
            "encode_batch: fastokens off for this tokenizer (%s); using the tiktoken path", exc)
        return None, str(exc)
