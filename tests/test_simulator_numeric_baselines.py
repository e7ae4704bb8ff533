"""The numeric benchmark's yardsticks, on inputs whose answer is known: the binned baseline's
bins, Wasserstein-1, the central Laplace mean and histogram, and how repeated means are tiled.

At the largest epsilon a campaign takes (16) the local noise is negligible here (GRR over 5 bins
moves a value with probability 4/(e^16 + 4), about 5e-7), and so is central noise at 1e9: each
estimate must equal the exact binned frequencies.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import simulator.numeric as numeric
from aggregator.numeric import DistributionEstimate
from client_sdk.mechanisms import create
from simulator.numeric import (
    binned_baseline,
    central_laplace_histogram,
    central_laplace_mean_mse,
    central_laplace_means,
    repeated_means,
    wasserstein1,
)

#: Bounds away from 0, so that a mutant using ``high * low`` or ``high % low`` for the span shows.
BOUNDS = (2.0, 12.0)
#: 5 bins of width 2: [2, 4), [4, 6), [6, 8), [8, 10), [10, 12]; 4, 0, 2, 0, 2 values each
#: (12 and 15 are clipped into the last bin, 1 into the first).
VALUES = np.array([1.0, 2.0, 3.0, 3.9, 6.0, 7.5, 12.0, 15.0])
EXPECTED = np.array([4, 0, 2, 0, 2]) / 8
CENTERS = np.array([3.0, 5.0, 7.0, 9.0, 11.0])


def test_the_binned_baseline_puts_each_value_in_its_bin() -> None:
    est = binned_baseline(VALUES, epsilon=16.0, bounds=BOUNDS, bins=5, rng=1)
    np.testing.assert_allclose(est.frequencies, EXPECTED, atol=1e-5)
    np.testing.assert_allclose(est.edges, [2, 4, 6, 8, 10, 12])
    np.testing.assert_allclose(est.centers, CENTERS)
    assert est.n == VALUES.size and est.mechanism.startswith("binned-")


def test_the_central_histogram_puts_each_value_in_its_bin() -> None:
    est = central_laplace_histogram(VALUES, bounds=BOUNDS, epsilon=1e9, bins=5, rng=1)
    np.testing.assert_allclose(est.frequencies, EXPECTED, atol=1e-6)
    np.testing.assert_allclose(est.centers, CENTERS)
    assert (est.mechanism, est.n) == ("central-laplace", VALUES.size)


def test_wasserstein1_against_a_known_distance() -> None:
    """Uniform on [2, 12] against every value at 7: the integral of |(x-2)/10 - 1{x >= 7}|
    is 2 * (1/2 * 5 * 1/2) = 2.5; a point mass estimate at the same place is at distance 0."""
    uniform = DistributionEstimate("u", 1, np.array([2.0, 12.0]), np.ones(1), np.array([7.0]))
    assert wasserstein1(uniform, np.full(100, 7.0)) == pytest.approx(2.5, rel=1e-3)
    edges = np.linspace(2.0, 12.0, 11)
    exact = DistributionEstimate("e", 1, edges, np.eye(10)[3], (edges[:-1] + edges[1:]) / 2)
    # The estimate's mass is uniform on [5, 6]; values uniform there too: distance ~0.
    assert wasserstein1(exact, np.linspace(5.0, 6.0, 10_001)[:-1]) < 1e-3


def test_the_central_mean_has_the_stated_variance() -> None:
    """Laplace noise of scale span / (n eps) on the clipped mean: MSE 2 (span / (n eps))^2."""
    n, epsilon = 50, 0.5
    assert central_laplace_mean_mse(n, bounds=BOUNDS, epsilon=epsilon) == pytest.approx(
        2 * (10 / (n * epsilon)) ** 2
    )
    reps = 100_000
    values = np.full(n, 5.0)
    means = central_laplace_means(values, bounds=BOUNDS, epsilon=epsilon, reps=reps, rng=3)
    mse = float(np.mean((means - 5.0) ** 2))
    target = central_laplace_mean_mse(n, bounds=BOUNDS, epsilon=epsilon)
    # The squared error of Laplace(b) has variance 20 b^4 = 5 * target^2.
    assert abs(mse - target) < 5 * math.sqrt(5 * target**2 / reps)


def test_repeated_means_tile_the_column_within_the_value_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One ``perturb_many`` call holds at most ``_TILE_VALUES`` values (whole repetitions),
    however many repetitions are asked."""
    monkeypatch.setattr(numeric, "_TILE_VALUES", 12)
    mech = create("piecewise", epsilon=1.0, bounds=(0.0, 10.0))
    sizes: list[int] = []
    perturb_many = mech.perturb_many

    def spy(x: np.ndarray, *, rng: object) -> object:
        sizes.append(int(np.asarray(x).size))
        return perturb_many(x, rng=rng)

    object.__setattr__(mech, "perturb_many", spy)
    out = repeated_means(mech, np.array([1.0, 2.0, 3.0, 4.0]), reps=7, rng=4)
    assert out.shape == (7,) and np.all(np.isfinite(out))
    assert sizes == [12, 12, 4]
