"""eb-joint's one-dimensional moments and input checks (issue 21, joint_shrinkage.py).

Mutation survivors showed that the integration windows of :func:`flat_tilted` (where the
truncated cavity Gaussian lives, which decides the grid's resolution) were only checked through
EP's final answer, where a badly placed window in one regime changes little. Here the tilted
moments are compared with SciPy's exact truncated normal in each regime of the window: inside
[0, 1], near 0, just outside either end (where the density decays from the end at rate
``|mu - end| / sd^2``), and wide. Tolerances: the code's own error is at most 0.011 posterior
standard deviations on the mean and 0.9% on the variance over these cases (midpoint Gaussian
per cell, at most a third of a standard deviation wide); a misplaced window is off by far more.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import truncnorm

from aggregator.joint_shrinkage import flat_posterior, flat_tilted
from client_sdk.errors import InvalidParameter

CASES = [
    (0.3, 1e-3),
    (0.02, 1e-3),
    (1.01, 1e-3),
    (-0.01, 1e-3),
    (0.5, 0.2),
    (1.2, 0.05),
    (-0.3, 0.1),
    (0.999, 1e-4),
]


def test_tilted_moments_match_the_exact_truncated_normal() -> None:
    mu = np.array([c[0] for c in CASES])
    sd = np.array([c[1] for c in CASES])
    mean, var = flat_tilted(mu, sd)
    for (m, s), got_mean, got_var in zip(CASES, mean, var, strict=True):
        exact = truncnorm((0 - m) / s, (1 - m) / s, loc=m, scale=s)
        assert abs(got_mean - exact.mean()) <= 0.02 * exact.std(), (m, s)
        assert abs(got_var / exact.var() - 1) <= 0.02, (m, s)


def test_a_non_finite_covariance_is_refused() -> None:
    raw = np.array([0.5, 0.3, 0.2])
    cov = np.eye(3) * 1e-3
    cov[0, 1] = np.nan
    with pytest.raises(InvalidParameter, match="finite"):
        flat_posterior(raw, cov)
    with pytest.raises(InvalidParameter, match="finite"):
        flat_posterior(np.array([0.5, np.inf, 0.2]), np.eye(3) * 1e-3)


@pytest.mark.parametrize(
    ("epsilon", "n", "raw"),
    # Raw estimates far outside the simplex: truncation more than halves a cavity's variance,
    # the regime where the site precision 1/var_tilted - 1/var_cavity must be exact.
    [(1.0, 100, [-0.3, -0.2, 1.5]), (0.5, 400, [-0.2, 0.1, 1.1])],
)
def test_ep_matches_brute_force_under_strong_truncation(
    epsilon: float, n: int, raw: list[float]
) -> None:
    import sys
    from pathlib import Path

    from aggregator.flat_prior import frequency_cov
    from client_sdk.mechanisms import create

    sys.path.insert(0, str(Path(__file__).parent))
    from test_aggregator_joint_shrinkage import _brute_flat_mean

    mech = create("grr", epsilon=epsilon, domain=3)
    r = np.array(raw)
    start = np.clip(r, 0, None) / np.clip(r, 0, None).sum()
    cov = frequency_cov(mech, n, start)
    post = flat_posterior(r, cov)
    sd = np.sqrt(np.diag(cov))
    # Measured: within 0.022 sd of the brute force (grid 1/1200); as in the main file, 0.03 sd.
    assert post.converged
    assert np.all(np.abs(post.mean - _brute_flat_mean(r, cov)) <= 0.03 * sd)


def test_window_cells_give_sheppards_variance_excess() -> None:
    # Inside [0, 1] with a narrow cavity the window is mu +- 10 sd cut into 64 cells of width
    # h = 20 sd / 64, each cell's mass placed by the Gaussian at its midpoint but spread
    # uniformly inside it: the variance comes out high by Sheppard's h^2 / 12 (0.8138% here;
    # 0.840% with 63 cells), the mean exact.
    mu = np.array([0.3, 0.6])
    sd = np.array([1e-3, 2e-4])
    mean, var = flat_tilted(mu, sd)
    h = 2 * 10.0 * sd / 64
    np.testing.assert_allclose(var / sd**2 - 1, h**2 / 12 / sd**2, rtol=1e-4)
    np.testing.assert_allclose(mean, mu, rtol=1e-10)


def test_ep_gives_up_after_200_sweeps_and_says_so() -> None:
    # EP_MAX_SWEEPS's contract: a non-converging EP stops after 200 parallel sweeps (the
    # number the answer reports as ``sweeps``) with ``converged`` False, and still returns a
    # distribution. A tilted distribution whose mean alternates between cavity +- 0.05 (1, -1, 0)
    # (a move inside the sum-one hyperplane) keeps the sites, damped by half, moving by a fixed
    # fraction of that every sweep, far above the 1e-8 tolerance; EP evaluates it once a sweep.
    from aggregator.joint_shrinkage import conditioned_gaussian, ep_posterior

    calls = 0

    def alternating(mu: np.ndarray, sd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nonlocal calls
        calls += 1
        return mu + (0.05 if calls % 2 else -0.05) * np.array([1.0, -1.0, 0.0]), sd**2

    raw = np.array([0.5, 0.3, 0.2])
    centre, cov = conditioned_gaussian(raw, np.diag([0.01, 0.01, 0.01]))
    post = ep_posterior(centre, cov, alternating)
    assert post.sweeps == 200 and calls == 200
    assert not post.converged
    assert post.mean.min() >= 0 and np.isclose(post.mean.sum(), 1.0, rtol=0, atol=1e-15)
    # The same EP with the flat prior converges long before the cap.
    assert flat_posterior(raw, np.diag([0.01, 0.01, 0.01])).sweeps < 200
