"""Exact dedup: a 128-bit hash of each normalized text; in each group of equal hashes the first document in input
order (smallest `doc_index`) stays, whatever the partitioning. Hashes come from the `text_hash` kernel (CUDA on the
GPU, its numba twin on the CPU, bit-identical)."""

from __future__ import annotations

from collections import Counter

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpupipe.config import Strict
from gpupipe.stages.global_stage import BUCKET_COLUMN, GlobalStage


class ExactDedupConfig(Strict):
    fold_whitespace: bool = True   # seed 000 §18.6: " ".join(text.split()) before hashing, so spacing can't hide a copy


class ExactDedup(GlobalStage):
    name = "exact_dedup"
    Config = ExactDedupConfig

    def keys(self, df: pd.DataFrame) -> pd.DataFrame:
        from gpupipe.kernels.text_hash import text_hash

        arr = pa.array(df["text"], type=pa.large_string(), from_pandas=True).fill_null("")
        if self.config.fold_whitespace:
            arr = pc.utf8_trim_whitespace(pc.replace_substring_regex(arr, r"\s+", " "))
        h = text_hash(arr, device=self.ctx.device)
        return pd.DataFrame({"h0": h[:, 0], "h1": h[:, 1], "doc_index": df["doc_index"].to_numpy(),
                             BUCKET_COLUMN: h[:, 0]})

    def resolve(self, keys: pd.DataFrame) -> tuple[pd.DataFrame, Counter]:
        keys = keys.sort_values(["h0", "h1", "doc_index"], kind="stable")
        dup = keys.duplicated(["h0", "h1"], keep="first")
        groups = keys.loc[dup, ["h0", "h1"]].drop_duplicates()
        removals = keys.loc[dup, ["doc_index", "part"]].assign(reason="exact_duplicate")
        return removals, Counter({"duplicate_groups": len(groups)})
