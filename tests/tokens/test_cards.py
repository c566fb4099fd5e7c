"""Per-shard data cards and phase boundaries in the stream packer (#34)."""

import json

import numpy as np

from gpupipe.tokens.manifest import shard_card, write_manifest
from gpupipe.tokens.packing import StreamPacker, quality_card
from gpupipe.tokens.verify import verify_shards


def test_quality_card_bins_probabilities_and_regression_scores():
    q = quality_card(np.array([0.05, 0.05, 0.95, np.nan], dtype=np.float32))
    assert q["edges"][0] == 0.0 and q["edges"][-1] == 1.0 and len(q["edges"]) == 11
    assert q["histogram"][0] == 2 and q["histogram"][9] == 1 and q["unscored_tokens"] == 1
    assert q["mean"] == round(float(np.float32([0.05, 0.05, 0.95]).astype(np.float64).mean()), 6)   # unscored out
    r = quality_card(np.array([0.5, 2.5, 4.0], dtype=np.float32))   # an edu score on 0..5
    assert r["edges"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and r["histogram"] == [1, 0, 1, 0, 1]
    assert quality_card(np.array([np.nan], dtype=np.float32)) is None


def test_phases_close_their_own_shards_and_cards_count_every_token(tmp_path):
    p = StreamPacker(tmp_path, 4, 0, np.uint16, 3, cards=True, score_columns=("quality_score",))
    p.start_phase("one")
    p.add_many([np.array([1, 2, 3]), np.array([4, 5])], ["a", "b"], scores={"quality_score": np.array([0.2, 0.8])})
    p.start_phase("two")   # 7 tokens so far: one block, 3 dropped
    p.add_many([np.array([6, 7, 8, 9, 10, 11, 12])], "a")
    s = p.finish()
    assert [ph["shards"] for ph in s["phases"]] == [["shard-00000.bin"], ["shard-00001.bin"]]
    one, two = s["phases"]
    assert (one["stream_tokens"], one["tokens"], one["dropped_remainder_tokens"]) == (7, 4, 3)
    assert one["tokens_by_group"] == {"a": 4, "b": 3} and one["dropped_by_group"] == {"b": 3}
    assert s["shards"][0]["card"]["tokens_by_group"] == {"a": 4}
    assert s["shards"][0]["card"]["quality"]["quality_score"]["mean"] == round(float(np.float32(0.2)), 6)
    assert np.fromfile(tmp_path / "shard-00001.bin", dtype="<u2").tolist() == [6, 7, 8, 9, 10, 11, 12, 0]
    assert s["dropped_remainder_tokens"] == 3 and s["tokens_per_group"] == {"a": 12, "b": 3}
    m = write_manifest(tmp_path, s, seq_len=4, dtype="uint16", vocab_size=20, eos_id=0, tokenizer_sha256="t",
                       tokenizer_file="tokenizer.json", config_hash="c",
                       extra={"phases": s["phases"], "tokens_per_group": s["tokens_per_group"]})
    assert verify_shards(tmp_path) == []
    assert shard_card(m, "shard-00001.bin")["phase"] == "two" and shard_card(m, "shard-00001.bin")["config_hash"] == "c"
    m["phases"][0]["dropped_remainder_tokens"] = 0       # a phase that says it dropped nothing
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    assert any("phase 'one'" in line for line in verify_shards(tmp_path))
