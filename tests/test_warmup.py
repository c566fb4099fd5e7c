"""gpupipe/warmup.py: the warm-up compiles every station that has numba kernels, simhash_dedup included."""

from gpupipe.warmup import _COMPILE_COST, _full_stages


def test_simhash_dedup_is_warmed_up_with_the_other_dedup_kernels():
    names = [next(iter(s)) for s in _full_stages("index.parquet")]
    for station in ("exact_dedup", "fuzzy_dedup", "simhash_dedup", "substring_dedup"):
        assert station in names and station in _COMPILE_COST, station
