"""Best-fit packing: documents placed whole into fixed `seq_len` blocks, the rest of a block padded.

    |docC EOS docA EOS PAD PAD|docB EOS docD EOS docE EOS|long-1 ...|long-2 ...|tail EOS docF EOS PAD|

The alternative to the continuous EOS-delimited stream (gpupipe.tokens.packing): no document is cut at a
block edge unless it cannot fit in one block, at the price of padding (reported as padding_rate).

Rules (verify_shards checks every one of them):
- Every document is followed by exactly one EOS; EOS is never padding. Padding uses a dedicated
  pad id (the tokenizer's `<|pad|>` special token), which is never the EOS id.
- Pads only fill the end of a block, right after an EOS; a block is never all padding.
- A document of n tokens needs n + 1 slots (with its EOS). If n + 1 <= seq_len it is placed whole.
  Otherwise it is split: its first (n + 1) // seq_len * seq_len slots fill whole blocks, written
  one after another, and the rest (the tail, which ends with the EOS) starts the very next block,
  which other documents may then fill. So a split document is contiguous in the shard stream.
- Hence document boundaries are the EOS positions: drop the pad ids from the stream and split after
  every EOS, and you get back every document whole (in packing order). No extra index file is needed.
- Nothing is dropped: the last blocks are padded, so dropped_remainder_tokens is 0.

Placement is best-fit decreasing over a window of `window_docs` documents: the window's documents,
longest first (ties in arrival order), each go to the open block with the least free space that
still holds them, or to a new block. Blocks are written in the order they were opened and the
window is emptied, so memory is bounded by one window and the result depends only on the input
order and the window size.
"""
from __future__ import annotations

import bisect
import hashlib
import os
from collections.abc import Iterable, Sequence

import numpy as np

from .packing import (_expand_sources, _remove_stale_outputs, check_document, shard_dtype, shard_name,
                      write_atomic)

PAD_TOKEN = "<|pad|>"
DEFAULT_WINDOW_DOCS = 1024


class _Bin:
    """One block being filled: its pieces and how many slots are still free."""

    __slots__ = ("pieces", "free")

    def __init__(self, seq_len: int):
        self.pieces: list[np.ndarray] = []
        self.free = seq_len

    def put(self, piece: np.ndarray) -> None:
        self.pieces.append(piece)
        self.free -= piece.size


class _ShardWriter:
    """Whole padded blocks → shard files of `blocks_per_shard` blocks (tmp name, then rename)."""

    def __init__(self, out_dir: str, seq_len: int, dtype: np.dtype, blocks_per_shard: int, eos_id: int,
                 pad_id: int):
        self.out_dir, self.seq_len, self.dtype = out_dir, seq_len, dtype
        self.eos_id, self.pad_id = eos_id, pad_id
        self._buf = np.empty(seq_len * blocks_per_shard, dtype=dtype)
        self._fill = 0
        self.shards: list[dict] = []

    def write_block(self, block: np.ndarray) -> None:
        self._buf[self._fill:self._fill + self.seq_len] = block
        self._fill += self.seq_len
        if self._fill == self._buf.size:
            self._flush()

    def _flush(self) -> None:
        if not self._fill:
            return
        blocks = self._buf[:self._fill]
        data = memoryview(blocks).cast("B")
        name = shard_name(len(self.shards))
        write_atomic(os.path.join(self.out_dir, name), data)
        self.shards.append({
            "file": name,
            "sequences": blocks.size // self.seq_len,
            "tokens": int(blocks.size),
            "sha256": hashlib.sha256(data).hexdigest(),
            "eos": int(np.count_nonzero(blocks == self.eos_id)),
            "pad": int(np.count_nonzero(blocks == self.pad_id)),
        })
        self._fill = 0

    def close(self) -> list[dict]:
        self._flush()
        self._buf = np.empty(0, dtype=self.dtype)
        return self.shards


class BestFitPacker:
    """Same interface and summary as StreamPacker (add / add_many / finish), plus padding figures."""

    def __init__(self, out_dir, seq_len: int, eos_id: int, pad_id: int, dtype, blocks_per_shard: int = 1024,
                 window_docs: int = DEFAULT_WINDOW_DOCS):
        if seq_len < 2:
            raise ValueError(f"seq_len must be >= 2, got {seq_len}")
        if blocks_per_shard < 1 or window_docs < 1:
            raise ValueError("blocks_per_shard and window_docs must be >= 1")
        self.dtype = shard_dtype(dtype)
        top = np.iinfo(self.dtype).max
        for what, tid in (("eos_id", eos_id), ("pad_id", pad_id)):
            if not 0 <= tid <= top:
                raise ValueError(f"{what} {tid} does not fit {self.dtype.name}")
        if pad_id == eos_id:
            raise ValueError(f"pad_id equals eos_id ({eos_id}): padding with EOS would invent document boundaries")
        self.out_dir = os.fspath(out_dir)
        self.seq_len, self.eos_id, self.pad_id = int(seq_len), int(eos_id), int(pad_id)
        self.window_docs = int(window_docs)
        os.makedirs(self.out_dir, exist_ok=True)
        _remove_stale_outputs(self.out_dir)
        self._writer = _ShardWriter(self.out_dir, self.seq_len, self.dtype, int(blocks_per_shard),
                                    self.eos_id, self.pad_id)
        self._window: list[np.ndarray] = []    # documents with their EOS appended
        self._documents = self._stream_tokens = self._padding = self._split = 0
        self._tokens_per_source: dict[str, int] = {}
        self._summary: dict | None = None

    # -- input -----------------------------------------------------------------------------

    def add(self, tokens: np.ndarray, source: str = "default") -> None:
        self.add_many([tokens], [source])

    def add_many(self, token_lists: Iterable[np.ndarray], sources: Sequence[str] | str | None = None) -> None:
        docs = [self._check_document(t) for t in token_lists]
        sources = _expand_sources(sources, len(docs))
        for doc, source in zip(docs, sources):
            piece = np.empty(doc.size + 1, dtype=self.dtype)
            piece[:-1], piece[-1] = doc, self.eos_id
            self._window.append(piece)
            self._documents += 1
            self._stream_tokens += piece.size
            self._tokens_per_source[source] = self._tokens_per_source.get(source, 0) + piece.size
            if len(self._window) == self.window_docs:
                self._flush_window()

    def _check_document(self, tokens) -> np.ndarray:
        if self._summary is not None:
            raise RuntimeError("BestFitPacker.finish() was already called")
        arr = check_document(tokens, self.dtype)
        for what, tid in (("EOS", self.eos_id), ("pad", self.pad_id)):
            if np.any(arr == tid):
                raise ValueError(f"document contains the {what} id {tid}")
        return arr

    # -- placement -------------------------------------------------------------------------

    def _flush_window(self) -> None:
        bins: list[_Bin] = []
        free: list[tuple[int, int]] = []  # (free slots, bin number), sorted: best fit = first with enough room
        whole = []
        for piece in self._window:
            if piece.size <= self.seq_len:
                whole.append(piece)
            else:
                self._split_into(piece, bins, free)
        # longest first; sorted() is stable, so equal lengths keep arrival order
        for piece in sorted(whole, key=lambda p: -p.size):
            i = bisect.bisect_left(free, (piece.size, -1))
            if i < len(free):
                _, b = free.pop(i)
            else:
                b = self._open(bins)
            bins[b].put(piece)
            if bins[b].free:
                bisect.insort(free, (bins[b].free, b))
        for b in bins:
            self._emit(b)
        self._window = []

    def _open(self, bins: list[_Bin]) -> int:
        bins.append(_Bin(self.seq_len))
        return len(bins) - 1

    def _split_into(self, piece: np.ndarray, bins: list[_Bin], free: list[tuple[int, int]]) -> None:
        """Whole blocks of the document, then its tail opening the next block (documented above)."""
        self._split += 1
        full = piece.size // self.seq_len * self.seq_len
        for start in range(0, full, self.seq_len):
            bins[self._open(bins)].put(piece[start:start + self.seq_len])
        if full < piece.size:
            b = self._open(bins)
            bins[b].put(piece[full:])
            bisect.insort(free, (bins[b].free, b))

    def _emit(self, b: _Bin) -> None:
        block = np.full(self.seq_len, self.pad_id, dtype=self.dtype)
        used = self.seq_len - b.free
        if b.pieces:
            block[:used] = np.concatenate(b.pieces) if len(b.pieces) > 1 else b.pieces[0]
        self._padding += b.free
        self._writer.write_block(block)

    # -- end -------------------------------------------------------------------------------

    def finish(self) -> dict:
        """Place the last window, write the last shard, return the summary (StreamPacker's keys +
        padding_tokens, padding_rate, split_documents, pad_id, window_docs)."""
        if self._summary is not None:
            return self._summary
        if self._window:
            self._flush_window()
        shards = self._writer.close()
        total = sum(s["tokens"] for s in shards)
        self._summary = {
            "documents": self._documents,
            "stream_tokens": self._stream_tokens,
            "blocks": sum(s["sequences"] for s in shards),
            "dropped_remainder_tokens": 0,
            "dropped_remainder_eos": 0,
            "tokens_per_source": dict(sorted(self._tokens_per_source.items())),
            "shards": shards,
            "padding_tokens": self._padding,
            "padding_rate": round(self._padding / total, 6) if total else 0.0,
            "split_documents": self._split,
            "pad_id": self.pad_id,
            "window_docs": self.window_docs,
        }
        return self._summary


def unpack_documents(tokens: np.ndarray, eos_id: int, pad_id: int) -> list[np.ndarray]:
    """The documents (without their EOS) of a best-fit token stream, in packing order: drop the pads,
    split after every EOS. The inverse of BestFitPacker up to the order inside each window."""
    stream = np.asarray(tokens)
    stream = stream[stream != pad_id]
    ends = np.flatnonzero(stream == eos_id)
    starts = np.concatenate(([0], ends[:-1] + 1)) if ends.size else ends
    return [stream[s:e] for s, e in zip(starts.tolist(), ends.tolist())]
