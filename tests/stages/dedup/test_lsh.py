"""LSH banding math (gpupipe.stages.dedup.lsh): S-curve, FP/FN areas, the optimal (b, r) search, seed 001's exercise."""

import math
import re

import numpy as np
import pytest

from gpupipe.stages.dedup import lsh


def _p(s, b, r):
    """The S-curve written out independently of the module."""
    return 1.0 - (1.0 - s ** r) ** b


def _all_pairs(num_perm):
    return [(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)]


# ---- candidate probability ------------------------------------------------------------------------------------

def test_candidate_probability_scalar_and_array():
    assert isinstance(lsh.candidate_probability(0.8, 9, 13), float)
    assert lsh.candidate_probability(0.0, 9, 13) == 0.0
    assert lsh.candidate_probability(1.0, 9, 13) == 1.0
    s = np.linspace(0, 1, 11)
    p = lsh.candidate_probability(s, 9, 13)
    assert p.shape == s.shape
    np.testing.assert_allclose(p, _p(s, 9, 13))
    assert np.all(np.diff(p) >= 0)


@pytest.mark.parametrize("bands,rows", [(9, 13), (20, 5), (4, 2)])
def test_candidate_probability_matches_banding_simulation(bands, rows):
    """Banding real signature pairs whose values agree independently with probability s."""
    rng = np.random.default_rng(1234 + bands)
    trials, k = 20_000, bands * rows
    for s in (0.3, 0.5, 0.7, 0.8, 0.9):
        a = rng.integers(0, 2**63, (trials, k), dtype=np.int64)
        other = rng.integers(0, 2**63, (trials, k), dtype=np.int64)   # a 63-bit collision is never drawn
        b = np.where(rng.random((trials, k)) < s, a, other)
        band_equal = (a == b).reshape(trials, bands, rows).all(axis=2)  # a band matches when all its rows do
        observed = band_equal.any(axis=1).mean()
        expected = lsh.candidate_probability(s, bands, rows)
        sigma = math.sqrt(max(expected * (1 - expected), 1.0 / trials) / trials)
        assert abs(observed - expected) <= 3 * sigma, (s, observed, expected)


# ---- false positive / negative areas ----------------------------------------------------------------------------

@pytest.mark.parametrize("t", [0.3, 0.5, 0.8, 0.95])
@pytest.mark.parametrize("r", [1, 5, 13, 128])
def test_areas_closed_form_one_band(t, r):
    # b = 1: P = s^r, so FP = t^(r+1)/(r+1) and FN = (1-t) - (1 - t^(r+1))/(r+1)
    assert lsh.false_positive_area(t, 1, r) == pytest.approx(t ** (r + 1) / (r + 1), abs=1e-12)
    assert lsh.false_negative_area(t, 1, r) == pytest.approx((1 - t) - (1 - t ** (r + 1)) / (r + 1), abs=1e-12)


@pytest.mark.parametrize("t", [0.3, 0.5, 0.8])
@pytest.mark.parametrize("b", [1, 9, 128])
def test_areas_closed_form_one_row(t, b):
    # r = 1: P = 1 - (1-s)^b, so FP = t - (1 - (1-t)^(b+1))/(b+1) and FN = (1-t)^(b+1)/(b+1)
    assert lsh.false_positive_area(t, b, 1) == pytest.approx(t - (1 - (1 - t) ** (b + 1)) / (b + 1), abs=1e-12)
    assert lsh.false_negative_area(t, b, 1) == pytest.approx((1 - t) ** (b + 1) / (b + 1), abs=1e-12)


def test_areas_match_fine_trapezoid():
    s = np.linspace(0, 1, 400_001)
    for b, r in [(9, 13), (20, 5), (3, 42)]:
        t = 0.8
        below, above = s[s <= t], s[s >= t]
        fp = np.trapezoid(_p(below, b, r), below)
        fn = np.trapezoid(1 - _p(above, b, r), above)
        assert lsh.false_positive_area(t, b, r) == pytest.approx(fp, abs=1e-8)
        assert lsh.false_negative_area(t, b, r) == pytest.approx(fn, abs=1e-8)


def test_area_rejects_bad_threshold():
    with pytest.raises(ValueError):
        lsh.false_positive_area(1.5, 9, 13)


# ---- optimal (b, r) -------------------------------------------------------------------------------------------

def _brute_force_errors(threshold, num_perm, fp_w, fn_w, n=20_001):
    """Weighted error of every (b, r), integrated with a plain trapezoid rule (independent of the module)."""
    below, above = np.linspace(0, threshold, n), np.linspace(threshold, 1, n)
    return {(b, r): fp_w * np.trapezoid(_p(below, b, r), below)
            + fn_w * np.trapezoid(1 - _p(above, b, r), above)
            for b, r in _all_pairs(num_perm)}


@pytest.mark.parametrize("threshold,num_perm,weights", [
    (0.8, 128, (0.5, 0.5)), (0.5, 64, (0.5, 0.5)), (0.9, 256, (0.5, 0.5)),
    (0.7, 128, (0.2, 0.8)), (0.85, 100, (0.9, 0.1)), (0.3, 32, (0.5, 0.5)),
])
def test_optimal_params_minimises_weighted_area(threshold, num_perm, weights):
    b, r = lsh.optimal_params(threshold, num_perm, *weights)
    assert 1 <= b and 1 <= r and b * r <= num_perm
    errors = _brute_force_errors(threshold, num_perm, *weights)
    assert errors[(b, r)] <= min(errors.values()) + 1e-7


def test_optimal_params_seed_002_setting():
    # seed 002 §3.2: num_perm 128, threshold 0.8 -> 9 bands x 13 rows
    assert lsh.optimal_params(0.8, 128) == (9, 13)


def test_optimal_params_implied_threshold_rises_with_threshold():
    implied = [lsh.implied_threshold(*lsh.optimal_params(t, 128)) for t in np.arange(0.3, 0.96, 0.05)]
    assert all(x <= y for x, y in zip(implied, implied[1:])), implied
    assert implied[0] < implied[-1]


def test_optimal_params_matches_datasketch():
    """Only where datasketch is importable (the benchmark venv, not the main one)."""
    datasketch_lsh = pytest.importorskip("datasketch.lsh")
    for t in (0.5, 0.7, 0.8, 0.9):
        for num_perm in (32, 128, 256):
            for w in ((0.5, 0.5), (0.1, 0.9)):
                assert lsh.optimal_params(t, num_perm, *w) == datasketch_lsh._optimal_param(t, num_perm, *w)


def test_optimal_params_rejects_bad_input():
    with pytest.raises(ValueError):
        lsh.optimal_params(0.8, 0)
    with pytest.raises(ValueError):
        lsh.optimal_params(0.8, 128, 0.0, 0.0)


# ---- seed 001 §2.10 exercise 1 --------------------------------------------------------------------------------

EXERCISE = dict(hi_sim=0.8, hi_min_prob=0.95, lo_sim=0.5, lo_max_prob=0.05)


def _exercise_brute_force(num_perm):
    return [(b, r) for b, r in _all_pairs(num_perm)
            if _p(0.8, b, r) >= 0.95 and _p(0.5, b, r) <= 0.05]


def test_exercise_has_no_solution_within_128_permutations():
    """K=128 cannot meet both: P(0.8) >= 0.95 needs b >= ln 0.05 / ln(1 - 0.8^r), and with b*r <= 128 that
    forces r <= 7, where P(0.5) is already above 0.05 (13 x 7 gives 0.097; 13 x 8 tops out at P(0.8) = 0.908)."""
    assert lsh.solve_exercise(128, **EXERCISE) == [] == _exercise_brute_force(128)
    assert lsh.candidate_probability(0.8, 13, 7) >= 0.95 and lsh.candidate_probability(0.5, 13, 7) > 0.05
    assert lsh.candidate_probability(0.5, 13, 8) <= 0.05 and lsh.candidate_probability(0.8, 13, 8) < 0.95


def test_seed_002_banding_misses_the_exercise_bound():
    """9 x 13 (seed 002) cuts near (1/9)^(1/13) = 0.845: P(0.5) is tiny but P(0.8) is only ~0.40."""
    assert lsh.candidate_probability(0.5, 9, 13) <= 0.05
    assert lsh.candidate_probability(0.8, 9, 13) == pytest.approx(0.3988, abs=1e-4)
    assert (9, 13) not in lsh.solve_exercise(256, **EXERCISE)


def test_exercise_smallest_budget_and_solutions():
    smallest = next(k for k in range(128, 400) if lsh.solve_exercise(k, **EXERCISE))
    assert smallest == 189
    assert lsh.solve_exercise(189, **EXERCISE) == [(21, 9)]
    solutions = lsh.solve_exercise(256, **EXERCISE)
    assert solutions == _exercise_brute_force(256)
    assert solutions and all(b * r <= 256 for b, r in solutions)
    for b, r in solutions:
        assert lsh.candidate_probability(0.8, b, r) >= 0.95
        assert lsh.candidate_probability(0.5, b, r) <= 0.05


# ---- table and report -----------------------------------------------------------------------------------------

def test_params_table_adds_threshold_and_checks_budget():
    table = lsh.params_table(0.82, 128, 9, 13, similarities=(0.5, 0.9))
    assert [row["similarity"] for row in table] == [0.5, 0.82, 0.9]
    assert table[1]["probability"] == pytest.approx(_p(0.82, 9, 13))
    with pytest.raises(ValueError):
        lsh.params_table(0.8, 100, 9, 13)


def test_format_params_report():
    text = lsh.format_params_report(0.8, 128, 9, 13)
    assert "9 x 13 = 117" in text and "11 unused" in text
    assert "0.8445" in text                       # (1/9)^(1/13)
    assert "(this one)" in text
    assert "<- threshold" in text
    assert f"{lsh.false_positive_area(0.8, 9, 13):.5f}" in text
    assert "(this one)" not in lsh.format_params_report(0.8, 128, 20, 5)
    assert lsh.format_params_report(0.8, 128) == text


# ---- gpupipe minhash-params under constraints (#35) -------------------------------------------------------------

def test_search_params_generalises_the_exercise():
    assert lsh.search_params(256, [(0.8, 0.95)], [(0.5, 0.05)]) == lsh.solve_exercise(256, **EXERCISE)
    assert lsh.search_params(128, [(0.8, 0.95)], [(0.5, 0.05)]) == []
    assert lsh.smallest_budget([(0.8, 0.95)], [(0.5, 0.05)]) == (189, (21, 9))
    b, r = lsh.closest_params(128, [(0.8, 0.95)], [(0.5, 0.05)])
    assert b * r <= 128 and (_p(0.8, b, r) < 0.95 or _p(0.5, b, r) > 0.05)
    worst = lambda b, r: max(0.95 - _p(0.8, b, r), _p(0.5, b, r) - 0.05)   # noqa: E731
    assert worst(b, r) == min(worst(x, y) for x, y in _all_pairs(128))
    assert lsh.smallest_budget([(0.9, 1.0)], [(0.89, 0.0)], limit=64) is None


def test_cli_says_when_no_bands_rows_satisfy_and_finds_them_when_some_do(capsys):
    from gpupipe.cli import main

    assert main(["minhash-params", "--at-least", "0.8:0.95", "--at-most", "0.5:0.05", "--num-perm", "128"]) == 1
    out = capsys.readouterr().out
    assert "no bands x rows with b*r <= 128 permutations satisfies P(0.8) >= 0.95 and P(0.5) <= 0.05" in out
    assert "fewest permutations that satisfy it: 189 (21 x 9)" in out
    assert main(["minhash-params", "--exercise", "--num-perm", "256"]) == 0
    out = capsys.readouterr().out
    assert "6 bands x rows within 256 permutations satisfy" in out and "21x9" in out and "26x9" in out
    chosen = re.search(r"bands x rows\s+(\d+) x (\d+)", out)
    assert (int(chosen[1]), int(chosen[2])) in lsh.solve_exercise(256, **EXERCISE)


def test_cli_refuses_a_bad_constraint_before_any_work(capsys):
    from gpupipe.cli import main

    for bad in ("0.8", "0.8:1.5", "x:0.9"):
        with pytest.raises(SystemExit) as e:
            main(["minhash-params", "--at-least", bad])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "SIMILARITY:PROBABILITY" in err or "[0, 1]" in err
