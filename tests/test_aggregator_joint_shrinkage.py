"""``eb-joint`` (aggregator/joint_shrinkage.py): exactness, determinism and risk.

Shrinkage is biased by design, so it is tested by its risk: on tallies drawn with a known truth
its mean squared error is below ``mle``'s by more than the paired replicate noise (one-sided z
at 1%, 2.326 standard errors of the mean paired difference). Fixed seeds keep outcomes
reproducible. The EP posterior mean is checked against brute-force integration over the
2-simplex.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from aggregator.estimate import estimate
from aggregator.evaluation import sample_tally
from aggregator.flat_prior import frequency_cov
from aggregator.joint_shrinkage import (
    conditioned_gaussian,
    eb_joint_frequencies,
    flat_posterior,
    flat_tilted,
)
from aggregator.postprocess import postprocess
from aggregator.shrinkage import eb_frequencies
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create

Z_ONE_SIDED_1PCT = 2.326


def _brute_flat_mean(raw: np.ndarray, cov: np.ndarray, m: int = 1200) -> np.ndarray:
    """Flat-prior posterior mean on the 2-simplex by a midpoint grid over (f1, f2)."""
    centre, cond = conditioned_gaussian(raw, cov)
    g = (np.arange(m) + 0.5) / m
    f1, f2 = np.meshgrid(g, g, indexing="ij")
    inside = 1 - f1 - f2 >= 0
    f = np.stack([f1[inside], f2[inside], 1 - f1[inside] - f2[inside]], axis=1)
    d = f[:, :2] - centre[:2]
    w = np.exp(-0.5 * np.einsum("ij,jk,ik->i", d, np.linalg.inv(cond[:2, :2]), d))
    mean: np.ndarray = (w[:, None] * f).sum(axis=0) / w.sum()
    return mean


@pytest.mark.parametrize(
    ("epsilon", "raw"),
    [(1.0, [0.93, 0.08, -0.01]), (0.5, [0.6, 0.45, -0.05]), (2.0, [0.5, 0.3, 0.2])],
)
def test_flat_posterior_matches_brute_force_on_the_simplex(epsilon: float, raw: list) -> None:
    mech = create("grr", epsilon=epsilon, domain=3)
    r = np.array(raw)
    start = np.clip(r, 0, None) / np.clip(r, 0, None).sum()
    cov = frequency_cov(mech, 400, start)
    post = flat_posterior(r, cov)
    sd = np.sqrt(np.diag(cov))
    # EP is an approximation; on the 2-simplex it is within 0.015 sd (measured), the grid 0.01.
    assert post.converged
    assert np.all(np.abs(post.mean - _brute_flat_mean(r, cov)) <= 0.03 * sd)


def test_truncated_moments_are_exact_where_the_window_is_the_whole_mass() -> None:
    # N(0.5, 0.01^2) truncated to [0, 1] is the Gaussian itself; far below 0 it is exponential
    # from 0 with rate |mu|/sd^2: mean sd^2/|mu|, variance (sd^2/|mu|)^2. The window's cells
    # are 20/64 sd wide and the Gaussian is taken at their midpoints, which adds about
    # (20/64)^2/12 = 0.8% to the variance.
    mean, var = flat_tilted(np.array([0.5, -0.05]), np.array([0.01, 0.001]))
    assert math.isclose(mean[0], 0.5, abs_tol=1e-9) and math.isclose(var[0], 1e-4, rel_tol=1e-2)
    rate = 0.05 / 1e-6
    assert math.isclose(mean[1], 1 / rate, rel_tol=1e-2)
    assert math.isclose(var[1], 1 / rate**2, rel_tol=3e-2)


def test_conditioning_on_the_sum_for_unary_encoding() -> None:
    mech = create("oue", epsilon=1.0, domain=5)
    f = np.array([0.4, 0.3, 0.2, 0.1, 0.0])
    cov = frequency_cov(mech, 1000, f)
    centre, cond = conditioned_gaussian(np.array([0.5, 0.3, 0.2, 0.1, 0.05]), cov)
    assert math.isclose(centre.sum(), 1.0, abs_tol=1e-12)
    assert np.allclose(cond @ np.ones(5), 0.0, atol=1e-12 * np.trace(cov))


def test_registry_entry_is_deterministic_and_a_distribution() -> None:
    mech = create("ss", epsilon=1.0, domain=12)
    truth = np.array([3000, 1500, 900, 600, 400, 250, 150, 100, 60, 30, 10, 0])
    est = estimate(mech, sample_tally(mech, truth, np.random.default_rng(3)))
    first, second = postprocess(est, "eb-joint"), postprocess(est, "eb-joint")
    assert np.array_equal(first.counts, second.counts)
    assert first.counts.min() >= 0 and math.isclose(first.counts.sum(), est.n)
    described = first.describe()
    assert described["method"] == "eb-joint" and isinstance(described["pooled"], bool)


def test_pooled_branch_is_ebs_pooled_posterior() -> None:
    # One value holding 90% and many near-empty ones: eb pools; eb-joint returns eb's answer.
    mech = create("ss", epsilon=1.0, domain=30)
    truth = np.array([9000, 400, 200, 150, 100, 50] + [4] * 24)
    est = estimate(mech, sample_tally(mech, truth, np.random.default_rng(5)))
    eb = eb_frequencies(est)
    joint = eb_joint_frequencies(est)
    assert eb.pooled and joint.pooled and joint.flat is None
    assert np.array_equal(joint.frequencies, eb.frequencies)


def test_rejects_bad_shapes() -> None:
    with pytest.raises(InvalidParameter):
        flat_posterior(np.array([0.5, 0.5]), np.eye(3))
    with pytest.raises(InvalidParameter):
        flat_posterior(np.array([0.5, np.nan]), np.eye(2))


def test_risk_below_mle_at_low_epsilon() -> None:
    """Subset selection, k 16, a skewed truth with many small values, epsilon 0.5.

    Paired over the same tallies, the mean count MSE of ``mle`` minus ``eb-joint`` must exceed
    2.326 standard errors of that mean difference (its replicate variance / R).
    """
    mech = create("auto", epsilon=0.5, domain=16)
    truth = np.array(
        [6000, 4200, 3300, 1000, 800, 700, 650, 500, 350, 340, 300, 240, 230, 200, 100, 30]
    )
    rng = np.random.default_rng(20261123)
    diffs = []
    for _ in range(24):
        est = estimate(mech, sample_tally(mech, truth, rng))
        mle = postprocess(est, "mle").counts
        joint = postprocess(est, "eb-joint").counts
        diffs.append(np.mean((mle - truth) ** 2) - np.mean((joint - truth) ** 2))
    d = np.array(diffs)
    assert d.mean() > Z_ONE_SIDED_1PCT * d.std(ddof=1) / math.sqrt(d.size)
