"""Tokenization: train a byte-level BPE on the curated text (in input order, so the same corpus gives the same
tokenizer) or load a `tokenizer.json`; then encode every partition in parallel into a `tokens` column."""

from __future__ import annotations

import functools
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import Field, model_validator

from gpupipe.config import FileRef, KeyProblem, Strict
from gpupipe.stages.base import MapStage, StageJob, StageStats
from gpupipe.tokens.tokenizer import (BYTE_ALPHABET_SIZE, EOS_TOKEN, _tokenizer_path, encode_batch_flat,
                                      encoder_info, eos_id, load_tokenizer, save_tokenizer, train_byte_level_bpe)

TOKENIZER_FILE = "tokenizer.json"


class TokenizeConfig(Strict):
    tokenizer: FileRef | None = None        # a tokenizer.json to load; None trains one on the curated text
    vocab_size: int = Field(8192, ge=1)     # training: at least the 256 byte tokens + the special tokens
    min_frequency: int = Field(2, ge=0)
    special_tokens: list[str] = [EOS_TOKEN]
    eos_token: str = EOS_TOKEN
    train_max_docs: int | None = Field(None, ge=1)   # train on the first N documents only (input order); None = all

    @model_validator(mode="after")
    def _vocabulary(self) -> "TokenizeConfig":
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
        floor = BYTE_ALPHABET_SIZE + len(self.special_tokens)
        if self.vocab_size < floor:
            raise KeyProblem("vocab_size", f"vocab_size {self.vocab_size} is below the {BYTE_ALPHABET_SIZE} byte "
                                           f"tokens + {len(self.special_tokens)} special tokens = {floor}")
        if self.eos_token not in self.special_tokens:
            raise KeyProblem("eos_token", f"{self.eos_token!r} is not one of special_tokens {self.special_tokens}")
        return self

    def has_token(self, token: str) -> bool:
        """Whether `token` is in the vocabulary this stage trains (its special tokens) or loads."""
        if self.tokenizer is None:
            return token in self.special_tokens
        return token in _loaded_vocab(self.tokenizer)


def _loaded_vocab(path: str) -> frozenset[str]:
    """The vocabulary of a tokenizer file (or of the tokenizer.json in a folder); cached while the file is unchanged."""
    st = os.stat(_tokenizer_path(path))
    return _vocab(_tokenizer_path(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _vocab(path: str, mtime_ns: int, size: int) -> frozenset[str]:
    return frozenset(load_tokenizer(path).get_vocab(with_added_tokens=True))


def iter_texts(parts: list[Path], limit: int | None) -> Iterator[str]:
    n = 0
    for p in parts:
        for t in pd.read_parquet(p, columns=["text"])["text"]:
            if limit is not None and n >= limit:
                return
            n += 1
            yield t


class Tokenize(MapStage):
    name = "tokenize"
    Config = TokenizeConfig

    def setup(self) -> None:
        self._tok = load_tokenizer(self.config.tokenizer)
        eos_id(self._tok, self.config.eos_token)  # fail early, naming the token, if the vocab lacks it

    def execute(self, job: StageJob) -> StageStats:
        job.out_dir.mkdir(parents=True, exist_ok=True)
        path = job.out_dir / TOKENIZER_FILE
        if self.config.tokenizer:
            shutil.copyfile(self.config.tokenizer, path)
        else:
            tok = train_byte_level_bpe(iter_texts(job.inputs, self.config.train_max_docs), self.config.vocab_size,
                                       self.config.special_tokens, self.config.min_frequency)
            save_tokenizer(tok, path)
        # Workers load the saved file: the same bytes everywhere, whoever trained it.
        worker = Tokenize(self.config.model_copy(update={"tokenizer": str(path)}), self.ctx)
        return MapStage.execute(worker, job)

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        ids, offsets = encode_batch_flat(self._tok, df["text"].tolist())
        tokens = pa.ListArray.from_arrays(pa.array(offsets, pa.int64()), pa.array(ids, pa.uint32()))
        return df.assign(tokens=pd.Series(pd.arrays.ArrowExtensionArray(tokens), index=df.index),
                         n_tokens=np.diff(offsets))

    def reasons(self, df: pd.DataFrame) -> pd.Series:
        return pd.Series(np.where(df["n_tokens"].to_numpy() == 0, "empty_tokens", None), index=df.index,
                         dtype=object)

    def extra_stats(self, df_out: pd.DataFrame) -> Counter:
        c = Counter({"tokens": int(df_out["n_tokens"].sum())})
        encoder = encoder_info(self._tok)["encoder"]  # tiktoken, or tokenizers (the log says why)
        c[f"docs_encoded_{encoder}"] += len(df_out)
        if "lang" in df_out.columns:
            for lang, g in df_out.groupby("lang"):
                c[f"tokens_{lang}"] += int(g["n_tokens"].sum())
                c[f"chars_{lang}"] += int(g["text"].str.len().sum())
        return c
