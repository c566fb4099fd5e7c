"""gpupipe.loader: shard order, rank × worker split, exact resume, EOS-aware fields, zero copy.

Shards are real (StreamPacker + write_manifest); DataLoaders are real, with worker processes
started the default way.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from gpupipe.loader import EpochOrder, RankSplit, ResumableLoader, ShardDataset, to_device  # noqa: E402
from gpupipe.loader.dataset import loss_mask, position_ids  # noqa: E402
from gpupipe.tokens import StreamPacker, write_manifest  # noqa: E402
from gpupipe.tokens.packing import write_parquet_shards  # noqa: E402
from tests.helpers import ROOT as REPO

EOS = 0
pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:.*pin_memory.*:UserWarning")]


def write_shards(out_dir, docs, *, seq_len, dtype=np.uint16, blocks_per_shard=7, vocab_size=1000,
                 parquet_row_group=None):
    """.bin shards, or with parquet_row_group pack's Format B (shard-NNNNN.parquet) of the same blocks."""
    packer = StreamPacker(out_dir, seq_len, EOS, dtype, blocks_per_shard=blocks_per_shard)
    packer.add_many(docs)
    summary = packer.finish()
    extra = None
    if parquet_row_group:
        summary = write_parquet_shards(out_dir, summary, seq_len, dtype, parquet_row_group)
        extra = {"shard_format": "parquet", "row_group_size": parquet_row_group}
    write_manifest(out_dir, summary, seq_len=seq_len, dtype=dtype, vocab_size=vocab_size, eos_id=EOS,
                   tokenizer_sha256="0" * 64, tokenizer_file="tokenizer.json", config_hash="test", extra=extra)
    return out_dir


def shard_docs():
    rng = np.random.default_rng(0)
    return [rng.integers(1, 1000, rng.integers(1, 40)) for _ in range(102)]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """127 blocks of 16 tokens in 19 shards of 7 blocks (the last one shorter): 127 is odd and
    127 mod 3 = 1, so 2 ranks drop a block and 3 ranks pad two."""
    return write_shards(tmp_path_factory.mktemp("shards"), shard_docs(), seq_len=16)


@pytest.fixture(scope="module")
def parquet_shards(tmp_path_factory):
    """The same blocks as `shards`, written as Parquet (pack format: parquet), 3 blocks per row group."""
    out = write_shards(tmp_path_factory.mktemp("parquet"), shard_docs(), seq_len=16, parquet_row_group=3)
    assert not list(out.glob("*.bin")) and len(list(out.glob("*.parquet"))) == 19
    return out


def dataset(shards, **kw):
    kw.setdefault("seed", 3)
    kw.setdefault("buffer_size", 8)
    return ShardDataset(shards, return_block_ids=True, **kw)


def block_ids(batches) -> list[int]:
    """Global block ids of items (batch_size=None: ints) or of collated batches (tensors)."""
    return [i for b in batches for i in np.atleast_1d(np.asarray(b["block_id"])).tolist()]


# -- the pure order ---------------------------------------------------------------------------


def test_epoch_order_is_a_seeded_permutation():
    counts = [7, 0, 7, 3, 12]
    a = EpochOrder(counts, seed=1, epoch=0, buffer_size=4).all()
    assert sorted(a.tolist()) == list(range(29))
    assert a.tolist() == EpochOrder(counts, seed=1, epoch=0, buffer_size=4).all().tolist()
    assert a.tolist() != EpochOrder(counts, seed=1, epoch=1, buffer_size=4).all().tolist()
    assert a.tolist() != EpochOrder(counts, seed=2, epoch=0, buffer_size=4).all().tolist()
    assert EpochOrder(counts, shuffle=False).all().tolist() == list(range(29))
    # any subset of positions maps like the whole order: no dependence on who reads what
    order = EpochOrder(counts, seed=1, epoch=0, buffer_size=4)
    pos = np.array([28, 3, 17, 4, 0])
    assert order.blocks(pos).tolist() == a[pos].tolist()


def test_epoch_order_is_a_shard_permutation_plus_a_window_shuffle():
    order = EpochOrder([5, 5, 5, 5], seed=9, epoch=0, buffer_size=3)
    ids = order.all()
    shard_order = (order._stream_first_id // 5).tolist()
    assert sorted(shard_order) == [0, 1, 2, 3] and shard_order != [0, 1, 2, 3]
    # each block's place in the shard-permuted stream, then: it stays inside its window
    stream_start = dict(zip(shard_order, order._stream_start.tolist()))
    q = np.array([stream_start[s] for s in (ids // 5).tolist()]) + ids % 5
    assert sorted(q.tolist()) == list(range(20))
    assert (q // 3 == np.arange(20) // 3).all()


@pytest.mark.parametrize("n", [0, 1, 5, 12, 13, 29])
@pytest.mark.parametrize("world", [1, 2, 3, 5])
@pytest.mark.parametrize("drop", [True, False])
def test_rank_split_no_duplicate_no_loss_equal_counts(n, world, drop):
    splits = [RankSplit(n, world, r, drop_remainder=drop) for r in range(world)]
    lengths = {s.length for s in splits}
    assert len(lengths) == 1
    got = np.concatenate([s.positions() for s in splits])
    if drop:
        assert sorted(got.tolist()) == list(range(n - n % world)) and splits[0].dropped == n % world
    else:
        assert set(got.tolist()) == set(range(n)) and got.size == n + splits[0].padded
        assert splits[0].padded == (-n) % world


def test_worker_chunks_deal_the_rank_list_round_robin():
    split = RankSplit(40, 2, 1)  # 20 positions: chunks of 4 → 5 chunks over 3 workers
    workers = [split.worker_chunks(w, 3, chunk=4) for w in range(3)]
    dealt = []
    for j in range(10):  # the DataLoader's rotation; only the last workers run out, at the end
        chunk = next(workers[j % 3], None)
        if chunk is None:
            break
        dealt.append(chunk)
    assert np.concatenate(dealt).tolist() == split.positions().tolist() and len(dealt) == 5


def test_resume_position_survives_a_world_size_change():
    n = 50
    order = EpochOrder([n], seed=0, epoch=0, buffer_size=8)
    # 2 ranks consume 7 blocks each, then the job restarts on 3 ranks from position 14
    first = [order.blocks(RankSplit(n, 2, r).positions(0, 7)) for r in range(2)]
    rest = [order.blocks(RankSplit(n, 3, r, start=14).positions()) for r in range(3)]
    seen = np.concatenate(first + rest).tolist()
    assert len(seen) == len(set(seen)) == 14 + 36  # (50 - 14) = 36, a multiple of 3: nothing dropped


# -- the dataset through real DataLoaders -------------------------------------------------------


def test_every_block_exactly_once_across_2_ranks_x_3_workers(shards):
    seen = {}
    for rank in (0, 1):
        ds = dataset(shards, rank=rank, world_size=2)
        ids = block_ids(DataLoader(ds, batch_size=None, num_workers=3))
        assert ids == ds.rank_blocks().tolist()  # the consumer sees the rank's list in order
        seen[rank] = ids
    n = ds.num_blocks
    assert n == 127
    assert len(seen[0]) == len(seen[1]) == n // 2 == len(ds)
    both = seen[0] + seen[1]
    assert len(set(both)) == len(both)
    assert ds.epoch_info()["dropped"] == 1
    last = ds._order().all()[-1]  # the one dropped block is the last of the epoch's order
    assert sorted(both + [last]) == list(range(n))


def test_batched_loader_yields_the_rank_list_in_order_and_matches_the_shards(shards):
    ds = dataset(shards, rank=1, world_size=2)
    expected = ds.rank_blocks()
    batches = list(ResumableLoader(ds, batch_size=4, num_workers=3))
    assert block_ids(batches) == expected.tolist()
    assert all(len(b["block_id"]) == 4 for b in batches[:-1])
    raw = np.concatenate([np.fromfile(p, dtype="<u2") for p in sorted(Path(shards).glob("shard-*.bin"))])
    tokens = torch.cat([b["input_ids"] for b in batches]).numpy()
    assert tokens.dtype == np.int64
    assert (tokens == raw.reshape(-1, 16)[expected]).all()


def test_pad_mode_wraps_to_equal_counts(shards):
    counts = [dataset(shards, rank=r, world_size=3, drop_remainder=False) for r in range(3)]
    n = counts[0].num_blocks
    ids = [block_ids(DataLoader(ds, batch_size=None, num_workers=2)) for ds in counts]
    assert len({len(i) for i in ids}) == 1
    flat = sum(ids, [])
    assert set(flat) == set(range(n)) and len(flat) == n + 2 == n + counts[0].epoch_info()["padded"]


def test_same_seed_same_order_and_epochs_differ(shards):
    a, b = dataset(shards), dataset(shards)
    assert block_ids(DataLoader(a, batch_size=None, num_workers=2)) == a.rank_blocks().tolist()
    assert a.rank_blocks().tolist() == b.rank_blocks().tolist()
    b.set_epoch(1)
    assert sorted(b.rank_blocks().tolist()) == sorted(a.rank_blocks().tolist())
    assert b.rank_blocks().tolist() != a.rank_blocks().tolist()
    assert dataset(shards, seed=4).rank_blocks().tolist() != a.rank_blocks().tolist()


@pytest.mark.parametrize("batch_size,workers_before,workers_after", [(4, 3, 2), (None, 3, 2), (4, 0, 3)])
def test_resume_continues_exactly_even_with_another_worker_count(shards, batch_size, workers_before,
                                                                 workers_after):
    def loader(workers):
        return ResumableLoader(dataset(shards, rank=1, world_size=2), batch_size=batch_size,
                               num_workers=workers)

    full = [block_ids([b]) for b in loader(2)]
    interrupted = loader(workers_before)
    first, k = [], 5
    for i, batch in enumerate(interrupted):
        first.append(batch)
        if i + 1 == k:
            break
    state = interrupted.state_dict()
    assert state["consumed"] == k * (batch_size or 1) and state["epoch"] == 0

    resumed = loader(workers_after)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert [block_ids([b]) for b in first + rest] == full  # the very batches of the uninterrupted run
    assert resumed.epoch == 1 and resumed.consumed == 0


def test_resume_on_another_world_size_neither_repeats_nor_skips(shards):
    seen, states = [], []
    for rank in (0, 1):  # 2 ranks take 5 batches of 3 each, then the job restarts on 3 ranks
        loader = ResumableLoader(dataset(shards, rank=rank, world_size=2), batch_size=3)
        for i, batch in enumerate(loader):
            seen += block_ids([batch])
            if i == 4:
                break
        states.append(loader.state_dict())
    assert states[0]["position"] == states[1]["position"] == 30
    for rank in range(3):
        loader = ResumableLoader(dataset(shards, rank=rank, world_size=3), batch_size=3, num_workers=2)
        loader.load_state_dict(states[0])
        seen += block_ids(loader)
    dropped = (127 - 30) % 3
    assert len(seen) == len(set(seen)) == 127 - dropped


def test_break_then_iterate_again_continues_and_epochs_advance(shards):
    loader = ResumableLoader(dataset(shards), batch_size=8, num_workers=2)
    epoch0 = loader.dataset.rank_blocks().tolist()
    got = []
    for batch in loader:
        got += block_ids([batch])
        break
    for batch in loader:  # picks up after what the loop took, not what workers prefetched
        got += block_ids([batch])
    assert got == epoch0 and loader.epoch == 1
    state = loader.state_dict()
    assert (state["epoch"], state["consumed"]) == (1, 0)
    loader.set_epoch(1)  # same epoch: no reset
    epoch1 = block_ids(loader)
    assert sorted(epoch1) == sorted(epoch0) and epoch1 != epoch0


def test_state_dict_refuses_another_order(shards, tmp_path):
    state = dataset(shards).state_dict(consumed=3)
    with pytest.raises(ValueError, match="seed"):
        dataset(shards, seed=5).load_state_dict(state)
    other = write_shards(tmp_path, [np.arange(1, 60)], seq_len=16)
    with pytest.raises(ValueError, match="manifest_sha"):
        dataset(other).load_state_dict(state)
    with pytest.raises(ValueError, match="consumed"):
        dataset(shards).state_dict(consumed=10_000)


def test_rank_and_world_size_default_from_env(shards, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    ds = dataset(shards)
    assert (ds.rank, ds.world_size) == (1, 2)
    assert ds.rank_blocks().tolist() == dataset(shards, rank=1, world_size=2).rank_blocks().tolist()


# -- Parquet shards (pack format: parquet) ----------------------------------------------------


def test_parquet_shards_give_the_blocks_order_and_resume_of_the_bin_shards(shards, parquet_shards):
    pq_dir = parquet_shards
    a, b = dataset(shards, rank=1, world_size=2), dataset(pq_dir, rank=1, world_size=2, cache_bytes=200)
    assert (b.num_blocks, len(b)) == (a.num_blocks, len(a)) and b.format == "parquet"
    assert b.rank_blocks().tolist() == a.rank_blocks().tolist()
    for blk in (0, 6, 7, 62, 126):   # first/last block of a shard, of a row group
        assert (b.block(blk) == a.block(blk)).all()
    batches = list(ResumableLoader(b, batch_size=4, num_workers=2))
    assert block_ids(batches) == a.rank_blocks().tolist()
    raw = np.concatenate([np.fromfile(p, dtype="<u2") for p in sorted(Path(shards).glob("shard-*.bin"))])
    tokens = torch.cat([x["input_ids"] for x in batches]).numpy()
    assert (tokens == raw.reshape(-1, 16)[a.rank_blocks()]).all()
    assert 0 < b._cache.held <= 200   # row groups decoded and kept within the bound
    # resume: a state taken on the Parquet copy continues exactly
    loader = ResumableLoader(dataset(pq_dir, rank=1, world_size=2), batch_size=4)
    first = [x for _, x in zip(range(3), loader)]
    resumed = ResumableLoader(dataset(pq_dir, rank=1, world_size=2), batch_size=4, num_workers=1)
    resumed.load_state_dict(loader.state_dict())
    assert block_ids(first + list(resumed)) == a.rank_blocks().tolist()


def test_parquet_shard_that_disagrees_with_the_manifest_is_refused(parquet_shards, tmp_path):
    import json
    import shutil

    pq_dir = shutil.copytree(parquet_shards, tmp_path / "pq")
    m = json.loads((pq_dir / "manifest.json").read_text())
    m["shards"][1]["sequences"] += 1
    (pq_dir / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ValueError, match=r"shard-00001\.parquet: 7 rows, manifest says 8 blocks"):
        ShardDataset(pq_dir)
    m["shard_format"] = "arrow"
    (pq_dir / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ValueError, match="shard_format 'arrow'; ShardDataset reads bin and parquet shards"):
        ShardDataset(pq_dir)


# -- fields: position ids, loss mask, dtypes --------------------------------------------------


def test_position_ids_and_loss_mask_reset_after_eos(tmp_path):
    # stream: 1 2 3 E 4 5 E 6 | 7 8 9 10 E 11 12 E | 13 E (dropped remainder)
    d = write_shards(tmp_path, [np.array([1, 2, 3]), np.array([4, 5]), np.arange(6, 11), np.array([11, 12]),
                                np.array([13])], seq_len=8)
    ds = ShardDataset(d, shuffle=False, return_positions=True, return_loss_mask=True)
    items = list(ds)
    assert [i["input_ids"].tolist() for i in items] == [[1, 2, 3, 0, 4, 5, 0, 6], [7, 8, 9, 10, 0, 11, 12, 0]]
    assert items[0]["position_ids"].tolist() == [0, 1, 2, 3, 0, 1, 2, 0]
    assert items[1]["position_ids"].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert items[0]["loss_mask"].tolist() == [1, 1, 1, 0, 1, 1, 0, 1]
    assert items[1]["loss_mask"].tolist() == [1, 1, 1, 1, 0, 1, 1, 0]
    assert items[0]["position_ids"].dtype == torch.int64 and items[0]["loss_mask"].dtype == torch.float32
    # the numpy helpers are what the items use
    assert position_ids(np.array([0, 5, 0, 0, 7]), 0).tolist() == [0, 0, 1, 0, 0]
    assert loss_mask(np.array([3, 0, 4]), 0).tolist() == [1, 0, 1]


@pytest.mark.parametrize("dtype,torch_dtype", [(np.uint16, torch.uint16), (np.uint32, torch.uint32)])
def test_raw_items_are_zero_copy_views_and_default_items_int64(tmp_path, dtype, torch_dtype):
    d = write_shards(tmp_path, [np.arange(1, 100) * 7], seq_len=16, dtype=dtype, vocab_size=1000)
    raw = ShardDataset(d, shuffle=False, raw=True)
    item = next(iter(raw))
    assert item["input_ids"].dtype == torch_dtype
    assert item["input_ids"].data_ptr() == raw.block(0).ctypes.data  # the memmap itself
    wide = next(iter(ShardDataset(d, shuffle=False)))["input_ids"]
    assert wide.dtype == torch.int64 and wide.tolist() == item["input_ids"].to(torch.int64).tolist()
    batch = next(iter(DataLoader(raw, batch_size=2, num_workers=1)))  # collate handles uint16/32
    assert batch["input_ids"].dtype == torch_dtype and batch["input_ids"].shape == (2, 16)


def test_to_device_cpu_is_zero_copy_on_the_memmap(shards):
    ds = dataset(shards)
    mm = ds._shard(0)
    view = mm[2:6]  # four consecutive blocks, straight from the memmap
    t = to_device(view, "cpu")
    assert t.data_ptr() == view.ctypes.data and t.dtype == torch.uint16
    t2 = to_device({"input_ids": ds.block(3)}, "cpu")["input_ids"]
    assert t2.data_ptr() == ds.block(3).ctypes.data
    ro = np.memmap(Path(shards) / "shard-00000.bin", dtype="<u2", mode="r")
    assert to_device(ro, "cpu").data_ptr() == ro.ctypes.data  # read-only maps too, without a copy
    assert to_device(view, "cpu", widen=True).dtype == torch.int64
    assert to_device([ds.block(0), ds.block(1)], "cpu").shape == (2, 16)


def test_imports_stay_light():
    code = ("import sys, gpupipe.loader, gpupipe.loader.sampler; "
            "import importlib.util as u; "
            f"s = u.spec_from_file_location('dev', {str(REPO / 'gpupipe/loader/device.py')!r}); "
            "m = u.module_from_spec(s); s.loader.exec_module(m); "
            "print(sorted(k for k in ('torch', 'cupy', 'pydantic', 'yaml') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


# -- persistent workers (seed 000 §18.17's DataLoader settings, #35 part 7) ----------------------------------------

SEED_000_SETTINGS = {"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True}


def passes(loader, n: int) -> list[list[int]]:
    return [block_ids(loader) for _ in range(n)]


def test_persistent_workers_give_every_epoch_its_own_order_on_the_same_workers(shards):
    plain = ResumableLoader(dataset(shards), batch_size=4, num_workers=2)
    loader = ResumableLoader(dataset(shards), batch_size=4, **SEED_000_SETTINGS)
    expected = passes(plain, 3)
    got = [block_ids(loader)]
    workers = [w.pid for w in loader._loader._iterator._workers]
    got += passes(loader, 2)
    assert got == expected and loader.epoch == 3
    assert len({tuple(e) for e in got}) == 3 and all(sorted(e) == sorted(got[0]) for e in got)
    assert [w.pid for w in loader._loader._iterator._workers] == workers   # the same processes served them all
    loader.set_epoch(7)
    seven = dataset(shards)
    seven.set_epoch(7)
    assert block_ids(loader) == seven.rank_blocks().tolist()


def test_persistent_workers_resume_exactly_after_a_break_and_from_a_state_dict(shards):
    loader = ResumableLoader(dataset(shards, rank=1, world_size=2), batch_size=3, **SEED_000_SETTINGS)
    full = loader.dataset.rank_blocks().tolist()
    got = []
    for i, batch in enumerate(loader):
        got += block_ids([batch])
        if i == 3:
            break
    state = loader.state_dict()
    for i, batch in enumerate(loader):   # the same workers, which had prefetched further: continues after 4 batches
        got += block_ids([batch])
        if i == 1:
            break
    assert got == full[:18]
    resumed = ResumableLoader(dataset(shards, rank=1, world_size=2), batch_size=3, **SEED_000_SETTINGS)
    resumed.load_state_dict(state)
    assert block_ids(resumed) == full[12:]
    assert resumed.epoch == 1
    nxt = dataset(shards, rank=1, world_size=2)
    nxt.set_epoch(1)
    assert block_ids(resumed) == nxt.rank_blocks().tolist()


def test_seed_000_settings_as_written(shards):
    """Seed 000 §18.17: batch_size=32, shuffle=True, num_workers=8, pin_memory=True, prefetch_factor=4,
    persistent_workers=True."""
    settings = dict(batch_size=32, shuffle=True, num_workers=8, pin_memory=True, prefetch_factor=4,
                    persistent_workers=True)
    loader = ResumableLoader(dataset(shards), **settings)
    plain = ResumableLoader(dataset(shards), batch_size=32, num_workers=2)
    assert passes(loader, 2) == passes(plain, 2)
    with pytest.raises(ValueError, match="the dataset's shuffle"):
        ResumableLoader(dataset(shards, shuffle=False), **settings)


def test_persistent_workers_without_workers_are_refused(shards):
    with pytest.raises(ValueError, match="num_workers > 0"):
        ResumableLoader(dataset(shards), batch_size=4, persistent_workers=True)


def test_persistent_spawned_workers_read_each_pass_from_shared_memory(shards):
    """Spawned workers get the dataset pickled: the pass state crosses as shared memory, not as a copy."""
    plain = ResumableLoader(dataset(shards), batch_size=4, num_workers=2)
    loader = ResumableLoader(dataset(shards), batch_size=4, multiprocessing_context="spawn", **SEED_000_SETTINGS)
    assert passes(loader, 2) == passes(plain, 2)
