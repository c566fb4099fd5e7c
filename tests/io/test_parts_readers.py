"""Every Parquet part gpupipe writes opens in the readers users open it with (#35 item 5): pandas' own
`read_parquet` failed on the tokenize stage's parts ("data type 'list<item: uint32>[pyarrow]' not understood"), while
gpupipe's own reader still gets the tokens back as an Arrow list column."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpupipe.io.parts import read_part, write_part


def _tokens_part(tmp_path):
    tokens = pa.array([[1, 2, 3], [], [7]], pa.list_(pa.uint32()))
    df = pd.DataFrame({"id": ["a", "b", "c"], "doc_index": [0, 1, 2]})
    df.insert(1, "tokens", pd.arrays.ArrowExtensionArray(tokens))
    df["n_tokens"] = [3, 0, 1]
    write_part(df, tmp_path / "part.parquet")
    return tmp_path / "part.parquet", df


def test_pandas_and_pyarrow_open_a_tokens_part(tmp_path):
    path, df = _tokens_part(tmp_path)
    opened = pd.read_parquet(path)
    assert list(opened.columns) == list(df.columns)
    assert [list(t) for t in opened["tokens"]] == [[1, 2, 3], [], [7]]
    assert pq.read_table(path).to_pandas()["n_tokens"].tolist() == [3, 0, 1]


def test_read_part_gives_the_tokens_back_as_an_arrow_list(tmp_path):
    path, df = _tokens_part(tmp_path)
    back = read_part(path)
    assert list(back.columns) == list(df.columns)
    assert isinstance(back["tokens"].dtype, pd.ArrowDtype)
    assert back["tokens"].array._pa_array.combine_chunks().equals(df["tokens"].array._pa_array.combine_chunks())
    assert list(read_part(path, columns=["tokens", "id"]).columns) == ["id", "tokens"]


@pytest.mark.parametrize("reader", ["datasets", "duckdb", "polars"])
def test_other_readers_open_a_tokens_part(tmp_path, reader):
    if importlib.util.find_spec(reader) is None:
        pytest.skip(f"{reader} is not installed")
    path, _ = _tokens_part(tmp_path)
    if reader == "datasets":
        import datasets

        rows = datasets.Dataset.from_parquet(str(path), cache_dir=str(tmp_path / "cache"))
        assert rows[0]["tokens"] == [1, 2, 3] and len(rows) == 3
    elif reader == "duckdb":
        import duckdb

        assert duckdb.sql(f"select tokens from '{path}' order by doc_index").fetchall()[0][0] == [1, 2, 3]
    else:
        import polars

        assert polars.read_parquet(path)["tokens"].to_list()[0] == [1, 2, 3]


# -- every Parquet file a real run writes, in every reader installed (#35 part 5) ---------------------------------

READERS = ["pandas", "pyarrow", "polars", "duckdb", "datasets"]


@pytest.fixture(scope="module")
def run_files(tmp_path_factory, synth_crawl):
    """A run of every kind of Parquet gpupipe writes: every stage's parts (keep_intermediate), the tokenize stage's
    token lists, Parquet shards, a decontamination index."""
    import yaml

    from gpupipe.cli import main

    tmp = tmp_path_factory.mktemp("readers")
    assert main(["decontam-index", "--out", str(tmp / "index.parquet"), synth_crawl["benchmark"]]) == 0
    cfg = {"input": {"path": synth_crawl["warc"]}, "output": str(tmp / "run"), "device": "cpu",
           "keep_intermediate": True,
           "stages": [{"extract": {}}, {"normalize": {}}, {"exact_dedup": {}},
                      {"decontaminate": {"index": str(tmp / "index.parquet")}},
                      {"tokenize": {"vocab_size": 300}}, {"pack": {"seq_len": 32, "format": "parquet"}}]}
    (tmp / "c.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", str(tmp / "c.yaml")]) == 0
    files = sorted((tmp / "run").rglob("*.parquet")) + [tmp / "index.parquet"]
    assert {"tokens", "crawl_id", "content_length"} <= set(pq.read_schema(
        next((tmp / "run" / "stages").glob("*-tokenize")) / "part-0000-000000.parquet").names)
    assert any(f.name.startswith("shard-") for f in files)
    return files


def _rows(reader: str, path, cache) -> int:
    if reader == "pandas":
        return len(pd.read_parquet(path))
    if reader == "pyarrow":
        return pq.read_table(path).to_pandas().shape[0]
    if reader == "polars":
        import polars

        return polars.read_parquet(path).height
    if reader == "duckdb":
        import duckdb

        return len(duckdb.sql(f"select * from read_parquet('{path}')").fetchall())
    import datasets

    return len(datasets.Dataset.from_parquet(str(path), cache_dir=str(cache)))


@pytest.mark.parametrize("reader", READERS)
def test_every_parquet_file_of_a_run_opens_in(reader, run_files, tmp_path):
    if importlib.util.find_spec(reader) is None:
        pytest.skip(f"{reader} is not installed")
    for path in run_files:
        assert _rows(reader, path, tmp_path / "cache") == pq.ParquetFile(path).metadata.num_rows, path
