"""Normalization (seed 000 §18.18's `normalize`, plus Unicode NFC and control characters), vectorized with Arrow.

`normalize_text` is the reference, one string at a time; `normalize_array` does the same on a whole column with
Arrow's compute kernels, and a property test holds them equal. One departure from the seed: it deletes every
character below U+0020 but "\n", which glues words separated by a tab; here a tab is whitespace like a space.
"""

from __future__ import annotations

import unicodedata
from typing import Literal

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpupipe.config import Strict
from gpupipe.stages.base import MapStage


def _is_control(ch: str) -> bool:
    o = ord(ch)
    return (o < 0x20 and ch not in "\n\t") or 0x7F <= o <= 0x9F


def normalize_text(text: str, form: str = "NFC", keep_paragraphs: bool = False) -> str:
    """The reference: NFC, unified newlines, no control characters, whitespace folded, blank lines dropped
    (or, with keep_paragraphs, runs of blank lines kept as one paragraph break)."""
    text = unicodedata.normalize(form, text) if form != "none" else text
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = "".join(ch for ch in text if not _is_control(ch))
    lines = [" ".join(line.split()) for line in text.split("\n")]
    if not keep_paragraphs:
        return "\n".join(line for line in lines if line)
    paragraphs, current = [], []
    for line in lines + [""]:
        if line:
            current.append(line)
        elif current:
            paragraphs.append("\n".join(current))
            current = []
    return "\n\n".join(paragraphs)


_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f-\x{9f}]"
# What Python's str.split() treats as whitespace, once control characters are gone.
_SPACE_RUN = r"[\t\p{Zs}\x{2028}\x{2029}]+"


def normalize_array(arr: pa.Array, form: str = "NFC", keep_paragraphs: bool = False) -> pa.Array:
    if form != "none":
        arr = pc.utf8_normalize(arr, form)
    arr = pc.replace_substring_regex(arr, r"\r\n?", "\n")
    arr = pc.replace_substring_regex(arr, _CONTROL, "")
    arr = pc.replace_substring_regex(arr, _SPACE_RUN, " ")
    if keep_paragraphs:
        arr = pc.replace_substring_regex(arr, r" ?\n ?", "\n")
        arr = pc.replace_substring_regex(arr, r"\n{2,}", "\n\n")
    else:
        arr = pc.replace_substring_regex(arr, r" ?\n[ \n]*", "\n")
    return pc.utf8_trim(arr, " \n")


class NormalizeConfig(Strict):
    form: Literal["NFC", "NFKC", "none"] = "NFC"
    keep_paragraphs: bool = False


class Normalize(MapStage):
    name = "normalize"
    Config = NormalizeConfig

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        arr = pa.array(df["text"], type=pa.large_string(), from_pandas=True).fill_null("")
        out = normalize_array(arr, self.config.form, self.config.keep_paragraphs)
        return df.assign(text=pd.Series(out.to_pylist(), index=df.index, dtype=df["text"].dtype))

    def reasons(self, df: pd.DataFrame) -> pd.Series:
        return pd.Series(["empty_text" if not t else None for t in df["text"]], index=df.index, dtype=object)
