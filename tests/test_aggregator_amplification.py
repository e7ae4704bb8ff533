"""Amplification by shuffling (docs/MECHANISMS.md §21) against a slow, independent reference.

The reference below recomputes the Feldman-McMillan-Talwar (FOCS 2021) divergence the plain
way: for a clone count c it sums max(0, P_c(a) − e^ε Q_c(a)) over every count a with SciPy's
binomial pmf (no threshold formula, no recurrence), and over c it uses SciPy's binomial cdf on
buckets, charging each bucket the divergence of its smallest count for an upper bound and of its
largest for a lower bound (the divergence falls as c grows: adding a clone adds an independent
coin to both sides, a post-processing). The true ε of the analysis therefore lies where the
reference says; the fast code must land within 1% of it.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import aggregator
from aggregator import ShuffleAmplification, amplified_epsilon, shuffle_amplification
from aggregator.amplification import METHOD, default_delta
from client_sdk.errors import InvalidParameter

TAIL = 1e-18  # clone-count mass the reference leaves out (charged divergence 1 in the upper bound)
BUCKETS = 120


def ref_conditional(c: int, eps: float, eps0: float) -> float:
    """D_{e^ε}(P_c || Q_c) by direct summation over the count a of the first value."""
    alpha = math.exp(eps0) / (math.exp(eps0) + 1.0)
    if c <= 20_000:
        a = np.arange(0, c + 2)
    else:  # beyond 12 standard deviations the binomial mass is < 1e-30
        half = int(12 * math.sqrt(c) / 2) + 2
        a = np.arange(max(0, c // 2 - half), min(c + 1, c // 2 + half) + 1)
    b = stats.binom.pmf(a, c, 0.5)
    b_prev = stats.binom.pmf(a - 1, c, 0.5)
    p = alpha * b + (1 - alpha) * b_prev
    q = (1 - alpha) * b + alpha * b_prev
    return float(np.maximum(p - math.exp(eps) * q, 0.0).sum())


def ref_delta(n: int, eps0: float, eps: float) -> tuple[float, float]:
    """(lower, upper) bounds on the analysis' δ(ε) for n reports at ε0."""
    m, p = n - 1, math.exp(-eps0)
    lo = int(stats.binom.ppf(TAIL, m, p))
    hi, top = math.floor(m * p), m  # smallest hi with sf(hi) <= TAIL (isf is coarse out there)
    while top - hi > 1:
        mid = (hi + top) // 2
        if stats.binom.sf(mid, m, p) <= TAIL:
            top = mid
        else:
            hi = mid
    hi = top
    outside = float(stats.binom.cdf(lo - 1, m, p) + stats.binom.sf(hi, m, p))
    if hi - lo <= 400:
        edges = np.arange(lo, hi + 2)
    else:
        edges = np.unique(np.linspace(lo, hi + 1, BUCKETS + 1).round().astype(int))
    ends = {int(c) for c in edges[:-1]} | {int(c) - 1 for c in edges[1:]}
    d = {c: ref_conditional(c, eps, eps0) for c in ends}
    lower = upper = 0.0
    for left, right in zip(edges[:-1], edges[1:], strict=True):  # bucket [left, right - 1]
        mass = float(stats.binom.cdf(right - 1, m, p) - stats.binom.cdf(left - 1, m, p))
        upper += mass * d[int(left)]
        lower += mass * d[int(right) - 1]  # the largest count in the bucket: D is smallest
    return lower, upper + outside


def closed_form(n: int, eps0: float, delta: float) -> float | None:
    """FMT21's closed-form bound (Theorem 3.1), where its condition on ε0 holds."""
    if eps0 > math.log(n / (16 * math.log(4 / delta))):
        return None
    x = math.expm1(eps0) / (math.exp(eps0) + 1)
    return math.log1p(
        x * (8 * math.sqrt(math.exp(eps0) * math.log(4 / delta) / n) + 8 * math.exp(eps0) / n)
    )


def check_against_reference(n: int, eps0: float, delta: float) -> None:
    eps = amplified_epsilon(eps0, n, delta)
    if eps == 0.0:  # already (0, δ)-DP
        assert ref_delta(n, eps0, 0.0)[1] <= delta
        return
    if eps < eps0:  # the true ε is at most 1% above the answer...
        assert ref_delta(n, eps0, eps * 1.01)[1] <= delta, (n, eps0, delta, eps)
    # ... and more than 1% below it (at ε0 itself: no amplification at all is provable)
    assert ref_delta(n, eps0, eps / 1.01)[0] > delta, (n, eps0, delta, eps)


GRID_SMALL = [
    (n, eps0, delta)
    for n in (1_000, 10_000, 100_000)
    for eps0 in (0.1, 0.5, 1.0, 2.0, 4.0, 8.0)
    for delta in (1e-10, 1e-7, 1e-4)
]
_GRID_LARGE_FULL = [
    (n, eps0, delta)
    for n in (1_000_000, 10_000_000, 100_000_000)
    for eps0 in (0.1, 1.0, 4.0, 8.0)
    for delta in (1e-10, 1e-4)
]
# The reference sums up to 10^8 binomial terms per cell (~7 CPU-minutes for the full grid), so
# the suite checks a spread of it; LDP_FULL_AMPLIFICATION_GRID=1 checks every cell.
GRID_LARGE = (
    _GRID_LARGE_FULL
    if os.environ.get("LDP_FULL_AMPLIFICATION_GRID") == "1"
    else [
        *[c for c in _GRID_LARGE_FULL if c[0] == 1_000_000],
        (10_000_000, 0.1, 1e-10),
        (10_000_000, 4.0, 1e-4),
        (100_000_000, 1.0, 1e-4),
        (100_000_000, 8.0, 1e-10),
    ]
)


@pytest.mark.parametrize(("n", "eps0", "delta"), GRID_SMALL)
def test_agrees_with_reference_small_n(n: int, eps0: float, delta: float) -> None:
    check_against_reference(n, eps0, delta)


@pytest.mark.slow
@pytest.mark.parametrize(("n", "eps0", "delta"), GRID_LARGE)
def test_agrees_with_reference_large_n(n: int, eps0: float, delta: float) -> None:
    check_against_reference(n, eps0, delta)


def test_reference_catches_a_wrong_answer() -> None:
    """The check is not vacuous: 2% off in either direction fails it."""
    n, eps0, delta = 100_000, 4.0, 1e-6
    eps = amplified_epsilon(eps0, n, delta)
    assert ref_delta(n, eps0, eps * 0.98)[0] > delta
    assert ref_delta(n, eps0, eps * 1.02)[1] <= delta
    assert ref_delta(n, eps0, eps * 0.98 * 1.01)[1] > delta  # "0.98 ε" would fail the upper side


def test_published_example_and_closed_form() -> None:
    """n = 10^5, ε0 = 4, δ = 10^-6: ≈ 0.17 numerically, ≈ 0.54 in closed form (FMT21)."""
    eps = amplified_epsilon(4.0, 100_000, 1e-6)
    assert 0.16 < eps < 0.18
    bound = closed_form(100_000, 4.0, 1e-6)
    assert bound is not None and 0.5 < bound < 0.6


@pytest.mark.parametrize(("n", "eps0", "delta"), [c for c in GRID_SMALL if closed_form(*c)])
def test_never_above_closed_form_or_epsilon0(n: int, eps0: float, delta: float) -> None:
    bound = closed_form(n, eps0, delta)
    assert bound is not None
    eps = amplified_epsilon(eps0, n, delta)
    assert eps <= min(bound, eps0)


def grid_point(draw: st.DrawFn) -> tuple[int, float, float]:
    n = draw(st.integers(1_000, 2_000_000))
    eps0 = draw(st.floats(0.1, 8.0))
    delta = draw(st.floats(1e-10, 1e-4))
    return n, eps0, delta


@st.composite
def pairs(draw: st.DrawFn) -> tuple[tuple[int, float, float], tuple[int, float, float]]:
    """Two arguments differing in one coordinate, the second "more private" than the first."""
    n, eps0, delta = grid_point(draw)
    which = draw(st.sampled_from(["n", "eps0", "delta"]))
    if which == "n":
        return (n, eps0, delta), (draw(st.integers(n, 2_000_000)), eps0, delta)
    if which == "eps0":
        return (n, eps0, delta), (n, draw(st.floats(0.1, eps0)), delta)
    return (n, eps0, delta), (n, eps0, draw(st.floats(delta, 1e-4)))


@settings(max_examples=60, deadline=None)
@given(pairs())
def test_monotone_in_each_argument(
    pair: tuple[tuple[int, float, float], tuple[int, float, float]],
) -> None:
    (n1, e1, d1), (n2, e2, d2) = pair
    assert amplified_epsilon(e2, n2, d2) <= amplified_epsilon(e1, n1, d1)


def test_monotone_along_each_axis_at_large_n() -> None:
    ns = [10**6, 3 * 10**6, 10**7, 3 * 10**7, 10**8]
    by_n = [amplified_epsilon(1.0, n, 1e-8) for n in ns]
    assert by_n == sorted(by_n, reverse=True) and len(set(by_n)) == len(by_n)
    by_eps0 = [amplified_epsilon(e, 10**8, 1e-8) for e in (0.5, 1.0, 2.0, 4.0, 8.0)]
    assert by_eps0 == sorted(by_eps0)
    by_delta = [amplified_epsilon(2.0, 10**7, d) for d in (1e-10, 1e-8, 1e-6, 1e-4)]
    assert by_delta == sorted(by_delta, reverse=True)


def test_typed_result_and_default_delta() -> None:
    result = shuffle_amplification(2.0, 50_000)
    assert isinstance(result, ShuffleAmplification)
    assert result.delta == default_delta(50_000) == 1e-8  # 50000^-1.1 ≈ 6.8e-6 is above the cap
    assert (result.n, result.epsilon0, result.method) == (50_000, 2.0, METHOD)
    assert result.epsilon == amplified_epsilon(2.0, 50_000) < 2.0
    assert default_delta(10**8) == pytest.approx((10**8) ** -1.1)
    assert default_delta(10**8) < 1e-8
    one = shuffle_amplification(1.0, 1, delta=1e-6)
    assert (one.epsilon, one.method) == (1.0, "none")
    assert "amplified_epsilon" in aggregator.__all__


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0.0, 1000, 1e-6), "epsilon0 must be a finite number > 0, got 0.0"),
        ((float("nan"), 1000, 1e-6), "epsilon0"),
        ((1.0, 0, 1e-6), "n must be an integer >= 1"),
        ((1.0, 10.5, 1e-6), "n must be an integer >= 1"),
        ((1.0, 1000, 0.0), "delta must be a number in \\(0, 1\\)"),
        ((1.0, 1000, 1.5), "delta must be a number in \\(0, 1\\)"),
    ],
)
def test_bad_arguments(args: tuple[object, object, object], match: str) -> None:
    with pytest.raises(InvalidParameter, match=match):
        amplified_epsilon(*args)  # type: ignore[arg-type]
