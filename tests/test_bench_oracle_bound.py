"""bench/oracle_bound.py: the permutation oracle's matching probabilities are exact.

The oracle's posterior mean is the lower bound the bench quotes for every label-symmetric
estimator, so its subset dynamic programme is checked against enumerating all k! matchings,
and the oracle itself against the one case with a closed form (two values).
"""

from __future__ import annotations

import itertools
import math
from types import ModuleType

import numpy as np
import pytest

from tests.support.bench import bench_module


@pytest.fixture(scope="module")
def oracle() -> ModuleType:
    return bench_module("oracle_bound")


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7])
def test_marginals_equal_the_enumeration_of_every_matching(oracle: ModuleType, k: int) -> None:
    lik = np.random.default_rng(k).random((k, k)) ** 3
    expected = np.zeros((k, k))
    for perm in itertools.permutations(range(k)):
        weight = math.prod(lik[v, perm[v]] for v in range(k))
        expected[np.arange(k), perm] += weight
    expected /= expected.sum(axis=1, keepdims=True)
    got = oracle.assignment_marginals(lik)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got.sum(axis=0), 1.0, rtol=1e-12)


def test_two_values_have_the_closed_form_posterior(oracle: ModuleType) -> None:
    # Equal variances (beta = 0): P[v holds a] = 1 / (1 + exp(-(a - b)(r_v - r_w) / var)).
    truth, raw, n, v0 = np.array([0.3, 0.7]), np.array([0.62, 0.41]), 50, 2.0
    var = v0 / n
    share = 1.0 / (1.0 + math.exp(-(0.3 - 0.7) * (raw[0] - raw[1]) / var))
    expected = share * 0.3 + (1 - share) * 0.7
    got = oracle.oracle_frequencies(raw, truth, n, v0, 0.0)
    assert got[0] == pytest.approx(expected, rel=1e-12)
    assert got.sum() == pytest.approx(1.0, rel=1e-12)


def test_too_large_a_domain_is_refused(oracle: ModuleType) -> None:
    with pytest.raises(ValueError, match="at most 16"):
        oracle.assignment_marginals(np.ones((17, 17)))
