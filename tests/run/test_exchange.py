"""The exchange between the phases of global stages (stages/exchange.py): one file per producer, exactly the rows
routed to a destination read back, and a bounded number of files in a real stage; the phase runner's hooks carry
no state on the stage (tests/helpers/interleave.py), which the interleaving harness itself is shown to catch."""

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from gpupipe.run.executors import LocalExecutor
from gpupipe.run import exchange as exchange_mod
from gpupipe.stages import STAGES, base
from gpupipe.run import tasks
from gpupipe.stages.base import MapStage, RunContext
from gpupipe.stages.dedup.exact import ExactDedup
from gpupipe.run.exchange import Exchange
from gpupipe.stages.dedup.fuzzy import FuzzyDedup
from gpupipe.stages.dedup.substring import SubstringDedup
from tests.helpers import near_copy_texts, run_stage
from tests.helpers.interleave import assert_no_partition_state, check_interleaved, write_parts


def _rows(rng, n: int, producer: int) -> pd.DataFrame:
    return pd.DataFrame({"k": rng.integers(0, 1 << 62, n, dtype=np.int64).astype(np.uint64),
                         "doc_index": np.arange(n, dtype=np.int64) + 1000 * producer,
                         "tag": [f"p{producer}-{i}" for i in range(n)]})


@pytest.mark.parametrize("rows_per_group", [3, 1 << 20])
def test_one_file_per_producer_and_each_destination_gets_exactly_its_rows(tmp_path, monkeypatch, rows_per_group):
    monkeypatch.setattr(exchange_mod, "ROWS_PER_GROUP", rows_per_group)  # 3: a destination spans batches
    rng = np.random.default_rng(5)
    ex = Exchange(tmp_path / "ex")
    sent = {}
    for p, n in enumerate([40, 0, 17, 1, 60]):            # an empty producer too
        rows = _rows(rng, n, p)
        dest = rng.choice([0, 2, 3, 6], size=n)           # buckets 1, 4, 5 never receive anything
        ex.send("keys", p, rows, dest)
        sent[p] = (rows, dest)
    files = ex.producer_files("keys")
    assert [f.name for f in files] == [f"from-{p:06d}.arrow" for p in range(5)]   # one file per producer
    assert ex.files() == files
    for p, f in enumerate(files):
        rows, dest = sent[p]
        groups = sum(-(-int((dest == d).sum()) // rows_per_group) for d in np.unique(dest))
        assert pa.ipc.open_file(f).num_record_batches == groups
    assert ex.destinations("keys") == [0, 2, 3, 6]
    for j in range(7):
        want = [rows[dest == j] for rows, dest in sent.values() if (dest == j).any()]
        got = ex.receive("keys", j)
        if not want:
            assert got is None
            continue
        pd.testing.assert_frame_equal(got, pd.concat(want, ignore_index=True))   # producer order, row order kept
        tagged = ex.receive("keys", j, columns=["tag"], producer_column="from")
        assert tagged["from"].tolist() == [int(t.split("-")[0][1:]) for t in tagged["tag"]]


def test_keyed_files_and_reset(tmp_path):
    ex = Exchange(tmp_path / "ex")
    ex.put("bands", 3, pd.DataFrame({"a": [1, 2]}))
    ex.put("bands", 1, pd.DataFrame({"a": [5]}))
    assert ex.keys("bands") == [1, 3] and ex.get("bands", 3)["a"].tolist() == [1, 2]
    assert ex.get("bands", 2) is None and ex.receive("nothing", 0) is None and ex.destinations("nothing") == []
    ex.reset()
    assert ex.files() == [] and not ex.root.exists()


def _frames(texts: list[str], parts: int) -> list[pd.DataFrame]:
    df = pd.DataFrame({"id": [f"d{i}" for i in range(len(texts))], "doc_index": np.arange(len(texts), dtype=np.int64),
                       "text": texts})
    return [df.iloc[k * len(df) // parts:(k + 1) * len(df) // parts] for k in range(parts)]


def _kept_exchange(monkeypatch) -> list[list[Path]]:
    """Keep each stage's exchange after its run (the runner removes it), to count its files."""
    seen = []
    monkeypatch.setattr(Exchange, "remove", lambda self: seen.append(self.files()))
    return seen


def _by_folder(files: list[Path]) -> Counter:
    return Counter(f.parent.name for f in files)


def test_exact_dedup_exchange_is_one_file_per_partition_and_per_bucket(tmp_path, monkeypatch):
    n, b = 6, 4
    inputs = write_parts(tmp_path / "in", _frames(near_copy_texts(60, 1) + near_copy_texts(20, 1), n))
    seen = _kept_exchange(monkeypatch)
    stage = ExactDedup(ExactDedup.Config(), RunContext(shuffle_buckets=b))
    stats = run_stage(stage, inputs, tmp_path / "out")
    assert stats.removed == {"exact_duplicate": 20}
    assert _by_folder(seen[0]) == {"keys": n, "removals": b}       # n + b files, not n × b + b × n


def test_fuzzy_dedup_exchange_is_bounded(tmp_path, monkeypatch):
    n, b = 5, 3
    inputs = write_parts(tmp_path / "in", _frames(near_copy_texts(80, 2), n))
    seen = _kept_exchange(monkeypatch)
    stage = FuzzyDedup(FuzzyDedup.Config(band_groups=2), RunContext(shuffle_buckets=b))
    stats = run_stage(stage, inputs, tmp_path / "out")
    assert stats.removed == {"near_duplicate": 40}
    got = _by_folder(seen[0])
    assert got["bands"] == n and got["keys-g000"] == got["keys-g001"] == n and got["removals"] == 1
    assert got["edges-g000"] <= b and got["edges-g001"] <= b and got["shingles"] <= n and got["candidates"] == 1
    assert got["pairs"] == 1    # every partition pair's candidate edges, as destinations of one file
    assert "sample-texts" not in got   # the sampled clusters' texts: side tables beside the parts, then removed
    assert not (tmp_path / "out" / "sample-texts").exists() and (tmp_path / "out" / "clusters_sample.jsonl").is_file()
    assert sum(got.values()) <= 5 * n + 2 * b + 2


def test_fuzzy_dedup_verifies_two_partitions_at_a_time(tmp_path, monkeypatch):
    """The exact check holds the shingle sets of the two partitions of an edge, never all candidates' at once, and
    keeps what the in-memory check keeps."""
    from gpupipe.stages.dedup.fuzzy import stage as fuzzy_stage

    n = 5
    inputs = write_parts(tmp_path / "in", _frames(near_copy_texts(80, 2), n))
    loaded = []
    real = fuzzy_stage.sets_of_tables
    monkeypatch.setattr(fuzzy_stage, "sets_of_tables", lambda tables: loaded.append(len(tables)) or real(tables))
    stage = FuzzyDedup(FuzzyDedup.Config(), RunContext(shuffle_buckets=3))
    stats = run_stage(stage, inputs, tmp_path / "out")
    assert stats.removed == {"near_duplicate": 40} and stats.extra["verified_edges"] > 0
    assert loaded and max(loaded) <= 2 and len(loaded) > 1


def test_substring_dedup_exchange_is_bounded(tmp_path, monkeypatch):
    n = 6
    texts = near_copy_texts(36, 3)
    inputs = write_parts(tmp_path / "in", _frames(texts, n))
    seen = _kept_exchange(monkeypatch)
    stage = SubstringDedup(SubstringDedup.Config(group_bytes=1), RunContext(shuffle_buckets=4))  # a group a part
    stats = run_stage(stage, inputs, tmp_path / "out")
    assert stats.extra["groups"] == n and stats.extra["cross_group_anchors"] > 0
    got = _by_folder(seen[0])
    buckets = max(4, n)
    assert got["anchors"] == n and got["ranges-group"] == n and got["requests"] == buckets
    assert got["regions"] <= n and got["ranges-cross"] == stats.extra["cross_batches"]


# -- no state on the stage ------------------------------------------------------------------------------------------

class _Stateful(MapStage):
    """What the hooks must not do: transform leaves its result on the instance for reasons and extra_stats."""
    name = "stateful_toy"

    def transform(self, df):
        self._short = df["text"].str.len().to_numpy() < 3
        self._n = len(df)
        return df

    def reasons(self, df):
        return pd.Series(np.where(self._short, "short", None), index=df.index, dtype=object)

    def extra_stats(self, df_out):
        return Counter({"seen": self._n})


def test_the_interleaving_harness_catches_state_kept_between_hooks(tmp_path, monkeypatch):
    monkeypatch.setitem(STAGES, _Stateful.name, _Stateful)
    frames = [pd.DataFrame({"id": ["a", "b", "c"], "doc_index": [0, 1, 2], "text": ["x", "long", "yy"]}),
              pd.DataFrame({"id": ["d", "e"], "doc_index": [3, 4], "text": ["long", "longer"]})]
    inputs = write_parts(tmp_path / "in", frames)
    with pytest.raises(AssertionError):
        check_interleaved(_Stateful(_Stateful.Config(), RunContext()), inputs, tmp_path, monkeypatch)


def test_exact_dedup_apply_interleaved_on_one_instance(tmp_path, monkeypatch):
    inputs = write_parts(tmp_path / "in", _frames(near_copy_texts(40, 4) + near_copy_texts(16, 4), 4))
    stage = ExactDedup(ExactDedup.Config(), RunContext(shuffle_buckets=3))
    res = check_interleaved(stage, inputs, tmp_path, monkeypatch)
    assert res["alone"]["removed"] == {"exact_duplicate": 16}
    assert_no_partition_state(res["instance"])


def test_worker_stages_carry_no_partition_state_after_a_pipeline_run(tmp_path):
    from tests.helpers import run_config, write_jsonl

    texts = near_copy_texts(60, 6)
    texts += [texts[3], texts[40] + " " + texts[7][:400]]
    src = write_jsonl(tmp_path / "in.jsonl", texts)
    tasks._WORKER_STAGES.clear()
    run_config(tmp_path, "state", src, [{"exact_dedup": {}}, {"fuzzy_dedup": {}},
                                        {"substring_dedup": {"group_bytes": 20000}}], partition_docs=9,
               workers=1)   # in this process: its worker cache is the one looked at
    names = sorted(s.name for s in tasks._WORKER_STAGES.values())
    assert names == ["exact_dedup", "fuzzy_dedup", "read", "substring_dedup"]
    for s in tasks._WORKER_STAGES.values():   # the read stage's driver-side inputs are empty on a worker
        assert_no_partition_state(s, allowed=("config", "ctx", "resolved", "partitioning") if s.name == "read"
                                  else ("config", "ctx"))
