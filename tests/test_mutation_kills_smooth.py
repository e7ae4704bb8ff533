"""Smoother behaviour that mutation testing found unchecked (issue 21).

* A break is a window whose raw estimate is far from the filter's *prediction*: the first window
  (no prediction yet) and a window without an estimate can never be one, whatever ``break_z``.
* Breaks found once the first breaks are in place count too: a level that changes twice in a
  row (down, then up to a third level) gives two breaks, and the smoothed values follow both.
* ``reports``: each window's standard error adds the sampling scatter of its own devices,
  ``f (1 - f) / n_t`` in variance, to the posterior variance of the level, for the smoothed and
  the filtered values alike.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.smooth import smooth_series
from client_sdk.errors import InvalidParameter


@pytest.mark.parametrize("break_z", [0.5, 2.0, 4.5])
def test_first_and_missing_windows_are_never_breaks(break_z: float) -> None:
    rng = np.random.default_rng(11)
    y = 0.3 + 0.02 * rng.standard_normal((10, 3))
    y[[3, 7], :] = np.nan
    se = np.where(np.isnan(y), np.nan, 0.01)
    sm = smooth_series(y, se, break_z=break_z)
    windows = {t for t, _ in sm.breaks}
    assert 0 not in windows and not windows & {3, 7}, sm.breaks


def test_two_level_changes_in_a_row_are_both_breaks() -> None:
    # 0.6, then 0.25 (35 standard errors down), then 0.4 for good (15 up): two new levels.
    level = np.full(14, 0.4)
    level[0], level[1] = 0.6, 0.25
    se = np.full((14, 1), 0.01)
    sm = smooth_series(level[:, None], se)
    assert sm.breaks == ((1, 0), (2, 0))
    # Each level is followed at once: the smoothed value is the window's own level.
    assert sm.mean[:, 0] == pytest.approx(level, abs=3 * 0.01)


def test_reports_add_each_windows_sampling_scatter() -> None:
    rng = np.random.default_rng(12)
    y = np.clip(np.array([0.2, 0.5, 0.3]) + 0.01 * rng.standard_normal((8, 3)), 0, 1)
    se = np.full(y.shape, 0.01)
    reports = np.array([500, 800, 1000, 400, 2000, 700, 900, 1200])
    plain = smooth_series(y, se)
    with_n = smooth_series(y, se, reports=reports)
    assert np.array_equal(with_n.mean, plain.mean) and np.array_equal(with_n.tau, plain.tau)
    n = reports[:, None]
    m, fm = np.clip(plain.mean, 0, 1), np.clip(plain.filtered, 0, 1)
    assert with_n.std_error**2 == pytest.approx(plain.std_error**2 + m * (1 - m) / n, rel=1e-9)
    assert with_n.filtered_std_error**2 == pytest.approx(
        plain.filtered_std_error**2 + fm * (1 - fm) / n, rel=1e-9
    )


@pytest.mark.parametrize("small", [1e-3, 1e-6, 1e-8])
def test_pooling_is_exact_whatever_the_spread_of_standard_errors(small: float) -> None:
    # Found while checking the std_error clamp: a value whose standard error is far below the
    # largest one (1e6 times that is the diffuse start) used to get a posterior variance of 0
    # after its first window, then 0/0 (NaN) in the backward pass, or 8% off at 1e-6.
    y = np.tile([0.3, 0.5], (3, 1))
    se = np.tile([small, 0.1], (3, 1))
    sm = smooth_series(y, se)
    assert sm.tau.tolist() == [0.0, 0.0]
    # The diffuse start is 1e6 times the largest variance, not infinite: a relative pull of
    # about 1e-6 towards 0.
    assert sm.mean == pytest.approx(y, rel=1e-5)
    assert sm.std_error[:, 0] == pytest.approx(np.full(3, small / np.sqrt(3)), rel=1e-5)
    assert sm.filtered_std_error[:, 0] == pytest.approx(small / np.sqrt([1, 2, 3]), rel=1e-5)


@pytest.mark.parametrize("count", [1, 3, 5])
def test_reports_of_another_length_are_refused(count: int) -> None:
    # One count per window (4 here): one count would otherwise be broadcast to every window.
    y = np.full((4, 2), 0.5)
    with pytest.raises(InvalidParameter, match="one positive count per window"):
        smooth_series(y, np.full((4, 2), 0.01), reports=np.full(count, 100))


def test_no_windows_is_refused_and_no_values_is_not() -> None:
    """T >= 1 windows are required (the check reads the window axis, not the value axis)."""
    with pytest.raises(InvalidParameter, match="T >= 1"):
        smooth_series(np.empty((0, 3)), np.empty((0, 3)))
    out = smooth_series(np.empty((4, 0)), np.empty((4, 0)))
    assert out.mean.shape == out.std_error.shape == (4, 0)
