"""The key phase of exact and URL dedup reads only the columns its keys need (#31 item 7: on the GPU the rest of a
part would be decoded onto the device for nothing), and a part without the column still gets its keys."""

from __future__ import annotations

import pandas as pd

from gpupipe.backend import read_frame
from gpupipe.io.parts import write_part
from gpupipe.stages import build_stage
from gpupipe.stages.base import RunContext


def _part(tmp_path, **cols):
    df = pd.DataFrame({"id": ["a", "b", "c"], "doc_index": [0, 1, 2], "text": ["x y", "x y", "z"],
                       "lang": ["en"] * 3, **cols})
    write_part(df, tmp_path / "part.parquet")
    return tmp_path / "part.parquet"


def test_read_frame_reads_the_asked_columns_the_part_has(tmp_path):
    path = _part(tmp_path)
    assert list(read_frame(path, columns=["text", "doc_index", "url"]).columns) == ["doc_index", "text"]
    assert list(read_frame(path).columns) == ["id", "doc_index", "text", "lang"]


def test_exact_and_url_dedup_keys_from_their_columns_alone(tmp_path):
    ctx = RunContext()
    exact = build_stage({"exact_dedup": {}}, ctx)
    url = build_stage({"url_dedup": {}}, ctx)
    assert exact.key_columns() == ["doc_index", "text"] and url.key_columns() == ["doc_index", "url"]
    with_urls = _part(tmp_path, url=["http://a.example/x", "http://a.example/x", None])
    full, narrow = read_frame(with_urls), read_frame(with_urls, columns=exact.key_columns())
    pd.testing.assert_frame_equal(exact.keys(full), exact.keys(narrow))
    keys = url.keys(read_frame(with_urls, columns=url.key_columns()))
    pd.testing.assert_frame_equal(keys, url.keys(full))
    assert keys["doc_index"].tolist() == [0, 1]   # the document without a URL has no key
    no_urls = tmp_path / "n"
    no_urls.mkdir()
    assert url.keys(read_frame(_part(no_urls), columns=url.key_columns())).empty
