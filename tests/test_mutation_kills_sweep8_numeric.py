"""Square Wave intervals widened for the smoothing bias (298dcc4): what the eighth mutation
sweep found unchecked (docs/MUTATION.md, "eighth sweep").

* ``widen_interval`` is the hull of the percentile interval moved out by the allowance and of
  the basic bootstrap interval ``[2 value - high, 2 value - low]``: both ends of the latter
  count (a skewed percentile interval reflected about the estimate).
* A grid quantile's interval goes out to the edges of the bin its ends fall in, no further:
  with replicates and a relaxed fit equal to the estimate (nothing to widen) it is exactly the
  value's bin; the 0-quantile, the lower bound, keeps its point interval.
* Whiskers are cut to [0, 1]: a frequency near 1 with a large allowance ends at 1.

The estimates are built directly (``DistributionEstimate`` is a plain dataclass), so every
number is known.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.numeric import DistributionEstimate, widen_interval

EDGES = np.linspace(0.0, 10.0, 11)
FREQS = np.array([0.05, 0.1, 0.15, 0.2, 0.2, 0.1, 0.1, 0.05, 0.03, 0.02])


def _estimate(freqs: np.ndarray, edges: np.ndarray, relaxed: np.ndarray) -> DistributionEstimate:
    centers = (edges[:-1] + edges[1:]) / 2
    replicates = np.tile(freqs, (5, 1))  # every replicate the estimate: no bootstrap spread
    return DistributionEstimate("sw", 1000, edges, freqs, centers, replicates, relaxed=relaxed)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((0.5, 0.1, 0.6, 0.0), (0.1, 0.9)),  # skewed low: the basic interval's high end
        ((0.5, 0.4, 0.9, 0.0), (0.1, 0.9)),  # skewed high: its low end
        ((0.5, 0.4, 0.6, 0.3), (0.1, 0.9)),  # symmetric: the allowance on both sides
        ((0.5, 0.4, 0.6, -0.3), (0.1, 0.9)),  # the allowance's sign is not trusted
        ((0.5, 0.1, 0.6, 0.05), (0.05, 0.9)),
    ],
)
def test_widen_interval_is_the_hull_of_the_moved_and_the_basic_intervals(
    args: tuple[float, float, float, float], expected: tuple[float, float]
) -> None:
    low, high = widen_interval(*args)
    assert (float(low), float(high)) == pytest.approx(expected)


def test_a_quantile_interval_goes_out_to_its_bins_edges_and_no_further() -> None:
    est = _estimate(FREQS, EDGES, FREQS.copy())
    row = est.quantile(0.4)
    assert 3 < row.value < 4  # in bin [3, 4)
    assert (row.low, row.high) == (3.0, 4.0)


def test_the_zero_quantile_is_the_lower_bound_with_a_point_interval() -> None:
    est = _estimate(FREQS, EDGES, FREQS.copy())
    row = est.quantile(0.0)
    assert (row.value, row.low, row.high) == (0.0, 0.0, 0.0)


def test_whiskers_are_cut_to_0_and_1() -> None:
    freqs = np.array([0.98, 0.02])
    est = _estimate(freqs, np.array([0.0, 1.0, 2.0]), np.array([0.8, 0.2]))
    low, high = est.frequency_intervals()
    assert float(high[0]) == 1.0  # 0.98 + 0.18 and the reflected 0.98, cut
    assert float(low[1]) == 0.0  # 0.02 - 0.18, cut
    assert np.all((low >= 0) & (high <= 1))
