"""Statistical tests: the default post-processing lowers the error on Adult ``occupation``.

Each repetition perturbs the 30,718 occupations through the real mechanism and scores the raw
and the post-processed frequencies on the same draw (paired). The test statistic is the mean of
the paired difference ``(1 - target) MSE_raw - MSE_default`` over its standard error; the claim
"the default lowers the MSE by at least ``target``" is accepted when that z exceeds the
one-sided 1% point (2.326). Seeds are fixed, so the outcome is reproducible.

Measured (bench/estimate.py, 300 repetitions): with HR the default meets every target of the
issue (>= 15% at epsilon 0.5 and 1, >= 5% at 2, never worse at 4). For GRR and SS at epsilon 1
(about 7%), OUE at 1 (about 14%) and GRR/SS at 2 (about 4%) the targets are not reached:
GRR/SS estimates already sum to n, so only non-negativity helps, and for GRR even the flat-prior
posterior mean stays far below them (tests/test_aggregator_flat_prior.py, docs/AGGREGATOR.md).
Those cells are held to "significantly lowers the MSE", which holds everywhere.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.evaluation import method_errors
from aggregator.postprocess import DEFAULT_POSTPROCESS
from client_sdk.mechanisms import create
from simulator.adult import load_adult

Z_ONE_SIDED_1PCT = 2.326
SEED = 20261122


@pytest.fixture(scope="module")
def occupation() -> tuple[list[str], np.ndarray]:
    labels, indices = load_adult("train").column("occupation")
    assert len(labels) == 14 and indices.size == 30_718
    return labels, indices


@pytest.mark.slow
@pytest.mark.parametrize(("epsilon", "target"), [(0.5, 0.15), (1.0, 0.15), (2.0, 0.05), (4.0, 0.0)])
def test_default_meets_the_issue_targets_with_hadamard_response(
    occupation: tuple[list[str], np.ndarray], epsilon: float, target: float
) -> None:
    labels, indices = occupation
    mech = create("hr", epsilon=epsilon, domain=labels)
    res = method_errors(
        mech, indices, repetitions=600, seed=SEED, methods=("none", DEFAULT_POSTPROCESS)
    )
    z = res.paired_test(DEFAULT_POSTPROCESS, target)
    reduction, se = res.reduction(DEFAULT_POSTPROCESS)
    assert z > Z_ONE_SIDED_1PCT, (
        f"hr eps={epsilon}: reduction {reduction:.1%} +- {se:.1%} not significantly >= {target:.0%}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["grr", "oue", "olh", "ss", "sue"])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
def test_default_never_raises_the_error(
    occupation: tuple[list[str], np.ndarray], name: str, epsilon: float
) -> None:
    labels, indices = occupation
    mech = create(name, epsilon=epsilon, domain=labels)
    res = method_errors(
        mech, indices, repetitions=150, seed=SEED, methods=("none", DEFAULT_POSTPROCESS)
    )
    z = res.paired_test(DEFAULT_POSTPROCESS, 0.0)
    assert z > Z_ONE_SIDED_1PCT, f"{name} eps={epsilon}: z = {z:.2f}"


def test_reduction_and_paired_test_on_known_numbers() -> None:
    from aggregator.evaluation import MethodErrors

    res = MethodErrors(
        "grr",
        1.0,
        10,
        {"none": np.array([2.0, 4.0, 2.0, 4.0]), "mle": np.array([1.0, 2.0, 1.5, 2.5])},
    )
    reduction, se = res.reduction("mle")
    assert reduction == pytest.approx(1 - 7 / 12) and se > 0
    assert res.paired_test("mle", 0.0) > 0
    assert res.paired_test("mle", 0.9) < 0


# -- exact tally sampling and the any-mechanism covariance ------------------------------------

_COUNTS = np.array([600, 250, 100, 50, 0])


@pytest.mark.parametrize("name", ["grr", "oue", "sue", "ss"])
def test_sample_tally_has_the_exact_moments(name: str) -> None:
    from aggregator.evaluation import sample_tally

    mech = create(name, epsilon=1.0, domain=5)
    rng = np.random.default_rng([7, len(name)])
    reps = 600
    draws = np.array([sample_tally(mech, _COUNTS, rng).support for _ in range(reps)], float)
    n = _COUNTS.sum()
    p, q = mech.p_star, mech.q_star
    mean = _COUNTS * p + (n - _COUNTS) * q
    var = _COUNTS * p * (1 - p) + (n - _COUNTS) * q * (1 - q)
    z_mean = (draws.mean(axis=0) - mean) / np.sqrt(var / reps)
    centred = draws - mean
    s2 = (centred**2).mean(axis=0)
    se_s2 = np.sqrt(np.maximum((centred**4).mean(axis=0) - s2**2, 0) / reps)
    assert np.all(np.abs(z_mean) < 4.5), z_mean
    assert np.all(np.abs((s2 - var) / se_s2) < 4.5)
    assert (draws.sum(axis=1) == n * (mech.d if name == "ss" else 1)).all() or name in (
        "oue",
        "sue",
    )


@pytest.mark.parametrize(("name", "params"), [("grr", {}), ("ss", {"d": 2}), ("oue", {})])
def test_frequency_cov_matches_the_empirical_covariance(name: str, params: dict) -> None:
    from aggregator.estimate import debias
    from aggregator.evaluation import sample_tally
    from aggregator.flat_prior import frequency_cov

    mech = create(name, epsilon=1.0, domain=5, **params)
    rng = np.random.default_rng([8, len(name)])
    n, reps = int(_COUNTS.sum()), 2000
    est = np.array([debias(mech, sample_tally(mech, _COUNTS, rng)) / n for _ in range(reps)])
    emp = np.cov(est.T)
    cov = frequency_cov(mech, n, _COUNTS / n)
    d = np.sqrt(np.diag(cov))
    se = np.sqrt((np.outer(d, d) ** 2 + cov**2) / reps)  # SE of a sample covariance (normal)
    assert np.all(np.abs(emp - cov) < 4.5 * se), (emp - cov) / se
