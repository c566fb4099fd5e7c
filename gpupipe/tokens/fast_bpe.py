"""Exact fast path for `encode_batch`: a byte-level BPE tokenizer.json run by tiktoken's Rust BPE.

HF `tokenizers` carries offsets and normalized strings through every word; tiktoken encodes the same GPT-2 regex
pieces about 4x faster per core on this project's corpus (profiling/bench_tokens.py), releases the GIL for a whole
document, and hands back a uint32 buffer instead of a Python list. But the two BPE algorithms are not the same:

  HF        repeatedly merges the adjacent PAIR (x, y) with the lowest rank in the merges list, leftmost first
            (models/bpe/word.rs: a heap ordered by (rank, position));
  tiktoken  repeatedly merges the adjacent pair whose CONCATENATION x+y has the lowest rank in its byte-string
            table, leftmost first (both its vector and heap paths, lib.rs).

With rank(x_r + y_r) = r they differ when (a) a vocab token can be formed from a pair that is not its merge (HF
leaves "ab"+"c" alone when only ("a", "bc") is a merge; tiktoken joins them), or (b) two merges make the same
token. tiktoken itself says "as long as we train BPE the way we currently do, this is equivalent". Here is the
condition under which it is, checked for every tokenizer before the fast path is used (`_check_merges`):

  (C) for every merge r = (x_r, y_r): HF's BPE of the bytes of t_r = x_r + y_r, using only the merges ranked
      below r, gives exactly [x_r, y_r].

Claim: under (C), HF and tiktoken (ranks ordered as the merges) give the same tokens for every piece.
  1. (C) makes x_r and y_r bytes or outputs of earlier merges, so any pair that contains t_r ranks above r: HF
     merges in non-decreasing rank order, i.e. "for r in order: merge every (x_r, y_r), left to right".
  2. Locality: if tokens p, q are adjacent in some HF state, no merge has crossed the outer edges of u = p+q, so
     the merges inside u happened exactly as when HF encodes u alone (with the same merges done so far).
  3. (C) gives HF(t_r, merges <= r) = [t_r], hence HF(t_r, merges < s) = [t_r] for all s > r (one token stays
     one), and no token is made by two merges (the second one's check would see a single token).
  4. Step by step, from the same bytes: suppose both states agree and HF's next merge has rank r (so every merge
     below r is exhausted, by 1). A tiktoken candidate (p, q) with p+q = t_s would, by 2, be HF's encoding of
     t_s with the merges done so far: if s < r that is [t_s] by 3, one token, not two; if s = r it is
     [x_r, y_r] by (C). So tiktoken's lowest candidates are exactly HF's, and both take the leftmost. If HF has
     nothing left to merge, a tiktoken candidate would again contradict 3, so both stop together.
  5. tiktoken's shortcut (a piece that is a whole vocab token becomes that token) agrees by 3.
The pre-tokenizer is the same GPT-2 regex in both; the two regex engines' Unicode classes (\\p{L}, \\p{N}, \\s)
are compared on every code point by tests/test_fast_bpe.py. Anything else in the tokenizer.json that could change
ids (a normalizer, other pre-tokenizers, dropout, word prefixes/suffixes, truncation, non-special added tokens)
turns the fast path off with a reason (`fast_encoder`), and encode_batch uses HF tokenizers as before.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

log = logging.getLogger("gpupipe")

# tokenizers' ByteLevel pre-tokenizer regex (pre_tokenizers/byte_level.rs), passed to tiktoken verbatim.
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# tiktoken's buffer-returning encode scans the text for special tokens; with none registered its pattern is
# empty and matches at every position (slow). One never-allowed special fixes that. Text that contains it must
# still be ordinary bytes: tiktoken >= 0.10 does so (allowed_special is empty), 0.9 emits the special's id, and
# encode_flat then encodes that document again with encode_ordinary.
_SENTINEL_SPECIAL = "<|gpupipe:no-special-tokens|>"
_OK_POST_PROCESSORS = (None, "ByteLevel")  # ByteLevel only trims offsets: the ids are the same


class Unsupported(ValueError):
    """The tokenizer is outside what the fast path reproduces exactly; the message says why."""


def _byte_alphabet() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: the printable character that stands for each byte in tokenizer.json."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in keep}
    shifted = (b for b in range(256) if b not in chars)
    for n, b in enumerate(shifted):
        chars[b] = chr(256 + n)
    return {c: b for b, c in chars.items()}


_CHAR_TO_BYTE = _byte_alphabet()


def _as_bytes(token: str) -> bytes:
    try:
        return bytes(_CHAR_TO_BYTE[c] for c in token)
    except KeyError as exc:
        raise Unsupported(f"token {token!r} is not byte-level (character {exc.args[0]!r})") from None


def _check_pipeline(spec: dict) -> None:
    """Everything around the BPE model must be what the claim above assumes."""
    if spec.get("normalizer") is not None:
        raise Unsupported(f"has a normalizer ({spec['normalizer'].get('type')})")
    pre = spec.get("pre_tokenizer") or {}
    if (pre.get("type") != "ByteLevel" or pre.get("add_prefix_space", True) is not False
            or pre.get("use_regex", True) is not True):
        raise Unsupported(f"pre-tokenizer is not ByteLevel(add_prefix_space=False, use_regex=True): {pre}")
    post = (spec.get("post_processor") or {}).get("type")
    if post not in _OK_POST_PROCESSORS:
        raise Unsupported(f"post-processor {post} is not one of {_OK_POST_PROCESSORS}")
    if spec.get("truncation") is not None or spec.get("padding") is not None:
        raise Unsupported("truncation or padding is set")
    plain = [t["content"] for t in spec.get("added_tokens", []) if not t.get("special")]
    if plain:
        # non-special added tokens are cut out of the text before the pre-tokenizer, even with
        # encode_special_tokens=True
        raise Unsupported(f"has non-special added tokens, e.g. {plain[0]!r}")
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        raise Unsupported(f"model is {model.get('type')}, not BPE")
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"):
        if model.get(key):
            raise Unsupported(f"BPE {key} = {model[key]!r}")


def _merge_pairs(model: dict) -> list[tuple[str, str]]:
    pairs = []
    for m in model.get("merges", []):
        pair = m.split(" ") if isinstance(m, str) else m
        if len(pair) != 2:
            raise Unsupported(f"merge {m!r} is not a pair")
        pairs.append((pair[0], pair[1]))
    return pairs


def _check_merges(merges: list[tuple[bytes, bytes]]) -> None:
    """Condition (C) of the module docstring, for every merge in rank order.

    By induction (C) holds below r, so HF's BPE with the merges below r is tiktoken's algorithm with those ranks,
    computed here directly. Cost: O(len(t)^2) per token, about 0.6 s for 50k merges.
    """
    rank: dict[bytes, int] = {}
    for r, (x, y) in enumerate(merges):
        t = x + y
        if t in rank:
            raise Unsupported(f"merges {rank[t]} and {r} both make {t!r}")
        parts = [t[i:i + 1] for i in range(len(t))]
        while len(parts) > 2:
            best, at = None, -1
            for i in range(len(parts) - 1):
                k = rank.get(parts[i] + parts[i + 1])
                if k is not None and (best is None or k < best):
                    best, at = k, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        if parts != [x, y]:
            raise Unsupported(f"merge {r} ({x!r}, {y!r}): the merges before it split {t!r} as {parts}, so "
                              f"tiktoken's rule (rank of the concatenation) would not follow HF's (rank of the pair)")
        rank[t] = r


def _threads() -> int:
    """The thread count HF tokenizers would use: RAYON_NUM_THREADS, 1 when TOKENIZERS_PARALLELISM is off."""
    if os.environ.get("TOKENIZERS_PARALLELISM", "").lower() in ("0", "false", "off", "no"):
        return 1
    try:
        n = int(os.environ.get("RAYON_NUM_THREADS", "0"))
    except ValueError:
        n = 0
    if n > 0:
        return n
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class FastBPE:
    """A byte-level BPE tokenizer.json as a tiktoken Encoding whose ids are the tokenizer's own ids."""

    def __init__(self, spec: dict):
        try:
            import tiktoken
        except ImportError:
            raise Unsupported("tiktoken is not installed") from None
        _check_pipeline(spec)
        model = spec["model"]
        vocab: dict[str, int] = model["vocab"]
        missing = [c for c in _CHAR_TO_BYTE if c not in vocab]
        if missing:
            raise Unsupported(f"{len(missing)} of the 256 byte tokens are not in the vocab, e.g. {missing[0]!r}")
        pairs = _merge_pairs(model)
        merges = [(_as_bytes(a), _as_bytes(b)) for a, b in pairs]
        made = []
        for a, b in pairs:
            if a + b not in vocab:
                raise Unsupported(f"merge ({a!r}, {b!r}) makes a token that is not in the vocab")
            made.append(vocab[a + b])
        if model.get("ignore_merges") and len(vocab) > 256 + len(merges):
            # HF then returns any whole-word vocab token directly, even one no merge makes
            raise Unsupported("ignore_merges with vocab tokens that no merge makes")
        _check_merges(merges)

        # tiktoken only compares the ranks of merge outputs, so any order-preserving relabelling of the merge
        # order gives the same tokens: use the HF ids themselves when they increase with the merges (trained
        # tokenizers), else the merge index and a lookup table back to HF ids.
        byte_ids = {bytes([b]): vocab[c] for c, b in _CHAR_TO_BYTE.items()}
        if all(i < j for i, j in zip(made, made[1:])):
            ranks = {**byte_ids, **{x + y: i for (x, y), i in zip(merges, made)}}
            self._lut = None
        else:
            ranks = {bytes([b]): b for b in range(256)}
            ranks.update((x + y, 256 + r) for r, (x, y) in enumerate(merges))
            self._lut = np.empty(len(ranks), dtype=np.uint32)
            for t, r in ranks.items():
                self._lut[r] = byte_ids[t] if len(t) == 1 else made[r - 256]
        self._sentinel = max(ranks.values()) + 1
        try:
            self._enc = tiktoken.Encoding("gpupipe-bpe", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                                          special_tokens={_SENTINEL_SPECIAL: self._sentinel})
        except ValueError as exc:  # e.g. two vocab entries with one id
            raise Unsupported(f"tiktoken refused the ranks: {exc}") from None
        # Encoding.encode_to_numpy minus its Python-side checks and array: ~3 us a document, with the GIL held
        self._encode = getattr(getattr(self._enc, "_core_bpe", None), "encode_to_tiktoken_buffer", None)
        if self._encode is None:
            raise Unsupported(f"tiktoken {tiktoken.__version__} has no CoreBPE.encode_to_tiktoken_buffer")
        self.threads = _threads()
        self._helpers: tuple[tuple[int, int], ThreadPoolExecutor] | None = None

    def _pool(self) -> ThreadPoolExecutor:
        """The helper threads, made again after a fork (a child process has none of its parent's threads)."""
        key = (os.getpid(), self.threads)
        if self._helpers is None or self._helpers[0] != key:
            self._helpers = key, ThreadPoolExecutor(max(1, self.threads - 1), thread_name_prefix="gpupipe-bpe")
        return self._helpers[1]

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All documents' ids in one uint32 array, and offsets (len(texts) + 1): doc i is ids[off[i]:off[i+1]].

        Documents are spread over `threads` threads (the calling one included) that each take the next
        document; tiktoken releases the GIL for a whole document and returns its ids as a uint32 buffer. The
        helper threads live as long as this encoder: tiktoken keeps one regex per thread, and a new thread's
        regex starts with a cold cache (fresh threads for every batch made two threads no faster than one).
        """
        n = len(texts)
        out: list = [None] * n
        todo = iter(range(n))  # shared: CPython's range iterator hands out each index once
        errors: list[BaseException] = []
        encode, none = self._encode, frozenset()

        def work() -> None:  # as little as possible here: the GIL is held between documents
            try:
                for i in todo:
                    out[i] = encode(texts[i], none)
            except BaseException as exc:  # re-raised in the caller
                errors.append(exc)

        helpers = [self._pool().submit(work) for _ in range(min(self.threads, n) - 1)]
        work()
        for f in helpers:
            f.result()
        if errors:
            raise errors[0]
        out = [np.frombuffer(b, dtype=np.uint32) for b in out]
        ids, offsets = _join(out)
        if ids.size and int(ids.max()) == self._sentinel:  # the largest id; see _SENTINEL_SPECIAL
            hits = np.flatnonzero(ids == self._sentinel)
            for i in set(np.searchsorted(offsets, hits, side="right").tolist()):
                out[i - 1] = np.asarray(self._enc.encode_ordinary(texts[i - 1]), dtype=np.uint32)
            ids, offsets = _join(out)
        if self._lut is not None:
            ids = self._lut[ids]
        return ids, offsets


def _join(docs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, docs), dtype=np.int64, count=len(docs)), out=offsets[1:])
    return (np.concatenate(docs) if docs else np.empty(0, dtype=np.uint32)), offsets


def _fingerprint(tok) -> tuple:
    """What a change to the tokenizer in place would most likely alter. Cheap, unlike tok.to_str() (~25 ms for
    a 50k vocab, too slow for every batch); a new model of the same size and edge tokens goes unnoticed."""
    n = tok.get_vocab_size(with_added_tokens=False)
    state = [getattr(tok, name) for name in ("normalizer", "pre_tokenizer", "post_processor")]
    return (n, tok.get_vocab_size(with_added_tokens=True), tok.id_to_token(n - 1), tok.id_to_token(n // 2),
            tok.truncation, tok.padding, type(tok.model).__name__,
            *(s.__getstate__() if s is not None else None for s in state),
            tuple((i, str(t)) for i, t in sorted(tok.get_added_tokens_decoder().items())))


def per_tokenizer(build: Callable) -> Callable:
    """`build(tok) -> (encoder or None, reason or None)`, cached per Tokenizer object and rebuilt when the tokenizer
    is changed in place (its fingerprint): an encoder is built and proven once, not for every batch."""
    cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    lock = threading.Lock()

    @functools.wraps(build)
    def get(tok):
        key = _fingerprint(tok)
        with lock:
            hit = cache.get(tok)
            if hit is None or hit[0] != key:
                hit = cache[tok] = (key, *build(tok))
            return hit[1], hit[2]
    return get


@per_tokenizer
def fast_encoder(tok) -> tuple[FastBPE | None, str | None]:
    """(the fast encoder, None) for a tokenizer it reproduces exactly, else (None, the reason)."""
    try:
        return FastBPE(json.loads(tok.to_str())), None
    except Unsupported as exc:
        log.warning("encode_batch: fast BPE path off for this tokenizer (%s); using HF tokenizers", exc)
        return None, str(exc)
