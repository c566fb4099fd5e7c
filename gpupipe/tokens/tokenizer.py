"""Byte-level BPE tokenizer: train, save, load, batch-encode.

Byte-level means every UTF-8 byte has a base token, so any text encodes without <unk>; the
merges only decide how compact the encoding is.
"""
from __future__ import annotations

import hashlib
import itertools
import logging
import os
import threading
from collections.abc import Iterable, Sequence

import numpy as np

from gpupipe.io.parts import atomic_output
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from . import fastokens_bpe
from .fast_bpe import fast_encoder
from .fast_train import NotUsed, train_gigatoken

log = logging.getLogger("gpupipe")

EOS_TOKEN = "<|endoftext|>"
TOKENIZER_FILE = "tokenizer.json"
BYTE_ALPHABET_SIZE = 256  # byte-level BPE: one base token per byte value


def train_byte_level_bpe(
    texts: Iterable[str],
    vocab_size: int,
    special_tokens: Sequence[str] = (EOS_TOKEN,),
    min_frequency: int = 2,
    info: dict | None = None,
) -> Tokenizer:
    """Train a byte-level BPE on the given texts.

    Deterministic: the trainer breaks count ties by pair ids, and with the full byte alphabet
    given up front the base ids do not depend on the order in which characters are seen, so
    the same texts in the same order give a byte-identical tokenizer.json (tested across
    processes, whose Rust hash maps are seeded differently).

    gigatoken's trainer runs when it is installed (about 3x faster), unless its result could differ from HF
    BpeTrainer's (gpupipe.tokens.fast_train: what is checked after each training), else BpeTrainer; the
    tokenizer.json is byte-identical either way on every corpus compared. `info`, when given, is filled with
    which ran: {"trainer": "gigatoken"} or {"trainer": "tokenizers", "reason": why not gigatoken}.
    """
    info = {} if info is None else info
    special_tokens = list(special_tokens)
    floor = BYTE_ALPHABET_SIZE + len(special_tokens)
    if vocab_size < floor:
        # the trainer would silently return a larger vocab than asked for
        raise ValueError(f"vocab_size {vocab_size} < {floor} (256 byte tokens + {len(special_tokens)} special)")
    texts = texts if isinstance(texts, list) else list(texts)
    try:
        tok = train_gigatoken(texts, vocab_size, special_tokens, min_frequency)
        info.update(trainer="gigatoken")
        return tok
    except NotUsed as exc:
        info.update(trainer="tokenizers", reason=str(exc))
        log.info("train_byte_level_bpe: HF BpeTrainer (%s)", exc)
    return _train_hf(texts, vocab_size, special_tokens, min_frequency)


def _train_hf(texts: Iterable[str], vocab_size: int, special_tokens: list[str], min_frequency: int) -> Tokenizer:
    """HF tokenizers' BpeTrainer, byte-level."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def _tokenizer_path(path) -> str:
    """A directory means the tokenizer.json inside it."""
    path = os.fspath(path)
    return os.path.join(path, TOKENIZER_FILE) if os.path.isdir(path) else path


def load_tokenizer(path) -> Tokenizer:
    path = _tokenizer_path(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    try:
        return Tokenizer.from_file(path)
    except Exception as exc:  # the Rust side raises a bare Exception
        raise ValueError(f"not a valid tokenizers JSON file: {path}: {exc}") from exc


def save_tokenizer(tok: Tokenizer, path) -> str:
    """Write tokenizer.json atomically; return the sha256 hex of the bytes written."""
    path = _tokenizer_path(path)
    data = tok.to_str(pretty=True).encode("utf-8")  # same bytes as Tokenizer.save()
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
    return hashlib.sha256(data).hexdigest()


def eos_id(tok: Tokenizer, eos_token: str = EOS_TOKEN) -> int:
    tid = tok.token_to_id(eos_token)
    if tid is None:
        raise ValueError(f"EOS token {eos_token!r} is not in the tokenizer's vocabulary")
    return int(tid)


def encode_batch(tok: Tokenizer, texts: Sequence[str], *, fast: bool = True) -> list[np.ndarray]:
    """Encode documents into np.uint32 id arrays, adding no special tokens.

    Special-token text inside a document (a web page that literally contains "<|endoftext|>")
    is encoded as ordinary bytes: otherwise it would become a real EOS in the middle of a
    document and break the one-EOS-per-document invariant of the packed stream.

    `fast` (the default) uses the fastest exact encoder that qualifies for the tokenizer (the same ids as HF
    tokenizers; the arrays are then views of one buffer): fastokens (gpupipe.tokens.fastokens_bpe), else the
    tiktoken path (gpupipe.tokens.fast_bpe), else HF tokenizers' Rust batch encoder; `encoder_info` says which
    and why.
    """
    texts = list(texts)
    flat = _encode_fast(tok, texts) if fast else None
    if flat is not None:
        ids, offsets = flat
        bounds = offsets.tolist()
        return [ids[a:b] for a, b in zip(bounds, bounds[1:])]
    return [np.asarray(ids, dtype=np.uint32) for ids in _hf_encode_batch(tok, texts)]


def encode_batch_flat(tok: Tokenizer, texts: Sequence[str], *, fast: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """encode_batch as one np.uint32 array of all ids and int64 offsets: document i is ids[offsets[i]:offsets[i+1]]."""
    texts = list(texts)
    flat = _encode_fast(tok, texts) if fast else None
    if flat is not None:
        return flat
    docs = _hf_encode_batch(tok, texts)
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum([len(d) for d in docs], out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(docs), dtype=np.uint32, count=int(offsets[-1]))
    return ids, offsets


def _fast(tok: Tokenizer):
    """(the fastest exact encoder or None, encoder_info's dict)."""
    from .tiktoken_bpe import tiktoken_encoder

    tt, _ = tiktoken_encoder(tok)   # converted from a tiktoken encoding: tiktoken itself gives its ids
    if tt is not None:
        return tt, {"encoder": "tiktoken"}
    fo, _ = fastokens_bpe.fastokens_encoder(tok)  # why not: logged once per tokenizer
    if fo is not None:
        return fo, {"encoder": "fastokens"}
    fast, why = fast_encoder(tok)
    if fast is not None:
        return fast, {"encoder": "tiktoken"}
    return None, {"encoder": "tokenizers", "reason": why}


def _encode_fast(tok: Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    fast, _ = _fast(tok)
    if fast is None:
        return None
    try:
        return fast.encode_flat(texts)
    except (TypeError, UnicodeEncodeError):
        return None  # not plain str (e.g. a lone surrogate): HF tokenizers decides, raising its usual error


def encoder_info(tok: Tokenizer) -> dict:
    """Which encoder encode_batch uses for `tok`: {"encoder": "fastokens"}, {"encoder": "tiktoken"} (why not
    fastokens: `fastokens_bpe.fastokens_encoder(tok)[1]`, also logged) or {"encoder": "tokenizers", "reason"}."""
    return _fast(tok)[1]


# encode_special_tokens is a flag on the shared Tokenizer, not an argument of the call: threads that encode with one
# tokenizer (the local executor's threaded maps) take turns, or one thread's reset lets another encode
# "<|endoftext|>" text as a real EOS. Little is lost: HF's batch encoder runs on all cores itself.
_SPECIAL_TOKENS_FLAG = threading.Lock()


def _hf_encode_batch(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    with _SPECIAL_TOKENS_FLAG:
        previous = tok.encode_special_tokens
        tok.encode_special_tokens = True
        try:
            encode = getattr(tok, "encode_batch_fast", tok.encode_batch)  # _fast skips offsets
            encodings = encode(texts, add_special_tokens=False)
        finally:
            tok.encode_special_tokens = previous
    return [e.ids for e in encodings]


def id_space(tok: Tokenizer) -> int:
    """One more than the highest id: the vocabulary size the shards' dtype must hold. The token count
    (get_vocab_size) is less where ids leave gaps (tiktoken's cl100k_base has no id 100256)."""
    return max(tok.get_vocab_size(), max(tok.get_vocab(with_added_tokens=True).values(), default=-1) + 1)


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab_size <= 65535), else uint32."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    if vocab_size <= np.iinfo(np.uint16).max:
        return np.dtype(np.uint16)
    if vocab_size <= np.iinfo(np.uint32).max:
        return np.dtype(np.uint32)
    raise ValueError(f"vocab_size {vocab_size} does not fit uint32 ids")
