"""Flat-prior reference estimator behaviour that mutation testing found unchecked (issue 21).

The sampler's limits are ``chains >= 1``, ``sweeps >= 1`` and ``burn_in >= 0``: no burn-in is
allowed (the average then starts at the first sweep) and must still give a distribution.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.flat_prior import flat_prior_mean
from client_sdk.errors import InvalidParameter

RAW = np.array([0.4, 0.6])
COV = 0.01 * np.array([[1.0, -1.0], [-1.0, 1.0]])
START = np.array([0.5, 0.5])


def _mean(**kwargs: int) -> np.ndarray:
    return flat_prior_mean(RAW, COV, START, rng=np.random.default_rng(3), **kwargs)


def test_the_smallest_allowed_settings_are_accepted() -> None:
    got = _mean(chains=1, burn_in=0, sweeps=1)
    assert got.shape == (2,) and (got >= 0).all() and got.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("kwargs", [{"chains": 0}, {"sweeps": 0}, {"burn_in": -1}])
def test_one_below_each_limit_is_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(InvalidParameter, match="chains and sweeps must be >= 1 and burn_in >= 0"):
        _mean(**kwargs)


@pytest.mark.parametrize("r", [0.02, 0.5])
def test_a_sum_fixed_only_up_to_rounding_gives_the_same_posterior(r: float) -> None:
    # cov fixes the sum up to 1e-15 of its scale (1' cov 1 below 1e-12 of the trace, so it is
    # not conditioned again), with its tiny eigenvalue off the all-ones direction: the sampler
    # moves only along the sum-zero hyperplane, where this cov is the exactly singular one
    # to 1e-13, so the same draws give the same posterior mean.
    exact = 0.08**2 * np.array([[1.0, -1.0], [-1.0, 1.0]])
    nearly = exact + 2e-15 * np.outer([1.3, 0.7], [1.3, 0.7])
    assert np.ones(2) @ nearly @ np.ones(2) <= 1e-12 * np.trace(nearly)
    raw = np.array([r, 1 - r])
    means = [
        flat_prior_mean(
            raw, cov, START, rng=np.random.default_rng(1), chains=500, burn_in=5, sweeps=5
        )
        for cov in (exact, nearly)
    ]
    assert means[1] == pytest.approx(means[0], abs=1e-9)
