"""ShardDataset: a torch IterableDataset over gpupipe token shards; ResumableLoader (DESIGN.md, "Loader").

Ordering lives in `sampler.py` (pure numpy); this module opens the shards (np.memmap, lazily,
in whichever process reads them), turns blocks into tensors, and keeps the resume bookkeeping.

Order the consumer sees. torch's DataLoader (in_order=True, the default) asks its workers for
items in strict rotation: worker 0, 1, ..., n-1, 0, ... With batch_size=None each request is
one item; with batch_size=B each worker collates B consecutive items of ITS OWN stream. So the
dataset deals the rank's list to workers in chunks of `batch_size` blocks (chunk j → worker
j mod n): the consumer then receives the rank's list in order, item by item or as batches of B
consecutive blocks, whatever the number of workers. This is why "consumed n blocks" is a prefix
of the rank's list, why one integer is a complete resume state, and why that state is valid
under another worker count. (A DataLoader whose batch_size differs from the dataset's
`batch_size` would interleave blocks across workers; ResumableLoader keeps the two equal.)

Resume. Workers run in other processes, so only the consumer knows how far training got.
ResumableLoader counts blocks as the loop takes them and turns the count into a state dict;
without it, count yourself and call `dataset.state_dict(consumed=n)`.

    ds = ShardDataset("shards/", seed=1234, return_positions=True)
    loader = ResumableLoader(ds, batch_size=8, num_workers=4, pin_memory=True)
    loader.load_state_dict(ckpt["loader"])          # optional: continue mid-epoch
    # or ds.start_at_phase("anneal") before the loader: a curriculum's phase (manifest `phases`) from its start
    for epoch in range(loader.epoch, epochs):
        loader.set_epoch(epoch)                     # no-op for the epoch being resumed
        for batch in loader:
            ...; ckpt["loader"] = loader.state_dict()
"""
from __future__ import annotations

import hashlib
import math
import os

import numpy as np

try:
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info
except ImportError as _e:  # torch is not a base dependency: only the loader uses it
    raise ImportError(f"gpupipe.loader (ShardDataset, ResumableLoader) needs torch, which the base install leaves "
                      f"out: pip install 'gpupipe[torch]' (or install the torch build for your CUDA or CPU first) "
                      f"({_e})") from None

from gpupipe.io import storage
from gpupipe.tokens.manifest import read_manifest
from gpupipe.tokens.packing import MANIFEST_FILE, shard_dtype

from .parquet import ParquetShard, check_parquet_shard
from .remote import ChunkCache, RemoteShard
from .sampler import EpochOrder, PhasedOrder, RankSplit

STATE_FORMAT = "gpupipe-loader/1"
DEFAULT_CACHE_BYTES = 256 << 20   # per process, shards at a URL or in Parquet only (loader/remote.py, parquet.py)
SHARD_FORMATS = ("bin", "parquet")
# keys that fix the epoch's global order: a state taken under other values cannot be resumed
_ORDER_KEYS = ("manifest_sha", "seed", "shuffle", "buffer_size", "drop_remainder")


def position_ids(tokens: np.ndarray, eos_id: int) -> np.ndarray:
    """0, 1, 2, ... per block, restarting at 0 on the token after each EOS; the EOS keeps its
    document's position (Megatron's reset_position_ids). A block that starts mid-document
    starts at 0 too: positions are relative to what the model sees."""
    n = tokens.shape[-1]
    start = np.zeros(n, dtype=np.int64)
    after = np.flatnonzero(tokens[:-1] == eos_id) + 1  # first token of each new document
    start[after] = after
    np.maximum.accumulate(start, out=start)
    return np.arange(n, dtype=np.int64) - start


def loss_mask(tokens: np.ndarray, eos_id: int) -> np.ndarray:
    """Megatron's eod_mask_loss: 0.0 where the INPUT token is EOS, 1.0 elsewhere.

    loss_mask[i] weights the prediction made at position i (of token i+1): the model is not
    trained to guess the next document's first token from the previous document, while the
    EOS itself stays a target (predicted at i-1, weight 1). For HF-style labels:
    labels = input_ids.clone(); labels[..., 1:][loss_mask[..., :-1] == 0] = -100.
    """
    return (tokens != eos_id).astype(np.float32)


def _default_rank_world(rank, world_size) -> tuple[int, int]:
    """torch.distributed when initialized, else env RANK / WORLD_SIZE, else 0 / 1."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        r, w = torch.distributed.get_rank(), torch.distributed.get_world_size()
    else:
        r, w = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    return int(r if rank is None else rank), int(w if world_size is None else world_size)


class ShardDataset(IterableDataset):
    """Blocks of a shard directory (manifest.json + shard-NNNNN.bin or .parquet), one dict per block.

    Items: {"input_ids": int64 tensor (seq_len,)} plus, when asked, "position_ids" (int64),
    "loss_mask" (float32), "block_id" (the global block index: manifest order). input_ids
    needs one widening copy (shards are uint16/uint32); raw=True instead gives the zero-copy
    view of the memmap as a torch.uint16/uint32 tensor (widen later, e.g. on the GPU).

    `shard_dir` may be a URL (s3://..., any fsspec protocol): blocks are then read by ranged requests of
    `chunk_blocks` blocks (default `buffer_size`) through an in-memory cache of at most `cache_bytes` per process
    (loader/remote.py); items, order and resume state are those of the local copy.

    Parquet shards (`pack: {format: parquet}`) are read too: a row group is decoded whole on first use and kept in
    the same cache of `cache_bytes` (loader/parquet.py); the blocks are those of the .bin shards of the same run.

    Every rank gets `len(self)` blocks per epoch; `epoch_info()` says how many were dropped or
    padded to get there. Set `batch_size` to the DataLoader's batch_size when not using
    ResumableLoader (see the module doc for why).
    """

    def __init__(self, shard_dir, *, seed: int = 0, shuffle: bool = True, buffer_size: int = 1024,
                 rank: int | None = None, world_size: int | None = None, drop_remainder: bool = True,
                 return_positions: bool = False, return_loss_mask: bool = False, raw: bool = False,
                 return_block_ids: bool = False, batch_size: int | None = None,
                 cache_bytes: int = DEFAULT_CACHE_BYTES, chunk_blocks: int | None = None):
        self.shard_dir = os.fspath(shard_dir)
        m = read_manifest(self.shard_dir)
        self.manifest_sha = hashlib.sha256(storage.read_bytes(storage.join(self.shard_dir, MANIFEST_FILE))).hexdigest()
        # shards at a URL (s3://...): ranged reads of chunk_blocks blocks (default: the shuffle window), cached
        self.remote = storage.is_url(self.shard_dir)
        self.format = m.get("shard_format", "bin")
        if self.format not in SHARD_FORMATS:
            raise ValueError(f"{self.shard_dir}: manifest shard_format {self.format!r}; ShardDataset reads "
                             f"{' and '.join(SHARD_FORMATS)} shards")
        self.cache_bytes, self.chunk_blocks = int(cache_bytes), int(chunk_blocks or buffer_size)
        self._cache = ChunkCache(self.cache_bytes) if self._cached else None
        self.seq_len, self.eos_id = int(m["seq_len"]), int(m["eos_id"])
        self.dtype = shard_dtype(m["dtype"])
        self.files = [s["file"] for s in m["shards"]]
        self.counts = np.array([int(s["sequences"]) for s in m["shards"]], dtype=np.int64)
        self._first_id = np.concatenate(([0], np.cumsum(self.counts)[:-1])).astype(np.int64)
        self.num_blocks = int(self.counts.sum())
        # a curriculum (mixture phases): blocks are shuffled within their phase, phases come in order
        self.phases = [(p["name"], [self.files.index(f) for f in p["shards"]]) for p in m.get("phases") or []]
        self._check_files()

        self.rank, self.world_size = _default_rank_world(rank, world_size)
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.seed, self.shuffle, self.buffer_size = int(seed), bool(shuffle), int(buffer_size)
        self.drop_remainder = bool(drop_remainder)
        self.return_positions, self.return_loss_mask = return_positions, return_loss_mask
        self.raw, self.return_block_ids = raw, return_block_ids
        self.batch_size = batch_size
        RankSplit(self.num_blocks, self.world_size, self.rank)  # validates rank / world_size

        self.epoch = 0
        self._start = 0  # global position where the next pass begins
        self._base = 0   # blocks of this epoch this rank had consumed at _start
        self._mmaps: dict[int, np.ndarray] = {}
        # (epoch, start, base) in shared memory, read by every pass in the workers: with persistent workers the
        # workers keep the copy of the dataset they started with, so the pass's order comes through this instead
        self._shared: torch.Tensor | None = None

    @property
    def _cached(self) -> bool:
        """Blocks come through the chunk cache (a URL, or Parquet: neither can be memory-mapped)."""
        return self.remote or self.format == "parquet"

    def _check_files(self) -> None:
        block_bytes = self.seq_len * self.dtype.itemsize
        for name, n in zip(self.files, self.counts.tolist()):
            path = storage.join(self.shard_dir, name)
            if self.format == "parquet":  # a missing file: FileNotFoundError, as for .bin
                check_parquet_shard(path, name, n, self.seq_len, self.dtype.name)
                continue
            size = storage.size(path)  # FileNotFoundError for a missing shard
            if size != n * block_bytes:
                raise ValueError(f"{name}: {size} bytes, manifest says {n} blocks of {block_bytes} bytes")

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_mmaps"] = {}  # each process maps the shards itself
        state["_cache"] = ChunkCache(self.cache_bytes) if self._cached else None   # and caches its own chunks
        return state

    # -- order -----------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's order; a new epoch starts from its beginning, the current one
        (e.g. just loaded from a state dict) keeps its resume point."""
        if epoch != self.epoch:
            self.epoch, self._start, self._base = int(epoch), 0, 0

    def _order(self) -> EpochOrder | PhasedOrder:
        if self.phases:
            return PhasedOrder([self.counts[shards] for _, shards in self.phases], seed=self.seed, epoch=self.epoch,
                               shuffle=self.shuffle, buffer_size=self.buffer_size)
        return EpochOrder(self.counts, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle,
                          buffer_size=self.buffer_size)

    def phase_blocks(self) -> dict[str, tuple[int, int]]:
        """Per phase of a curriculum: its first global position (= block id) and its number of blocks."""
        out, start = {}, 0
        for name, shards in self.phases:
            n = int(self.counts[shards].sum())
            out[name], start = (start, n), start + n
        return out

    def start_at_phase(self, name: str) -> None:
        """Begin the current epoch at the first block of phase `name` (as if every rank had consumed the earlier
        phases: a state dict taken later resumes from there, inside the phase, exactly)."""
        phases = self.phase_blocks()
        if name not in phases:
            raise ValueError(f"no phase {name!r} in {self.shard_dir} (phases: {list(phases) or 'none'})")
        start = phases[name][0]
        self._start, self._base = start, start // self.world_size   # _base: a count label, as in a resume

    def _split(self, start: int | None = None) -> RankSplit:
        return RankSplit(self.num_blocks, self.world_size, self.rank,
                         self._start if start is None else start, self.drop_remainder)

    def __len__(self) -> int:
        """Blocks per rank per epoch."""
        return self._split(0).length

    def epoch_info(self) -> dict:
        split = self._split(0)
        return {"epoch": self.epoch, "blocks": self.num_blocks, "world_size": self.world_size,
                "per_rank": split.length, "dropped": split.dropped, "padded": split.padded}

    def rank_blocks(self) -> np.ndarray:
        """Block ids the next pass yields on this rank, in the order the consumer sees them."""
        return self._order().blocks(self._split().positions())

    # -- reading ---------------------------------------------------------------------------

    def _shard(self, s: int) -> np.ndarray:
        mm = self._mmaps.get(s)
        if mm is None and self.format == "parquet":
            mm = self._mmaps[s] = ParquetShard(storage.join(self.shard_dir, self.files[s]), int(self.counts[s]),
                                               self.seq_len, self.dtype, self._cache)
        elif mm is None and self.remote:
            mm = self._mmaps[s] = RemoteShard(storage.join(self.shard_dir, self.files[s]), int(self.counts[s]),
                                              self.seq_len, self.dtype, self.chunk_blocks, self._cache)
        elif mm is None:
            # mode "c" (copy-on-write): a writable view, so torch.from_numpy neither copies nor
            # warns; nothing is ever written back to the file
            mm = np.memmap(os.path.join(self.shard_dir, self.files[s]), dtype=self.dtype, mode="c",
                           shape=(int(self.counts[s]), self.seq_len))
            self._mmaps[s] = mm = np.asarray(mm)  # plain ndarray view: cheaper slicing, keeps the map
        return mm

    def block(self, block_id: int) -> np.ndarray:
        """The memmap view (no copy) of one block, by global id (of the cached chunk or row group when the
        shards are at a URL or in Parquet)."""
        s = int(np.searchsorted(self._first_id, block_id, side="right")) - 1
        if not 0 <= block_id < self.num_blocks:
            raise IndexError(f"block {block_id} out of range [0, {self.num_blocks})")
        return self._shard(s)[block_id - self._first_id[s]]

    def _item(self, block_id: int) -> dict:
        view = self.block(block_id)
        ids = view if self.raw else view.astype(np.int64)
        item = {"input_ids": torch.from_numpy(ids)}
        if self.return_positions:
            item["position_ids"] = torch.from_numpy(position_ids(view, self.eos_id))
        if self.return_loss_mask:
            item["loss_mask"] = torch.from_numpy(loss_mask(view, self.eos_id))
        if self.return_block_ids:
            item["block_id"] = block_id
        return item

    def share_pass_state(self) -> None:
        """Keep the next pass's (epoch, start, base) in shared memory (before worker processes start), so that
        workers that live across passes (DataLoader persistent_workers=True) read each pass's from there."""
        if self._shared is None:
            self._shared = torch.zeros(3, dtype=torch.int64).share_memory_()
        self.publish_pass_state()

    def publish_pass_state(self) -> None:
        """Write the next pass's (epoch, start, base) where persistent workers read it (share_pass_state)."""
        if self._shared is not None:
            self._shared.copy_(torch.tensor([self.epoch, self._start, self._base], dtype=torch.int64))

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if self._shared is not None and info is not None:   # a worker: this pass's state, not the one it began with
            self.epoch, self._start, self._base = (int(v) for v in self._shared.tolist())
        order = self._order()
        for positions in self._split().worker_chunks(worker, workers, self.batch_size or 1):
            for block_id in order.blocks(positions).tolist():
                yield self._item(block_id)

    # -- resume ----------------------------------------------------------------------------

    def _position(self, consumed: int) -> int:
        """Global position reached once this rank has consumed `consumed` blocks of the epoch."""
        length = self._split().length
        if not self._base <= consumed <= self._base + length:
            raise ValueError(f"consumed={consumed} outside this pass [{self._base}, {self._base + length}]")
        return self._start + (consumed - self._base) * self.world_size

    def _rebase(self, consumed: int) -> None:
        """Make the next pass begin after `consumed` blocks of the epoch."""
        self._start, self._base = self._position(consumed), consumed

    def state_dict(self, consumed: int) -> dict:
        """Resume state after this rank consumed `consumed` blocks of the current epoch (counting
        those before a resume; see `consumed_at_start`)."""
        return {"format": STATE_FORMAT, "epoch": self.epoch, "consumed": int(consumed),
                "position": self._position(consumed), "world_size": self.world_size,
                "rank": self.rank, "num_blocks": self.num_blocks, "seed": self.seed,
                "shuffle": self.shuffle, "buffer_size": self.buffer_size,
                "drop_remainder": self.drop_remainder, "manifest_sha": self.manifest_sha}

    def load_state_dict(self, state: dict) -> None:
        """Continue where `state` left off. The world size may differ: all ranks consumed the
        same count in lockstep, so `position` (global) is where every new rank resumes."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a {STATE_FORMAT} state: {state.get('format')!r}")
        mine = self.state_dict(self._base)
        clash = [k for k in _ORDER_KEYS if state[k] != mine[k]]
        if clash:
            raise ValueError("state was taken with another data order: "
                             + ", ".join(f"{k} {state[k]!r} != {mine[k]!r}" for k in clash))
        self.epoch, self._start = int(state["epoch"]), int(state["position"])
        same_world = state["world_size"] == self.world_size
        self._base = int(state["consumed"]) if same_world else self._start // self.world_size

    @property
    def consumed_at_start(self) -> int:
        """Blocks of the current epoch consumed before the next pass (0, or the resume point)."""
        return self._base


class ResumableLoader:
    """A DataLoader over a ShardDataset that counts what the training loop takes.

    Iterating yields the rest of the current epoch; when it runs out, the epoch advances. A
    `break` leaves the count where the loop stopped, so iterating again (or a state dict)
    continues from there, not from where the workers had prefetched. Workers are not
    persistent by default; with `persistent_workers=True` (seed 000 §18.17's DataLoader settings) one DataLoader
    and its worker processes serve every pass, each pass's epoch and resume point reaching the workers through
    shared memory (ShardDataset.share_pass_state): the same batches as without, each epoch its own order, a break
    or a state dict resumed exactly (the DataLoader's reset discards what the workers had prefetched).
    """

    def __init__(self, dataset: ShardDataset, batch_size: int | None = None, **dataloader_kwargs):
        shuffle = dataloader_kwargs.pop("shuffle", None)   # seed 000 §18.17 passes it: the dataset's own setting
        if shuffle is not None and bool(shuffle) != dataset.shuffle:
            raise ValueError(f"shuffle={shuffle} but the dataset's shuffle is {dataset.shuffle}: the order is the "
                             f"dataset's (ShardDataset(shuffle=...)); a DataLoader cannot shuffle an iterable dataset")
        self._persistent = bool(dataloader_kwargs.get("persistent_workers"))
        if self._persistent and not dataloader_kwargs.get("num_workers"):
            raise ValueError("persistent_workers=True needs num_workers > 0 (torch's DataLoader says the same)")
        if self._persistent:
            dataset.share_pass_state()
        self._loader: DataLoader | None = None
        if dataloader_kwargs.get("in_order") is False:
            raise ValueError("in_order=False breaks the worker rotation the order relies on")
        if dataset.batch_size not in (None, batch_size):
            raise ValueError(f"dataset.batch_size={dataset.batch_size} != batch_size={batch_size}")
        dataset.batch_size = batch_size
        self.dataset, self.batch_size, self._kwargs = dataset, batch_size, dataloader_kwargs
        self._consumed = dataset.consumed_at_start

    @property
    def epoch(self) -> int:
        return self.dataset.epoch

    @property
    def consumed(self) -> int:
        """Blocks of the current epoch taken by the loop on this rank."""
        return self._consumed

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.dataset.epoch:
            self.dataset.set_epoch(epoch)
            self._consumed = 0

    def __len__(self) -> int:
        """Batches per epoch (drop_last in the DataLoader kwargs is honoured)."""
        n, b = len(self.dataset), self.batch_size or 1
        return n // b if self._kwargs.get("drop_last") else math.ceil(n / b)

    def _data_loader(self) -> DataLoader:
        """A new DataLoader per pass; with persistent workers one for all passes (its workers stay up)."""
        if not self._persistent:
            return DataLoader(self.dataset, batch_size=self.batch_size, **self._kwargs)
        if self._loader is None:
            self._loader = DataLoader(self.dataset, batch_size=self.batch_size, **self._kwargs)
        return self._loader

    def __iter__(self):
        ds = self.dataset
        ds._rebase(self._consumed)
        ds.publish_pass_state()   # before the DataLoader's (re)start sends the workers into the next pass
        epoch = ds.epoch
        for batch in self._data_loader():
            self._consumed += self._count(batch)
            yield batch
        self.set_epoch(epoch + 1)  # ran out (a break never gets here): the epoch is done

    def _count(self, batch) -> int:
        if self.batch_size is None:
            return 1
        return len(batch["input_ids"]) if isinstance(batch, dict) else len(batch)

    def start_at_phase(self, name: str) -> None:
        """Continue from the first block of a curriculum's phase (ShardDataset.start_at_phase)."""
        self.dataset.start_at_phase(name)
        self._consumed = self.dataset.consumed_at_start

    def state_dict(self) -> dict:
        return self.dataset.state_dict(self._consumed)

    def load_state_dict(self, state: dict) -> None:
        self.dataset.load_state_dict(state)
        self._consumed = self.dataset.consumed_at_start
