"""Coverage of the mean mechanisms' served intervals where the sample variance collapses.

With every value at a bound and a high epsilon (or a handful of reports) the reports of Duchi,
1BitMean, Piecewise and Hybrid barely vary: the sample variance behind ``std_error`` is 0 or
near it while the estimate still has a real error, and the served 95% interval held the truth
in 0.75-66% of runs in the cells below (Duchi, epsilon 10, n = 200, all values at the low bound:
0.75%). The standard error is floored at the mechanism's exact per-report variance at the
clamped estimate.

Tolerances: a coverage share over R seeded runs has standard error sqrt(0.95 * 0.05 / R); each
test asks for at least 0.95 minus 4 of them (R = 400: 0.906), which the unfloored intervals miss
by far (0.0075-0.66 in these cells, the numbers beside them).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from aggregator.numeric import MeanEstimate, estimate_numeric
from aggregator.results import MeanEstimates
from aggregator.service import EstimateQuery, estimate_range
from client_sdk.mechanisms.numeric import MeanMechanism, create

REPETITIONS = 400
NOMINAL = 0.95
FLOOR = NOMINAL - 4 * math.sqrt(NOMINAL * (1 - NOMINAL) / REPETITIONS)

CELLS = [
    # (mechanism, epsilon, n, every value at), then the coverage without the floor (this seed)
    ("duchi", 10.0, 200, 0.0),  # 0.0075
    ("1bitmean", 4.0, 50, 0.0),  # 0.6375
    ("piecewise", 10.0, 50, 0.0),  # 0.27
    ("hybrid", 10.0, 200, 1.0),  # 0.6575
    ("duchi", 0.1, 2, 0.5),  # 0.5025: two reports, one degree of freedom
]


@pytest.mark.parametrize(("name", "epsilon", "n", "value"), CELLS)
def test_served_mean_interval_covers_values_at_a_bound(
    name: str, epsilon: float, n: int, value: float
) -> None:
    mech = create(name, epsilon=epsilon, bounds=(0.0, 1.0))
    rng = np.random.default_rng(20261128)
    x = np.full(n, value)
    query = EstimateQuery(trend=False)
    covered = 0
    for _ in range(REPETITIONS):
        tally = mech.tally(mech.perturb_many(x, rng=rng))
        answer = estimate_range(mech, {"2026-01-01": tally}, query)
        assert isinstance(answer, MeanEstimates)
        assert math.isfinite(answer.ci.low) and answer.ci.low <= answer.ci.high
        covered += answer.ci.low <= value <= answer.ci.high
    assert covered / REPETITIONS >= FLOOR, (name, epsilon, n, covered / REPETITIONS, FLOOR)


@pytest.mark.parametrize("name", ["duchi", "1bitmean"])
def test_floor_leaves_binary_reports_inside_the_bounds_alone(name: str) -> None:
    # For a two-output mechanism s**2 = n/(n-1) Var[report | estimate] while the estimate is
    # inside the bounds, so the floor never binds there: the standard error is the sample one.
    mech = create(name, epsilon=1.0, bounds=(0.0, 1.0))
    assert isinstance(mech, MeanMechanism)
    rng = np.random.default_rng(7)
    x = rng.uniform(0.0, 1.0, 500)
    tally = mech.tally(mech.perturb_many(x, rng=rng))
    est = estimate_numeric(mech, tally)
    assert isinstance(est, MeanEstimate)
    n, s1, s2 = mech.estimate_sums(tally)
    unit = mech.grid.span / mech.grid.size
    sample = math.sqrt(float((s2 - s1 * s1 / n) / (n - 1)) / n) * unit
    assert 0.0 < est.mean < 1.0
    assert est.std_error == pytest.approx(sample, rel=1e-12)
