"""Which blocks a (rank, worker) reads, in which order: pure numpy, no torch (DESIGN.md, "Loader").

Three layers, each a pure function of its arguments:

1. `EpochOrder` — the epoch's GLOBAL order of block ids, a function of (seed, epoch) only:
   the shards are permuted (seeded by (seed, epoch)), their blocks laid end to end in that
   order (a stream that is read shard by shard, as streaming readers do), and the stream is
   cut into windows of `buffer_size` blocks, each permuted with its own seeded RNG. The window
   shuffle is the random-access form of a shuffle buffer: a block moves at most buffer_size
   places, and the block at any position is computable without replaying the stream, so the
   order does not depend on how many ranks or workers read it, and a resume costs nothing.
   `PhasedOrder` does the same per phase of a curriculum, phase after phase (a manifest with `phases`).
2. `RankSplit` — rank r of W reads global positions start + k*W + r, k = 0, 1, ...: all ranks
   walk the global order in lockstep. Every rank gets the same count; the N mod W tail is
   dropped, or padded by wrapping to the start of the order. After every rank has consumed c
   blocks, exactly the positions [start, start + c*W) are consumed, which is what makes resume
   exact, even with another world size.
3. `worker_chunks` — a rank's list is dealt to its DataLoader workers in chunks of
   `chunk` (the DataLoader's batch_size, 1 without batching): chunk j goes to worker
   j mod num_workers. torch's DataLoader (in_order=True, the default) takes one item (or one
   batch) from each worker in turn, so the consumer sees the rank's list in order whatever the
   worker count, and "consumed n blocks" always means "the first n blocks of the list".
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

# SeedSequence entropy tags: keep the shard permutation and the window shuffles independent
_SHARDS, _WINDOW = 0, 1


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(k) for k in key]))


class EpochOrder:
    """The epoch's global permutation of block ids (ids = manifest order: shard 0's blocks first).

    `blocks(positions)` maps positions of the epoch's order to block ids, computing only the
    windows it touches; `all()` is the whole order (tests, debugging).
    """

    def __init__(self, counts: Sequence[int], *, seed: int = 0, epoch: int = 0, shuffle: bool = True,
                 buffer_size: int = 1024, stream: int | None = None):
        counts = np.asarray(counts, dtype=np.int64)
        if counts.ndim != 1 or (counts < 0).any():
            raise ValueError("counts must be a 1-D list of non-negative block counts")
        if seed < 0 or epoch < 0:
            raise ValueError(f"seed and epoch must be >= 0, got seed={seed} epoch={epoch}")
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
        self.seed, self.epoch, self.shuffle = int(seed), int(epoch), bool(shuffle)
        # a phase of a curriculum draws from a stream of its own (PhasedOrder); None keeps the plain keys
        self._key = (self.seed, self.epoch) if stream is None else (self.seed, self.epoch, int(stream))
        self.buffer_size = int(buffer_size) if shuffle else 1
        self.num_blocks = int(counts.sum())

        first_id = np.concatenate(([0], np.cumsum(counts)[:-1]))  # first block id of each shard
        order = _rng(*self._key, _SHARDS).permutation(counts.size) if shuffle else np.arange(counts.size)
        order = order[counts[order] > 0]  # empty shards take no place in the stream
        # stream position q lies in the shard whose stream start is the last one <= q
        self._stream_start = np.concatenate(([0], np.cumsum(counts[order])[:-1]))
        self._stream_first_id = first_id[order]
        self._windows: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self.num_blocks

    def _window(self, w: int) -> np.ndarray:
        """The permutation of window w (cached; readers walk windows in increasing order)."""
        perm = self._windows.get(w)
        if perm is None:
            size = min(self.buffer_size, self.num_blocks - w * self.buffer_size)
            perm = _rng(*self._key, _WINDOW, w).permutation(size)
            if len(self._windows) >= 8:  # a few windows suffice: positions arrive nearly sorted
                del self._windows[min(self._windows)]
            self._windows[w] = perm
        return perm

    def _stream_to_block(self, q: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self._stream_start, q, side="right") - 1
        return self._stream_first_id[i] + (q - self._stream_start[i])

    def blocks(self, positions) -> np.ndarray:
        """Global block ids at `positions` (int array, each in [0, num_blocks)) of this order."""
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < 0 or pos.max() >= self.num_blocks):
            raise IndexError(f"positions out of range [0, {self.num_blocks})")
        if self.buffer_size == 1:
            return self._stream_to_block(pos)
        b = self.buffer_size
        win, within = np.divmod(pos, b)
        q = np.empty_like(pos)
        for w in np.unique(win).tolist():
            sel = win == w
            q[sel] = w * b + self._window(w)[within[sel]]
        return self._stream_to_block(q)

    def all(self) -> np.ndarray:
        return self.blocks(np.arange(self.num_blocks))


class PhasedOrder:
    """A curriculum's global order (a manifest with `phases`): the phases one after another, each phase's blocks
    in an EpochOrder of their own (its shards permuted, windows shuffled, never across a phase boundary). The
    phases list the shards in manifest order, so phase k holds block ids [start_k, start_k + n_k), which are also
    its positions in the order: the loader can start at a phase's first position and resume anywhere inside."""

    def __init__(self, phase_counts: Sequence[Sequence[int]], *, seed: int = 0, epoch: int = 0,
                 shuffle: bool = True, buffer_size: int = 1024):
        self.orders = [EpochOrder(c, seed=seed, epoch=epoch, shuffle=shuffle, buffer_size=buffer_size, stream=k)
                       for k, c in enumerate(phase_counts)]
        sizes = np.array([o.num_blocks for o in self.orders], dtype=np.int64)
        self.starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        self.num_blocks = int(sizes.sum())

    def __len__(self) -> int:
        return self.num_blocks

    def blocks(self, positions) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < 0 or pos.max() >= self.num_blocks):
            raise IndexError(f"positions out of range [0, {self.num_blocks})")
        phase = np.searchsorted(self.starts, pos, side="right") - 1
        out = np.empty_like(pos)
        for k in np.unique(phase).tolist():
            sel = phase == k
            out[sel] = self.starts[k] + self.orders[k].blocks(pos[sel] - self.starts[k])
        return out

    def all(self) -> np.ndarray:
        return self.blocks(np.arange(self.num_blocks))


@dataclass(frozen=True)
class RankSplit:
    """Rank `rank` of `world_size`: global positions start + k*world_size + rank, k < length.

    `start` is the global position this pass begins at (0 for a fresh epoch; a resume point
    otherwise). drop_remainder=True drops the (N - start) mod W positions at the end of the
    order; False pads to a whole round by wrapping around to the order's first positions.
    """

    num_blocks: int
    world_size: int = 1
    rank: int = 0
    start: int = 0
    drop_remainder: bool = True

    def __post_init__(self):
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank={self.rank} world_size={self.world_size}")
        if self.start < 0 or self.num_blocks < 0:
            raise ValueError("num_blocks and start must be >= 0")

    @property
    def remaining(self) -> int:
        """Global positions left in the epoch from `start`."""
        return max(0, self.num_blocks - self.start)

    @property
    def length(self) -> int:
        """Blocks this rank reads in this pass (the same on every rank)."""
        if self.drop_remainder:
            return self.remaining // self.world_size
        return math.ceil(self.remaining / self.world_size)

    @property
    def dropped(self) -> int:
        """Blocks of the epoch no rank reads (drop_remainder=True)."""
        return self.remaining - self.length * self.world_size if self.drop_remainder else 0

    @property
    def padded(self) -> int:
        """Blocks read twice to even out the ranks (drop_remainder=False)."""
        return 0 if self.drop_remainder else self.length * self.world_size - self.remaining

    def positions(self, k0: int = 0, k1: int | None = None) -> np.ndarray:
        """Global positions of this rank's list entries [k0, k1)."""
        k1 = self.length if k1 is None else min(k1, self.length)
        pos = self.start + np.arange(k0, max(k0, k1), dtype=np.int64) * self.world_size + self.rank
        return pos % self.num_blocks if self.padded else pos

    def worker_chunks(self, worker_id: int = 0, num_workers: int = 1, chunk: int = 1) -> Iterator[np.ndarray]:
        """Positions read by one DataLoader worker: chunk j of the rank's list, for j = worker_id mod
        num_workers. Each chunk is `chunk` entries (the last one may be shorter)."""
        if not 0 <= worker_id < num_workers or chunk < 1:
            raise ValueError(f"bad worker split: worker {worker_id} of {num_workers}, chunk {chunk}")
        n_chunks = math.ceil(self.length / chunk)
        for j in range(worker_id, n_chunks, num_workers):
            yield self.positions(j * chunk, (j + 1) * chunk)
