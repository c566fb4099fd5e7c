"""A curriculum's shards (manifest `phases`): blocks shuffled within their phase, phases in order, a start at a
phase boundary, an exact resume inside a phase, with any world size (#34)."""

import numpy as np
import pytest

from gpupipe.loader.sampler import EpochOrder, PhasedOrder, RankSplit
from gpupipe.tokens.manifest import write_manifest
from gpupipe.tokens.packing import StreamPacker


def test_phased_order_keeps_each_phase_in_its_place():
    counts = [[3, 5, 2], [4, 4], [1, 6]]
    order = PhasedOrder(counts, seed=5, epoch=1, buffer_size=3)
    blocks = order.all()
    sizes = [sum(c) for c in counts]
    edges = np.cumsum([0] + sizes)
    for k in range(3):
        assert sorted(blocks[edges[k]:edges[k + 1]]) == list(range(edges[k], edges[k + 1]))
    assert not np.array_equal(blocks, np.arange(edges[-1]))                 # shuffled within phases
    assert np.array_equal(order.blocks([12, 3, 0]), blocks[[12, 3, 0]])     # random access = the full order
    assert not np.array_equal(PhasedOrder(counts, seed=5, epoch=2, buffer_size=3).all(), blocks)
    # a one-phase curriculum draws its own stream, not the plain order's
    assert len(PhasedOrder([[3, 5, 2]], seed=5, buffer_size=3).all()) == len(EpochOrder([3, 5, 2], seed=5).all())


@pytest.fixture
def shards(tmp_path):
    """Three phases of 40, 25 and 13 blocks of 8 tokens (blocks_per_shard 6): ids are ascending in the stream."""
    p = StreamPacker(tmp_path, 8, 0, np.uint16, 6, cards=True)
    rng = np.random.default_rng(0)
    for name, tokens in (("general", 325), ("rich", 205), ("anneal", 110)):
        p.start_phase(name)
        left = tokens
        while left > 0:
            n = int(min(left - 1, rng.integers(3, 30))) if left > 1 else 1
            p.add_many([rng.integers(1, 60000, size=max(n, 1))], name)
            left -= max(n, 1) + 1
    s = p.finish()
    write_manifest(tmp_path, s, seq_len=8, dtype="uint16", vocab_size=65535, eos_id=0, tokenizer_sha256="t",
                   tokenizer_file="tokenizer.json", config_hash="c",
                   extra={"phases": s["phases"], "tokens_per_group": s["tokens_per_group"]})
    return tmp_path


def test_start_at_a_phase_and_resume_inside_it(shards):
    pytest.importorskip("torch")
    from gpupipe.loader import ResumableLoader, ShardDataset
    from gpupipe.tokens.verify import verify_shards

    assert verify_shards(shards) == []
    ds = ShardDataset(shards, seed=2, buffer_size=4, return_block_ids=True)
    phases = ds.phase_blocks()
    assert list(phases) == ["general", "rich", "anneal"] and phases["rich"] == (40, 25)
    full = ds.rank_blocks().tolist()
    loader = ResumableLoader(ShardDataset(shards, seed=2, buffer_size=4, return_block_ids=True), batch_size=3)
    loader.start_at_phase("rich")
    got = []
    for batch in loader:
        got += batch["block_id"].tolist()
        if len(got) >= 9:
            break
    assert got == full[40:49] and all(40 <= b < 65 for b in got)
    state = loader.state_dict()
    # the same run, two ranks now: together they read exactly the rest, in lockstep
    rest = []
    for rank in range(2):
        ds2 = ShardDataset(shards, seed=2, buffer_size=4, return_block_ids=True, rank=rank, world_size=2)
        ds2.load_state_dict(state)
        rest.append([int(item["block_id"]) for item in ds2])
    merged = [b for pair in zip(*rest) for b in pair]
    assert merged == full[49:49 + len(merged)] and len(merged) == 2 * ((len(full) - 49) // 2)
    with pytest.raises(ValueError, match="no phase 'nope'"):
        ds.start_at_phase("nope")


def test_rank_split_from_a_phase_boundary():
    split = RankSplit(78, world_size=3, rank=1, start=40)
    assert split.positions().tolist() == list(range(41, 78, 3))[:split.length]
