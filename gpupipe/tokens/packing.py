"""Continuous-stream packing into fixed-length blocks and shard files.

    docA EOS docB EOS docC EOS ...  →  |seq_len|seq_len|...|remainder (dropped)
                                        shard-00000.bin = blocks_per_shard blocks, ...

Every document is followed by exactly one EOS (a boundary, never padding), blocks are cut
straight through documents, and the last partial block is dropped and counted.

Phases (a mixture's curriculum): `start_phase(name)` closes the open phase, if any: its full blocks become a
shard of their own and its partial block is dropped and counted, so a shard never straddles two phases. With
`cards=True` every shard entry gets a data card: its phase, its tokens per group (a parallel label per token) and,
for each score column given, the token-weighted mean and histogram of the scores (`quality_card`).
"""
from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Sequence

import numpy as np

from gpupipe.io.parts import atomic_output

MANIFEST_FILE = "manifest.json"
SHARD_RE = re.compile(r"^shard-\d{5,}\.bin$")
PARQUET_SHARD_RE = re.compile(r"^shard-\d{5,}\.parquet$")
SHARD_DTYPES = ("uint16", "uint32")
SHARD_FORMATS = ("bin", "parquet")
PARQUET_ROW_GROUP_SIZE = 10_000   # blocks per row group of the Parquet format (the user's spec)
PARQUET_COMPRESSION = "zstd"


def shard_name(index: int) -> str:
    return f"shard-{index:05d}.bin"


def shard_dtype(dtype) -> np.dtype:
    """The on-disk dtype: uint16 or uint32, always little-endian."""
    dt = np.dtype(dtype)
    if dt.name not in SHARD_DTYPES:
        raise ValueError(f"shard dtype must be one of {SHARD_DTYPES}, got {dt}")
    return dt.newbyteorder("<")


def write_atomic(path: str, data) -> None:
    """Write to a temp name then rename, so a crash never leaves a half file that looks whole."""
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def _remove_stale_outputs(out_dir: str) -> None:
    # A previous run's manifest would describe shards we are about to overwrite, and its extra
    # shards would sit next to ours unlisted; both go before the first new shard is written.
    for name in os.listdir(out_dir):
        leftover_tmp = name.startswith(".") and ".tmp." in name  # io.parts.atomic_output's temp names
        if name == MANIFEST_FILE or SHARD_RE.match(name) or PARQUET_SHARD_RE.match(name) or leftover_tmp:
            os.remove(os.path.join(out_dir, name))


def check_token_ids(arr: np.ndarray, dtype: np.dtype) -> None:
    """A document's ids must be integers that fit `dtype` (shared by every writer of token files)."""
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"token ids must be integers, got {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi > np.iinfo(dtype).max:
        raise ValueError(f"token id out of range for {np.dtype(dtype).name}: [{lo}, {hi}]")


def check_document(tokens, dtype: np.dtype) -> np.ndarray:
    """One document as a non-empty 1-D integer array whose ids fit `dtype`."""
    arr = np.asarray(tokens)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"a document must be a non-empty 1-D token array, got shape {arr.shape}")
    check_token_ids(arr, dtype)
    return arr


class StreamPacker:
    """Continuous stream: doc tokens + exactly one EOS after each document; cut into fixed seq_len
    blocks; blocks go to shard files of `blocks_per_shard` blocks (shard-00000.bin, ...), written
    as raw little-endian arrays of `dtype` (tmp name then os.replace); the final partial block
    (remainder) is dropped and counted; memory stays bounded (keep only the carry-over < seq_len
    tokens plus the current shard's buffer).

    The carry-over lives at the tail of the shard buffer itself: the buffer holds a whole number
    of blocks, so it is written exactly when it is full, and whatever is left at finish() beyond
    the last complete block is the dropped remainder.
    """

    def __init__(self, out_dir, seq_len: int, eos_id: int, dtype, blocks_per_shard: int = 1024,
                 cards: bool = False, score_columns: Sequence[str] = ()):
        if seq_len < 2:
            raise ValueError(f"seq_len must be >= 2, got {seq_len}")
        if blocks_per_shard < 1:
            raise ValueError(f"blocks_per_shard must be >= 1, got {blocks_per_shard}")
        self.dtype = shard_dtype(dtype)
        if not 0 <= eos_id <= np.iinfo(self.dtype).max:
            raise ValueError(f"eos_id {eos_id} does not fit {self.dtype.name}")
        self.out_dir = os.fspath(out_dir)
        self.seq_len = int(seq_len)
        self.eos_id = int(eos_id)
        self.blocks_per_shard = int(blocks_per_shard)
        os.makedirs(self.out_dir, exist_ok=True)
        _remove_stale_outputs(self.out_dir)

        self._buf = np.empty(self.seq_len * self.blocks_per_shard, dtype=self.dtype)
        self._fill = 0
        self._shards: list[dict] = []
        self._documents = 0
        self._stream_tokens = 0
        self._tokens_per_source: dict[str, int] = {}
        self._summary: dict | None = None
        # data cards: a group code and the scores of every buffered token, beside the buffer
        self.cards, self.score_columns = bool(cards), tuple(score_columns)
        self._group_names: list[str] = []
        self._group_codes: dict[str, int] = {}
        self._tokens_per_group: dict[str, int] = {}
        self._labels = np.empty(self._buf.size if cards else 0, dtype=np.int32)
        self._scores = {c: np.empty(self._buf.size, dtype=np.float32) for c in self.score_columns}
        self._phase: dict | None = None   # the open phase
        self._phases: list[dict] = []
        self._dropped_tokens = self._dropped_eos = 0

    # -- input -----------------------------------------------------------------------------

    def add(self, tokens: np.ndarray, source: str = "default") -> None:
        """Append one document (>= 1 token) followed by one EOS."""
        self.add_many([tokens], [source])

    def add_many(self, token_lists: Iterable[np.ndarray], sources: Sequence[str] | str | None = None,
                 groups: Sequence[str] | None = None, scores: dict[str, np.ndarray] | None = None) -> None:
        """Append documents in order; `sources` is one name per document, or one name for all; with cards,
        `groups` (one name per document; default: the sources) and `scores` (per score column, one value per
        document, NaN for none) label every token of the document for its shard's card.

        The checks run once over the whole batch (not per document): a corpus has millions of small documents.
        """
        if self._summary is not None:
            raise RuntimeError("StreamPacker.finish() was already called")
        docs = [np.asarray(t) for t in token_lists]
        if not docs:
            return
        if sources is None:
            sources = "default"
        elif not isinstance(sources, str):
            sources = _expand_sources(sources, len(docs))  # checks the count before anything is written
        lengths = np.fromiter((d.size for d in docs), dtype=np.int64, count=len(docs))
        joined = self._check_batch(docs, lengths)
        # docA EOS docB EOS ...: insert one EOS after each document in one vectorized call
        piece = np.insert(joined, np.cumsum(lengths), self.eos_id)
        labels, values = self._card_labels(lengths, sources if groups is None else groups, scores)
        self._push(piece, labels, values)

        self._documents += len(docs)
        self._stream_tokens += piece.size
        if self._phase is not None:
            self._phase["documents"] += len(docs)
            self._phase["stream_tokens"] += piece.size
        if isinstance(sources, str):  # one source for the whole batch: no per-document loop
            self._tokens_per_source[sources] = self._tokens_per_source.get(sources, 0) + piece.size
        else:
            for source, n in zip(sources, lengths.tolist()):
                self._tokens_per_source[source] = self._tokens_per_source.get(source, 0) + n + 1

    def _check_batch(self, docs: list[np.ndarray], lengths: np.ndarray) -> np.ndarray:
        bad = next((d for d in docs if d.ndim != 1), None)
        if bad is not None:
            raise ValueError(f"a document must be a 1-D token array, got shape {bad.shape}")
        empty = np.flatnonzero(lengths == 0)
        if empty.size:
            # an empty document would put two EOS next to each other
            raise ValueError(f"empty document at batch position {int(empty[0])}: every packed document needs "
                             f"at least one token")
        joined = np.concatenate(docs)
        check_token_ids(joined, self.dtype)
        if np.any(joined == self.eos_id):
            # a stray EOS inside a document is a false boundary (see tokenizer.encode_batch)
            raise ValueError(f"document contains the EOS id {self.eos_id}")
        return joined.astype(self.dtype, copy=False)

    # -- stream → shards -------------------------------------------------------------------

    def _card_labels(self, lengths: np.ndarray, groups, scores) -> tuple[np.ndarray | None, dict]:
        """Per token of the piece (documents and their EOS): its group code and scores (cards only)."""
        if not self.cards:
            return None, {}
        names = _expand_sources(groups, lengths.size)
        codes = np.fromiter((self._group_codes.setdefault(g, len(self._group_codes)) for g in names),
                            dtype=np.int32, count=lengths.size)
        self._group_names = list(self._group_codes)
        per_doc = lengths + 1
        stream = np.bincount(codes, weights=per_doc, minlength=len(self._group_names))
        for counts in ([self._tokens_per_group] if self._phase is None
                       else [self._tokens_per_group, self._phase["tokens_by_group"]]):
            for i in np.flatnonzero(stream).tolist():
                g = self._group_names[i]
                counts[g] = counts.get(g, 0) + int(stream[i])
        values = {}
        for c in self.score_columns:
            v = (scores or {}).get(c)
            v = np.full(lengths.size, np.nan) if v is None else np.asarray(v, dtype=np.float64)
            values[c] = np.repeat(v.astype(np.float32), per_doc)
        return np.repeat(codes, per_doc), values

    def _push(self, piece: np.ndarray, labels: np.ndarray | None = None, values: dict | None = None) -> None:
        """Copy a stream piece (and its card labels) into the shard buffer, writing a shard each time it fills."""
        pos = 0
        while pos < piece.size:
            take = min(self._buf.size - self._fill, piece.size - pos)
            self._buf[self._fill:self._fill + take] = piece[pos:pos + take]
            if labels is not None:
                self._labels[self._fill:self._fill + take] = labels[pos:pos + take]
                for c, v in values.items():
                    self._scores[c][self._fill:self._fill + take] = v[pos:pos + take]
            self._fill += take
            pos += take
            if self._fill == self._buf.size:
                self._write_shard(self._buf.size)
                self._fill = 0

    def _group_counts(self, start: int, stop: int) -> dict[str, int]:
        counts = np.bincount(self._labels[start:stop], minlength=len(self._group_names))
        return {g: int(counts[i]) for i, g in sorted(enumerate(self._group_names), key=lambda x: x[1])
                if counts[i]}

    def _write_shard(self, size: int) -> None:
        blocks = self._buf[:size]
        data = memoryview(np.ascontiguousarray(blocks)).cast("B")
        name = shard_name(len(self._shards))
        write_atomic(os.path.join(self.out_dir, name), data)
        entry = {
            "file": name,
            "sequences": blocks.size // self.seq_len,
            "tokens": int(blocks.size),
            "sha256": hashlib.sha256(data).hexdigest(),
            "eos": int(np.count_nonzero(blocks == self.eos_id)),
        }
        if self.cards:
            card = {"tokens_by_group": self._group_counts(0, size)}
            if self._phase is not None:
                card["phase"] = self._phase["name"]
            quality = {c: q for c in self.score_columns if (q := quality_card(self._scores[c][:size]))}
            if quality:
                card["quality"] = quality
            entry["card"] = card
        if self._phase is not None:
            self._phase["shards"].append(name)
            self._phase["tokens"] += entry["tokens"]
        self._shards.append(entry)

    def _close_stream(self) -> None:
        """The buffer's whole blocks become a shard; the partial block is dropped and counted."""
        kept = self._fill - self._fill % self.seq_len
        if kept:
            self._write_shard(kept)
        remainder = self._buf[kept:self._fill]
        dropped, dropped_eos = int(remainder.size), int(np.count_nonzero(remainder == self.eos_id))
        self._dropped_tokens += dropped
        self._dropped_eos += dropped_eos
        if self._phase is not None:
            self._phase.update(dropped_remainder_tokens=dropped, dropped_remainder_eos=dropped_eos)
            if self.cards:
                self._phase["dropped_by_group"] = self._group_counts(kept, self._fill)
            self._phases.append(self._phase)
            self._phase = None
        self._fill = 0

    def start_phase(self, name: str) -> None:
        """Close the open phase (its own shards, its remainder dropped) and start the next one."""
        if self._summary is not None:
            raise RuntimeError("StreamPacker.finish() was already called")
        if self._phase is not None:
            self._close_stream()
        self._phase = {"name": str(name), "shards": [], "tokens": 0, "stream_tokens": 0, "documents": 0,
                       "tokens_by_group": {}}

    def finish(self) -> dict:
        """Write the last (partial) shard, drop the remainder, return the packing summary."""
        if self._summary is not None:
            return self._summary
        self._close_stream()
        self._summary = {
            "documents": self._documents,
            "stream_tokens": self._stream_tokens,
            "blocks": sum(s["sequences"] for s in self._shards),
            "dropped_remainder_tokens": self._dropped_tokens,
            "dropped_remainder_eos": self._dropped_eos,
            "tokens_per_source": dict(sorted(self._tokens_per_source.items())),
            "shards": self._shards,
        }
        for p in self._phases:
            p["tokens_by_group"] = dict(sorted(p["tokens_by_group"].items()))
        if self._phases:
            self._summary["phases"] = self._phases
        if self.cards:   # the stream's tokens per group (as tokens_per_source: the dropped remainder included)
            self._summary["tokens_per_group"] = dict(sorted(self._tokens_per_group.items()))
        self._buf = np.empty(0, dtype=self.dtype)  # release the shard buffer
        return self._summary


def quality_card(values: np.ndarray) -> dict | None:
    """Token-weighted mean and histogram of one score column over a shard (NaN: unscored tokens, counted).
    Bins: tenths of [0, 1] when every score lies there (probabilities), else unit bins (regression scores)."""
    v = values[~np.isnan(values)].astype(np.float64)
    if v.size == 0:
        return None
    lo, hi = float(v.min()), float(v.max())
    edges = np.linspace(0.0, 1.0, 11) if lo >= 0.0 and hi <= 1.0 else np.arange(np.floor(lo), np.floor(hi) + 2)
    counts, _ = np.histogram(v, bins=edges)
    return {"mean": round(float(v.mean()), 6), "scored_tokens": int(v.size),
            "unscored_tokens": int(values.size - v.size), "edges": [round(float(e), 6) for e in edges],
            "histogram": counts.astype(int).tolist()}


def _expand_sources(sources, n: int) -> list[str]:
    if sources is None:
        return ["default"] * n
    if isinstance(sources, str):
        return [sources] * n
    sources = [str(s) for s in sources]
    if len(sources) != n:
        raise ValueError(f"{n} documents but {len(sources)} sources")
    return sources


# -- Parquet: the same blocks, one row each (for Hugging Face datasets) ---------------------------------------------


def parquet_schema(dtype, seq_len: int):
    """One column `input_ids`: a fixed-size list of seq_len token ids of the shard dtype, one row per block."""
    import pyarrow as pa

    return pa.schema([pa.field("input_ids", pa.list_(pa.from_numpy_dtype(np.dtype(dtype).name), int(seq_len)))])


def write_parquet_shards(out_dir, summary: dict, seq_len: int, dtype,
                         row_group_size: int = PARQUET_ROW_GROUP_SIZE) -> dict:
    """Re-encode the .bin shards of a packing summary (StreamPacker or BestFitPacker) as shard-NNNNN.parquet, block
    for block in the same order, zstd, `row_group_size` rows per row group; the .bin files go. Returns the summary
    with the shard entries renamed and their sha256 the Parquet file's (the counts stay: the same tokens)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir = os.fspath(out_dir)
    dt = shard_dtype(dtype)
    schema = parquet_schema(dt, seq_len)
    shards = []
    for entry in summary["shards"]:
        src = os.path.join(out_dir, entry["file"])
        flat = np.fromfile(src, dtype=dt)
        ids = pa.FixedSizeListArray.from_arrays(pa.array(flat.astype(dt.newbyteorder("="), copy=False)), seq_len)
        name = entry["file"][:-len(".bin")] + ".parquet"
        path = os.path.join(out_dir, name)
        with atomic_output(path) as tmp:
            pq.write_table(pa.Table.from_arrays([ids], schema=schema), tmp, row_group_size=row_group_size,
                           compression=PARQUET_COMPRESSION)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()   # one shard: blocks_per_shard x seq_len ids, compressed
        os.remove(src)
        shards.append({**entry, "file": name, "sha256": digest})
    renamed = {a["file"]: b["file"] for a, b in zip(summary["shards"], shards)}
    phases = [{**p, "shards": [renamed[f] for f in p["shards"]]} for p in summary.get("phases", [])]
    return {**summary, "shards": shards, **({"phases": phases} if phases else {})}
