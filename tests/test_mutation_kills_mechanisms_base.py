"""Tests that kill surviving mutants of ``client_sdk/mechanisms/base.py`` (issue 21).

The shared contract of every frequency oracle: the closed-form variance of the unbiased count
``(C_v - n q*) / (p* - q*)`` (derived here from the binomial variance of ``C_v``), the domain
checks of ``perturb_index`` and ``perturb_many`` with the offending index named, the abstract
methods a mechanism must provide, the row-by-row ``supports`` fallback agreeing with every
mechanism's vectorised one, and ``bit_vector_distribution`` being the law of independent bits.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import MECHANISMS, Mechanism, create
from client_sdk.mechanisms.base import bit_vector_distribution

NAMES = sorted(MECHANISMS)


def build(name: str, epsilon: float = 1.0, k: int = 5) -> Mechanism:
    return create(name, epsilon=epsilon, domain=min(k, MECHANISMS[name].max_k))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_count_variance_is_the_binomial_variance_of_the_unbiased_count(
    name: str, epsilon: float
) -> None:
    mech = build(name, epsilon, k=6)
    p, q = mech.p_star, mech.q_star
    n = 1000
    counts = np.array([0, 1, 17, 250, 500, 232][: mech.k], dtype=float)
    # C_v is a sum of independent Bernoullis: c_v with mean p*, n - c_v with mean q*.
    var_c = counts * p * (1 - p) + (n - counts) * q * (1 - q)
    expected = var_c / (p - q) ** 2
    got = mech.count_variance(n, counts)
    assert got.shape == counts.shape
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert mech.v0 == pytest.approx(float(expected[0]) / n, rel=1e-12)
    assert mech.beta == pytest.approx((float(expected[1]) - float(expected[0])), rel=1e-9)
    # Uniform data: the per-report variance averaged over the domain.
    uniform = np.full(mech.k, n / mech.k)
    per_report = float(np.mean(mech.count_variance(n, uniform))) / n
    assert mech.mean_variance() == pytest.approx(per_report, rel=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_perturb_index_accepts_exactly_the_domain(name: str) -> None:
    mech = build(name)
    for index in range(mech.k):
        mech.perturb_index(index, rng=0)
    for index in (-1, mech.k, mech.k + 1):
        with pytest.raises(InvalidParameter, match=r"index must be in \[0, "):
            mech.perturb_index(index, rng=0)


@pytest.mark.parametrize("name", NAMES)
def test_perturb_many_names_the_first_index_outside_the_domain(name: str) -> None:
    mech = build(name)
    k = mech.k
    assert mech.perturb_many(np.arange(k), rng=0).shape[0] == k
    assert mech.perturb_many(np.zeros(3, dtype=np.int64), rng=0).shape[0] == 3
    assert mech.perturb_many(np.full(2, k - 1), rng=0).shape[0] == 2
    for values, bad in (
        ([0, 1, k], k),
        ([0, k + 3, 1, -1], k + 3),
        ([1, -2, 0, k + 7], -2),
        ([-1], -1),
    ):
        with pytest.raises(InvalidParameter, match=rf"index {bad} is outside the domain"):
            mech.perturb_many(np.array(values), rng=0)


REQUIRED = (
    "realised_epsilon",
    "p_star",
    "q_star",
    "report_bits",
    "_perturb_one",
    "_perturb_batch",
    "encode_many",
    "check_payload",
    "decode_many",
    "support_counts",
)


def _complete() -> dict[str, Any]:
    def method(self: Any, *args: Any) -> Any:
        return None

    body: dict[str, Any] = {"name": "stub", "max_k": 16}
    for attr in REQUIRED:
        is_property = attr in ("realised_epsilon", "p_star", "q_star", "report_bits")
        body[attr] = property(lambda self: 1.0) if is_property else method
    return body


def test_every_abstract_method_is_required() -> None:
    stub = type("Stub", (Mechanism,), _complete())
    assert stub(epsilon=1.0, domain=3).k == 3
    for missing in REQUIRED:
        body = _complete()
        del body[missing]
        incomplete = type(f"Without{missing}", (Mechanism,), body)
        with pytest.raises(TypeError, match=missing):
            incomplete(epsilon=1.0, domain=3)


@pytest.mark.parametrize("name", NAMES)
def test_the_row_by_row_supports_fallback_agrees_with_the_tally(name: str) -> None:
    mech = build(name, epsilon=1.0, k=6)
    batch = mech.perturb_many(np.arange(60) % mech.k, rng=3)
    counts = mech.support_counts(batch)
    for index in range(mech.k):
        fallback = Mechanism.supports(mech, batch, index)
        assert fallback.dtype == bool and fallback.shape == (60,)
        np.testing.assert_array_equal(fallback, mech.supports(batch, index))
        assert int(fallback.sum()) == int(counts[index])
    assert counts.sum() > 0


def test_bit_vector_distribution_is_the_law_of_independent_bits() -> None:
    own, other = Fraction(3, 4), Fraction(1, 5)
    k, index = 3, 1
    dist = bit_vector_distribution(k, index, own, other)
    assert set(dist) == set(itertools.product((0, 1), repeat=k))
    assert sum(dist.values()) == 1
    for bits in itertools.product((0, 1), repeat=k):
        factors = [
            (own if i == index else other) if b else 1 - (own if i == index else other)
            for i, b in enumerate(bits)
        ]
        assert dist[bits] == math.prod(factors)
    assert dist[(0, 1, 0)] == Fraction(4, 5) * Fraction(3, 4) * Fraction(4, 5)
