"""The mean mechanisms' estimator and variance, checked exactly from their output weights.

For a grid input ``i`` the exact output distribution is ``output_weights(i)``; the per-report
estimate of an output ``y`` is what ``estimate_sums`` gives for the tally of ``y`` alone. So in
rational arithmetic ``E[i_hat | i]`` must be ``i`` (unbiased) and ``E[i_hat**2 | i] - i**2``
must be ``variance_grid(i)``; the float coefficients, the worst case and ``variance(x)`` are
then checked against those exact variances. Mutation testing (issue 21) showed statistical tests
cannot see errors of this size.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from client_sdk.errors import InvalidParameter, InvalidReport
from client_sdk.mechanisms.numeric import create
from client_sdk.mechanisms.randomness import SCALE, exact_threshold

BOUNDS = (-4.0, 12.0)
CASES = [
    (name, eps, grid)
    for name in ("duchi", "piecewise", "hybrid")
    for eps in (0.5, 1.0, 3.0)
    for grid in (7, 16)
]


def _exact_moments(mech, i: int) -> tuple[Fraction, Fraction]:
    den, weights = mech.output_weights(i)
    assert len(weights) == mech.output_size and sum(weights) == den
    assert all(w >= 0 for w in weights)
    m1 = m2 = Fraction(0)
    for y, w in enumerate(weights):
        if w:
            n, s1, s2 = mech.estimate_sums(mech.tally(np.array([y])))
            assert n == 1 and s2 == s1 * s1
            m1 += Fraction(w, den) * s1
            m2 += Fraction(w, den) * s2
    return m1, m2 - m1 * m1


@pytest.mark.parametrize("name, eps, grid", CASES)
def test_unbiased_with_the_stated_variance_exactly(name: str, eps: float, grid: int) -> None:
    mech = create(name, epsilon=eps, bounds=BOUNDS, grid=grid)
    c0, c1, c2 = mech.variance_coefficients
    exact = []
    for i in range(grid + 1):
        mean, var = _exact_moments(mech, i)
        assert mean == i
        assert var == mech.variance_grid(i)
        exact.append(var)
        assert c0 + c1 * i + c2 * i * i == pytest.approx(float(var), rel=1e-9)
    assert mech.worst_case_variance_grid == max(exact)
    unit = (BOUNDS[1] - BOUNDS[0]) / grid
    assert mech.worst_case_variance == pytest.approx(float(max(exact)) * unit**2, rel=1e-12)
    assert mech.unit_worst_case_variance == pytest.approx(float(max(exact)) * (2 / grid) ** 2)
    # variance(x) at grid points is the grid variance in units of x**2; between two points it
    # adds the rounding: E over {floor, ceil} of the grid variance, plus frac (1 - frac).
    x = BOUNDS[0] + unit * 2
    assert mech.variance(x) == pytest.approx(float(exact[2]) * unit**2, rel=1e-9)
    x = BOUNDS[0] + unit * 2.25
    mix = 0.75 * float(exact[2]) + 0.25 * float(exact[3]) + 0.25 * 0.75
    assert mech.variance(x) == pytest.approx(mix * unit**2, rel=1e-9)
    values = np.array([BOUNDS[0] - 1, BOUNDS[0] + unit * 2.25, 0.3, BOUNDS[1] + 5])
    np.testing.assert_allclose(mech.variances(values), [mech.variance(v) for v in values])
    assert mech.mean_variance(values) == pytest.approx(mech.variances(values).sum() / 16)


@pytest.mark.parametrize("grid", [2, 7, 16, 1000, 65536, 3 * 2**20])
def test_duchi_thresholds_meet_at_the_top_of_the_grid(grid: int) -> None:
    # T_lo + D delta = T_hi exactly (delta an integer), T_lo = 2**64 - T_hi, ratio <= e^eps.
    for eps in (0.1, 1.0, 5.0):
        mech = create("duchi", epsilon=eps, bounds=BOUNDS, grid=grid)
        assert mech.threshold(0) == mech.threshold_low == SCALE - mech.threshold_high
        assert mech.threshold(grid) == mech.threshold_high
        assert mech.realised_epsilon <= eps
        assert mech.realised_epsilon == pytest.approx(eps, rel=1e-3)


def test_duchi_refuses_an_epsilon_too_small_for_its_grid() -> None:
    # 2 T_hi - 2**64 is about 2**64 eps / 2, below the grid size D for eps < 2 D / 2**64.
    with pytest.raises(InvalidParameter, match="too small for a grid"):
        create("duchi", epsilon=1e-12, bounds=BOUNDS, grid=1 << 24)
    assert create("duchi", epsilon=1e-12, bounds=BOUNDS, grid=2).delta >= 1
    assert create("duchi", epsilon=1e-9, bounds=BOUNDS, grid=1 << 24).delta >= 1


def test_hybrid_mixes_piecewise_above_the_paper_epsilon_star() -> None:
    for eps in (0.62, 1.0, 4.0):
        mech = create("hybrid", epsilon=eps, bounds=BOUNDS, grid=16)
        assert mech.threshold == exact_threshold(-math.expm1(-eps / 2))
        assert mech.alpha == Fraction(mech.threshold, SCALE)
    for eps in (0.1, 0.5, 0.61):
        mech = create("hybrid", epsilon=eps, bounds=BOUNDS, grid=16)
        assert mech.threshold == 0
        assert mech.realised_epsilon == mech.duchi.realised_epsilon


def test_hybrid_wire_range_is_piecewise_then_two_bits() -> None:
    mech = create("hybrid", epsilon=2.0, bounds=BOUNDS, grid=16)
    m = mech.piecewise.output_size
    assert mech.output_size == m + 2
    mech.check_payload(m + 1)
    with pytest.raises(InvalidReport, match=r"\[0, "):
        mech.check_payload(m + 2)
