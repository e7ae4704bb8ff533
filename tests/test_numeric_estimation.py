"""Mean mechanisms as statistics: unbiased, variance equal to the formula, honest errors.

Tolerances come from the variance: over R independent repetitions the estimates' average is
within 4 standard errors of the truth, and ``(R-1) s**2 / V`` lies inside the chi-square
distribution's central 0.999 interval, where ``V`` is the mechanism's exact variance
(``mean_variance``) for the data.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from aggregator.numeric import MeanEstimate, estimate_numeric
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import NUMERIC_MECHANISMS
from client_sdk.mechanisms.numeric import (
    AlphaPointMean,
    NumericTally,
    create,
)
from client_sdk.mechanisms.randomness import SCALE

#: Every mean mechanism of the one registry.
MEANS = sorted(n for n, cls in NUMERIC_MECHANISMS.items() if cls.kind == "mean")
BOUNDS = (-10.0, 30.0)
R = 200
N = 5000


def data(n: int = N) -> np.ndarray:
    gen = np.random.default_rng(2024)
    # skewed, with values outside the bounds (clipped) and exactly at them
    x = gen.gamma(2.0, 6.0, n) - 8.0
    x[:10] = BOUNDS[0]
    x[10:20] = 100.0
    return x


def repeated_means(mech, x: np.ndarray, seed: int) -> np.ndarray:
    gen = np.random.default_rng(seed)
    out = np.empty(R)
    for r in range(R):
        est = estimate_numeric(mech, mech.tally(mech.perturb_many(x, rng=gen)))
        out[r] = est.mean
    return out


@pytest.mark.parametrize("name", MEANS)
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_unbiased_with_the_formula_variance(name: str, epsilon: float) -> None:
    mech = create(name, epsilon=epsilon, bounds=BOUNDS)
    x = data()
    truth = float(np.clip(x, *BOUNDS).mean())
    v = mech.mean_variance(x)
    means = repeated_means(mech, x, seed=int(epsilon * 10) + len(name))
    assert abs(means.mean() - truth) <= 4 * math.sqrt(v / R), (means.mean(), truth, v)
    statistic = (R - 1) * means.var(ddof=1) / v
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], R - 1)
    assert lo <= statistic <= hi, f"empirical variance / formula = {statistic / (R - 1):.3f}"


@pytest.mark.parametrize("name", ["duchi", "piecewise", "hybrid"])
def test_std_error_is_the_iid_one_and_conservative(name: str) -> None:
    """E[std_error**2] = (mean per-report variance + population variance) / n >= true var."""
    mech = create(name, epsilon=1.0, bounds=BOUNDS)
    x = data(20000)
    gen = np.random.default_rng(5)
    ests = [estimate_numeric(mech, mech.tally(mech.perturb_many(x, rng=gen))) for _ in range(20)]
    se2 = np.mean([e.std_error**2 for e in ests])
    clipped = np.clip(x, *BOUNDS)
    expected = mech.mean_variance(x) + clipped.var() / x.size
    assert se2 >= mech.mean_variance(x)
    assert abs(se2 / expected - 1) < 0.05
    e = ests[0]
    assert isinstance(e, MeanEstimate)
    low, high = e.ci(0.95)
    assert math.isclose(high - e.mean, 1.959963984540054 * e.std_error, rel_tol=1e-9)
    assert math.isclose(e.mean - low, high - e.mean, rel_tol=1e-9)
    with pytest.raises(InvalidParameter):
        e.ci(1.5)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
def test_worst_case_variance_matches_the_papers_closed_forms(epsilon: float) -> None:
    """On t in [-1, 1]: Duchi B**2, PM 4e^{e/2}/(3(e^{e/2}-1)**2), HM's closed form."""
    e, h = math.exp(epsilon), math.exp(epsilon / 2)
    duchi = ((e + 1) / (e - 1)) ** 2
    pm = 4 * h / (3 * (h - 1) ** 2)
    hm = (
        (h + 3) / (3 * h * (h - 1)) + (e + 1) ** 2 / (h * (e - 1) ** 2) if epsilon > 0.61 else duchi
    )
    for name, formula in [("duchi", duchi), ("piecewise", pm), ("hybrid", hm)]:
        mech = create(name, epsilon=epsilon, bounds=(0, 1))
        assert math.isclose(mech.unit_worst_case_variance, formula, rel_tol=2e-3), name


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 0.61, 0.7, 1.0, 1.29, 1.3, 2.0, 4.0, 8.0])
def test_auto_is_never_worse_than_the_best_single_mechanism(epsilon: float) -> None:
    chosen = create("auto", epsilon=epsilon, bounds=(0, 5))
    singles = [create(n, epsilon=epsilon, bounds=(0, 5)) for n in ("duchi", "piecewise", "hybrid")]
    assert chosen.worst_case_variance == min(m.worst_case_variance for m in singles)
    assert chosen.worst_case_variance <= min(m.worst_case_variance for m in singles)


def test_auto_switches_from_duchi_to_hybrid() -> None:
    assert create("auto", epsilon=0.3, bounds=(0, 1)).name == "duchi"
    assert create("auto", epsilon=2.0, bounds=(0, 1)).name == "hybrid"


# -- alpha-point rounding with memoisation -----------------------------------------------------


SECRET = bytes(range(32))


def test_memoised_reports_repeat_for_the_same_rounded_value() -> None:
    mech = AlphaPointMean(epsilon=1.0, bounds=(0, 64), segments=64)
    first = mech.perturb_memoized(10.3, SECRET, campaign="minutes")
    assert all(mech.perturb_memoized(10.3, SECRET, campaign="minutes") == first for _ in range(20))
    r = mech.rounded(10.3, SECRET, campaign="minutes")
    assert r in (10, 11)
    # a nearby value in the same rounding window reports the same bit
    same = [
        v for v in np.linspace(10.0, 11.0, 41) if mech.rounded(v, SECRET, campaign="minutes") == r
    ]
    assert all(mech.perturb_memoized(v, SECRET, campaign="minutes") == first for v in same)
    with pytest.raises(InvalidParameter):
        mech.perturb_memoized(1.0, b"short")
    assert mech.longitudinal_epsilon(3) == 3 * mech.realised_epsilon
    assert mech.longitudinal_epsilon(10**6) == 65 * mech.realised_epsilon


def test_alpha_rounding_is_unbiased_and_memoised_bits_follow_the_threshold() -> None:
    """Over device secrets: P[round up] = frac(pos), P[bit = 1 | r] = T(r) / 2**64."""
    mech = AlphaPointMean(epsilon=1.0, bounds=(0, 8), segments=8)
    gen = np.random.default_rng(11)
    secrets = [gen.bytes(16) for _ in range(4000)]
    ups = np.array([mech.rounded(3.3, s) for s in secrets]) - 3
    p = 0.3
    assert abs(ups.mean() - p) <= 4 * math.sqrt(p * (1 - p) / len(secrets))
    bits = np.array([mech.memoized_bit(5, s, campaign="c") for s in secrets])
    q = mech.threshold(5) / SCALE
    assert abs(bits.mean() - q) <= 4 * math.sqrt(q * (1 - q) / len(secrets))
    other = np.array([mech.memoized_bit(5, s, campaign="d") for s in secrets])
    assert (bits != other).any()  # campaigns are keyed apart


# -- tallies --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*MEANS, "square_wave"])
def test_tallies_merge_exactly(name: str) -> None:
    mech = create(name, epsilon=1.0, bounds=BOUNDS)
    x = data(3000)
    a = mech.perturb_many(x[:1000], rng=1)
    b = mech.perturb_many(x[1000:], rng=2)
    ta, tb = mech.tally(a), mech.tally(b)
    assert ta + tb == tb + ta == mech.tally(np.concatenate([a, b]))
    assert (ta + tb).n == 3000
    assert mech.tally(mech.encode_many(a)) == ta  # from wire payloads
    assert NumericTally.from_dict(ta.to_dict()) == ta
    assert ta + mech.empty_tally() == ta


def test_bad_tallies_are_refused() -> None:
    duchi = create("duchi", epsilon=1.0, bounds=(0, 1))
    pm = create("piecewise", epsilon=1.0, bounds=(0, 1))
    with pytest.raises(InvalidParameter):
        duchi.tally([0, 1]) + pm.tally([0, 1])
    with pytest.raises(InvalidParameter):
        estimate_numeric(duchi, pm.tally([0, 1]))
    with pytest.raises(InvalidParameter):
        estimate_numeric(duchi, NumericTally(2, (3,)))  # more ones than reports
    for bad in [{"n": -1, "values": [0]}, {"n": 1, "values": [True]}, {"n": 1}, {"values": []}]:
        with pytest.raises(InvalidParameter):
            NumericTally.from_dict(bad)


def test_memoised_devices_give_an_unbiased_mean() -> None:
    """Many devices, each with its own secret, one memoised report each: unbiased, formula var."""
    mech = AlphaPointMean(epsilon=2.0, bounds=BOUNDS, segments=4)  # floor-rounding bias: 5
    x = data(6000)
    gen = np.random.default_rng(21)
    reports = [mech.perturb_memoized(float(v), gen.bytes(16), campaign="c") for v in x]
    est = estimate_numeric(mech, mech.tally(reports))
    truth = float(np.clip(x, *BOUNDS).mean())
    assert abs(est.mean - truth) <= 4 * math.sqrt(mech.mean_variance(x))
