"""Numeric answers where mutation testing found them unchecked (``aggregator.numeric_answers``,
issue 21): the ``bootstrap`` option, the mean's bootstrap interval, the per-window trend's
scaled errors and median interval, and the trends without smoothing.

Expected figures come from the distribution estimate itself (its replicates, centers and
quantiles, :mod:`aggregator.numeric`) and the normal quantile, computed here.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from aggregator.numeric import estimate_numeric, widen_interval
from aggregator.numeric_answers import mean_interval
from aggregator.results import DistributionEstimates, MeanEstimates
from aggregator.service import EstimateQuery, estimate_range, seed_of
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric import create as create_numeric

DAYS = ["2026-11-01", "2026-11-02"]
SIZES = [3000, 1200]  # unequal: total.n / n is not an integer


def _tallies(name: str) -> tuple[Any, dict[str, Any]]:
    mech = create_numeric(name, epsilon=2.0, bounds=(0, 100))
    rng = np.random.default_rng(8)
    tallies = {}
    for d, (day, n) in enumerate(zip(DAYS, SIZES, strict=True)):
        x = np.clip(rng.normal(45 + 5 * d, 12, n), 0, 100)
        tallies[day] = mech.tally(mech.perturb_many(x, rng=d + 1))
    return mech, tallies


@pytest.fixture(scope="module")
def square_wave() -> tuple[Any, dict[str, Any]]:
    return _tallies("square_wave")


def test_the_distribution_trend_scales_the_whole_ranges_spread(
    square_wave: tuple[Any, dict[str, Any]],
) -> None:
    mech, tallies = square_wave
    level = 0.9
    answer = estimate_range(mech, tallies, EstimateQuery(level=level, bootstrap=4))
    assert isinstance(answer, DistributionEstimates)
    total_tally = tallies[DAYS[0]] + tallies[DAYS[1]]
    total = estimate_numeric(mech, total_tally, bootstrap=4, rng=seed_of(total_tally))
    z = NormalDist().inv_cdf(0.5 + level / 2)
    total_se = float(np.std(total.replicates @ total.centers, ddof=1))
    assert answer.mean_ci.low == pytest.approx(total.mean - z * total_se)
    assert answer.mean_ci.high == pytest.approx(total.mean + z * total_se)
    median = total.quantile(0.5, level)
    for row, n in zip(answer.trend, SIZES, strict=True):
        scale = math.sqrt(sum(SIZES) / n)
        assert row.mean_std_error == pytest.approx(total_se * scale)
        assert row.mean is not None and row.median is not None
        assert row.mean_low == pytest.approx(row.mean - z * total_se * scale)
        assert row.median_low == pytest.approx(row.median - (median.value - median.low) * scale)
        assert row.median_high == pytest.approx(row.median + (median.high - median.value) * scale)


def test_two_replicates_give_a_standard_error_and_none_give_a_point(
    square_wave: tuple[Any, dict[str, Any]],
) -> None:
    mech, tallies = square_wave
    tally = tallies[DAYS[1]]
    dist = estimate_numeric(mech, tally, bootstrap=2, rng=1)
    low, high, se = mean_interval(dist, 0.95)
    expected = float(np.std(dist.replicates @ dist.centers, ddof=1))
    assert se == pytest.approx(expected) and expected > 0
    z = NormalDist().inv_cdf(0.975)
    assert (low, high) == pytest.approx((dist.mean - z * expected, dist.mean + z * expected))
    point = estimate_numeric(mech, tally, bootstrap=0, rng=1)
    assert mean_interval(point, 0.95) == (point.mean, point.mean, None)


def test_bootstrap_takes_integers_from_zero(square_wave: tuple[Any, dict[str, Any]]) -> None:
    mech, tallies = square_wave
    answer = estimate_range(mech, tallies, EstimateQuery(bootstrap=0))
    assert isinstance(answer, DistributionEstimates) and answer.bootstrap == 0
    assert answer.mean_ci.low == answer.mean_ci.high == answer.mean
    assert all(t.smoothed_mean is None and t.mean_std_error is None for t in answer.trend)
    for bad in (True, -1, 2.0):
        with pytest.raises(InvalidParameter, match="bootstrap must be an integer >= 0"):
            estimate_range(mech, tallies, EstimateQuery(bootstrap=bad))  # type: ignore[arg-type]


def test_trends_without_smoothing(square_wave: tuple[Any, dict[str, Any]]) -> None:
    mech, tallies = square_wave
    flat = estimate_range(mech, tallies, EstimateQuery(bootstrap=4, smoothing=False))
    assert isinstance(flat, DistributionEstimates)
    assert [t.smoothed_mean for t in flat.trend] == [None, None]
    assert all(t.mean_std_error is not None for t in flat.trend)
    mech, tallies = _tallies("piecewise")
    mean = estimate_range(mech, tallies, EstimateQuery(smoothing=False))
    assert isinstance(mean, MeanEstimates)
    assert [t.smoothed_mean for t in mean.trend] == [None, None]
    assert all(t.mean is not None for t in mean.trend)


def test_bootstrap_is_capped_before_any_replicate_is_drawn() -> None:
    # 10**9 replicates used to fail with a MemoryError (5.6 TiB asked for at once).
    from aggregator.numeric import MAX_BOOTSTRAP, estimate_numeric

    mech, tallies = _tallies("square_wave")
    tally = next(iter(tallies.values()))
    for bad in (MAX_BOOTSTRAP + 1, 10**9):
        with pytest.raises(InvalidParameter, match=f"at most {MAX_BOOTSTRAP}"):
            estimate_numeric(mech, tally, bootstrap=bad)
        with pytest.raises(InvalidParameter, match=f"at most {MAX_BOOTSTRAP}"):
            estimate_range(mech, tallies, EstimateQuery(bootstrap=bad))
    assert MAX_BOOTSTRAP == 10_000


def test_the_bootstrap_option_is_checked_before_the_reports() -> None:
    mech, tallies = _tallies("square_wave")
    with pytest.raises(InvalidParameter, match="bootstrap must be an integer >= 0"):
        estimate_range(mech, tallies, EstimateQuery(bootstrap=True, min_reports=10**6))


def test_histogram_bins_are_runs_with_percentile_intervals(
    square_wave: tuple[Any, dict[str, Any]],
) -> None:
    mech, tallies = square_wave
    level = 0.8
    answer = estimate_range(
        mech, tallies, EstimateQuery(level=level, bootstrap=6, histogram_bins=4, trend=False)
    )
    assert isinstance(answer, DistributionEstimates)
    total_tally = tallies[DAYS[0]] + tallies[DAYS[1]]
    dist = estimate_numeric(mech, total_tally, bootstrap=6, rng=seed_of(total_tally))
    groups = np.array_split(np.arange(dist.frequencies.size), 4)
    assert len(answer.bins) == 4
    for b, g in zip(answer.bins, groups, strict=True):
        freq = float(dist.frequencies[g].sum())
        sums = dist.replicates[:, g].sum(axis=1)
        lo = min(float(np.quantile(sums, 0.1)), freq)
        hi = max(float(np.quantile(sums, 0.9)), freq)
        # The percentile interval widened for the smoothing bias (docs/MECHANISMS.md 19.5).
        assert dist.relaxed is not None
        wide = widen_interval(freq, lo, hi, float(dist.relaxed[g].sum()) - freq)
        assert b.frequency == pytest.approx(freq)
        assert b.ci_low == pytest.approx(min(max(float(wide[0]), 0.0), freq))
        assert b.ci_high == pytest.approx(max(min(float(wide[1]), 1.0), freq))
        assert b.ci_high - b.ci_low >= hi - lo
        assert b.center == pytest.approx((b.low + b.high) / 2)
    one = estimate_range(mech, tallies, EstimateQuery(bootstrap=0, histogram_bins=1, trend=False))
    assert isinstance(one, DistributionEstimates)
    (whole,) = one.bins
    assert (whole.low, whole.high, whole.center) == (0.0, 100.0, 50.0)
    assert whole.frequency == pytest.approx(1.0)
    with pytest.raises(InvalidParameter, match="histogram_bins must be an integer >= 1, got 0"):
        estimate_range(mech, tallies, EstimateQuery(bootstrap=0, histogram_bins=0))
