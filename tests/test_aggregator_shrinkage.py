"""Empirical-Bayes shrinkage (aggregator/shrinkage.py) against brute force and simulation.

Brute-force references integrate the same model with scipy's adaptive quadrature; the
tolerances are what the integration partition (cells at most a third of a standard error
wide) can miss. Statistical claims use paired draws and a one-sided z at 1% (2.326), with
fixed seeds so the outcomes are reproducible.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from aggregator.estimate import estimate
from aggregator.evaluation import sample_tally
from aggregator.postprocess import mle_frequencies, postprocess
from aggregator.shrinkage import (
    dirichlet_posterior_mean,
    eb_frequencies,
    npmle_posterior_mean,
    shrinkage_frequencies,
    sum_to_one,
)
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create

Z_ONE_SIDED_1PCT = 2.326


def _brute_posterior(
    r: float, n: int, v0: float, beta: float, a: float, b: float
) -> tuple[float, float, float]:
    """Marginal, posterior mean and variance of one value by quadrature."""

    def lik(t: float) -> float:
        var = (v0 + beta * t) / n
        return math.exp(-0.5 * (r - t) ** 2 / var) / math.sqrt(var)

    def moment(j: int) -> float:
        value, _ = integrate.quad(
            lambda t: t**j * stats.beta.pdf(t, a, b) * lik(t), 0, 1, points=[r], limit=400
        )
        return float(value)

    m0, m1, m2 = moment(0), moment(1), moment(2)
    return m0, m1 / m0, m2 / m0 - (m1 / m0) ** 2


@pytest.mark.slow
def test_dirichlet_posterior_mean_matches_quadrature() -> None:
    raw = np.array([0.42, 0.31, 0.18, 0.06, 0.03])
    n, v0, beta = 2_000, 0.9, 0.4
    fit = dirichlet_posterior_mean(raw, n, v0, beta)
    a_total, k = fit.concentration, raw.size
    moments = [_brute_posterior(r, n, v0, beta, a_total / k, a_total * (1 - 1 / k)) for r in raw]
    expected = sum_to_one(np.array([m[1] for m in moments]), np.array([m[2] for m in moments]))
    assert np.allclose(fit.frequencies, expected, atol=2e-4)

    # The fitted concentration maximises the composite marginal likelihood.
    def log_marginal(a: float) -> float:
        return sum(
            math.log(_brute_posterior(r, n, v0, beta, a / k, a * (1 - 1 / k))[0]) for r in raw
        )

    best = log_marginal(a_total)
    assert best >= log_marginal(a_total * 1.3) - 1e-6
    assert best >= log_marginal(a_total / 1.3) - 1e-6


def test_sum_to_one_is_gaussian_conditioning_then_clipping() -> None:
    mean = np.array([0.5, 0.3, 0.1])
    var = np.array([1.0, 2.0, 1.0])
    expected = mean + var * (1 - mean.sum()) / var.sum()
    assert np.allclose(sum_to_one(mean, var), expected)
    # A deficit-free overshoot cannot push an entry below 0: it is dropped and the rest refit.
    out = sum_to_one(np.array([0.9, 0.6, 0.01]), np.array([1.0, 1.0, 1.0]))
    assert out.min() >= 0 and math.isclose(out.sum(), 1.0) and out[2] == 0.0
    assert np.allclose(out, [0.65, 0.35, 0.0])


def _draw_raw(
    f: np.ndarray, n: int, v0: float, beta: float, rng: np.random.Generator
) -> np.ndarray:
    return f + rng.standard_normal(f.size) * np.sqrt((v0 + beta * f) / n)


@pytest.mark.parametrize("n", [10**6, 10**8])
def test_pooled_and_dirichlet_estimates_are_consistent(n: int) -> None:
    f = np.array([0.55, 0.2, 0.12, 0.08, 0.04, 0.01, 0.0])
    v0, beta = 1.2, 0.3
    raw = _draw_raw(f, n, v0, beta, np.random.default_rng(n))
    sd = np.sqrt((v0 + beta * f) / n)
    for got in (
        npmle_posterior_mean(raw, n, v0, beta).pooled_frequencies,
        dirichlet_posterior_mean(raw, n, v0, beta).frequencies,
    ):
        assert np.all(np.abs(got - f) <= 6 * sd + 1e-12), (got - f) / sd


def test_deterministic() -> None:
    mech = create("ss", epsilon=1.0, domain=30)
    counts = np.r_[9_000, np.full(29, 40)]
    est = estimate(mech, sample_tally(mech, counts, np.random.default_rng(5)))
    first, second = eb_frequencies(est), eb_frequencies(est)
    assert np.array_equal(first.frequencies, second.frequencies)
    assert first.pooled == second.pooled
    a, b = shrinkage_frequencies(est), shrinkage_frequencies(est)
    assert np.array_equal(a.frequencies, b.frequencies) and a.concentration == b.concentration
    assert np.array_equal(postprocess(est, "eb").counts, postprocess(est, "eb").counts)


def test_well_resolved_values_keep_the_mle_exactly() -> None:
    # Few values, far apart in standard errors: pooling them cannot pay and BIC keeps mle.
    mech = create("grr", epsilon=4.0, domain=6)
    counts = np.array([6_000, 5_000, 4_000, 3_000, 2_000, 1_000])
    est = estimate(mech, sample_tally(mech, counts, np.random.default_rng(3)))
    out = eb_frequencies(est)
    mle, _, _, _ = mle_frequencies(mech, est.tally)
    assert not out.pooled and np.array_equal(out.frequencies, mle)
    assert postprocess(est, "eb").describe()["pooled"] is False


@pytest.mark.slow
def test_pooling_lowers_the_error_on_a_skewed_domain() -> None:
    # One value holds 90%, 29 share the rest thinly (native-country's shape): below the noise.
    mech = create("ss", epsilon=1.0, domain=30)
    rng = np.random.default_rng(20)
    counts = np.r_[18_000, rng.multinomial(2_000, np.full(29, 1 / 29))]
    diff = []
    pooled = 0
    for _ in range(30):
        est = estimate(mech, sample_tally(mech, counts, rng))
        out = eb_frequencies(est)
        pooled += out.pooled
        mle, _, _, _ = mle_frequencies(mech, est.tally)
        n = est.n
        diff.append(np.mean((mle * n - counts) ** 2) - np.mean((out.frequencies * n - counts) ** 2))
    d = np.asarray(diff)
    z = d.mean() / (d.std(ddof=1) / math.sqrt(d.size))
    assert pooled >= 25 and z > Z_ONE_SIDED_1PCT, (pooled, z)


def test_bad_input_is_refused() -> None:
    with pytest.raises(InvalidParameter):
        dirichlet_posterior_mean(np.array([0.5]), 10, 1.0, 0.0)
    with pytest.raises(InvalidParameter):
        npmle_posterior_mean(np.array([0.5, np.nan]), 10, 1.0, 0.0)
    with pytest.raises(InvalidParameter):
        npmle_posterior_mean(np.array([0.5, 0.5]), 0, 1.0, 0.0)
    with pytest.raises(InvalidParameter):
        dirichlet_posterior_mean(np.array([0.5, 0.5]), 10, 1.0, -2.0)
    with pytest.raises(InvalidParameter):
        dirichlet_posterior_mean(np.array([0.5, 0.5]), 10, 1.0, 0.0, prior_mean=[1.0, 0.0])


# -- the fast NPMLE fit and the ``auto`` default ----------------------------------------------


@pytest.mark.parametrize(
    ("name", "epsilon", "counts"),
    [
        ("ss", 1.0, np.r_[27_000, np.arange(40) * 20 + 5]),  # native-country's shape, k 41
        (
            "ss",
            0.5,
            np.array(
                [
                    4_000,
                    3_800,
                    3_600,
                    3_500,
                    3_400,
                    3_000,
                    2_000,
                    1_900,
                    1_500,
                    1_300,
                    900,
                    600,
                    150,
                    9,
                ]
            ),
        ),  # occupation's shape, k 14
        ("grr", 4.0, np.array([9_000, 5_000, 3_000, 1_000, 500, 200, 60, 10])),
    ],
)
def test_fast_npmle_fit_matches_the_full_grid_em(name: str, epsilon: float, counts) -> None:
    # The reduced EM (negligible columns dropped, near-coincident support points merged) must
    # give the full-grid EM's posterior means to a small fraction of a standard error and the
    # same BIC choice. 1e-2 standard errors is 17x the largest difference measured on Adult.
    import aggregator.shrinkage as shrinkage

    mech = create(name, epsilon=epsilon, domain=len(counts))
    est = estimate(mech, sample_tally(mech, counts, np.random.default_rng(11)))
    raw, n = est.counts / est.n, est.n
    fast = npmle_posterior_mean(raw, n, mech.v0, mech.beta)
    t, w, lik = shrinkage._npmle_fit_reference(raw, n, mech.v0, mech.beta)
    marginal = np.maximum(lik @ w, shrinkage.TINY)
    post = (lik * w) @ t / marginal
    second = (lik * w) @ (t * t) / marginal
    ref = sum_to_one(post, np.maximum(second - post**2, 0.0))
    sd = np.sqrt((mech.v0 + mech.beta * np.clip(raw, 0, 1)) / n)
    assert np.max(np.abs(fast.pooled_frequencies - ref) / sd) < 1e-2
    assert math.isclose(fast.log_gain, float(np.sum(np.log(marginal))), abs_tol=0.1)
    assert fast.weights is not None and math.isclose(float(fast.weights.sum()), 1.0)


def test_auto_pools_where_eb_pools() -> None:
    from aggregator.shrinkage import auto_frequencies

    mech = create("ss", epsilon=1.0, domain=30)
    counts = np.r_[18_000, np.random.default_rng(20).multinomial(2_000, np.full(29, 1 / 29))]
    est = estimate(mech, sample_tally(mech, counts, np.random.default_rng(21)))
    out, eb = auto_frequencies(est), eb_frequencies(est)
    assert eb.pooled and out.chosen == "pooled"
    assert np.array_equal(out.frequencies, eb.frequencies)
    described = postprocess(est, "auto").describe()
    assert described["method"] == "auto" and described["chosen"] == "pooled"


def test_auto_takes_the_flat_posterior_only_where_noise_dominates() -> None:
    from aggregator.flat_prior import frequency_cov
    from aggregator.joint_shrinkage import flat_posterior
    from aggregator.shrinkage import FLAT_BELOW_SDS, auto_frequencies, uniform_sds

    counts = np.array([900, 800, 700, 600, 500, 400, 300, 200, 100, 50])  # spread: BIC keeps mle
    for epsilon, expected in ((0.5, "flat"), (4.0, "mle")):
        mech = create("grr", epsilon=epsilon, domain=counts.size)
        est = estimate(mech, sample_tally(mech, counts, np.random.default_rng(4)))
        sds = uniform_sds(mech.k, est.n, mech.v0)
        assert (sds < FLAT_BELOW_SDS) == (expected == "flat"), sds
        out = auto_frequencies(est)
        mle, _, _, _ = mle_frequencies(mech, est.tally)
        assert out.chosen == expected and out.uniform_sds == sds
        if expected == "flat":
            flat = flat_posterior(est.counts / est.n, frequency_cov(mech, est.n, mle))
            assert np.array_equal(out.frequencies, flat.mean) and out.converged
        else:
            assert np.array_equal(out.frequencies, mle)
        counts_out = postprocess(est, "auto").counts
        assert math.isclose(float(counts_out.sum()), est.n) and counts_out.min() >= 0
