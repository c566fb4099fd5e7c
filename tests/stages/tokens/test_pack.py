"""Format B (seed 002 §5.3): `pack: {format: parquet}` on real runs, read back by HF datasets and pyarrow and
compared block for block with the .bin shards of the same config; its manifest and `gpupipe verify`."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from gpupipe.cli import main
from gpupipe.tokens.verify import verify_shards
from tests.helpers import ROOT

SEQ_LEN, BLOCKS, ROWS = 256, 16, 5


def _stages(**pack):
    cfg = yaml.safe_load((ROOT / "configs/default.yaml").read_text())
    stages = [s for s in cfg["stages"] if "pack" not in s]
    return stages + [{"pack": {"seq_len": SEQ_LEN, "blocks_per_shard": BLOCKS, **pack}}]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, synth_crawl):
    from tests.helpers import write_config

    tmp = tmp_path_factory.mktemp("parquet")
    out = {}
    for name, pack in (("bin", {}), ("parquet", {"format": "parquet", "row_group_size": ROWS, "megatron": True})):
        cfg = write_config(tmp / f"{name}.yaml", input={"path": synth_crawl["warc"]}, output=str(tmp / name),
                           stages=_stages(**pack))
        assert main(["run", str(cfg)]) == 0
        out[name] = tmp / name / "shards"
    out["tmp"] = tmp
    return out


def _bin_blocks(shards: Path) -> np.ndarray:
    m = json.loads((shards / "manifest.json").read_text())
    return np.concatenate([np.fromfile(shards / s["file"], dtype=m["dtype"]) for s in m["shards"]]).reshape(-1,
                                                                                                            SEQ_LEN)


def test_datasets_loads_parquet_shards_equal_to_bin_blocks(runs):
    import datasets

    files = sorted(str(p) for p in runs["parquet"].glob("shard-*.parquet"))
    assert len(files) > 1 and not list(runs["parquet"].glob("shard-*.bin"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(runs["tmp"] / "hf"))
    feat = ds.features["input_ids"]
    assert feat.feature.dtype == "uint16" and feat.length == SEQ_LEN
    got = np.asarray(ds.with_format("numpy")["input_ids"])
    want = _bin_blocks(runs["bin"])
    assert got.shape == want.shape and (got == want).all()


def test_parquet_layout_and_manifest(runs):
    mb = json.loads((runs["bin"] / "manifest.json").read_text())
    mp = json.loads((runs["parquet"] / "manifest.json").read_text())
    assert (mp["shard_format"], mp["row_group_size"], mp["compression"]) == ("parquet", ROWS, "zstd")
    assert "shard_format" not in mb                                        # bin stays the default
    for k in ("sequences", "tokens", "stream_tokens", "documents_packed", "tokens_per_source", "dtype",
              "tokenizer_sha256", "dropped_remainder_tokens", "vocab_size", "eos_id"):
        assert mp[k] == mb[k], k
    blocks = []
    for sb, sp in zip(mb["shards"], mp["shards"]):
        assert sp["file"] == sb["file"].replace(".bin", ".parquet")
        assert (sp["sequences"], sp["tokens"], sp["eos"]) == (sb["sequences"], sb["tokens"], sb["eos"])
        path = runs["parquet"] / sp["file"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == sp["sha256"]
        pf = pq.ParquetFile(path)
        t = pf.schema_arrow.field("input_ids").type
        assert pf.schema_arrow.names == ["input_ids"] and pa.types.is_fixed_size_list(t)
        assert (str(t.value_type), t.list_size) == ("uint16", SEQ_LEN)
        assert pf.metadata.num_row_groups == -(-sp["sequences"] // ROWS)
        assert all(pf.metadata.row_group(i).column(0).compression == "ZSTD"
                   for i in range(pf.metadata.num_row_groups))
        blocks.append(pq.read_table(path)["input_ids"].combine_chunks().flatten().to_numpy()
                      .reshape(-1, SEQ_LEN))
    assert (np.concatenate(blocks) == _bin_blocks(runs["bin"])).all()
    # megatron: true still writes its .bin/.idx next to the Parquet shards
    assert (runs["parquet"] / "megatron" / "data.bin").is_file() and mp["megatron"]["documents"] == \
        mp["documents_packed"]


def test_verify_parquet_shards(runs, tmp_path, capsys):
    import shutil

    assert verify_shards(runs["parquet"]) == []
    assert main(["verify", str(runs["parquet"])]) == 0 and "OK" in capsys.readouterr().out
    work = tmp_path / "shards"
    shutil.copytree(runs["parquet"], work)
    m = json.loads((work / "manifest.json").read_text())
    victim = work / m["shards"][0]["file"]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    problems = verify_shards(work)
    assert any(m["shards"][0]["file"] in p for p in problems), problems
    assert main(["verify", str(work)]) == 1

    shutil.rmtree(work)
    shutil.copytree(runs["parquet"], work)
    m["shards"][1]["sequences"] += 1
    (work / "manifest.json").write_text(json.dumps(m))
    assert any("sequences" in p for p in verify_shards(work))
    (work / "shard-00099.parquet").write_bytes(b"")                      # unlisted
    assert any("shard-00099.parquet" in p and "not in" in p for p in verify_shards(work))


def test_verify_parquet_catches_wrong_schema_and_ids(runs, tmp_path):
    import shutil

    work = tmp_path / "shards"
    shutil.copytree(runs["parquet"], work)
    m = json.loads((work / "manifest.json").read_text())
    first = work / m["shards"][0]["file"]
    ids = pq.read_table(first)["input_ids"].combine_chunks().flatten().to_numpy().copy()
    ids[3] = m["vocab_size"] + 1                                         # an id outside the vocabulary
    arr = pa.FixedSizeListArray.from_arrays(pa.array(ids), SEQ_LEN)
    pq.write_table(pa.table({"input_ids": arr}), first, compression="zstd")
    m["shards"][0]["sha256"] = hashlib.sha256(first.read_bytes()).hexdigest()
    (work / "manifest.json").write_text(json.dumps(m))
    assert any("vocab_size" in p for p in verify_shards(work))
    pq.write_table(pa.table({"input_ids": pa.array(ids.astype(np.int64))}), first)   # not a fixed-size list
    assert any("schema" in p for p in verify_shards(work))


def test_bestfit_blocks_as_parquet(tmp_path):
    """Best-fit packing re-encoded as Parquet keeps its padded blocks, and verify checks their rules."""
    from gpupipe.tokens.bestfit import BestFitPacker
    from gpupipe.tokens.manifest import write_manifest
    from gpupipe.tokens.packing import write_parquet_shards

    rng = np.random.default_rng(0)
    docs = [rng.integers(2, 500, size=int(n)) for n in rng.integers(1, 40, size=60)]
    p = BestFitPacker(tmp_path, 32, 0, 1, np.uint16, blocks_per_shard=8)
    p.add_many(docs)
    summary = p.finish()
    bins = np.concatenate([np.fromfile(tmp_path / s["file"], "<u2") for s in summary["shards"]])
    summary = write_parquet_shards(tmp_path, summary, 32, np.uint16, row_group_size=3)
    extra = {k: summary[k] for k in ("pad_id", "padding_tokens", "padding_rate", "split_documents")}
    write_manifest(tmp_path, summary, seq_len=32, dtype="uint16", vocab_size=500, eos_id=0, tokenizer_sha256="x",
                   tokenizer_file="none.json", config_hash="0" * 64,
                   extra={**extra, "packing": "bestfit", "shard_format": "parquet"})
    assert verify_shards(tmp_path) == []
    got = np.concatenate([pq.read_table(tmp_path / s["file"])["input_ids"].combine_chunks().flatten().to_numpy()
                          for s in summary["shards"]])
    assert (got == bins).all()


def test_shard_dataset_reads_the_parquet_shards_of_a_run(runs):
    """The loader takes a `format: parquet` run's shards as they are: the same blocks, order and fields as the
    .bin shards of the same config."""
    pytest.importorskip("torch")
    from gpupipe.loader import ShardDataset

    kw = dict(seed=5, buffer_size=4, return_positions=True, return_block_ids=True)
    b, p = ShardDataset(runs["bin"], **kw), ShardDataset(runs["parquet"], **kw)
    assert p.format == "parquet" and p.num_blocks == b.num_blocks == len(_bin_blocks(runs["bin"]))
    got, want = list(p), list(b)
    assert [i["block_id"] for i in got] == [i["block_id"] for i in want]
    assert all((x["input_ids"] == y["input_ids"]).all() and (x["position_ids"] == y["position_ids"]).all()
               for x, y in zip(got, want))
