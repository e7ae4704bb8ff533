"""The window smoother: exact on known inputs, better than raw on streams, honest bands."""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.evaluation import stream_errors
from aggregator.query import SMOOTHING_NOTE, estimate_windows
from aggregator.smooth import smooth_series
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Tally, create

ADULT_LIKE = np.array([12.7, 12.6, 12.5, 11.8, 11.3, 10.2, 6.6, 5.3, 4.7, 3.5, 3.1, 2.1, 0.5, 0.03])


def test_constant_series_is_pooled_exactly() -> None:
    # Scatter smaller than the standard errors: the likelihood fits tau = 0, and the smoothed
    # value of every window is the precision-weighted mean of all windows.
    y = np.array([[0.30, 0.70], [0.31, 0.69], [0.29, 0.71], [0.30, 0.70]])
    se = np.array([[0.02, 0.02], [0.02, 0.02], [0.04, 0.04], [0.02, 0.02]])
    sm = smooth_series(y, se)
    w = 1 / se[:, 0] ** 2
    pooled = (w * y[:, 0]).sum() / w.sum()
    assert sm.tau[0] == 0.0
    assert np.allclose(sm.mean[:, 0], pooled)
    assert np.allclose(sm.std_error[:, 0], 1 / np.sqrt(w.sum()))
    assert sm.breaks == ()


def test_missing_windows_are_predicted_and_a_step_is_a_break() -> None:
    y = np.array([[0.1], [np.nan], [0.1], [0.1], [0.6], [0.6], [0.6]])
    se = np.where(np.isnan(y), np.nan, 0.01)
    sm = smooth_series(y, se)
    assert sm.breaks == ((4, 0),)
    assert np.allclose(sm.mean[:4, 0], 0.1) and np.allclose(sm.mean[4:, 0], 0.6)
    # The missing window gets the level around it (tau = 0 here: the same as its neighbours).
    assert sm.mean[1, 0] == pytest.approx(0.1, abs=1e-5) and sm.std_error[1, 0] == pytest.approx(
        sm.std_error[0, 0]
    )


def test_bad_input_is_refused_with_the_rule() -> None:
    with pytest.raises(InvalidParameter, match="T x k arrays of the same shape"):
        smooth_series(np.zeros((3, 2)), np.ones((3, 3)))
    with pytest.raises(InvalidParameter, match="finite standard error > 0"):
        smooth_series(np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(InvalidParameter, match="one positive count per window"):
        smooth_series(np.zeros((2, 2)), np.ones((2, 2)), reports=np.array([1, 0]))


def test_stationary_stream_smoothed_error_is_far_below_raw_and_bands_cover() -> None:
    mech = create("auto", epsilon=1.0, domain=14)
    res = stream_errors(
        mech, ADULT_LIKE, None, windows=12, step_at=0, reports=3000, repetitions=8, seed=1
    )
    # Issue 20's target is >= 30% lower; pooling 12 windows gives about 85% lower.
    assert res.ratio < 0.7
    assert res.smoothed_coverage >= 0.9 and res.raw_coverage >= 0.9


def test_step_stream_is_never_worse_and_the_step_shows_at_once() -> None:
    mech = create("auto", epsilon=1.0, domain=14)
    after = ADULT_LIKE.copy()
    after[0] -= 6.0
    after[-1] += 6.0  # a step of 6 points: about 6 raw standard errors at n = 5000
    res = stream_errors(
        mech, ADULT_LIKE, after, windows=12, step_at=6, reports=5000, repetitions=8, seed=2
    )
    assert res.ratio <= 1.05
    assert all(d is not None and d <= 2 for d in res.smoothed_delays), res.smoothed_delays


def test_query_trend_has_smoothed_values_beside_the_raw_ones() -> None:
    mech = create("oue", epsilon=1.0, domain=3)
    rng = np.random.default_rng(3)
    tallies = {
        f"2026-11-0{d}": mech.tally(mech.perturb_many(rng.integers(0, 3, size=400), rng=rng))
        for d in range(1, 5)
    }
    tallies["2026-11-05"] = Tally.empty(3)
    body = estimate_windows(mech, tallies, min_reports=10)
    assert body["trend_smoothing"] == SMOOTHING_NOTE
    for row in body["trend"][:4]:
        assert len(row["smoothed_frequencies"]) == 3 and len(row["smoothed_std_errors"]) == 3
        assert row["frequencies"] is not None
    last = body["trend"][4]
    assert last["frequencies"] is None and last["smoothed_frequencies"] is None


def test_simulator_plot_draws_the_band(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from simulator.plots import trend_band

    mech = create("grr", epsilon=2.0, domain=3)
    rng = np.random.default_rng(4)
    tallies = {
        f"w{t}": mech.tally(mech.perturb_many(rng.integers(0, 3, size=300), rng=rng))
        for t in range(6)
    }
    rows = estimate_windows(mech, tallies)["trend"]
    path = trend_band(rows, ["a", "b", "c"], tmp_path, title="t", name="trend.png")
    assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
