"""gpupipe/warmup.py: the warm-up compiles every station that has numba kernels, simhash_dedup included."""

from gpupipe.warmup import _COMPILE_COST, _full_stages


def test_simhash_dedup_is_warmed_up_with_the_other_dedup_kernels():
    names = [next(iter(s)) for s in _full_stages("index.parquet")]
    for station in ("exact_dedup", "fuzzy_dedup", "simhash_dedup", "substring_dedup"):
        assert station in names and station in _COMPILE_COST, station


def test_the_gpu_pass_takes_extract_and_every_device_station_once():
    from gpupipe.warmup import _JSONL_STAGES, _device_stages

    names = [next(iter(s)) for s in _device_stages(_full_stages("index.parquet") + _JSONL_STAGES)]
    assert names == ["extract", "exact_dedup", "fuzzy_dedup", "simhash_dedup", "decontaminate"]
    assert _device_stages([{"extract": {}}, {"normalize": {}}]) == []   # no device station: no gpu pass


def test_where_a_gpu_is_usable_the_device_stations_run_once_on_it(tmp_path):
    """Through the CuPy stand-in (a machine whose CuPy sees a device): the warm-up's last run is the device stations
    with `device: gpu`, their kernels launched; with device cpu, or without a GPU, there is no such run."""
    from gpupipe.warmup import warm_up
    from tests.gpu_standin import install

    for device in ("auto", "gpu"):   # no GPU here: CPU runs only, a gpu config's too
        assert {r["run"] for r in warm_up(docs=40, work=tmp_path, stations=["exact_dedup"], device=device)} == {"warc"}
    with install() as cp:
        assert {r["run"] for r in warm_up(docs=40, work=tmp_path, stations=["exact_dedup"], device="cpu")} == {"warc"}
        assert not cp.STATE.stats.launches
        rows = warm_up(docs=40, work=tmp_path, stations=["exact_dedup"])
        assert [r["stage"] for r in rows if r["run"] == "gpu"] == ["read", "extract", "exact_dedup"]
        assert any(k.startswith("text_hash") for k in cp.STATE.stats.launches), cp.STATE.stats.launches


def test_a_cpu_config_s_warm_up_never_touches_the_gpu(tmp_path):
    from gpupipe.warmup import warm_up
    from tests.gpu_standin import install

    cfg = tmp_path / "cpu.yaml"
    cfg.write_text("device: cpu\nstages:\n  - extract: {}\n  - exact_dedup: {}\n")
    with install() as cp:
        assert {r["run"] for r in warm_up(docs=40, work=tmp_path, config=cfg)} == {"warc"}
        assert not cp.STATE.stats.launches
        cfg.write_text("stages:\n  - extract: {}\n  - exact_dedup: {}\n")   # no device named: auto, the GPU here
        assert "gpu" in {r["run"] for r in warm_up(docs=40, work=tmp_path, config=cfg)}
