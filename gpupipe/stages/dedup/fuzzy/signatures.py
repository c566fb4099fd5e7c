"""Per partition: the documents' texts, their shingling mode, and MinHash signatures folded at once into LSH band
hashes (one 64-bit key per band; the signature itself never leaves the partition)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from gpupipe.kernels.script_class import CJK, regex_class
from gpupipe.stages.dedup.fuzzy.config import FuzzyDedupConfig, lsh_shape

CJK_SCRIPT = regex_class(CJK)   # a Han, kana or Hangul character (kernels/script_class.py)


def cjk_mask(df: pd.DataFrame, cjk_langs: list[str], texts: pa.Array) -> np.ndarray:
    """1 where a document is shingled by characters: by its `lang`, or by script when there is no `lang`."""
    if "lang" in df.columns:
        return df["lang"].isin(cjk_langs).to_numpy(np.uint8)
    import pyarrow.compute as pc

    cjk = pc.count_substring_regex(texts, CJK_SCRIPT).to_numpy(zero_copy_only=False)
    chars = np.maximum(pc.utf8_length(texts).to_numpy(zero_copy_only=False), 1)
    return (cjk / chars > 0.3).astype(np.uint8)


def lsh_band_hashes(texts: pa.Array, cjk: np.ndarray, cfg: FuzzyDedupConfig, seed: int, device: str) -> np.ndarray:
    """(n, bands) LSH band keys of the documents' MinHash signatures (kernels.minhash.minhash_bands). Only the
    bands × rows permutations the bands read are computed (120 of 128 at 12 × 10): permutation j depends on the seed
    and j alone, so they are the full signature's first columns."""
    from gpupipe.kernels.minhash import minhash_bands

    bands, rows = lsh_shape(cfg)
    return minhash_bands(texts, cjk, bands, rows, seed=seed, word_k=cfg.word_k, char_k=cfg.char_k, device=device)
