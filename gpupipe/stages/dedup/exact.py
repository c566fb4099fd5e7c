"""Exact dedup: a 128-bit hash of each normalized text; in each group of equal hashes the first document in input
order (smallest `doc_index`) stays, whatever the partitioning. Hashes come from the `text_hash` kernel (CUDA on the
GPU, its numba twin on the CPU, bit-identical).

GPU-native: the partition code uses string methods pandas and cuDF both have, so on a RAPIDS machine the text is
folded by cuDF on the GPU and the kernel hashes the folded column's device buffers in place; only the hashes (16
bytes a document) come back to the host for the exchange.

`level: paragraph | sentence` (seed 001's practice: "sentence-level exact dedup: identical sentences of 50
characters or more kept once globally; paragraph-level exact dedup: md5/sha256") dedups pieces of documents instead
of documents: a paragraph is a line (split at "\n", as CCNet's paragraph dedup; blank lines are not pieces), a
sentence ends after 。！？； or . ! ? ; before whitespace or the end, or at a line break. Each piece, whitespace-folded,
is hashed with md5 (the seed's hash; 128 bits); pieces shorter than `min_chars` (sentence: 50, the seed's; paragraph:
1) are never compared. In each group of equal hashes the first occurrence in input order (smallest `doc_index`, then
position in the document) stays and every other occurrence is cut from its document; a document left with no
non-blank text goes as `all_paragraphs_duplicate` / `all_sentences_duplicate`. Same three phases as document level
(keys → reduce → apply, rows per piece instead of per document), decisions on (hash, doc_index, position) only, so
the result is the same for every partitioning, bucket count and worker count. Host only (a cuDF frame is brought to
the host)."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from gpupipe.backend import frame_to_host, is_device_frame, to_host
from gpupipe.config_base import Strict
from gpupipe.stages.dedup.global_stage import BUCKET_COLUMN, GlobalStage, all_but_first, count_phase, keys_phase
from gpupipe.stages.base import DEVICE, Applied
from gpupipe.stages.phases import APPLY, BUCKETS, DRIVER, Phase, Task
from gpupipe.stages.text.sentences import split_sentences

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
    # document (default): whole documents; paragraph / sentence: pieces cut from documents (module docstring)
    level: Literal["document", "paragraph", "sentence"] = "document"
    # pieces shorter than this (characters, folded) are never compared; None: sentence 50 (seed 001), paragraph 1
    min_chars: int | None = Field(None, ge=1)

    def piece_min_chars(self) -> int:
        if self.min_chars is not None:
            return self.min_chars
        return SENTENCE_MIN_CHARS if self.level == "sentence" else 1


SENTENCE_MIN_CHARS = 50   # seed 001: "50 字以上完全相同的句子，全局保留 1 份"
SEGMENTS = "segments"     # the exchange the reduce phase sends piece removals through


def split_pieces(text: str, level: str) -> list[str]:
    """The text's pieces: lines (without their "\n") for paragraph, sentences (with their trailing whitespace)
    for sentence. Paragraph pieces join back with "\n", sentence pieces with ""."""
    if level == "paragraph":
        return text.split("\n")
    return split_sentences(text)


def join_pieces(pieces: list[str], drop: set[int], level: str) -> str:
    """The text without the dropped pieces; a dropped line takes the blank lines after it along."""
    if level == "sentence":
        return "".join(p for i, p in enumerate(pieces) if i not in drop)
    kept, skipping = [], False
    for i, p in enumerate(pieces):
        if i in drop:
            skipping = True
        elif skipping and not p.strip():
            continue
        else:
            skipping = False
            kept.append(p)
    return "\n".join(kept).strip("\n")


def piece_keys(df: pd.DataFrame, level: str, min_chars: int, fold: bool) -> pd.DataFrame:
    """One row per comparable piece: md5 of the folded piece as (h0, h1), doc_index, position."""
    h0, h1, docs, pos = [], [], [], []
    for doc, text in zip(df["doc_index"].tolist(), df["text"].tolist()):
        if not isinstance(text, str):
            continue
        for i, piece in enumerate(split_pieces(text, level)):
            key = " ".join(piece.split()) if fold else piece.strip()
            if not key or len(key) < min_chars:
                continue
            a, b = np.frombuffer(hashlib.md5(key.encode("utf-8", "surrogatepass")).digest(), dtype="<u8")
            h0.append(a), h1.append(b), docs.append(doc), pos.append(i)
    h0a = np.array(h0, dtype=np.uint64)
    return pd.DataFrame({"h0": h0a, "h1": np.array(h1, dtype=np.uint64), "doc_index": np.array(docs, np.int64),
                         "pos": np.array(pos, dtype=np.int64), BUCKET_COLUMN: h0a})


def piece_reduce_phase(stage: "ExactDedup", task: Task) -> dict[str, int]:
    """One bucket's pieces: in each group of equal hashes all but the first (doc_index, pos) are cut."""
    keys = task.exchange.receive("keys", task.index)
    if keys is None:
        return {}
    keys = keys.sort_values(["h0", "h1", "doc_index", "pos"], kind="stable")
    dup = keys.duplicated(["h0", "h1"], keep="first").to_numpy()
    cut = keys.loc[dup]
    task.exchange.send(SEGMENTS, task.index, cut[["doc_index", "pos"]].reset_index(drop=True),
                       cut["part"].to_numpy(np.int64))
    unit = stage.config.level
    return {f"{unit}s_removed": int(dup.sum()),
            f"duplicate_{unit}_groups": len(cut[["h0", "h1"]].drop_duplicates())}


def pieces_of(stage, task: Task) -> dict[int, set[int]]:
    """The apply phase's share of one partition: doc_index → positions of its pieces to cut."""
    r = task.exchange.receive(SEGMENTS, task.index)
    out: dict[int, set[int]] = {}
    if r is not None:
        for doc, pos in zip(r["doc_index"].tolist(), r["pos"].tolist()):
            out.setdefault(doc, set()).add(pos)
    return out


def folded_text(text):
    """The text exact dedup hashes (pandas or cuDF Series in, same kind out): nulls as "", whitespace folded."""
    text = text.fillna("")
    return text.str.replace(WHITESPACE_RUN, " ", regex=True).str.strip(TRIM_CHARS)


class ExactDedup(GlobalStage):
    name = "exact_dedup"
    resources = DEVICE
    Config = ExactDedupConfig
    gpu_native = True   # keys: Series.fillna / .str.replace / .str.strip + text_hash on the column's buffers

    def phases(self) -> list[Phase]:
        if self.config.level == "document":
            return super().phases()
        return [Phase("keys", keys_phase), Phase("reduce", piece_reduce_phase, over=BUCKETS),
                Phase("count", count_phase, over=DRIVER), Phase("apply", pieces_of, over=APPLY)]

    def apply_partition(self, df: pd.DataFrame, info=None) -> Applied:
        if self.config.level == "document":
            return super().apply_partition(df, info)
        level = self.config.level
        if is_device_frame(df):   # piece levels run on the host
            df = frame_to_host(df)
        if not info:
            return Applied(df, extra=Counter({"docs_cut": 0}))
        texts = df["text"].tolist()
        why = [None] * len(df)
        chars = 0
        for row, doc in enumerate(df["doc_index"].tolist()):
            drop = info.get(doc)
            if not drop:
                continue
            old = texts[row]
            texts[row] = join_pieces(split_pieces(old, level), drop, level)
            chars += len(old) - len(texts[row])
            if not texts[row].strip():
                why[row] = f"all_{level}s_duplicate"
        extra = Counter({"docs_cut": sum(1 for d in df["doc_index"].tolist() if info.get(d)), "chars_cut": chars})
        return Applied(df.assign(text=texts), pd.Series(why, index=df.index, dtype=object), extra)

    def keys(self, df: pd.DataFrame) -> pd.DataFrame:
        if self.config.level != "document":
            return piece_keys(frame_to_host(df) if is_device_frame(df) else df, self.config.level, self.config.piece_min_chars(), self.config.fold_whitespace)
        from gpupipe.kernels.text_hash import text_hash

        text = folded_text(df["text"]) if self.config.fold_whitespace else df["text"].fillna("")
        h = text_hash(text, device=self.ctx.device)   # a cuDF column is hashed in place on the GPU
        return pd.DataFrame({"h0": h[:, 0], "h1": h[:, 1], "doc_index": to_host(df["doc_index"].to_numpy()),
                             BUCKET_COLUMN: h[:, 0]})

    def resolve(self, keys: pd.DataFrame) -> tuple[pd.DataFrame, Counter]:
        return all_but_first(keys, "exact_duplicate", "duplicate_groups")
