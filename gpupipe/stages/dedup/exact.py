"""Exact dedup: a 128-bit hash of each normalized text; in each group of equal hashes the first document in input
order (smallest `doc_index`) stays, whatever the partitioning. Hashes come from the `text_hash` kernel (CUDA on the
GPU, its numba twin on the CPU, bit-identical).

GPU-native: the partition code uses string methods pandas and cuDF both have, so on a RAPIDS machine the text is
folded by cuDF on the GPU and the kernel hashes the folded column's device buffers in place; only the hashes (16
bytes a document) come back to the host for the exchange."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from gpupipe.backend import to_host
from gpupipe.config_base import Strict
from gpupipe.stages.dedup.global_stage import BUCKET_COLUMN, GlobalStage, all_but_first
from gpupipe.stages.base import DEVICE

# Whitespace folding as the Arrow kernels did it, spelled so that pandas (pyarrow compute or Python `re`) and cuDF
# (libcudf regex and strip) read it the same way: every run of ASCII whitespace becomes one space (RE2's `\s` is
# exactly [\t\n\f\r ]; listed literally, not as `\s`, whose meaning differs between regex engines), then Unicode
# whitespace is trimmed at both ends: the set of Arrow's utf8_trim_whitespace, which is Python's str.isspace()
# (tests/test_rapids_path.py checks both sets over every code point).
WHITESPACE_RUN = "[\t\n\f\r ]+"
TRIM_CHARS = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
              "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


class ExactDedupConfig(Strict):
    fold_whitespace: bool = True   # " ".join(text.split()) before hashing, so spacing can't hide a copy


def folded_text(text):
    """The text exact dedup hashes (pandas or cuDF Series in, same kind out): nulls as "", whitespace folded."""
    text = text.fillna("")
    return text.str.replace(WHITESPACE_RUN, " ", regex=True).str.strip(TRIM_CHARS)


class ExactDedup(GlobalStage):
    name = "exact_dedup"
    resources = DEVICE
    Config = ExactDedupConfig
    gpu_native = True   # keys: Series.fillna / .str.replace / .str.strip + text_hash on the column's buffers

    def keys(self, df: pd.DataFrame) -> pd.DataFrame:
        from gpupipe.kernels.text_hash import text_hash

        text = folded_text(df["text"]) if self.config.fold_whitespace else df["text"].fillna("")
        h = text_hash(text, device=self.ctx.device)   # a cuDF column is hashed in place on the GPU
        return pd.DataFrame({"h0": h[:, 0], "h1": h[:, 1], "doc_index": to_host(df["doc_index"].to_numpy()),
                             BUCKET_COLUMN: h[:, 0]})

    def resolve(self, keys: pd.DataFrame) -> tuple[pd.DataFrame, Counter]:
        return all_but_first(keys, "exact_duplicate", "duplicate_groups")
