"""The tiktoken fast path of encode_batch gives exactly HF tokenizers' ids, or steps aside with a reason."""
from __future__ import annotations

import json
import random
import sys

import numpy as np
import pytest
from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors

from gpupipe.tokens import fast_bpe, fastokens_bpe
from gpupipe.tokens.tokenizer import EOS_TOKEN, encode_batch, encode_batch_flat, encoder_info, train_byte_level_bpe
from tests.helpers.tokens import byte_level, hf_ids

pytest.importorskip("tiktoken")

FRAGMENTS = [
    # English, contractions in both cases (the regex's 's 't 're ... are case-sensitive), numbers
    "The quick brown fox doesn't jump; it's tired and we'll see. I'M SURE THEY'RE FINE, y'all've",
    "In 1987 GNP rose 3.5 pct to 1,234,567.89 dlrs (vs. 3.9%) -- e-mail: a.b@c.org, http://x.y/z?q=1&r=2",
    "def f(x):\n    return x**2  # comment\n\tif x != 0: print(f'{x!r}')\r\n",
    # CJK, kana, Hangul, and scripts with combining marks / other digits
    "体验一般，国产1500价格本身不低，苹果mini 2也才1700多，买来给老人学习跳舞用的。中华人民共和国成立于1949年",
    "日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다. Привет, мир! Γειά σου Κόσμε",
    "مرحبا بالعالم ٣٤٥ שלום עולם नमस्ते दुनिया १२३ สวัสดีชาวโลก ＡＢＣ１２３ ² ³ ½ Ⅻ",
    "e\u0301 Z\u0324\u0354\u0367a\u0308\u0356 cafe\u0301 n\u0303o",
    # emoji: ZWJ sequences, flags, skin tones, variation selectors
    "👩‍👩‍👧‍👦 🇫🇷🇩🇪 👍🏽 ❤️ ☕️🍵 😀😀😀 🤖!",
    # odd whitespace: NBSP, thin, ideographic, zero-width (not \s), line/paragraph separators, VT, FF, NEL
    "a\u00a0b\u2009c\u3000d\u200be\u2028f\u2029g\x0bh\x0ci\x85j  \t \n\n \u3000 end  ",
    # special-token text is ordinary bytes; so is the fast path's own sentinel
    f"before {EOS_TOKEN} after <|pad|> and {fast_bpe._SENTINEL_SPECIAL} and <|endoftext|><|endoftext|>",
    # controls, private use, noncharacters, unassigned, recent Unicode (CJK Ext. I, Garay)
    "\x00\x1b[31mred\x1b[0m \ue000\uf8ff \uffff \U0010ffff \u0378 \U0002ebf0\U0002ebf1 \U00010d50\U00010d51",
]
LONG = ["a" * 3000, "ab" * 1000, "hello" * 300, "的" * 1000, "-" * 2000, " " * 1000 + "x", "\n" * 500,
        "1234567890" * 200, "中文" * 400 + "English" * 100, "'s" * 500]


def corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    seps = ["", " ", "  ", "\n", "\t", "\r\n", "\u3000"]
    docs = []
    for _ in range(n):
        parts = rng.choices(FRAGMENTS, k=rng.randint(1, 6))
        if rng.random() < 0.1:
            parts.append(rng.choice(LONG))
        # cut fragments at random characters too, so pieces start and end everywhere
        parts = [p[rng.randint(0, len(p) // 3):] for p in parts]
        docs.append("".join(p + rng.choice(seps) for p in parts))
    return docs + FRAGMENTS + LONG + ["", " ", "x"]


def assert_same_as_hf(tok: Tokenizer, texts: list[str]) -> None:
    ours = encode_batch(tok, texts)
    assert len(ours) == len(texts)
    assert all(isinstance(a, np.ndarray) and a.dtype == np.uint32 and a.ndim == 1 for a in ours)
    want = hf_ids(tok, texts)
    for i, (a, b) in enumerate(zip(ours, want)):
        assert a.tolist() == b, f"doc {i} differs from HF tokenizers: {texts[i][:80]!r}"


@pytest.fixture(autouse=True)
def tiktoken_path(monkeypatch):
    """These tests are about the tiktoken path: fastokens, tried first when installed, is off here (it has its
    own tests in test_fastokens_bpe.py)."""
    monkeypatch.setattr(fastokens_bpe, "fastokens_encoder", lambda tok: (None, "off in test_fast_bpe"))


@pytest.fixture(scope="module")
def trained() -> dict[int, Tokenizer]:
    texts = corpus(400, seed=1)
    return {n: train_byte_level_bpe(texts, n, (EOS_TOKEN, "<|pad|>")) for n in (300, 2000)}


# -- exactness -------------------------------------------------------------------------------


@pytest.mark.parametrize("vocab", [300, 2000])
def test_fast_path_is_used_and_equals_hf(trained, vocab):
    tok = trained[vocab]
    assert encoder_info(tok) == {"encoder": "tiktoken"}
    assert_same_as_hf(tok, corpus(300, seed=2))


def test_gpt2_style_post_processor_keeps_the_fast_path(trained):
    tok = Tokenizer.from_str(trained[300].to_str())
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    assert encoder_info(tok) == {"encoder": "tiktoken"}
    assert_same_as_hf(tok, corpus(50, seed=7))


def test_flat_layout_and_thread_counts(trained):
    tok = trained[2000]
    texts = corpus(120, seed=3)
    want = hf_ids(tok, texts)
    fast, _ = fast_bpe.fast_encoder(tok)
    default = fast.threads
    try:
        for threads in (1, 3):
            fast.threads = threads
            ids, offsets = encode_batch_flat(tok, texts)
            assert ids.dtype == np.uint32 and offsets.dtype == np.int64 and offsets[0] == 0
            assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == want
    finally:
        fast.threads = default
    assert encode_batch(tok, []) == []
    assert encode_batch_flat(tok, [])[1].tolist() == [0]
    assert encode_batch(tok, [""])[0].size == 0


def test_ids_not_in_merge_order_use_a_lookup_table(trained):
    """A tokenizer.json whose merge tokens' ids do not follow the merge order (hand-edited, converted)."""
    spec = json.loads(trained[2000].to_str())
    vocab, merges = spec["model"]["vocab"], spec["model"]["merges"]
    first, last = ("".join(merges[0]), "".join(merges[-1]))
    vocab[first], vocab[last] = vocab[last], vocab[first]
    tok = Tokenizer.from_str(json.dumps(spec))
    fast, why = fast_bpe.fast_encoder(tok)
    assert why is None and fast._lut is not None
    assert_same_as_hf(tok, corpus(100, seed=4))


def test_not_plain_str_raises_like_hf(trained):
    tok = trained[300]
    with pytest.raises(TypeError):
        hf_ids(tok, ["a\ud800b"])
    with pytest.raises(TypeError):
        encode_batch(tok, ["fine", "a\ud800b"])


# -- when the fast path steps aside -----------------------------------------------------------


def test_merges_that_break_tiktoken_rule_fall_back(monkeypatch):
    # "abc" is made by ("a", "bc"), but HF merges ("a", "b") first and has no ("ab", "c"): HF gives [ab, c].
    tok = byte_level(["ab", "bc", "abc"], [("a", "b"), ("b", "c"), ("a", "bc")])
    info = encoder_info(tok)
    assert info["encoder"] == "tokenizers" and "merge 2" in info["reason"]
    assert_same_as_hf(tok, ["abc", "xabcabc abc"])
    assert hf_ids(tok, ["abc"]) == [[tok.token_to_id("ab"), tok.token_to_id("c")]]
    # the check is load-bearing: without it, tiktoken's rule would give the single token "abc"
    monkeypatch.setattr(fast_bpe, "_check_merges", lambda merges: None)
    spec = json.loads(tok.to_str())
    ids, _ = fast_bpe.FastBPE(spec).encode_flat(["abc"])
    assert ids.tolist() != hf_ids(tok, ["abc"])[0]


def test_two_merges_making_one_token_fall_back():
    tok = byte_level(["ab", "bc", "abc"], [("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc")])
    assert "both make" in encoder_info(tok)["reason"]
    assert_same_as_hf(tok, ["abc", "zabcd"])


@pytest.mark.parametrize("change, reason", [
    (lambda t: setattr(t, "normalizer", normalizers.NFKC()), "normalizer"),
    (lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.ByteLevel(add_prefix_space=True)), "pre-tokenizer"),
    (lambda t: t.add_tokens(["fox"]), "non-special added tokens"),
    (lambda t: t.enable_truncation(8), "truncation"),
    (lambda t: setattr(t, "post_processor", processors.TemplateProcessing(single="$A <|pad|>", special_tokens=[
        ("<|pad|>", t.token_to_id("<|pad|>"))])), "post-processor"),
])
def test_other_pipelines_fall_back_and_still_equal_hf(trained, change, reason):
    tok = Tokenizer.from_str(trained[300].to_str())
    texts = corpus(30, seed=5)
    assert_same_as_hf(tok, texts)  # fast path first: the tokenizer's change below must be noticed
    change(tok)
    info = encoder_info(tok)
    assert info["encoder"] == "tokenizers" and reason in info["reason"]
    assert_same_as_hf(tok, texts)


def test_dropout_falls_back():
    tok = byte_level(["ab"], [("a", "b")], dropout=0.5)
    assert "dropout" in encoder_info(tok)["reason"]


def test_without_tiktoken_falls_back(trained, monkeypatch):
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    tok = Tokenizer.from_str(trained[300].to_str())
    assert encoder_info(tok) == {"encoder": "tokenizers", "reason": "tiktoken is not installed"}
    assert_same_as_hf(tok, corpus(20, seed=6))


# -- the pre-tokenizer regex ------------------------------------------------------------------


@pytest.mark.slow
def test_regex_classes_agree_on_every_code_point():
    """tiktoken's regex engine (fancy-regex) and HF's (Oniguruma) split the GPT-2 pattern alike for every code
    point c of planes 0-3 and 14 (planes 4-13 are unassigned, 15-16 private use, in every Unicode so far).

    A probe vocabulary holds x+c as one token, so the ids show whether x and c fell in one piece: after "a"
    iff c is a letter, after "1" iff a number, after "!" iff neither nor whitespace; whitespace is the rest.
    """
    import tiktoken

    cps = [chr(c) for c in [*range(0x40000), *range(0xE0000, 0xF0000)] if not 0xD800 <= c <= 0xDFFF]
    hf = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    for x in "a1!":
        ranks = {bytes([b]): b for b in range(256)}
        for c in cps:
            ranks.setdefault((x + c).encode(), len(ranks))
        enc = tiktoken.Encoding("probe", pat_str=fast_bpe.GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})
        for lo in range(0, len(cps), 100):  # HF's pre_tokenize_str slows down on very long strings
            text = "\n".join(x + c for c in cps[lo:lo + 100])
            want = []
            for _, (a, b) in hf.pre_tokenize_str(text):
                piece = text[a:b].encode()
                # a piece is x+c (one probe token) or holds no probe token at all (see the docstring)
                want.extend([ranks[piece]] if piece in ranks else piece)
            got = enc.encode_ordinary(text)
            if got != want:
                bad = [hex(ord(c)) for c in cps[lo:lo + 100]
                       if (len(enc.encode_ordinary(x + c)) == 1) != (len(hf.pre_tokenize_str(x + c)) == 1)]
                pytest.fail(f"after {x!r}, the regex engines classify these code points differently: {bad[:10]}")


def test_sentinel_special_emitted_by_tiktoken_is_encoded_again(trained, monkeypatch):
    """tiktoken 0.9 emits the id of a special token found in the text even when it is not allowed."""
    tok = Tokenizer.from_str(trained[2000].to_str())
    fast, _ = fast_bpe.fast_encoder(tok)
    real = fast._encode

    def old_tiktoken(text, allowed_special):
        ids = np.frombuffer(real(text, allowed_special), dtype=np.uint32)
        return np.append(ids, np.uint32(fast._sentinel)) if fast_bpe._SENTINEL_SPECIAL in text else ids

    monkeypatch.setattr(fast, "_encode", old_tiktoken)
    texts = ["plain", f"a {fast_bpe._SENTINEL_SPECIAL} b", "more", f"{fast_bpe._SENTINEL_SPECIAL}" * 2]
    assert_same_as_hf(tok, texts)
