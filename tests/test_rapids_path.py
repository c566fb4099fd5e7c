"""The RAPIDS path (issue #7): string buffers on either side, stages on either frame kind, the host hop counted.

CPU tests run everywhere: string_buffers on Arrow and pandas inputs, the whitespace folding exact dedup shares with
cuDF, and the native-vs-host dispatch of the partition runner (a pandas subclass stands in for a cuDF frame).
The `test_cudf_*` tests need cuDF and a CUDA device and skip with the reason elsewhere; profiling/gpu_check.sh runs
them on a GPU machine when `import cudf` works. This file uses no conftest fixture, so gpu_check.sh can run it
with --noconftest.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpupipe import backend
from gpupipe.kernels import strings as ks

HAS_CUDF = importlib.util.find_spec("cudf") is not None


def needs_cudf(test):
    """gpu-marked, and skipped with the reason where cuDF or a CUDA device is missing."""
    test = pytest.mark.skipif(not backend.gpu_status()[0], reason=f"no CUDA device: {backend.gpu_status()[1]}")(test)
    test = pytest.mark.skipif(not HAS_CUDF, reason="cuDF (RAPIDS) is not installed")(test)
    return pytest.mark.gpu(test)


TEXTS = ["hello", "", None, "wörld  \t spaced\n", "中文 文本", None, "x" * 300, "  a  b  ", "\u3000lead",
         "tail\x85"]


def docs_of(data, offsets) -> list[bytes]:
    data, offsets = backend.to_host(data), backend.to_host(offsets)
    return [bytes(data[offsets[i]:offsets[i + 1]]) for i in range(len(offsets) - 1)]


def expected(texts) -> list[bytes]:
    return [b"" if t is None or t != t else t.encode() for t in texts]


# ------------------------------------------------------------------------------------------------------------------
# string_buffers on the host
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("typ, off", [(pa.string(), np.int32), (pa.large_string(), np.int64)])
def test_string_buffers_arrow_zero_copy_and_sliced(typ, off):
    arr = pa.array(TEXTS, typ)
    data, offsets = backend.string_buffers(arr)
    assert offsets.dtype == off and len(offsets) == len(TEXTS) + 1
    assert data.ctypes.data == arr.buffers()[2].address           # the Arrow buffer itself, no copy
    assert docs_of(data, offsets) == expected(TEXTS)
    sliced = arr.slice(3, 5)
    data, offsets = backend.string_buffers(sliced)
    assert offsets[0] > 0 and len(offsets) == 6                    # offsets index the whole buffer
    assert data.ctypes.data == arr.buffers()[2].address
    assert docs_of(data, offsets) == expected(TEXTS[3:8])


def test_string_buffers_null_slot_holding_bytes_reads_as_empty():
    values = pa.py_buffer(b"abcde")
    offsets = pa.py_buffer(np.array([0, 2, 4, 5], np.int32).tobytes())
    arr = pa.Array.from_buffers(pa.string(), 3, [pa.py_buffer(bytes([0b101])), offsets, values], null_count=1)
    assert docs_of(*backend.string_buffers(arr)) == [b"ab", b"", b"e"]


def test_string_buffers_empty_and_all_null():
    for arr in (pa.array([], pa.string()), pa.array([], pa.large_string())):
        data, offsets = backend.string_buffers(arr)
        assert data.size == 0 and offsets.tolist() == [0]
    data, offsets = backend.string_buffers(pa.array([None, None]))      # Arrow type null
    assert data.size == 0 and offsets.tolist() == [0, 0, 0]
    data, offsets = backend.string_buffers(pd.Series([], dtype="str"))
    assert offsets.tolist() == [0]


@pytest.mark.parametrize("dtype", ["str", object])
def test_string_buffers_pandas(dtype):
    s = pd.Series(TEXTS, dtype=dtype)
    assert docs_of(*backend.string_buffers(s)) == expected(TEXTS)
    assert docs_of(*backend.string_buffers(s.iloc[2:7])) == expected(TEXTS[2:7])


def test_string_buffers_pandas_arrow_backed_is_zero_copy():
    s = pd.Series(["abc", "de", None], dtype="str")
    storage = getattr(s.array, "_pa_array", None)  # pandas' own Arrow storage (a private attribute)
    if not isinstance(storage, pa.ChunkedArray) or storage.num_chunks != 1:
        pytest.skip("this pandas does not keep str columns as one Arrow chunk")
    data, _ = backend.string_buffers(s)
    assert data.ctypes.data == storage.chunk(0).buffers()[2].address


def test_text_bytes_is_the_utf8_size_with_nulls_as_zero():
    from gpupipe.stages.base import text_bytes

    s = pd.Series(TEXTS, dtype="str")
    want = int(pc.sum(pc.binary_length(pa.array(s, pa.large_string(), from_pandas=True))).as_py())
    assert text_bytes(s) == want == sum(len(b) for b in expected(TEXTS))
    assert text_bytes(s.iloc[3:4]) == len(TEXTS[3].encode())


def test_kernel_inputs_device_choice():
    data, offsets, on_gpu = ks.kernel_inputs(["a", "bc"], "cpu")
    assert not on_gpu and docs_of(data, offsets) == [b"a", b"bc"]
    assert ks.kernel_inputs(["a"], "auto")[2] == ks.gpu_available()
    with pytest.raises(ValueError, match="device must be"):
        ks.kernel_inputs(["a"], "tpu")


# ------------------------------------------------------------------------------------------------------------------
# cudf_buffers' reading of the libcudf layout, on host stand-ins (the real thing: test_cudf_* below)
# ------------------------------------------------------------------------------------------------------------------


class _Buf:
    """A device buffer stand-in: exposes __cuda_array_interface__ (as gpumemoryview does) over host memory."""

    def __init__(self, arr):
        self._arr = np.ascontiguousarray(arr)
        self.__array_interface__ = self._arr.__array_interface__
        self.__cuda_array_interface__ = dict(self._arr.__array_interface__, version=3)


class _Col:
    """pylibcudf.Column's accessors: type().id().name, size(), offset(), data(), children()."""

    def __init__(self, type_name, size, data, offset=0, children=()):
        self._t, self._size, self._data, self._offset, self._children = type_name, size, data, offset, list(children)

    def type(self):
        return type("DataType", (), {"id": lambda _: type("TypeId", (), {"name": self._t})()})()

    def size(self):
        return self._size

    def offset(self):
        return self._offset

    def data(self):
        return self._data

    def children(self):
        return self._children


class _CudfSeries:
    """A cuDF string Series stand-in over an Arrow array: to_pylibcudf() lays it out as libcudf does (chars in the
    parent's data, offsets as child 0 over the unsliced buffer, the slice as the parent's offset())."""

    def __init__(self, arr, all_null_without_children=False):
        self.arr, self._bare = arr, all_null_without_children

    def to_pylibcudf(self):
        a = self.arr
        if self._bare or len(a) == 0:
            return _Col("STRING", len(a), None), {}
        _, off_buf, data_buf = a.buffers()
        dtype = np.int64 if pa.types.is_large_string(a.type) else np.int32
        offsets = np.frombuffer(off_buf, dtype=dtype)
        child = _Col("INT64" if dtype == np.int64 else "INT32", offsets.size, _Buf(offsets))
        chars = _Buf(np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.empty(0, np.uint8))
        return _Col("STRING", len(a), chars, offset=a.offset, children=[child]), {}

    @property
    def null_count(self):
        return self.arr.null_count

    def isna(self):
        return type("S", (), {"values": pc.is_null(self.arr).to_numpy(zero_copy_only=False)})()

    def fillna(self, value):
        return _CudfSeries(pc.fill_null(self.arr, value))


_CudfSeries.__module__ = "cudf.core.series"


@pytest.fixture
def host_cupy(monkeypatch):
    """`cupy` as numpy, so kernels/strings.py's device code runs on the stand-ins above."""
    import types

    cp = types.ModuleType("cupy")
    for name in ("asarray", "empty", "zeros", "any", "uint8", "int32", "int64", "ndarray"):
        setattr(cp, name, getattr(np, name))
    monkeypatch.setitem(sys.modules, "cupy", cp)
    return cp


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string()])
def test_string_layout_read_as_libcudf_documents(typ, host_cupy):
    arr = pa.array(TEXTS * 3, typ)
    for a in (arr, arr.slice(4, 17), arr.slice(29, 1), arr.slice(5, 0)):
        data, offsets = backend.string_buffers(_CudfSeries(a))
        assert offsets.dtype == (np.int64 if typ == pa.large_string() else np.int32) or len(a) == 0
        assert docs_of(data, offsets) == expected(a.to_pylist())
        if len(a):   # views of the column's buffers: chars not moved by the slice, offsets starting at it
            assert data.ctypes.data == a.buffers()[2].address
            assert offsets.ctypes.data == a.buffers()[1].address + a.offset * offsets.itemsize


def test_string_layout_all_null_without_children_and_nonempty_nulls(host_cupy):
    data, offsets = backend.string_buffers(_CudfSeries(pa.array([None, None], pa.string()),
                                                       all_null_without_children=True))
    assert data.size == 0 and offsets.tolist() == [0, 0, 0]
    values, offs = pa.py_buffer(b"abcde"), pa.py_buffer(np.array([0, 2, 4, 5], np.int32).tobytes())
    arr = pa.Array.from_buffers(pa.string(), 3, [pa.py_buffer(bytes([0b101])), offs, values], null_count=1)
    assert docs_of(*backend.string_buffers(_CudfSeries(arr))) == [b"ab", b"", b"e"]   # filled, not trusted
    assert docs_of(*backend.string_buffers(_CudfSeries(pa.array(["ab", None, "e"])))) == [b"ab", b"", b"e"]


def test_device_series_runs_on_the_gpu_unless_cpu_is_asked(host_cupy):
    s = _CudfSeries(pa.array(["a", "bc"]))
    assert ks.kernel_inputs(s, "auto")[2] and ks.kernel_inputs(s, "gpu")[2]
    s.to_arrow = lambda: s.arr
    data, offsets, on_gpu = ks.kernel_inputs(s, "cpu")
    assert not on_gpu and docs_of(data, offsets) == [b"a", b"bc"]


# ------------------------------------------------------------------------------------------------------------------
# exact dedup's folding: one spelling for pandas and cuDF, equal to the Arrow kernels it replaced
# ------------------------------------------------------------------------------------------------------------------


def test_trim_set_is_arrows_and_pythons_whitespace():
    from gpupipe.stages.dedup.exact import TRIM_CHARS, WHITESPACE_RUN

    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    arr = pa.array(["a" + chr(c) for c in cps])
    trimmed = pc.utf8_trim_whitespace(arr).to_numpy(zero_copy_only=False) == "a"
    arrow_ws = {chr(c) for c, t in zip(cps, trimmed) if t}
    assert arrow_ws == set(TRIM_CHARS) == {chr(c) for c in cps if chr(c).isspace()}
    folded = pc.replace_substring_regex(pa.array(["a" + chr(c) + "b" for c in cps]), r"\s+", " ")
    re2_ws = {chr(c) for c, t in zip(cps, folded.to_numpy(zero_copy_only=False) == "a b") if t}
    assert re2_ws == set(WHITESPACE_RUN[1:-2])


@pytest.mark.parametrize("dtype", ["str", object])
def test_folded_text_hashes_as_the_arrow_version(dtype):
    import random

    from gpupipe.kernels.text_hash import text_hash
    from gpupipe.stages.dedup.exact import folded_text

    rng = random.Random(3)
    pool = list(" \t\n\r\f\x0b\x1c\x85\xa0\u3000\u2028\u200bab\u00e9\u4e2d\x00")
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(0, 24))) for _ in range(3000)] + TEXTS
    s = pd.Series(texts, dtype=dtype)
    arr = pa.array(s, type=pa.large_string(), from_pandas=True).fill_null("")
    want = text_hash(pc.utf8_trim_whitespace(pc.replace_substring_regex(arr, r"\s+", " ")))
    assert (text_hash(folded_text(s)) == want).all()


# ------------------------------------------------------------------------------------------------------------------
# The partition runner: GPU-native stages take device frames, host-only stages get pandas, the hop is counted
# ------------------------------------------------------------------------------------------------------------------


class FakeDeviceFrame(pd.DataFrame):
    """Stands in for a cuDF DataFrame on a machine without one: recognised by its module, like cuDF, and converted
    to the host through `to_arrow(preserve_index=False)`, the cuDF method `backend.frame_to_host` uses."""

    @property
    def _constructor(self):  # pandas' subclassing hook: row selections etc. stay "device" frames
        return FakeDeviceFrame

    def to_arrow(self, preserve_index=None):
        return pa.Table.from_pandas(pd.DataFrame(self), preserve_index=bool(preserve_index))


FakeDeviceFrame.__module__ = "cudf.core.dataframe"


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"id": [f"d{i}" for i in range(6)], "doc_index": np.arange(6, dtype=np.int64),
                         "text": ["keep me", "drop me", "keep too", None, "drop", "stay"]})


def _stages():
    from gpupipe.stages.base import MapStage, RunContext

    seen = {}

    class DropsByText(MapStage):
        name = "drops_by_text_host"

        def transform(self, df):
            seen[self.name] = type(df)
            return df

        def reasons(self, df):
            return df["text"].map({"drop me": "by_text", "drop": "by_text"})

    class NativeDropsByText(DropsByText):
        name = "drops_by_text_native"
        gpu_native = True

    return seen, DropsByText(DropsByText.Config(), RunContext()), NativeDropsByText(DropsByText.Config(), RunContext())


def test_device_frames_are_recognised_and_converted_through_arrow():
    df = FakeDeviceFrame(_frame())
    assert backend.is_device_frame(df) and not backend.is_device_frame(_frame())
    host = backend.frame_to_host(df)
    assert type(host) is pd.DataFrame
    pd.testing.assert_frame_equal(host, pa.Table.from_pandas(_frame(), preserve_index=False).to_pandas())
    assert backend.frame_to_host(_frame()) is not None and backend.frame_nbytes(df) > 0


def test_host_only_stage_gets_pandas_once_and_the_hop_is_counted():
    seen, host_stage, _ = _stages()
    kept, rejects, stats = host_stage.run_partition(FakeDeviceFrame(_frame()))
    assert seen["drops_by_text_host"] is pd.DataFrame
    assert stats.extra["host_transfer_bytes"] == backend.frame_nbytes(FakeDeviceFrame(_frame()))
    assert kept["id"].tolist() == ["d0", "d2", "d3", "d5"] and dict(stats.removed) == {"by_text": 2}


def test_native_stage_keeps_the_device_frame_and_same_results_as_pandas():
    seen, host_stage, native = _stages()
    kept_d, rejects_d, stats_d = native.run_partition(FakeDeviceFrame(_frame()))
    assert seen["drops_by_text_native"] is FakeDeviceFrame and "host_transfer_bytes" not in stats_d.extra
    kept_h, rejects_h, stats_h = host_stage.run_partition(_frame())
    assert "host_transfer_bytes" not in stats_h.extra
    pd.testing.assert_frame_equal(pd.DataFrame(kept_d), kept_h)
    assert (stats_d.docs_in, stats_d.docs_out, stats_d.bytes_in, stats_d.bytes_out, dict(stats_d.removed)) == \
        (stats_h.docs_in, stats_h.docs_out, stats_h.bytes_in, stats_h.bytes_out, dict(stats_h.removed))
    assert rejects_h["reason"].tolist() == ["by_text", "by_text"]


def test_frame_device_needs_native_gpu_and_cudf(monkeypatch):
    from gpupipe.stages import base
    from gpupipe.stages.base import RunContext

    _, host_stage, native = _stages()
    assert native.frame_device() == "cpu" and host_stage.frame_device() == "cpu"
    native.ctx = host_stage.ctx = RunContext(device="gpu")
    monkeypatch.setattr(base, "has_cudf", lambda: True)
    assert native.frame_device() == "gpu" and host_stage.frame_device() == "cpu"
    monkeypatch.setattr(base, "has_cudf", lambda: False)   # CuPy only: frames stay pandas
    assert native.frame_device() == "cpu"


def test_write_frame_writes_a_device_frame_like_its_pandas_twin(tmp_path):
    moved = backend.write_frame(FakeDeviceFrame(_frame()), tmp_path / "a.parquet")
    assert moved == backend.frame_nbytes(FakeDeviceFrame(_frame()))
    assert backend.write_frame(_frame(), tmp_path / "b.parquet") == 0
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    pd.testing.assert_frame_equal(backend.read_frame(tmp_path / "a.parquet", "cpu"), _frame())
    if not backend.has_cudf():   # device gpu without cuDF (CuPy only, or nothing): frames stay pandas
        assert type(backend.read_frame(tmp_path / "a.parquet", "gpu")) is pd.DataFrame


def _run(tmp_path, name, src, partition_docs=64):
    from gpupipe.cli import main

    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(json.dumps({
        "input": {"path": str(src)}, "output": str(tmp_path / name), "device": "cpu", "seed": 0,
        # one process: the simulation patches this process's partition reader
        "executor": {"kind": "local", "workers": 1, "partition_docs": partition_docs},
        "stages": [{"normalize": {}}, {"exact_dedup": {}}, {"tokenize": {"vocab_size": 512}},
                   {"pack": {"seq_len": 64}}]}))
    assert main(["run", str(cfg)]) == 0
    return tmp_path / name


def test_pipeline_with_device_frames_in_gpu_native_stages_gives_the_same_bytes(tmp_path, monkeypatch):
    """The GPU data flow, simulated on the CPU: GPU-native stages get "device" frames (the pandas stand-in), run
    the same code on them, and their output crosses to the host to be written. Shards and parts are unchanged."""
    from gpupipe.io.parts import read_part
    from gpupipe.run import tasks
    from gpupipe.stages import base
    from gpupipe.stages.dedup import global_stage

    src = _jsonl_corpus(tmp_path / "corpus.jsonl")
    reference = _run(tmp_path, "reference", src)

    def read_frame(path, device="cpu", columns=None):
        df = read_part(path, columns)
        return FakeDeviceFrame(df) if device == "gpu" else df

    monkeypatch.setattr(base.Stage, "frame_device", lambda self: "gpu" if self.gpu_native else "cpu")
    monkeypatch.setattr(tasks, "read_frame", read_frame)
    monkeypatch.setattr(global_stage, "read_frame", read_frame)
    simulated = _run(tmp_path, "simulated", src)

    def files(run):
        return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*"))
                if p.is_file() and ("shards" in p.parts or p.suffix == ".parquet")}

    assert files(simulated) == files(reference)
    stats = {r.name: json.loads((r / "stats.json").read_text()) for r in (reference, simulated)}
    dedup = {k: next(s for s in v["stages"] if s["name"] == "exact_dedup") for k, v in stats.items()}
    assert dedup["simulated"]["extra"]["host_transfer_bytes"] > 0
    assert "host_transfer_bytes" not in dedup["reference"]["extra"]
    assert dedup["simulated"]["removed"] == dedup["reference"]["removed"] != {}
    other = [s for s in stats["simulated"]["stages"] if s["name"] != "exact_dedup"]
    assert all("host_transfer_bytes" not in s.get("extra", {}) for s in other)


def test_exact_dedup_is_the_gpu_native_stage_and_host_stages_are_not():
    from gpupipe.stages import STAGES

    native = sorted(name for name, cls in STAGES.items() if getattr(cls, "gpu_native", False))
    assert native == ["exact_dedup"]
    for host_only in ("extract", "langid", "tokenize", "perplexity", "quality_classifier"):
        assert not STAGES[host_only].gpu_native


def test_exact_dedup_keys_on_pandas_match_the_arrow_definition():
    from gpupipe.kernels.text_hash import text_hash
    from gpupipe.stages.base import RunContext
    from gpupipe.stages.dedup.exact import ExactDedup

    df = _frame().assign(text=["a  b", "a b", " a\tb\n", None, "", "a\u3000b"])
    keys = ExactDedup(ExactDedup.Config(), RunContext()).keys(df)
    arr = pa.array(df["text"], type=pa.large_string(), from_pandas=True).fill_null("")
    want = text_hash(pc.utf8_trim_whitespace(pc.replace_substring_regex(arr, r"\s+", " ")))
    assert keys["h0"].tolist() == want[:, 0].tolist() and keys["h1"].tolist() == want[:, 1].tolist()
    assert len(set(zip(keys["h0"], keys["h1"]))) == 3   # "a b" x3 (folded), "" x2 (null is ""), "a\u3000b"


# ------------------------------------------------------------------------------------------------------------------
# cuDF on a GPU (skipped here with the reason; run by profiling/gpu_check.sh where `import cudf` works)
# ------------------------------------------------------------------------------------------------------------------


@needs_cudf
@pytest.mark.parametrize("large", [False, True])
def test_cudf_string_buffers_equal_arrow_buffers(large):
    import cudf
    import cupy as cp

    texts = TEXTS * 50 + [f"doc {i} " * (i % 7) for i in range(500)]
    arrow = pa.array(texts, pa.large_string() if large else pa.string())
    s = cudf.Series.from_arrow(arrow)
    for series, want in ((s, texts), (s.iloc[17:333], texts[17:333]), (s.iloc[:0], []), (s.iloc[2:3], [None])):
        data, offsets = backend.string_buffers(series)
        assert isinstance(data, cp.ndarray) and isinstance(offsets, cp.ndarray)
        assert data.dtype == cp.uint8 and offsets.dtype in (cp.int32, cp.int64)
        assert offsets.shape == (len(want) + 1,)
        assert docs_of(data, offsets) == expected(want)
        assert docs_of(data, offsets) == docs_of(*ks.arrow_buffers(series.to_arrow()))
    # zero-copy: the views point into the column's own device buffers (a column without nulls, so no fill copy)
    t = s.fillna("")
    col = ks._pylibcudf_column(t)
    data, offsets = backend.string_buffers(t)
    assert data.data.ptr == col.data().ptr
    start = col.child(0).offset() + col.offset()
    assert offsets.data.ptr == col.child(0).data().ptr + start * offsets.itemsize


@needs_cudf
def test_cudf_text_hash_in_place_equals_cpu():
    import cudf

    from gpupipe.kernels.text_hash import text_hash
    from gpupipe.stages.dedup.exact import folded_text

    texts = TEXTS * 100
    s = cudf.Series(texts)
    assert (text_hash(s, device="gpu") == text_hash(pd.Series(texts, dtype="str"), device="cpu")).all()
    assert (text_hash(s.iloc[5:77], device="auto") == text_hash(texts[5:77])).all()
    assert (text_hash(folded_text(s), device="gpu") ==
            text_hash(folded_text(pd.Series(texts, dtype="str")), device="cpu")).all()


def _jsonl_corpus(path, n=400):
    import random

    rng = random.Random(11)
    words = "the a of data model token shard crawl page text clean dedup near exact gpu frame".split()
    lines = []
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 120)))
        lines.append(text)
        if i % 9 == 0:
            lines.append(text)                                   # an exact duplicate
        if i % 13 == 0:
            lines.append("  " + text.replace(" ", " \t ") + "\n")  # a duplicate up to whitespace
    path.write_text("".join(json.dumps({"text": t, "id": f"r{j}"}) + "\n" for j, t in enumerate(lines)))
    return path


@needs_cudf
def test_cudf_end_to_end_run_gives_the_cpu_shards(tmp_path):
    cli = pytest.importorskip("gpupipe.cli", reason="gpupipe's dependencies are not installed")
    src = _jsonl_corpus(tmp_path / "corpus.jsonl")
    runs = {}
    for device in ("cpu", "gpu"):
        out = tmp_path / f"run-{device}"
        cfg = tmp_path / f"{device}.yaml"
        cfg.write_text(json.dumps({
            "input": {"path": str(src)}, "output": str(out), "device": device, "seed": 0,
            "executor": {"kind": "local", "partition_docs": 64},
            "stages": [{"normalize": {}}, {"exact_dedup": {}}, {"tokenize": {"vocab_size": 512}},
                       {"pack": {"seq_len": 64}}]}))
        assert cli.main(["run", str(cfg)]) == 0
        runs[device] = out
    cpu, gpu = ({p.name: p.read_bytes() for p in sorted((r / "shards").iterdir())} for r in (runs["cpu"], runs["gpu"]))
    assert cpu == gpu and "manifest.json" in cpu
    stats = {d: json.loads((r / "stats.json").read_text()) for d, r in runs.items()}
    dedup = {d: next(s for s in st["stages"] if s["name"] == "exact_dedup") for d, st in stats.items()}
    assert dedup["gpu"]["removed"] == dedup["cpu"]["removed"] and dedup["cpu"]["removed"]["exact_duplicate"] > 0
    # exact_dedup really ran on cuDF frames: its output crossed to the host to be written, and says so
    assert dedup["gpu"]["extra"]["host_transfer_bytes"] > 0 and "host_transfer_bytes" not in dedup["cpu"]["extra"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-rs"]))
