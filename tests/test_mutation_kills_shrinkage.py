"""Properties of aggregator/shrinkage.py that its mutation survivors broke (docs/MUTATION.md).

Each test states a property that follows from the model in the module docstring (or from a
function's documented contract) and checks it on a small input where it can be derived by hand
or by an independent computation; tolerances are derived in the comments.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

import aggregator.shrinkage as shrinkage
from aggregator.shrinkage import (
    LOG_A_TOLERANCE,
    dirichlet_posterior_mean,
    npmle_posterior_mean,
    sum_to_one,
)
from client_sdk.errors import InvalidParameter

EPS = float(np.finfo(float).eps)

# -- the concentration ladder ------------------------------------------------------------------


def test_concentration_reaches_the_documented_ladder_ends() -> None:
    # Raw frequencies exactly at the prior mean, beta = 0 (a likelihood of constant width):
    # the marginal of each value is the likelihood averaged over a prior that concentrates on
    # the likelihood's peak as A grows, so it increases with A and the maximiser is the top of
    # the ladder, 1e7 (module docstring: "a fixed log-spaced ladder of A from 1e-2 to 1e7").
    for raw, prior in (
        (np.array([0.5, 0.5]), None),
        (np.full(4, 0.25), None),
        (np.array([0.2, 0.3, 0.5]), [2.0, 3.0, 5.0]),
    ):
        fit = dirichlet_posterior_mean(raw, 1000, 1.0, 0.0, prior_mean=prior)
        # exp(log(1e7)) is 1e7 to a few ulp.
        assert math.isclose(fit.concentration, 1e7, rel_tol=8 * EPS), fit.concentration
    # One value holds everything, resolved to 1e-3 standard errors: the sparsest prior on the
    # ladder, its bottom end 1e-2, fits best.
    fit = dirichlet_posterior_mean(np.array([1.0, 0.0, 0.0, 0.0, 0.0]), 10**6, 1.0, 0.0)
    assert math.isclose(fit.concentration, 1e-2, rel_tol=8 * EPS), fit.concentration


def _log_marginal(raw: np.ndarray, n: int, v0: float, beta: float, log_a: float) -> float:
    """The composite log marginal likelihood of the module docstring, on the module's partition.

    ``sum_v log sum_cells Beta-mass(cell; A m, A (1 - m)) N(r_v; mid, s^2(mid))``, without the
    ``-log(2 pi) / 2`` constants (as the module reports it); Beta masses from SciPy's CDF.
    """
    k = raw.size
    m = np.full(k, 1.0 / k)
    a_total = math.exp(log_a)
    sd = np.sqrt((v0 + beta * np.clip(raw, 0.0, 1.0)) / n)
    edges = shrinkage._partition(raw, sd)
    mid = (edges[:-1] + edges[1:]) / 2
    var = (v0 + beta * mid) / n
    total = 0.0
    for r, mv in zip(raw, m, strict=True):
        mass = np.diff(stats.beta.cdf(edges, a_total * mv, a_total * (1 - mv)))
        logl = -0.5 * ((r - mid) ** 2 / var + np.log(var))
        peak = logl.max()
        total += peak + math.log(float(np.sum(mass * np.exp(logl - peak))))
    return total


@pytest.mark.parametrize(
    ("raw", "n", "v0", "beta"),
    [
        (np.array([0.2, 0.3, 0.5]), 1000, 1.0, 0.0),
        (np.array([0.6, 0.25, 0.1, 0.05]), 2000, 0.9, 0.4),
    ],
)
def test_fitted_concentration_maximises_the_marginal(
    raw: np.ndarray, n: int, v0: float, beta: float
) -> None:
    fit = dirichlet_posterior_mean(raw, n, v0, beta)
    x_fit = math.log(fit.concentration)
    # The reported score is the marginal at the reported concentration (same partition; the
    # two differ only in the order of floating-point sums).
    assert math.isclose(fit.log_marginal, _log_marginal(raw, n, v0, beta, x_fit), abs_tol=1e-9)
    # Golden-section search ends with a bracket of width <= LOG_A_TOLERANCE holding the
    # maximiser x* of the (unimodal) marginal and returns a probe inside it, so
    # |x_fit - x*| <= LOG_A_TOLERANCE and l(x*) - l(x_fit) <= max|l''| LOG_A_TOLERANCE^2 / 2.
    step = 0.002
    grid = x_fit + step * np.arange(-25, 26)
    values = np.array([_log_marginal(raw, n, v0, beta, x) for x in grid])
    curvature = float(np.max(np.abs(np.diff(values, 2)))) / step**2
    bound = curvature * LOG_A_TOLERANCE**2 / 2
    assert values.max() - fit.log_marginal <= bound + 1e-9, (values.max() - fit.log_marginal, bound)
    # And the maximiser is inside the grid, not beyond it (the bracket found the right rung).
    assert 0 < int(np.argmax(values)) < grid.size - 1
    assert abs(grid[int(np.argmax(values))] - x_fit) <= LOG_A_TOLERANCE + step


# -- the posterior means under the fitted prior ------------------------------------------------


def _prior_times_likelihood(prior: stats.rv_continuous, r: float, s: float, j: int) -> float:
    """``int_0^1 t^j prior(t) exp(-(r - t)^2 / (2 s^2)) dt`` by adaptive quadrature."""
    value, _ = integrate.quad(
        lambda t: t**j * prior.pdf(t) * math.exp(-0.5 * ((r - t) / s) ** 2),
        0,
        1,
        points=[r],
        limit=400,
    )
    return float(value)


def test_posterior_means_are_those_of_the_fitted_beta_prior() -> None:
    # beta = 0: the likelihood N(r; t, s^2) has a constant s, and Tweedie's formula gives the
    # posterior mean as r + s^2 d/dr log marginal(r). The partition evaluates the likelihood
    # at cell midpoints of cells at most h = 2 WINDOW_SDS s / WINDOW_CELLS = 0.3125 s wide, which
    # widens the effective likelihood by Sheppard's h^2 / 12 (0.81% of s^2): the posterior
    # means' shrinkage |post - r| is off by about that share; allowed: twice it (the sum
    # conditioning mixes the values' errors). Checked against adaptive quadrature with the prior
    # Beta(A m, A (1 - m)) at the fitted A (measured: under 1% of the allowance).
    raw, n, v0, beta = np.array([0.2, 0.3, 0.5]), 1000, 1.0, 0.0
    fit = dirichlet_posterior_mean(raw, n, v0, beta)
    a_total, k = fit.concentration, raw.size
    s = math.sqrt(v0 / n)
    means, variances = [], []
    for r in raw:
        prior = stats.beta(a_total / k, a_total * (1 - 1 / k))
        m0, m1, m2 = (_prior_times_likelihood(prior, r, s, j) for j in range(3))
        means.append(m1 / m0)
        variances.append(m2 / m0 - (m1 / m0) ** 2)
    expected = sum_to_one(np.array(means), np.array(variances))
    sheppard = (2 * shrinkage.WINDOW_SDS / shrinkage.WINDOW_CELLS) ** 2 / 12
    tolerance = 2 * sheppard * np.abs(np.array(means) - raw)
    assert np.all(np.abs(fit.frequencies - expected) <= tolerance), (
        fit.frequencies - expected,
        tolerance,
    )


# -- the prior mean ------------------------------------------------------------------------------


def test_prior_mean_is_accepted_normalised_and_checked() -> None:
    raw, n = np.array([0.45, 0.35, 0.2]), 500
    # Positive weights are the prior mean up to scale: [1, 1, 1] is the uniform default.
    default = dirichlet_posterior_mean(raw, n, 1.0, 0.5)
    same = dirichlet_posterior_mean(raw, n, 1.0, 0.5, prior_mean=[1.0, 1.0, 1.0])
    assert np.array_equal(default.frequencies, same.frequencies)
    assert default.concentration == same.concentration
    scaled = dirichlet_posterior_mean(raw, n, 1.0, 0.5, prior_mean=[2.0, 3.0, 5.0])
    exact = dirichlet_posterior_mean(raw, n, 1.0, 0.5, prior_mean=np.array([0.2, 0.3, 0.5]))
    assert np.array_equal(scaled.frequencies, exact.frequencies)
    # A weight of 0 or below is no Dirichlet mean ("all > 0").
    for bad in ([1.0, 0.0, 1.0], [1.0, -1.0, 1.0], [-1.0, -1.0, -1.0]):
        with pytest.raises(InvalidParameter, match="prior_mean"):
            dirichlet_posterior_mean(raw, n, 1.0, 0.5, prior_mean=bad)


# -- sum_to_one ----------------------------------------------------------------------------------


def test_sum_to_one_keeps_entries_of_zero_variance() -> None:
    # Gaussian conditioning on the sum moves each mean by var_i / sum(var) of the deficit: a
    # posterior with variance 0 is certain and does not move. Entries are < 1 and each takes a
    # few roundings (deficit, product, quotient, the final division by a sum within k ulp of
    # 1), so 8 ulp of 1.
    out = sum_to_one(np.array([0.5, 0.3, 0.1]), np.array([0.0, 1.0, 1.0]))
    assert np.allclose(out, [0.5, 0.35, 0.15], rtol=0, atol=8 * EPS), out
    # All variances 0: nothing tells the entries apart; the deficit is shared equally.
    out = sum_to_one(np.array([0.5, 0.3, 0.1]), np.array([0.0, 0.0, 0.0]))
    assert np.allclose(out, [0.5 + 0.1 / 3, 0.3 + 0.1 / 3, 0.1 + 0.1 / 3], rtol=0, atol=8 * EPS)


def test_sum_to_one_returns_a_feasible_conditioning_as_is() -> None:
    # When the conditioned means are all >= 0 (here one is exactly 0: mean 0, variance 0) the
    # docstring's "then >= 0" has nothing to do: the result is the conditioned vector,
    # normalised, bit for bit (no further passes that would move it by rounding).
    mean = np.array([0.0, 0.17943498, 0.23855517, 0.1658969, 0.07277176, 0.23498753])
    var = np.array([0.0, 0.51088888, 0.75303021, 0.14792204, 0.81962672, 0.68328691])
    f = mean + var * (1 - mean.sum()) / var.sum()
    assert f.min() == 0.0
    assert np.array_equal(sum_to_one(mean, var), f / f.sum())


# -- the NPMLE prior's atoms and the BIC -----------------------------------------------------


def _runs(flags: np.ndarray) -> int:
    """Number of maximal runs of True in ``flags`` (written as a loop, not as the module's)."""
    count, inside = 0, False
    for flag in flags:
        if flag and not inside:
            count += 1
        inside = bool(flag)
    return count


@pytest.mark.parametrize(
    ("raw", "expected_atoms"),
    [
        # Two groups of five equal values, 160 standard errors apart: two atoms, none at 0.
        (np.r_[np.full(5, 0.02), np.full(5, 0.18)], 2),
        # Two values at 0.5 and four at exactly 0: an atom at the support point 0 and one at
        # 0.5 (the point 0 starts a run like any other).
        (np.array([0.5, 0.5, 0.0, 0.0, 0.0, 0.0]), 2),
    ],
)
def test_npmle_atoms_and_bic(raw: np.ndarray, expected_atoms: int) -> None:
    n, v0, beta = 10**6, 1.0, 0.0
    fit = npmle_posterior_mean(raw, n, v0, beta)
    assert fit.support is not None and fit.weights is not None
    heavy = fit.weights > shrinkage.ATOM_SHARE * fit.weights.max()
    assert fit.atoms == _runs(heavy) == expected_atoms
    assert heavy[0] == (expected_atoms == 2 and raw.min() == 0.0)
    # log_gain: the composite log marginal, sum_v log sum_j w_j L_vj, with each likelihood row
    # scaled to peak 1 (PooledFit's docstring); recomputed from the returned prior.
    t, _, lik, _ = shrinkage._npmle_grid(raw, n, v0, beta)
    assert np.array_equal(t, fit.support)
    log_gain = float(np.sum(np.log(lik @ fit.weights)))
    assert math.isclose(fit.log_gain, log_gain, rel_tol=1e-12, abs_tol=1e-12)
    # BIC difference pooled minus unpooled: the unpooled model has k free frequencies, the
    # pooled prior 2 atoms - 1 (a position per atom, weights summing to 1).
    k = raw.size
    free = k - (2 * expected_atoms - 1)
    assert math.isclose(fit.bic, fit.log_gain + free / 2 * math.log(k), rel_tol=1e-12)
    assert fit.pooled == (fit.bic > shrinkage.POOLING_EVIDENCE)


def test_reduced_fit_shares_each_bin_of_merge_sds_standard_errors() -> None:
    """``_npmle_fit`` fits the kept grid points of each bin of MERGE_SDS standard errors as one
    point and shares its weight equally: the returned weights are constant on exactly those bins.

    The bins are rebuilt here from the grid alone: a kept point's position is the running sum
    of its gaps, each in units of the standard error at the gap (the root of the mean of its
    two ends' variances), cut every MERGE_SDS.
    """
    rng = np.random.default_rng(5)
    n, v0, beta = 30_000, 2.0, -1.0
    raw = np.sort(rng.dirichlet(np.full(14, 2.0))) + rng.normal(0.0, 0.004, 14)
    t, var, lik, _ = shrinkage._npmle_grid(raw, n, v0, beta)
    keep = np.flatnonzero(lik.max(axis=0) >= shrinkage.NEGLIGIBLE)
    gaps = np.diff(t[keep]) / np.sqrt((var[keep][1:] + var[keep][:-1]) / 2.0)
    position = np.concatenate([[0.0], np.cumsum(gaps)])
    bins = np.floor(position / shrinkage.MERGE_SDS).astype(np.int64)
    _, full, _ = shrinkage._npmle_fit(raw, n, v0, beta)
    assert np.all(np.delete(full, keep) == 0.0)
    kept = full[keep]
    labels = np.unique(bins)
    assert 10 < labels.size < keep.size  # the test needs bins that merge several points
    for label in labels:
        members = kept[bins == label]
        assert np.all(members == members[0])
    # Neighbouring bins are fitted separately: their shared weights are not all equal.
    assert np.unique(kept).size > labels.size // 4
