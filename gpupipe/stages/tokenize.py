"""Tokenization: train a byte-level BPE on the curated text (in input order, so the same corpus gives the same
tokenizer) or load a `tokenizer.json`; then encode every partition in parallel into a `tokens` column."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from gpupipe.config import Strict
from gpupipe.stages.base import MapStage, StageJob, StageStats
from gpupipe.tokens.tokenizer import (EOS_TOKEN, encode_batch_flat, encoder_info, eos_id, load_tokenizer,
                                      save_tokenizer, train_byte_level_bpe)

TOKENIZER_FILE = "tokenizer.json"


class TokenizeConfig(Strict):
    tokenizer: str | None = None        # a tokenizer.json to load; None trains one on the curated text
    vocab_size: int = 8192
    min_frequency: int = 2
    special_tokens: list[str] = [EOS_TOKEN]
    eos_token: str = EOS_TOKEN
    train_max_docs: int | None = None   # train on the first N documents only (input order); None = all


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
