"""What ``aggregator.service`` answers, where mutation testing found it unchecked (issue 21).

Each expected figure is derived independently of the service: the intervals from the estimate
(:func:`aggregator.estimate.estimate`) and the normal quantile, the post-processing from
:func:`aggregator.postprocess.postprocess` at ``alpha = 1 - level``, the smoothed trend from
:func:`aggregator.smooth.smooth_series` over the raw rows, per-window frequencies from
:func:`aggregator.estimate.debias`.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from aggregator.estimate import debias, estimate
from aggregator.postprocess import postprocess
from aggregator.results import FrequencyEstimates, MeanEstimates
from aggregator.service import (
    EstimateQuery,
    estimate_range,
    raw_frequency_trend,
    smooth_one,
    with_smoothed_frequencies,
)
from aggregator.smooth import smooth_series
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Tally, create
from client_sdk.mechanisms.numeric import create as create_numeric

DAYS = [f"2026-11-{d:02d}" for d in range(1, 6)]


def _tallies(mech: Any, sizes: list[int], seed: int) -> dict[str, Tally]:
    rng = np.random.default_rng(seed)
    out = {}
    for day, n in zip(DAYS, sizes, strict=False):
        values = rng.choice(mech.k, size=n, p=[0.6, 0.3, 0.1])
        out[day] = mech.tally(mech.perturb_many(values, rng=rng))
    return out


def test_intervals_are_the_clipped_normal_intervals_of_the_raw_counts() -> None:
    # A GRR tally in which nobody supports the third value: its raw count is far below zero
    # (about -n q* / (p* - q*)), so both ends of its interval are clipped to 0, and the first
    # value's upper end beyond n is clipped to n.
    mech = create("grr", epsilon=1.0, domain=("a", "b", "c"))
    tally = Tally(3000, np.array([2000, 1000, 0]))
    level = 0.9
    answer = estimate_range(mech, {DAYS[0]: tally}, EstimateQuery(level=level))
    assert isinstance(answer, FrequencyEstimates)
    est = estimate(mech, tally)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    raw = np.asarray(est.counts, dtype=float)
    assert raw[2] + z * est.std_errors[2] < 0 and raw[0] + z * est.std_errors[0] > 3000
    for i, v in enumerate(answer.values):
        assert v.raw_count == pytest.approx(raw[i])
        low = min(max(raw[i] - z * est.std_errors[i], 0.0), 3000.0)
        high = min(max(raw[i] + z * est.std_errors[i], 0.0), 3000.0)
        assert v.ci_low == pytest.approx(low, abs=1e-9)
        assert v.ci_high == pytest.approx(high, abs=1e-9)
    assert (answer.values[2].ci_low, answer.values[2].ci_high) == (0.0, 0.0)
    assert answer.values[0].ci_high == 3000.0
    # The middle value's interval is not clipped: its ends are raw -/+ z se exactly.
    mid = answer.values[1]
    assert mid.ci_low == pytest.approx(raw[1] - z * est.std_errors[1])
    assert mid.ci_high == pytest.approx(raw[1] + z * est.std_errors[1])


@pytest.mark.parametrize("level", [0.9, 0.99])
def test_postprocessing_runs_at_alpha_one_minus_level(level: float) -> None:
    mech = create("oue", epsilon=1.0, domain=("a", "b", "c"))
    tallies = _tallies(mech, [800, 700], seed=3)
    answer = estimate_range(mech, tallies, EstimateQuery(level=level, postprocess="base-cut"))
    assert isinstance(answer, FrequencyEstimates)
    est = estimate(mech, tallies[DAYS[0]] + tallies[DAYS[1]])
    post = postprocess(est, "base-cut", alpha=1 - level)
    assert [v.count for v in answer.values] == pytest.approx(np.asarray(post.counts).tolist())
    assert answer.postprocess == post.describe()


def test_the_header_echoes_the_range_and_the_minimum() -> None:
    mech = create("oue", epsilon=1.0, domain=("a", "b", "c"))
    tallies = _tallies(mech, [300, 300, 300, 300], seed=4)
    answer = estimate_range(mech, tallies, EstimateQuery(end=DAYS[2]))
    assert answer.windows == DAYS[:3] and answer.n == 900
    assert answer.from_ == DAYS[0] and answer.to == DAYS[2]
    assert answer.min_reports == 1
    assert estimate_range(mech, tallies, EstimateQuery(min_reports=5)).min_reports == 5
    inner = estimate_range(mech, tallies, EstimateQuery(start=DAYS[1], end=DAYS[2]))
    assert inner.windows == DAYS[1:3] and inner.n == 600


def test_the_trend_is_each_windows_debiased_frequencies_and_their_smoothing() -> None:
    mech = create("oue", epsilon=1.0, domain=("a", "b", "c"))
    # A window of one report is shown (min_reports 1): the smoother weighs it by n = 1.
    tallies = _tallies(mech, [400, 1, 500, 300], seed=6)
    rows = raw_frequency_trend(mech, tallies, 1)
    for row, (window, tally) in zip(rows, tallies.items(), strict=True):
        assert row.window == window and row.n == tally.n
        assert row.frequencies == pytest.approx((debias(mech, tally) / tally.n).tolist())
    smoothed = with_smoothed_frequencies(rows)
    y = np.array([r.frequencies for r in rows], dtype=float)
    se = np.array([r.std_errors for r in rows], dtype=float)
    sm = smooth_series(y, se, reports=np.array([t.n for t in tallies.values()], dtype=float))
    for t, row in enumerate(smoothed):
        assert row.smoothed_frequencies == pytest.approx(sm.mean[t].tolist())
        assert row.smoothed_std_errors == pytest.approx(sm.std_error[t].tolist())
    answer = estimate_range(mech, tallies, EstimateQuery())
    assert isinstance(answer, FrequencyEstimates)
    assert [t.smoothed_frequencies for t in answer.trend] == [
        r.smoothed_frequencies for r in smoothed
    ]


def test_smooth_one_keeps_positive_standard_errors_and_floors_only_the_others() -> None:
    values: list[float | None] = [0.2, None, 0.25, 0.3, 0.28]
    errors: list[float | None] = [0.05, None, 0.02, 0.0, 0.04]
    mean, err = smooth_one(values, errors)
    # The zero standard error of an observed window takes the smallest positive one (0.02).
    sm = smooth_series(
        np.array([[0.2], [np.nan], [0.25], [0.3], [0.28]]),
        np.array([[0.05], [np.nan], [0.02], [0.02], [0.04]]),
    )
    assert mean[1] is None and err[1] is None
    for t in (0, 2, 3, 4):
        assert mean[t] == pytest.approx(float(sm.mean[t, 0]))
        assert err[t] == pytest.approx(float(sm.std_error[t, 0]))
    assert smooth_one([None, None], [None, None]) == ([None, None], [None, None])


def test_a_mean_trend_with_every_window_below_the_minimum_shows_nothing() -> None:
    mech = create_numeric("piecewise", epsilon=2.0, bounds=(0, 100))
    rng = np.random.default_rng(2)
    tallies = {
        day: mech.tally(mech.perturb_many(rng.uniform(0, 100, 60), rng=d))
        for d, day in enumerate(DAYS[:3])
    }
    answer = estimate_range(mech, tallies, EstimateQuery(min_reports=100))
    assert isinstance(answer, MeanEstimates) and answer.n == 180
    assert [t.mean for t in answer.trend] == [None, None, None]
    assert [t.smoothed_mean for t in answer.trend] == [None, None, None]


@dataclass
class _Other:
    """A mechanism of a kind the service has no estimator for."""

    kind: str
    name: str = "other"


@pytest.mark.parametrize("kind", ["vector", "aaa"])
def test_an_unknown_kind_is_refused_and_candidates_only_for_open_domain(kind: str) -> None:
    with pytest.raises(InvalidParameter, match=f"no estimator for mechanism kind '{kind}'"):
        estimate_range(_Other(kind), {DAYS[0]: object()}, EstimateQuery())
    with pytest.raises(InvalidParameter, match="candidates apply only to open-domain"):
        estimate_range(_Other(kind), {DAYS[0]: object()}, EstimateQuery(candidates=("x",)))


def test_raw_trend_std_errors_are_each_windows_own_in_frequency_units() -> None:
    # Count standard errors divided by the window's n (not multiplied): checked against
    # aggregator.estimate's per-window estimate, with windows of different sizes.
    mech = create("oue", epsilon=1.0, domain=("a", "b", "c"))
    tallies = _tallies(mech, [400, 900, 2500], seed=11)
    rows = raw_frequency_trend(mech, tallies, 1)
    assert [r.window for r in rows] == DAYS[:3]
    for row in rows:
        est = estimate(mech, tallies[row.window])
        assert row.std_errors is not None and row.frequencies is not None
        np.testing.assert_allclose(row.std_errors, est.std_errors / est.n, rtol=1e-12)
        np.testing.assert_allclose(row.frequencies, est.counts / est.n, rtol=1e-12)
