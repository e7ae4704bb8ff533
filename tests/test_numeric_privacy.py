"""Exact privacy of the numeric mechanisms: enumerate every output distribution, integer weights.

For each mechanism the worst ratio ``max_y max_{x,x'} P[y|x] / P[y|x']`` is computed exactly
from ``output_weights`` over every grid input (small grids) or over the extreme inputs (default
grids; each class's docstring proves those are the worst), and must satisfy
``ratio_at_most(..., epsilon)`` (the house's e^epsilon with its safety margin). The realised
epsilon must equal ln of that ratio and fall short of epsilon only by rounding.
"""

from __future__ import annotations

import math

import pytest

from client_sdk.mechanisms import NUMERIC_MECHANISMS
from client_sdk.mechanisms.numeric import create
from client_sdk.mechanisms.randomness import log_ratio, ratio_at_most

EPSILONS = [0.1, 0.5, 1.0, 2.0, 4.0, 8.0]
_SMALL = {
    "duchi": {"grid": 32},
    "1bitmean": {"grid": 33},
    "piecewise": {"grid": 32},
    "hybrid": {"grid": 32},
    "square_wave": {"grid": 16},
    "alpha_point": {"segments": 7},
}
#: Every numeric mechanism of the one registry, on a small grid (a new one: grid 16).
SMALL = {name: _SMALL.get(name, {"grid": 16}) for name in NUMERIC_MECHANISMS}


def worst_ratio(mech, inputs) -> tuple[int, int]:
    """``(numerator, denominator)`` of the largest output-probability ratio over ``inputs``."""
    rows = []
    for i in inputs:
        den, weights = mech.output_weights(i)
        assert sum(weights) == den, f"weights of input {i} do not sum to the denominator"
        assert len(weights) == mech.output_size
        rows.append(weights)
    best = (1, 1)
    for column in zip(*rows, strict=True):
        hi, lo = max(column), min(column)
        if hi == 0:
            continue  # an output no input produces
        assert lo > 0, "an output possible for one input is impossible for another"
        if hi * best[1] > best[0] * lo:
            best = (hi, lo)
    return best


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_every_input_on_a_small_grid(name: str, epsilon: float) -> None:
    mech = create(name, epsilon=epsilon, bounds=(-3.0, 5.0), **SMALL[name])
    hi, lo = worst_ratio(mech, range(mech.grid.size + 1))
    assert ratio_at_most(hi, lo, epsilon)
    assert mech.realised_epsilon <= epsilon
    assert math.isclose(log_ratio(hi, lo), mech.realised_epsilon, rel_tol=1e-12)
    assert epsilon - mech.realised_epsilon < 1e-9 * epsilon
    # the extreme inputs attain the worst ratio (what the default-grid test relies on)
    extreme = worst_ratio(mech, mech.worst_inputs())
    assert extreme[0] * lo == hi * extreme[1]


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_extreme_inputs_on_the_default_grid(name: str, epsilon: float) -> None:
    mech = create(name, epsilon=epsilon, bounds=(0, 100))
    hi, lo = worst_ratio(mech, mech.worst_inputs())
    assert ratio_at_most(hi, lo, epsilon)
    assert math.isclose(log_ratio(hi, lo), mech.realised_epsilon, rel_tol=1e-12)
    assert mech.realised_epsilon <= epsilon


def test_the_check_catches_a_threshold_one_step_too_far() -> None:
    """The ratio test can fail: move a threshold past the largest admissible one."""
    mech = create("piecewise", epsilon=1.0, bounds=(0, 1), grid=16)
    hi, lo = worst_ratio(mech, range(17))
    assert ratio_at_most(hi, lo, 1.0)
    mech.band.threshold += 1 << 44
    hi, lo = worst_ratio(mech, range(17))
    assert not ratio_at_most(hi, lo, 1.0)

    duchi = create("duchi", epsilon=1.0, bounds=(0, 1), grid=16)
    duchi.threshold_low -= 1 << 44
    hi, lo = worst_ratio(duchi, range(17))
    assert not ratio_at_most(hi, lo, 1.0)


def test_hybrid_below_epsilon_star_is_pure_duchi() -> None:
    mech = create("hybrid", epsilon=0.5, bounds=(0, 1), grid=8)
    for i in range(9):
        _, weights = mech.output_weights(i)
        assert not any(weights[: mech.output_size - 2])
    assert mech.realised_epsilon == mech.duchi.realised_epsilon


@pytest.mark.parametrize("name", sorted(NUMERIC_MECHANISMS))
def test_reports_live_on_the_declared_output_grid(name: str) -> None:
    mech = create(name, epsilon=2.0, bounds=(0, 10))
    reports = [mech.perturb(x) for x in (-5.0, 0.0, 3.3, 10.0, 1e300, float("inf"))]
    assert all(type(r) is int and 0 <= r < mech.output_size for r in reports)
