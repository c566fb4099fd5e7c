"""A curriculum through `gpupipe run`: the issue's phases config as written, shards per phase, the manifest's
phases and data cards checked by `gpupipe verify`, byte-identical shards for 1 and 2 workers, the loader resuming
inside the second phase (#34)."""

import json
from pathlib import Path

import numpy as np
import pytest

from gpupipe.cli import main
from gpupipe.run.pipeline import check_conservation
from gpupipe.tokens.manifest import shard_card
from gpupipe.tokens.tokenizer import EOS_TOKEN
from gpupipe.tokens.verify import verify_shards
from tests.helpers import run_config

from .test_mixture_groups import ISSUE_PHASES


def write_corpus(path: Path, seed: int = 0) -> Path:
    """web and books pages with a lang and a quality score (a classifier's column)."""
    rng = np.random.default_rng(seed)
    words = "the a data pipeline token model web book wiki science answer question 数据 模型".split()
    with open(path, "w", encoding="utf-8") as f:
        for i in range(160):
            source = "books" if i % 8 == 0 else "web"
            text = f"{source} {i} " + " ".join(rng.choice(words, size=int(rng.integers(3, 80))))
            f.write(json.dumps({"id": f"d{i}", "source": source, "lang": "zh" if i % 5 == 0 else "en",
                                "quality_score": round(float(rng.random()), 3), "text": text},
                               ensure_ascii=False) + "\n")
    return path


STAGES = [{"tokenize": {"vocab_size": 400, "min_frequency": 0, "special_tokens": [EOS_TOKEN]}},
          {"mixture": ISSUE_PHASES}, {"pack": {"seq_len": 64, "blocks_per_shard": 64}}]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("phases")
    src = write_corpus(tmp / "in.jsonl")
    return [run_config(tmp, f"w{w}", src, STAGES, partition_docs=37, workers=w) for w in (1, 2)]


def test_phases_lay_out_the_stream_phase_by_phase(runs):
    out = runs[0]
    m = json.loads((out / "shards" / "manifest.json").read_text())
    assert verify_shards(out / "shards") == [] and main(["verify", str(out / "shards")]) == 0
    assert [p["name"] for p in m["phases"]] == ["general", "anneal"]
    general, anneal = m["phases"]
    assert general["shards"] + anneal["shards"] == [s["file"] for s in m["shards"]]   # in order, no straddling
    assert set(anneal["tokens_by_group"]) == {"books"}
    for s in m["shards"]:
        phase = "general" if s["file"] in general["shards"] else "anneal"
        assert s["card"]["phase"] == phase and sum(s["card"]["tokens_by_group"].values()) == s["tokens"]
        card = shard_card(m, s["file"])
        assert card["tokenizer_sha256"] == m["tokenizer_sha256"] and card["config_hash"] == m["config_hash"]
        assert card["gpupipe_version"] == m["gpupipe_version"] and card["phase"] == phase
        q = s["card"]["quality"]["quality_score"]
        assert 0 < q["mean"] < 1 and sum(q["histogram"]) == q["scored_tokens"] == s["tokens"]
    ledger = m["mixture"]
    for p, lp in zip(m["phases"], ledger["phases"]):
        assert p["tokens_by_group"] == {g: r["tokens"] for g, r in lp["sources"].items()}
        assert abs(p["stream_tokens"] - lp["target_tokens"]) <= 200           # within a document
        assert p["dropped_remainder_tokens"] == p["stream_tokens"] % 64
        for g, r in lp["sources"].items():
            assert abs(r["share"] - r["target_share"]) * 100 <= 0.5, (p["name"], g, r)
    assert general["stream_tokens"] / m["stream_tokens"] == pytest.approx(0.8, abs=0.005)
    stats = json.loads((out / "stats.json").read_text())
    assert check_conservation(stats["stages"]) == [] and stats["conservation_ok"]
    mix = stats["stages"][2]["extra"]
    assert mix["share_general_web"] == ledger["phases"][0]["sources"]["web"]["share"]
    assert mix["target_share_anneal_books"] == 1.0


def test_one_and_two_workers_write_the_same_bytes(runs):
    one, two = (r / "shards" for r in runs)
    names = sorted(p.name for p in one.iterdir() if p.is_file())
    assert names == sorted(p.name for p in two.iterdir() if p.is_file())
    for name in names:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name


def test_a_tampered_card_or_phase_fails_verify(runs, tmp_path):
    import shutil

    shards = tmp_path / "shards"
    shutil.copytree(runs[0] / "shards", shards)
    path = shards / "manifest.json"
    m = json.loads(path.read_text())
    m["shards"][0]["card"]["tokens_by_group"]["web"] += 1
    m["phases"][1]["shards"] = m["phases"][1]["shards"][1:]
    path.write_text(json.dumps(m))
    problems = "\n".join(verify_shards(shards))
    assert "card tokens_by_group sums to" in problems and "are not the shards in order" in problems


def test_the_loader_resumes_inside_the_second_phase(runs):
    pytest.importorskip("torch")
    from gpupipe.loader import ResumableLoader, ShardDataset

    shards = runs[0] / "shards"
    ds = ShardDataset(shards, seed=3, buffer_size=16, return_block_ids=True)
    start, n = ds.phase_blocks()["anneal"]
    full = [int(b) for b in ds.rank_blocks()]
    assert sorted(full[:start]) == list(range(start)) and sorted(full[start:]) == list(range(start, start + n))
    loader = ResumableLoader(ShardDataset(shards, seed=3, buffer_size=16, return_block_ids=True), batch_size=4)
    loader.start_at_phase("anneal")
    seen = []
    for batch in loader:
        seen += batch["block_id"].tolist()
        if len(seen) >= 12:
            break
    assert seen == full[start:start + 12]
    state = loader.state_dict()
    again = ResumableLoader(ShardDataset(shards, seed=3, buffer_size=16, return_block_ids=True), batch_size=4,
                            num_workers=2)
    again.load_state_dict(state)
    rest = [b for batch in again for b in batch["block_id"].tolist()]
    assert rest == full[start + 12:]
