"""Tokenization: train a byte-level BPE on a seeded sample of the curated text or load a `tokenizer.json`; then
encode every partition in parallel into a `tokens` column.

The training sample: each document is in it when a hash of its `doc_index` and the run's seed falls below
`train_sample_bytes / curated bytes`, and the sample is fed in input order. So it is the same documents whatever
the partitioning and worker count (the same tokenizer, byte for byte), spread over the whole corpus rather than its
first files, and bounded: BPE training's merge loop is single-threaded and costs about 0.2 s per MB of text with
gigatoken's trainer (1 s with HF's; gpupipe.tokens.fast_train: the same tokenizer.json), so training on a
terabyte would take days, while a 4096-token vocabulary learnt from the default 4 MiB encodes the benchmark
corpus (19.8 MB) to within 0.16% of the tokens of one learnt from all of it (1 MiB: +0.9%, 2 MiB: +0.3%,
8 MiB: -0.1%, at twice the training time).
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Iterator, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field, model_validator

from gpupipe.config_base import FileRef, KeyProblem, Strict
from gpupipe.kernels._mersenne import splitmix64_array
from gpupipe.stages.phases import APPLY, DRIVER, Phase, PhasedStage, PhaseRun
from gpupipe.tokens import tiktoken_bpe
from gpupipe.tokens.tiktoken_bpe import ENCODINGS
from gpupipe.tokens.unigram import UNK_TOKEN, sentencepiece_module, train_unigram
from gpupipe.tokens.tokenizer import (BYTE_ALPHABET_SIZE, EOS_TOKEN, _tokenizer_path, encode_batch_flat,
                                      encoder_info, eos_id, id_space, load_tokenizer, save_tokenizer,
                                      train_byte_level_bpe)



VOCAB_WARN_BELOW = 32768   # a pretraining vocabulary is 32K to 256K tokens: a smaller one warns (#35)


class TokenizeConfig(Strict):
    # a tokenizer.json to load, or a tiktoken encoding name (cl100k_base, o200k_base: moved to `tiktoken`);
    # None trains one on the curated text
    tokenizer: FileRef | None = None
    # tiktoken encoding (gpupipe/tokens/tiktoken_bpe.py): its BPE file from `tiktoken_file` or tiktoken's cache,
    # never downloaded
    tiktoken: Literal["cl100k_base", "o200k_base"] | None = None
    tiktoken_file: FileRef | None = None
    # what to train: byte-level BPE, or a SentencePiece-style Unigram (gpupipe/tokens/unigram.py)
    model: Literal["bpe", "unigram"] = "bpe"
    byte_fallback: bool = True              # unigram: <0x00>..<0xFF> pieces for characters outside the vocabulary
    character_coverage: float = Field(0.9995, gt=0, le=1)   # unigram: share of character occurrences covered
    unigram_trainer: Literal["sentencepiece", "tokenizers"] = "sentencepiece"
    unk_token: str = UNK_TOKEN              # unigram
    # training: at least the 256 byte tokens + the special tokens; at most 2^24: ids are uint32 in the shards, and the
    # BPE trainer panics past 2^31 (an out-of-range value is refused before any work, #32)
    vocab_size: int = Field(8192, ge=1, le=1 << 24)
    min_frequency: int = Field(2, ge=0)
    special_tokens: list[str] = [EOS_TOKEN]
    eos_token: str = EOS_TOKEN
    train_max_docs: int | None = Field(None, ge=1)   # at most this many documents of the sample (input order)
    # Text bytes to train on (a seeded sample, see the module docstring); None: 1 KiB per vocabulary entry, at least
    # 4 MiB (4 MiB for 4096 tokens, 32 MiB for 32768, 128 MiB for 131072). 0 = all the curated text.
    train_sample_bytes: int | None = Field(None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _encoding_name(cls, data):
        """`tokenizer: cl100k_base` names a tiktoken encoding, not a file."""
        if isinstance(data, dict) and data.get("tokenizer") in ENCODINGS:
            if data.get("tiktoken") not in (None, data["tokenizer"]):
                raise KeyProblem("tokenizer", f"names {data['tokenizer']} and `tiktoken:` {data['tiktoken']}")
            data = {**data, "tiktoken": data["tokenizer"], "tokenizer": None}
        return data

    @model_validator(mode="after")
    def _vocabulary(self) -> "TokenizeConfig":
        if self.tiktoken_file is not None and self.tiktoken is None:
            raise KeyProblem("tiktoken_file", f"names a tiktoken BPE file; say whose pattern and special tokens it "
                                              f"takes with `tokenizer:` one of {sorted(ENCODINGS)}")
        if self.tiktoken is not None:
            if self.tokenizer is not None:
                raise KeyProblem("tokenizer", f"give a tokenizer file or `tiktoken: {self.tiktoken}`, not both")
            try:
                path, published = tiktoken_bpe.find_file(self.tiktoken, self.tiktoken_file)
                if not published:
                    tiktoken_bpe.read_ranks(path)   # a file of the user's: at least the format, before any work
            except (OSError, ValueError) as e:
                raise KeyProblem("tokenizer", str(e)) from None
            if not self.has_token(self.eos_token):
                raise KeyProblem("eos_token", f"{self.eos_token!r} is not a special token of {self.tiktoken} "
                                              f"({sorted(ENCODINGS[self.tiktoken].special_tokens)})")
            return self
        if self.tokenizer is not None:
            try:
                _loaded_vocab(self.tokenizer)
            except (OSError, ValueError) as e:
                raise KeyProblem("tokenizer", str(e)) from None
            if not self.has_token(self.eos_token):
                raise KeyProblem("eos_token", f"{self.eos_token!r} is not in the vocabulary of {self.tokenizer}")
            return self
        repeated = sorted({t for t in self.special_tokens if self.special_tokens.count(t) > 1})
        if repeated or "" in self.special_tokens:
            raise KeyProblem("special_tokens", f"special tokens must be distinct and not empty: {repeated or ['']}")
        specials = len(self.special_tokens) + (self.model == "unigram" and self.unk_token not in self.special_tokens)
        n_bytes = BYTE_ALPHABET_SIZE if self.model == "bpe" or self.byte_fallback else 0
        floor = n_bytes + specials + (self.model == "unigram")   # unigram: and at least one learnt piece
        if self.vocab_size < floor:
            raise KeyProblem("vocab_size", f"vocab_size {self.vocab_size} is below the {n_bytes} byte tokens + "
                                           f"{specials} special tokens" + (" + one piece" if self.model == "unigram"
                                                                          else "") + f" = {floor}")
        if self.eos_token not in self.special_tokens:
            raise KeyProblem("eos_token", f"{self.eos_token!r} is not one of special_tokens {self.special_tokens}")
        if self.model == "unigram" and self.unigram_trainer == "sentencepiece":
            try:
                sentencepiece_module()
            except ImportError as e:
                raise KeyProblem("model", str(e)) from None
        return self

    def has_token(self, token: str) -> bool:
        """Whether `token` is in the vocabulary this stage trains (its special tokens) or loads."""
        if self.tiktoken is not None:
            return token in ENCODINGS[self.tiktoken].special_tokens
        if self.tokenizer is None:
            return token in self.special_tokens or (self.model == "unigram" and token == self.unk_token)
        return token in _loaded_vocab(self.tokenizer)


def _loaded_vocab(path: str) -> frozenset[str]:
    """The vocabulary of a tokenizer file (or of the tokenizer.json in a folder); cached while the file is unchanged."""
    st = os.stat(_tokenizer_path(path))
    return _vocab(_tokenizer_path(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _vocab(path: str, mtime_ns: int, size: int) -> frozenset[str]:
    return frozenset(load_tokenizer(path).get_vocab(with_added_tokens=True))


def sample_bytes(cfg: TokenizeConfig) -> int | None:
    """The training sample's size in bytes, or None for all the text."""
    if cfg.train_sample_bytes == 0:
        return None
    return cfg.train_sample_bytes or max(4 << 20, 1024 * cfg.vocab_size)


def sample_shares(doc_index: np.ndarray, seed: int) -> np.ndarray:
    """Per document a number in [0, 1) that depends on its doc_index and the seed only."""
    salt = np.uint64((seed * 0x9E3779B97F4A7C15 + 0x2545F4914F6CDD1D) % 2**64)
    return (splitmix64_array(doc_index.astype(np.uint64) ^ salt) >> np.uint64(11)).astype(np.float64) / 2.0**53


def iter_texts(parts: list[Path], limit: int | None, budget: int | None = None, seed: int = 0) -> Iterator[str]:
    """The training texts in input order: a seeded sample of about `budget` bytes (None: every text), at most
    `limit` documents."""
    share = 1.0
    if budget is not None:
        total = sum(int(pc.sum(pc.binary_length(pq.read_table(p, columns=["text"])["text"])).as_py() or 0)
                    for p in parts)
        share = budget / total if total else 1.0
    n = 0
    for p in parts:
        t = pq.read_table(p, columns=["text", "doc_index"])
        texts = t["text"].to_pylist()
        keep = (sample_shares(t["doc_index"].to_numpy(), seed) < share) if share < 1 else np.ones(len(texts), bool)
        for text in itertools.compress(texts, keep):
            if limit is not None and n >= limit:
                return
            n += 1
            yield text


class Tokenize(PhasedStage):
    """Phases: `train` (driver: the tokenizer, trained on a seeded sample of the input or copied from the config,
    saved in the stage's folder), `encode` (per partition, every worker loading the saved file: the same bytes
    everywhere, whoever trained it)."""

    name = "tokenize"
    Config = TokenizeConfig

    @classmethod
    def outputs(cls) -> tuple[str, ...]:
        return ("tokens", "n_tokens", "token_count", "char_count", "compression_ratio")

    def phases(self) -> list[Phase]:
        return [Phase("train", train_phase, over=DRIVER),
                Phase("encode", None, over=APPLY, stage=lambda run: run.stage.loading(run.dir.tokenizer))]

    def loading(self, path: Path) -> "Tokenize":
        """This stage, encoding with the tokenizer saved at path."""
        return Tokenize(self.config.model_copy(update={"tokenizer": str(path), "tiktoken": None,
                                                       "tiktoken_file": None}), self.ctx)

    def setup(self) -> None:
        self._tok = load_tokenizer(self.config.tokenizer)
        eos_id(self._tok, self.config.eos_token)  # fail early, naming the token, if the vocab lacks it

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        ids, offsets = encode_batch_flat(self._tok, df["text"].tolist())
        tokens = pa.ListArray.from_arrays(pa.array(offsets, pa.int64()), pa.array(ids, pa.uint32()))
        n = np.diff(offsets).astype(np.int64)
        chars = df["text"].str.len().to_numpy(dtype=np.int64, na_value=0)
        # Per-document stats: token_count, char_count, compression_ratio (characters per token; 0 for
        # a document without tokens, which reasons() removes). `n_tokens` stays: mixture and old runs read it.
        ratio = np.divide(chars, n, out=np.zeros(len(n)), where=n > 0)
        return df.assign(tokens=pd.Series(pd.arrays.ArrowExtensionArray(tokens), index=df.index),
                         n_tokens=n, token_count=n, char_count=chars, compression_ratio=ratio)

    def reasons(self, df: pd.DataFrame) -> pd.Series:
        return pd.Series(np.where(df["n_tokens"].to_numpy() == 0, "empty_tokens", None), index=df.index,
                         dtype=object)

    def extra_stats(self, df_out: pd.DataFrame) -> Counter:
        c = Counter({"tokens": int(df_out["n_tokens"].sum())})
        encoder = encoder_info(self._tok)["encoder"]  # fastokens, tiktoken or tokenizers (the log says why)
        c[f"docs_encoded_{encoder}"] += len(df_out)
        c.update(token_count_bins(df_out["token_count"].to_numpy()))
        for column, prefix in (("lang", ""), ("source", "source_")):
            if column in df_out.columns:
                # sums of the two count columns alone: a groupby of the whole frame copies its texts and token
                # lists group by group (half the stage's CPU on the corpus)
                sums = df_out[[column, "token_count", "char_count"]].groupby(column, observed=True).agg(
                    tokens=("token_count", "sum"), chars=("char_count", "sum"), documents=("token_count", "size"))
                for key, tokens, chars, documents in sums.itertuples():
                    c[f"{prefix}tokens_{key}"] += int(tokens)
                    c[f"{prefix}chars_{key}"] += int(chars)
                    c[f"{prefix}documents_{key}"] += int(documents)
        return c




TOKEN_COUNT_BIN = "token_count_bin_"


def token_count_bins(token_count: np.ndarray) -> Counter:
    """Documents per power-of-two bin of their token count: `token_count_bin_<lo>` counts lo <= token_count < 2*lo
    (lo = 1, 2, 4, ...). Bins of partitions add up, so the run's histogram is exact whatever the partitioning."""
    n = np.asarray(token_count, dtype=np.int64)
    n = n[n > 0]
    if not n.size:
        return Counter()
    lo, counts = np.unique(np.left_shift(1, np.floor(np.log2(n)).astype(np.int64)), return_counts=True)
    return Counter({f"{TOKEN_COUNT_BIN}{int(b)}": int(k) for b, k in zip(lo, counts)})


def train_phase(stage: Tokenize, run: PhaseRun) -> None:
    _train(stage, run)
    size = id_space(load_tokenizer(run.dir.tokenizer))
    if size < VOCAB_WARN_BELOW:   # in the run's log and the stage's stats (not at config time: one error line there)
        logging.getLogger("gpupipe").warning(
            "tokenize: a vocabulary of %d tokens is under 32K: fine for a test run, small for pretraining (32K to "
            "256K is usual)", size)
        run.extra["vocabulary_under_32k"] = 1


def _train(stage: Tokenize, run: PhaseRun) -> None:
    path = run.dir.tokenizer
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = stage.config
    if cfg.tokenizer:
        shutil.copyfile(cfg.tokenizer, path)
        return
    if cfg.tiktoken:   # the encoding's local BPE file as a tokenizer.json (gpupipe/tokens/tiktoken_bpe.py)
        save_tokenizer(tiktoken_bpe.load(cfg.tiktoken, cfg.tiktoken_file), path)
        run.extra[f"tiktoken_{cfg.tiktoken}"] = 1
        return
    trained: dict = {}
    texts = iter_texts(run.inputs, cfg.train_max_docs, sample_bytes(cfg), stage.ctx.seed)
    if cfg.model == "unigram":
        if cfg.unigram_trainer == "tokenizers":
            logging.getLogger("gpupipe").warning(
                "tokenize: HF's UnigramTrainer orders equal-score pieces by hash-map order: another run of this "
                "config trains another vocabulary (unigram_trainer: sentencepiece does not)")
        save_tokenizer(train_unigram(texts, cfg.vocab_size, cfg.special_tokens, byte_fallback=cfg.byte_fallback,
                                     character_coverage=cfg.character_coverage, unk_token=cfg.unk_token,
                                     trainer=cfg.unigram_trainer), path)
        run.extra[f"trained_unigram_with_{cfg.unigram_trainer}"] = 1
        return
    tok = train_byte_level_bpe(texts, stage.config.vocab_size, stage.config.special_tokens,
                               stage.config.min_frequency, info=trained)
    save_tokenizer(tok, path)
    if trained:  # which trainer made the tokenizer (gigatoken or tokenizers' BpeTrainer, the log says why)
        run.extra[f"trained_with_{trained['trainer']}"] = 1

