"""Unbiasedness and variance of every mechanism's estimator, against its closed form.

For each (mechanism, epsilon, k) a fixed population of n devices reports R times (seeded). Per
domain value the mean of the R estimates must lie within a normal tolerance of the true count,
and the mean squared deviation inside the chi-square interval of the formula's variance.
Bonferroni over the k values keeps the family-wise false-alarm rate per case at ALPHA.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats

from aggregator import debias
from client_sdk.mechanisms import Tally, create

ALPHA = 1e-4
SMALL_K = [2, 14, 42]
EPSILONS = [0.5, 1.0, 2.0, 4.0]


def population(n: int, k: int) -> np.ndarray:
    """True counts: geometric decay, the last value held by nobody (k > 2)."""
    weights = 0.75 ** np.arange(k)
    if k > 2:
        weights[-1] = 0.0
    counts = np.floor(n * weights / weights.sum()).astype(np.int64)
    counts[0] += n - counts.sum()
    return counts


@dataclass
class Check:
    mean_ok: bool
    variance_ok: bool
    worst_z: float
    worst_variance_ratio: float


def check_estimator(mech, counts: np.ndarray, reps: int, seed: int, *, variance=None, q_star=None):
    """Run the repetitions and test the estimates against the (given or mechanism's) formulas."""
    n, k = int(counts.sum()), counts.size
    values = np.repeat(np.arange(k), counts)
    batch = mech.perturb_many(np.tile(values, reps), rng=np.random.default_rng(seed))
    estimates = np.empty((reps, k))
    for r in range(reps):
        tally = Tally(n, mech.support_counts(batch[r * n : (r + 1) * n]))
        if q_star is None:
            estimates[r] = debias(mech, tally)
        else:
            estimates[r] = (tally.support - n * q_star) / (mech.p_star - q_star)
    var = mech.count_variance(n, counts) if variance is None else variance
    z = stats.norm.ppf(1 - ALPHA / (2 * k))
    mean_z = (estimates.mean(axis=0) - counts) / np.sqrt(var / reps)
    ratio = ((estimates - counts) ** 2).mean(axis=0) / var
    lo = stats.chi2.ppf(ALPHA / (2 * k), reps) / reps
    hi = stats.chi2.ppf(1 - ALPHA / (2 * k), reps) / reps
    return Check(
        mean_ok=bool(np.all(np.abs(mean_z) <= z)),
        variance_ok=bool(np.all((ratio >= lo) & (ratio <= hi))),
        worst_z=float(np.abs(mean_z).max()),
        worst_variance_ratio=float(ratio[np.argmax(np.abs(np.log(ratio)))]),
    )


CASES = [("rr", eps, 2) for eps in EPSILONS] + [
    (m, eps, k)
    for m in ("grr", "sue", "oue", "olh", "hr", "ss")
    for eps in EPSILONS
    for k in SMALL_K
]
LARGE = [(m, eps, 1024) for m in ("oue", "olh", "hr", "ss") for eps in EPSILONS]


@pytest.mark.parametrize(("name", "epsilon", "k"), CASES)
def test_estimator_is_unbiased_with_the_formula_variance(name: str, epsilon: float, k: int) -> None:
    mech = create(name, epsilon=epsilon, domain=k)
    seed = (k * 1000 + int(epsilon * 10)) * 7 + len(name)
    result = check_estimator(mech, population(3000, k), reps=200, seed=seed)
    assert result.mean_ok, f"mean off by {result.worst_z:.2f} standard errors"
    assert result.variance_ok, f"variance ratio {result.worst_variance_ratio:.3f}"


@pytest.mark.slow
@pytest.mark.parametrize(("name", "epsilon", "k"), LARGE)
def test_large_domain_estimator_is_unbiased_with_the_formula_variance(
    name: str, epsilon: float, k: int
) -> None:
    mech = create(name, epsilon=epsilon, domain=k)
    result = check_estimator(
        mech, population(1500, k), reps=80, seed=int(epsilon * 100) + len(name)
    )
    assert result.mean_ok, f"mean off by {result.worst_z:.2f} standard errors"
    assert result.variance_ok, f"variance ratio {result.worst_variance_ratio:.3f}"


def test_the_check_rejects_a_wrong_variance_formula() -> None:
    """Dropping the beta * c term of OUE's variance is caught: the test can fail."""
    mech = create("oue", epsilon=4.0, domain=14)
    counts = population(3000, 14)
    wrong = np.full(14, 3000 * mech.v0)  # no beta * c_v
    assert not check_estimator(mech, counts, reps=200, seed=1, variance=wrong).variance_ok
    assert check_estimator(mech, counts, reps=200, seed=1).variance_ok


def test_the_check_rejects_a_biased_estimator() -> None:
    """Using GRR's q for OLH (a classic bug) biases the counts; the mean check catches it."""
    mech = create("olh", epsilon=1.0, domain=14)
    counts = population(3000, 14)
    grr_q = (1 - mech.p_star) / (mech.g - 1)
    assert not check_estimator(mech, counts, reps=200, seed=2, q_star=grr_q).mean_ok


def test_grr_estimates_sum_to_n_exactly() -> None:
    mech = create("grr", epsilon=1.0, domain=14)
    tally = mech.tally(mech.perturb_many(np.arange(14).repeat(50), rng=np.random.default_rng(1)))
    assert debias(mech, tally).sum() == pytest.approx(700, rel=1e-12)
