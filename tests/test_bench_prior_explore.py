"""bench/prior_explore.py: the declared-prior estimator does what its docstring says.

Its figures are quoted in docs/AGGREGATOR.md as a measured negative result, so the estimator
behind them is checked on real tallies: frequencies summing to 1 and never negative, the
fitted spread the grid's likelihood maximum, the posterior mean the stated formula, a uniform
declaration never kept, and the chi-square gate at its quantile.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

from aggregator.estimate import Estimate, estimate
from aggregator.evaluation import sample_tally
from client_sdk.mechanisms import create
from tests.support.bench import bench_module

COUNTS = np.array([9000, 6000, 4000, 3000, 2000, 1500, 1000, 500, 300, 200, 100, 10])


@pytest.fixture(scope="module")
def prior() -> ModuleType:
    return bench_module("prior_explore")


def _estimate(epsilon: float, seed: int) -> Estimate:
    mech = create("grr", epsilon=epsilon, domain=len(COUNTS))
    return estimate(mech, sample_tally(mech, COUNTS, np.random.default_rng(seed)))


def test_frequencies_sum_to_one_and_are_never_negative(prior: ModuleType) -> None:
    rng = np.random.default_rng(5)
    for seed in range(40):
        est = _estimate(float(rng.choice([0.5, 1.0, 4.0])), seed)
        declared = rng.dirichlet(np.full(len(COUNTS), 0.5))
        fit = prior.fit_declared(est, declared, rng.uniform(0, 0.01, len(COUNTS)))
        assert fit.frequencies.min() >= 0
        assert fit.frequencies.sum() == pytest.approx(1.0, rel=1e-12)


def test_the_fit_is_the_grid_maximum_and_the_posterior_the_formula(prior: ModuleType) -> None:
    est = _estimate(1.0, 11)
    n = est.n
    declared = (COUNTS + 300.0) / (COUNTS + 300.0).sum()
    s = np.full(len(COUNTS), 0.002)
    fit = prior.fit_declared(est, declared, s)
    r = np.asarray(est.counts, dtype=float) / n
    var = (np.asarray(est.std_errors, dtype=float) / n) ** 2
    g = np.maximum(declared, 1 / n) * (1 - declared)

    def loglik(tau2: float) -> float:
        total = tau2 * g + s**2 + var
        return float(-0.5 * np.sum(np.log(total) + (r - declared) ** 2 / total))

    best = max(prior.TAU2_GRID, key=loglik)
    assert fit.tau2 == best
    prior_var = best * g + s**2
    post = np.maximum(declared + prior_var / (prior_var + var) * (r - declared), 0)
    np.testing.assert_allclose(fit.frequencies, post / post.sum(), rtol=1e-12)


def test_a_uniform_declaration_is_never_kept(prior: ModuleType) -> None:
    for seed in range(10):
        est = _estimate(0.5, seed)
        fit = prior.fit_declared(est, np.full(len(COUNTS), 1.0))
        assert fit.log_ratio == 0.0
        assert not fit.kept


def test_the_truth_is_kept_and_a_permutation_refused_at_epsilon_one(prior: ModuleType) -> None:
    truth = COUNTS / COUNTS.sum()
    wrong = truth[::-1]
    for seed in range(10):
        est = _estimate(1.0, 100 + seed)
        assert prior.fit_declared(est, truth).kept
        assert not prior.fit_declared(est, wrong).kept


def test_the_gate_is_chi_square_at_its_quantile(prior: ModuleType) -> None:
    from scipy.stats import chi2

    k, n = 12, 10_000
    se = np.full(k, 100.0)  # counts: 0.01 as frequencies
    zero = np.zeros(k)
    declared = np.full(k, 1 / k)
    limit = float(chi2.ppf(prior.GATE_LEVEL, k - 1))
    # one value off by d frequencies: statistic (d / 0.01)^2
    for d, kept in ((0.0099 * limit**0.5, True), (0.0101 * limit**0.5, False)):
        raw = declared * n
        raw[0] += d * n
        assert prior.fits_declaration(raw, se, declared, zero, n) is kept
