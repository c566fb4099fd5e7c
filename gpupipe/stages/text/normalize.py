"""Normalization, vectorized (Arrow's NFC, then one numba pass for lines and spaces): newlines unified, control
characters deleted, whitespace folded, blank lines dropped or kept as paragraph breaks (the user's reference mini
pipeline's `normalize`), plus Unicode NFC.

`normalize_text` is the reference, one string at a time; `normalize_array` does the same on a whole column with
Arrow's compute kernels, and a property test holds them equal. One departure from that `normalize`: it deletes every
character below U+0020 but "\n", which glues words separated by a tab; here a tab is whitespace like a space.

Optional mojibake repair (`fix_mojibake`): UTF-8 text that was decoded as Latin-1/cp1252 ("Ã©tÃ©" for "été",
"â€™" for "’") is re-decoded by ftfy. ftfy is slow (pure Python), so an Arrow regex first picks the documents
that contain the tell-tale pair, a UTF-8 lead byte read as Latin-1 followed by a continuation byte read as
Latin-1/cp1252, and only those go through ftfy; it runs first, before the control characters (the C1 range that
Latin-1 mojibake contains) are deleted.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpupipe.columns import map_slices, text_array, text_series
from gpupipe.config_base import Strict
from gpupipe.stages.base import MapStage


def _is_control(ch: str) -> bool:
    o = ord(ch)
    return (o < 0x20 and ch not in "\n\t") or 0x7F <= o <= 0x9F


# cp1252's printable characters for bytes 0x80-0x9F (Latin-1 reads these bytes as C1 controls instead).
_CP1252_HIGH = "€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ"
# A UTF-8 lead byte (0xC2-0xF4) then a continuation byte (0x80-0xBF), both seen as Latin-1/cp1252 characters.
# The string holds the characters themselves (not regex escapes): Python's `re` and Arrow's RE2 read it alike.
MOJIBAKE_HINT = f"[\u00c2-\u00f4][\u0080-\u00bf{_CP1252_HIGH}]"
_MOJIBAKE_HINT_RE = re.compile(MOJIBAKE_HINT)


def fix_mojibake_text(text: str) -> str:
    """ftfy's encoding repair only (no quote uncurling, no NFKC-like width fixes: the rest is ours to decide)."""
    import ftfy

    return ftfy.fix_encoding(text) if _MOJIBAKE_HINT_RE.search(text) else text


def normalize_text(text: str, form: str = "NFC", keep_paragraphs: bool = False, fix_mojibake: bool = False) -> str:
    """The reference: (mojibake repaired,) NFC, unified newlines, no control characters, whitespace folded, blank
    lines dropped (or, with keep_paragraphs, runs of blank lines kept as one paragraph break)."""
    text = fix_mojibake_text(text) if fix_mojibake else text
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


def fix_mojibake_array(arr: pa.Array) -> pa.Array:
    """ftfy on the documents the vectorized prefilter flags; every other string is left as it is."""
    import ftfy

    flagged = pc.match_substring_regex(arr, MOJIBAKE_HINT).fill_null(False)
    if not pc.any(flagged).as_py():
        return arr
    fixed = [ftfy.fix_encoding(t) for t in arr.filter(flagged).to_pylist()]
    return pc.replace_with_mask(arr, flagged, pa.array(fixed, type=arr.type))


def clean_lines(arr: pa.Array) -> pa.Array:
    """The regex passes of `normalize_array` (keep_paragraphs off) in one kernel pass (kernels/whitespace.py);
    the same type as `arr` back."""
    from gpupipe.kernels.strings import arrow_buffers
    from gpupipe.kernels.whitespace import clean_whitespace

    data, offsets = clean_whitespace(*arrow_buffers(arr))
    out = pa.LargeStringArray.from_buffers(len(arr), pa.py_buffer(offsets), pa.py_buffer(data))
    return out if arr.type == out.type else out.cast(arr.type)


def normalize_array(arr: pa.Array, form: str = "NFC", keep_paragraphs: bool = False,
                    fix_mojibake: bool = False) -> pa.Array:
    if fix_mojibake:
        arr = fix_mojibake_array(arr)
    if form != "none":
        arr = pc.utf8_normalize(arr, form)
    if not keep_paragraphs and not arr.null_count:
        return clean_lines(arr)
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
    fix_mojibake: bool = False          # ftfy's encoding repair, on prefiltered documents only (needs ftfy)


class Normalize(MapStage):
    name = "normalize"
    Config = NormalizeConfig

    def setup(self) -> None:
        if self.config.fix_mojibake:
            try:
                import ftfy  # noqa: F401
            except ImportError as e:
                raise ImportError("normalize: `fix_mojibake: true` needs the ftfy package "
                                  "(pip install 'ftfy>=6.1')") from e

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        cfg = self.config
        out = map_slices(lambda a: normalize_array(a, cfg.form, cfg.keep_paragraphs, cfg.fix_mojibake),
                         text_array(df["text"]))
        return df.assign(text=text_series(out, df["text"]))

    def reasons(self, df: pd.DataFrame) -> pd.Series:
        empty = pc.equal(pc.binary_length(text_array(df["text"])), 0).to_numpy(zero_copy_only=False)
        return pd.Series(np.where(empty, "empty_text", None), index=df.index, dtype=object)
