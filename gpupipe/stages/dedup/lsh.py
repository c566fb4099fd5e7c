"""MinHash-LSH banding math: choosing (bands, rows) for a Jaccard threshold.

A signature of `num_perm` MinHash values is cut into `bands` bands of `rows` values; two documents become
candidates when any band is equal in all its rows. With Jaccard similarity s each value agrees with probability
s, so a pair becomes a candidate with probability

    P(s) = 1 - (1 - s**rows)**bands                      (the S-curve; steepest near (1/bands)**(1/rows))

The false-positive area is the integral of P below the threshold t, the false-negative area the integral of
1 - P above it. `optimal_params` minimises their weighted sum over every b*r <= num_perm, with the same search
order and tie rule as datasketch's MinHashLSH (b outer, r inner, first minimum kept), so the defaults agree
with it (t=0.8, 128 permutations -> 9 bands x 13 rows, the user's spec's MinHash setting).

Integrals use fixed composite Gauss-Legendre quadrature (numpy only, no scipy): P is a smooth polynomial, so
a few hundred nodes already match an adaptive integrator to ~1e-12, and every (b, r) pair shares the nodes,
which makes the full search one vectorised pass.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

SIMILARITIES = (0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)

_PANELS = 64        # composite rule: the S-curve can be steep (r up to num_perm), so split [a, b] in panels
_NODES = 16         # Gauss-Legendre nodes per panel: exact for polynomials of degree 31 on each panel


def candidate_probability(s: float | np.ndarray, bands: int, rows: int) -> float | np.ndarray:
    """P(s) = 1 - (1 - s^rows)^bands: the chance that a pair with Jaccard s shares at least one band."""
    p = 1.0 - (1.0 - np.asarray(s, dtype=np.float64) ** rows) ** bands
    return float(p) if np.ndim(p) == 0 else p


@lru_cache(maxsize=64)
def _quadrature(a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the composite Gauss-Legendre rule on [a, b]."""
    x, w = np.polynomial.legendre.leggauss(_NODES)
    edges = np.linspace(a, b, _PANELS + 1)
    half = np.diff(edges)[:, None] / 2
    mid = (edges[:-1] + edges[1:])[:, None] / 2
    return (mid + half * x).ravel(), (half * w).ravel()


def _areas(threshold: float, bands: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(false-positive area, false-negative area) for arrays of (bands, rows), broadcast over the nodes."""
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must lie in [0, 1], got {threshold}")
    b, r = np.asarray(bands, np.float64)[:, None], np.asarray(rows, np.float64)[:, None]
    xs, ws = _quadrature(0.0, float(threshold))
    fp = (1.0 - (1.0 - xs ** r) ** b) @ ws
    xs, ws = _quadrature(float(threshold), 1.0)
    fn = ((1.0 - xs ** r) ** b) @ ws           # 1 - P(s)
    return fp, fn


def false_positive_area(threshold: float, bands: int, rows: int) -> float:
    """Integral of P(s) over [0, threshold]: how much below-threshold similarity still becomes a candidate."""
    return float(_areas(threshold, np.array([bands]), np.array([rows]))[0][0])


def false_negative_area(threshold: float, bands: int, rows: int) -> float:
    """Integral of 1 - P(s) over [threshold, 1]: how much above-threshold similarity is missed."""
    return float(_areas(threshold, np.array([bands]), np.array([rows]))[1][0])


def _all_params(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (b, r) with b*r <= num_perm, b ascending then r ascending (datasketch's search order)."""
    if num_perm < 1:
        raise ValueError(f"num_perm must be >= 1, got {num_perm}")
    pairs = [(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)]
    arr = np.array(pairs, dtype=np.int64)
    return arr[:, 0], arr[:, 1]


@lru_cache(maxsize=256)  # ~30 ms of quadrature per call; stages ask once per partition
def optimal_params(threshold: float, num_perm: int, fp_weight: float = 0.5,
                   fn_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) minimising fp_weight * FP area + fn_weight * FN area over all b*r <= num_perm."""
    if fp_weight < 0 or fn_weight < 0 or fp_weight + fn_weight <= 0:
        raise ValueError("weights must be non-negative and not both zero")
    bands, rows = _all_params(num_perm)
    fp, fn = _areas(threshold, bands, rows)
    i = int(np.argmin(fp_weight * fp + fn_weight * fn))  # argmin keeps the first minimum, like datasketch's `<`
    return int(bands[i]), int(rows[i])


def implied_threshold(bands: int, rows: int) -> float:
    """(1/b)^(1/r): roughly where the S-curve is steepest, the similarity the banding really cuts at."""
    return (1.0 / bands) ** (1.0 / rows)


def _check_budget(num_perm: int, bands: int, rows: int) -> None:
    if bands < 1 or rows < 1 or bands * rows > num_perm:
        raise ValueError(f"{bands} bands x {rows} rows needs {bands * rows} permutations; only {num_perm}")


def params_table(threshold: float, num_perm: int, bands: int, rows: int,
                 similarities=SIMILARITIES) -> list[dict]:
    """Rows {similarity, probability} of the S-curve; the threshold itself is added when not listed."""
    _check_budget(num_perm, bands, rows)
    sims = sorted({round(float(s), 6) for s in similarities} | {round(float(threshold), 6)})
    return [{"similarity": s, "probability": candidate_probability(s, bands, rows)} for s in sims]


def solve_exercise(num_perm: int, hi_sim: float, hi_min_prob: float, lo_sim: float,
                   lo_max_prob: float) -> list[tuple[int, int]]:
    """All (b, r) with b*r <= num_perm, P(hi_sim) >= hi_min_prob and P(lo_sim) <= lo_max_prob.

    The textbook exercise: 128 permutations, candidates at Jaccard 0.8 with probability >= 0.95 and at 0.5 with
    probability <= 0.05. Sorted by bands, then rows. Bigger b*r sharpens the curve, so solutions cluster near the
    budget's edge.
    """
    bands, rows = _all_params(num_perm)
    hi = candidate_probability(hi_sim, bands, rows)
    lo = candidate_probability(lo_sim, bands, rows)
    ok = (hi >= hi_min_prob) & (lo <= lo_max_prob)
    return [(int(b), int(r)) for b, r in zip(bands[ok], rows[ok])]


Constraint = tuple[float, float]   # (similarity, probability)


def _meets(bands: np.ndarray, rows: np.ndarray, at_least: list[Constraint], at_most: list[Constraint]) -> np.ndarray:
    ok = np.ones(len(bands), dtype=bool)
    for sim, prob in at_least:
        ok &= candidate_probability(sim, bands, rows) >= prob
    for sim, prob in at_most:
        ok &= candidate_probability(sim, bands, rows) <= prob
    return ok


def search_params(num_perm: int, at_least: list[Constraint], at_most: list[Constraint]) -> list[tuple[int, int]]:
    """Every (b, r) with b*r <= num_perm and P(s) >= p for each (s, p) of at_least, P(s) <= p for each of at_most;
    sorted by bands, then rows. solve_exercise is the one-and-one case."""
    bands, rows = _all_params(num_perm)
    ok = _meets(bands, rows, at_least, at_most)
    return [(int(b), int(r)) for b, r in zip(bands[ok], rows[ok])]


def closest_params(num_perm: int, at_least: list[Constraint], at_most: list[Constraint]) -> tuple[int, int]:
    """The (b, r) within the budget whose worst constraint is missed by the least probability."""
    bands, rows = _all_params(num_perm)
    miss = np.zeros(len(bands))
    for sim, prob in at_least:
        miss = np.maximum(miss, prob - candidate_probability(sim, bands, rows))
    for sim, prob in at_most:
        miss = np.maximum(miss, candidate_probability(sim, bands, rows) - prob)
    i = int(np.argmin(miss))
    return int(bands[i]), int(rows[i])


def smallest_budget(at_least: list[Constraint], at_most: list[Constraint],
                    limit: int = 4096) -> tuple[int, tuple[int, int]] | None:
    """The fewest permutations b*r (<= limit) some (b, r) meeting the constraints uses, and that pair (fewest bands
    first); None when none within the limit does."""
    bands, rows = _all_params(limit)
    ok = _meets(bands, rows, at_least, at_most)
    if not ok.any():
        return None
    used = bands * rows
    i = min(np.flatnonzero(ok), key=lambda j: (used[j], bands[j]))
    return int(used[i]), (int(bands[i]), int(rows[i]))


def describe_constraints(at_least: list[Constraint], at_most: list[Constraint]) -> str:
    return " and ".join([f"P({s:g}) >= {p:g}" for s, p in at_least] + [f"P({s:g}) <= {p:g}" for s, p in at_most])


def format_params_report(threshold: float, num_perm: int, bands: int | None = None,
                         rows: int | None = None) -> str:
    """Human-readable report for `gpupipe minhash-params`: the banding, its implied cut, FP/FN areas, the S-curve.

    With bands/rows left out, the optimal pair for (threshold, num_perm) is reported.
    """
    best = optimal_params(threshold, num_perm)
    if bands is None or rows is None:
        bands, rows = best
    _check_budget(num_perm, bands, rows)
    fp, fn = false_positive_area(threshold, bands, rows), false_negative_area(threshold, bands, rows)
    used = bands * rows
    lines = [
        f"MinHash LSH for Jaccard threshold {threshold:g} with {num_perm} permutations",
        f"  bands x rows       {bands} x {rows} = {used} permutations"
        + (f" ({num_perm - used} unused)" if used < num_perm else ""),
        f"  implied threshold  (1/b)^(1/r) = {implied_threshold(bands, rows):.4f}",
        f"  false-positive area  integral_0^t P(s) ds     = {fp:.5f}",
        f"  false-negative area  integral_t^1 1-P(s) ds   = {fn:.5f}",
        f"  optimal (b, r) at equal FP/FN weights: {best[0]} x {best[1]}"
        + ("  (this one)" if (bands, rows) == best else ""),
        "",
        "  similarity  P(candidate)",
    ]
    for row in params_table(threshold, num_perm, bands, rows):
        bar = "#" * round(row["probability"] * 40)
        mark = "  <- threshold" if abs(row["similarity"] - threshold) < 1e-9 else ""
        lines.append(f"  {row['similarity']:>10.2f}  {row['probability']:>12.4f}  {bar}{mark}")
    return "\n".join(lines)
