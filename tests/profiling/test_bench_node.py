"""profiling/bench_node.py's bookkeeping of runs (what its node model and its check against a node are built from):
the worker counts it reads, the config each run gets, and which rows feed the host model and how GPU rows are
checked. The runs themselves are `gpupipe run`s measured from outside (the script, not a test)."""

import json

from tests.helpers import ROOT

BENCH = ROOT / "profiling" / "bench_node.py"


def _load():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_node", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _stage(name, seconds, bytes_in):
    return {"name": name, "seconds": seconds, "docs_in": 10, "docs_out": 10, "bytes_in": bytes_in, "partitions": 2,
            "compile_s": 0.0, "phases": {}, "peak_worker": 100.0, "peak_driver": 100.0, "p50": None, "p99": None}


def _row(workers, device, pinned, seconds):
    m = {"workers": workers, "pinned": pinned, "device": device, "gpu_busy": 0.2 if device == "gpu" else None,
         "gpu_mem_mb": None, "wall": sum(seconds) + 2, "stats_seconds": sum(seconds), "cpu_s": 10.0,
         "partitions": 2, "peak_worker": 100.0, "peak_driver": 100.0, "digest": "x",
         "stages": [_stage("normalize", seconds[0], 40e6), _stage("langid", seconds[1], 40e6)]}
    return {"scale": 1, "meta": {"text_bytes": 40e6, "docs": 10, "files": [], "file_bytes": 1}, "m": m}


def test_worker_counts_configs_and_labels():
    bn = _load()
    assert bn.parse_workers("1,default,cores,2", 16) == [0, 1, 2, 16]
    user = bn.config_text(["a.jsonl"], ROOT / "out", bn.DEFAULT_WORKERS, "gpu")
    assert "device: gpu" in user and "executor" not in user          # a user's run: the config names no executor
    assert "executor: {kind: local, workers: 3}" in bn.config_text(["a.jsonl"], ROOT / "out", 3)
    label = lambda w, d, p=False: bn.run_label({"workers": w, "device": d, "pinned": p})  # noqa: E731
    assert [label(0, "cpu"), label(1, "cpu", True), label(15, "gpu"), label(0, "gpu")] == \
        ["default", "1p", "15+gpu", "default+gpu"]


def test_the_host_model_uses_explicit_cpu_runs_and_gpu_rows_are_checked_with_the_feeder_core(tmp_path):
    bn = _load()
    rows = [_row(1, "cpu", True, [2.0, 4.0]), _row(2, "cpu", False, [1.0, 2.0]),
            _row(8, "gpu", False, [9.0, 9.0]),
            _row(0, "cpu", False, [0.1, 0.1])]
    model, single, _ = bn.choose_model(rows, 8)
    assert model["n"] == 2 and single is None     # neither the gpu row (8 workers) nor the default row took part
    saved = tmp_path / "node.json"
    saved.write_text(json.dumps({"model": model, "date": "d", "cores": 2, "digest": ["x"]}))
    lines = bn.check_lines(str(saved), rows, {})
    gpu_line = next(line for line in lines if "workers 8+gpu" in line)
    want = bn.predict(model, 9, 1, {})["mb_s"]          # 8 pool workers + the driver's core, one GPU
    assert f"predicted {want:.2f}," in gpu_line
    assert any("workers default" in line for line in lines)


def test_a_row_during_which_cupy_compiled_is_noted_with_its_first_run(tmp_path):
    """CuPy's kernel cache is the runs' own folder: files added during a row are kernels NVRTC compiled in it."""
    bench = _load()
    cache = tmp_path / "cupy-cache"
    assert bench._files_in(cache) == 0
    (cache / "sub").mkdir(parents=True)
    (cache / "sub" / "a.cubin").write_bytes(b"x")
    (cache / "b.cubin").write_bytes(b"y")
    assert bench._files_in(cache) == 2
    quiet = {"sources_changed": False, "compiled": False, "cupy_compiled": 0, "left_behind": 0}
    assert bench.note_of(quiet) == ""
    assert bench.note_of({**quiet, "cupy_compiled": 5}) == "CuPy compiled 5 kernels"
    rerun = {**quiet, "cold": {"wall": 21.6, "sources_changed": False, "compiled": False, "cupy_compiled": 40}}
    assert bench.note_of(rerun) == "first run 21.6 s (CuPy compiled 40 kernels)"


def test_a_second_bench_run_of_the_day_gets_its_own_results_file(tmp_path, monkeypatch):
    """bench_pipeline/bench_node write RESULTS/PREFIX_DATE.txt; a later run the same day once overwrote it."""
    bp = _load().bp
    monkeypatch.setattr(bp, "RESULTS", tmp_path / "results")
    first = bp.new_result_path("pipeline_bench")
    assert first.parent.is_dir() and not first.exists() and first.name.startswith("pipeline_bench_")
    first.write_text("run 1")
    second = bp.new_result_path("pipeline_bench")
    assert second.name == first.stem + "_2.txt"
    second.write_text("run 2")
    assert bp.new_result_path("pipeline_bench").name == first.stem + "_3.txt"
    assert first.read_text() == "run 1"
