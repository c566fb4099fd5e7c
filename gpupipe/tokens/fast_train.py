"""Fast path of `train_byte_level_bpe`: gigatoken's BPE trainer, giving the tokenizer.json HF's BpeTrainer gives.

HF's BpeTrainer spends about a second per MB of training text on this project's corpus (4.3 MB, vocab 4096:
3.3 s, of which 1.2 s pre-tokenizing and counting the words through its offset-tracking pipeline and 2 s in the
merge loop). gigatoken's `train_bpe` counts the GPT-2 pieces with a SIMD pre-tokenizer (0.1 s) and runs
the same greedy merge loop (0.8 s), breaking count ties as HF does (`tie_breaking="huggingface"`: the smaller pair
of ids in BpeTrainer's numbering, special tokens first, then the byte alphabet in code-point order, then the
merges in order). Its merges, laid out as BpeTrainer lays out its vocabulary (`_tokenizer_from_merges`), give a
byte-identical tokenizer.json on every sample measured (1 to 20 MB of the benchmark corpus, vocab 300 to 32768;
tests/test_tokens_fast_train.py compares the two on mixed-script corpora).

Where the two trainers differ, and what is checked after every training (else HF's trainer runs instead):

  stopping  gigatoken has no min_frequency and keeps "merging" pairs whose count has fallen to 0 once the text
            is exhausted; HF stops at the first pair counted fewer than max(min_frequency, 1) times. Both choose
            the most frequent pair, and a merge only lowers the counts of existing pairs and makes new pairs no
            more frequent than itself, so the chosen counts never increase: HF stops at none of gigatoken's merges
            when the last one was counted >= max(min_frequency, 1) times. Encoding the sample with the result,
            the last merge's token occurs once per time that merge was applied (nothing merges it further), at
            most its pair count; so "the last token occurs >= max(min_frequency, 1) times" proves it (checked
            with the tiktoken path on the documents whose bytes contain that token, until enough are seen).
  pieces    gigatoken's SIMD pre-tokenizer knows Unicode 17, HF's regex engine (Oniguruma) an older Unicode: the
            4,657 code points of `PRETOKENIZER_DIFFERS` (all unassigned in Unicode 14, e.g. CJK Extension J of
            Unicode 17) fall in other GPT-2 classes, so a sample that contains one is trained by
            HF's trainer. tests/test_tokens_fast_train.py compares the two pre-tokenizers on every code point.
  tokens    gigatoken gives every merge a new symbol; HF reuses the id of a token already in the vocabulary
            (another merge's, or a special token's). The result must pass the tiktoken fast path's check
            (gpupipe.tokens.fast_bpe, no two merges make one token) and no merge may make a special token.

Determinism: the same texts in the same order give the same merges whatever the thread count or hash seeds
(ties are broken by ids, not by hash-map order); tested across processes.

gigatoken prints progress to stdout and stderr (Rust println!); `_quiet_fds` sends it to the debug log.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Sequence
from contextlib import contextmanager

import numpy as np

from .fast_bpe import _CHAR_TO_BYTE

log = logging.getLogger("gpupipe")

_BYTE_TO_CHAR = {b: c for c, b in _CHAR_TO_BYTE.items()}
# Joins the documents for gigatoken, which splits them apart again before pre-tokenizing: 0xFF never occurs in
# UTF-8, so it cannot be part of any document.
_SEPARATOR = b"\xff"

# Code points that gigatoken 0.10's pre-tokenizer puts in another GPT-2 class than HF tokenizers 0.23's regex
# (letter / number / other), found by comparing the two on every code point (the test recomputes it).
PRETOKENIZER_DIFFERS = (
    (0x88F, 0x88F), (0xC5C, 0xC5C), (0xCDC, 0xCDC), (0xA7CE, 0xA7CF), (0xA7D2, 0xA7D2), (0xA7D4, 0xA7D4),
    (0xA7F1, 0xA7F1), (0x10940, 0x10959), (0x10EC5, 0x10EC7), (0x11DB0, 0x11DDB), (0x11DE0, 0x11DE9),
    (0x16EA0, 0x16EB8), (0x16EBB, 0x16ED3), (0x16FF2, 0x16FF6), (0x187F8, 0x187FF), (0x18D09, 0x18D1E),
    (0x18D80, 0x18DF2), (0x1E6C0, 0x1E6DE), (0x1E6E0, 0x1E6E2), (0x1E6E4, 0x1E6E5), (0x1E6E7, 0x1E6ED),
    (0x1E6F0, 0x1E6F4), (0x1E6FE, 0x1E6FF), (0x2B73A, 0x2B73F), (0x2CEA2, 0x2CEAD), (0x323B0, 0x33479),
)
# The first two UTF-8 bytes of those code points, as big-endian uint16 (a quick scan of the joined sample).
_DIFFERS_LEAD = np.unique([int.from_bytes(chr(c).encode()[:2], "big")
                           for a, b in PRETOKENIZER_DIFFERS for c in range(a, b + 1)]).astype(np.uint16)


def _first_differing(data: bytes) -> int | None:
    """The first code point of PRETOKENIZER_DIFFERS in UTF-8 `data` (documents joined by _SEPARATOR), or None."""
    a = np.frombuffer(data, dtype=np.uint8)
    if a.size < 2:
        return None
    lead = np.zeros(256, dtype=bool)
    lead[_DIFFERS_LEAD >> 8] = True
    at = np.flatnonzero(lead[a[:-1]])
    at = at[np.isin((a[at].astype(np.uint16) << 8) | a[at + 1], _DIFFERS_LEAD)]
    for i in at.tolist():
        n = 3 if a[i] < 0xF0 else 4
        c = ord(data[i:i + n].decode("utf-8", "replace")[0])
        if any(lo <= c <= hi for lo, hi in PRETOKENIZER_DIFFERS):
            return c
    return None

# A rayon pool started in this process does not survive a fork, and train_bpe has no sequential mode: a child
# forked after this process trained with gigatoken uses HF's trainer (which handles forks itself).
_used_in_pid: int | None = None
_forked_after_use = False


def _mark_fork() -> None:
    global _forked_after_use
    _forked_after_use = _forked_after_use or _used_in_pid is not None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_fork)


class NotUsed(RuntimeError):
    """gigatoken's result is not certainly HF's (or gigatoken is unavailable); the message says why."""


def _chars(token: bytes) -> str:
    return "".join(_BYTE_TO_CHAR[b] for b in token)


@contextmanager
def _quiet_fds():
    """Redirect file descriptors 1 and 2 (Rust's println!/eprintln!) to a temporary file, logged at debug level."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, ValueError, OSError):
            pass
    with tempfile.TemporaryFile() as sink:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace").strip()
            if text:
                log.debug("gigatoken train_bpe: %s", " | ".join(text.splitlines()))


def _tokenizer_from_merges(merges: Sequence[tuple[bytes, bytes]], special_tokens: Sequence[str]):
    """The Tokenizer BpeTrainer would build from these merges: special tokens (ids 0..), the byte alphabet in
    code-point order, each merge's token in merge order (a token already present keeps its id, as in HF)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab: dict[str, int] = {}
    for s in special_tokens:
        vocab.setdefault(s, len(vocab))
    for c in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab.setdefault(c, len(vocab))
    pairs = []
    for a, b in merges:
        a, b = _chars(a), _chars(b)
        pairs.append((a, b))
        vocab.setdefault(a + b, len(vocab))
    tok = Tokenizer(models.BPE(vocab, pairs))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(special_tokens))
    return tok


def train_gigatoken(texts: Sequence[str], vocab_size: int, special_tokens: Sequence[str], min_frequency: int):
    """HF BpeTrainer's tokenizer for these arguments, trained by gigatoken; raises NotUsed (with the reason)
    where the two could differ (see the module docstring) or gigatoken is not installed, for the caller to run
    HF's trainer instead."""
    global _used_in_pid
    if _forked_after_use:
        raise NotUsed("forked after this process used gigatoken (its thread pool does not survive a fork)")
    try:
        from gigatoken import gigatoken_rs
    except ImportError:
        raise NotUsed("gigatoken is not installed") from None
    if not texts:
        raise NotUsed("no training text")
    special_tokens = list(special_tokens)
    n_merges = vocab_size - 256 - len(special_tokens)
    if n_merges <= 0:
        raise NotUsed("no merges to learn")
    try:
        data = _SEPARATOR.join(t.encode("utf-8") for t in texts)
    except (UnicodeEncodeError, AttributeError):
        raise NotUsed("a text is not encodable str (HF's trainer decides)") from None
    hit = _first_differing(data)
    if hit is not None:
        raise NotUsed(f"the text has U+{hit:04X}, which gigatoken's pre-tokenizer classes differently from HF's")
    _used_in_pid = os.getpid()
    with _quiet_fds():
        # no special tokens for gigatoken: BpeTrainer numbers them first, we lay out the vocabulary ourselves
        _, merges = gigatoken_rs.train_bpe(data, 256 + n_merges, [], tie_breaking="huggingface",
                                           separator=_SEPARATOR)
    del data
    specials = set(special_tokens)
    made = [_chars(a + b) for a, b in merges]
    clash = next((t for t in made if t in specials), None)
    if clash is not None:
        raise NotUsed(f"a merge makes the special token {clash!r}")
    tok = _tokenizer_from_merges(merges, special_tokens)
    if not merges:
        return tok
    from .fast_bpe import FastBPE, Unsupported

    try:
        fast = FastBPE(json.loads(tok.to_str()))
    except Unsupported as exc:
        raise NotUsed(f"the result fails the fast path's merge check ({exc})") from None
    # Only documents whose bytes contain the last token can contain it; encode those until enough are seen.
    need, last, piece = max(min_frequency, 1), tok.token_to_id(made[-1]), merges[-1][0] + merges[-1][1]
    candidates = [t for t in texts if piece in t.encode("utf-8")]
    applied = 0
    for lo in range(0, len(candidates), 64):
        applied += int(np.count_nonzero(fast.encode_flat(candidates[lo:lo + 64])[0] == last))
        if applied >= need:
            return tok
    raise NotUsed(f"the last merge was applied {applied} times, below max(min_frequency, 1) = {need}: HF's "
                  f"trainer may stop earlier")
