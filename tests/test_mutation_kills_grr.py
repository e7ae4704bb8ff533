"""GRR and RR facts that mutation testing found unchecked by the fast test files (issue 21).

Exact values only: the output law in Fractions, the realised epsilon from the threshold, the
batch parser's int64 bound and messages, and ``rr`` built from a keep probability.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from client_sdk.errors import InvalidReport
from client_sdk.mechanisms import create
from client_sdk.mechanisms.randomness import SCALE


@pytest.mark.parametrize(("k", "epsilon"), [(2, 0.5), (3, 1.0), (7, 2.0), (40, 4.0)])
def test_output_distribution_is_the_exact_law_summing_to_one(k: int, epsilon: float) -> None:
    mech = create("grr", epsilon=epsilon, domain=k)
    p = Fraction(mech.threshold, SCALE)
    for index in (0, k - 1):
        law = mech.output_distribution(index)
        assert sum(law.values()) == 1
        assert law[index] == p
        others = [law[y] for y in range(k) if y != index]
        assert others == [(1 - p) / (k - 1)] * (k - 1)
        assert float(others[0]) == pytest.approx(mech.q_star, rel=1e-15)


@pytest.mark.parametrize(("k", "epsilon"), [(2, 0.5), (3, 1.0), (7, 2.0), (40, 4.0)])
def test_realised_epsilon_is_the_log_ratio_of_the_threshold(k: int, epsilon: float) -> None:
    mech = create("grr", epsilon=epsilon, domain=k)
    t = mech.threshold
    exact = math.log(t * (k - 1) / (SCALE - t))
    assert mech.realised_epsilon == pytest.approx(exact, rel=1e-12)
    assert mech.realised_epsilon == pytest.approx(math.log(mech.p_star / mech.q_star), rel=1e-12)
    assert mech.realised_epsilon <= epsilon


def test_every_report_supports_exactly_one_value() -> None:
    mech = create("grr", epsilon=1.0, domain=5)
    assert mech.exact_support_size == 1
    batch = mech.perturb_many(np.arange(5).repeat(20), rng=np.random.default_rng(3))
    rows = np.stack([mech.supports(batch, v) for v in range(5)], axis=1)
    assert (rows.sum(axis=1) == mech.exact_support_size).all()


@pytest.mark.parametrize("big", [2**63, 2**63 + 1, 2**64 - 1, 2**64, -(2**63) - 1])
def test_integers_beyond_int64_are_refused_as_reports_not_by_an_overflow(big: int) -> None:
    mech = create("grr", epsilon=1.0, domain=4)
    with pytest.raises(InvalidReport) as caught:
        mech.decode_many([0, 3, big])
    assert caught.value.index == 2
    assert f"got {big}" in str(caught.value)


def test_the_batch_parser_names_the_first_bad_report_in_its_own_words() -> None:
    mech = create("grr", epsilon=1.0, domain=4)
    np.testing.assert_array_equal(mech.decode_many([0, 3, 2, 1]), [0, 3, 2, 1])
    with pytest.raises(InvalidReport) as caught:
        mech.decode_many([0, 3, 7, -1])
    assert caught.value.index == 2
    assert str(caught.value) == "report #2: a report is an integer in [0, 4), got 7"


@pytest.mark.parametrize("p", [0.6, 0.55, 0.7, 0.8, 0.95])
def test_rr_from_any_keep_probability_states_an_epsilon_covering_it(p: float) -> None:
    # p = 0.6 has p // (1 - p) = 1: a floor instead of a division would imply epsilon 0.
    implied = math.log(p / (1 - p))
    mech = create("rr", p=p, domain=2)
    assert mech.p_star == pytest.approx(p, abs=2**-60)
    assert mech.epsilon >= mech.realised_epsilon
    assert mech.epsilon == pytest.approx(implied, rel=1e-9)
    assert create("rr", p=p, epsilon=implied, domain=2).epsilon == mech.epsilon


class _ScriptedGenerator:
    """A generator whose bytes and raw words are given in advance (a fault we cannot cause)."""

    def __init__(self, chunk: bytes, words: list[int]) -> None:
        self.chunk, self.words = chunk, words
        self.bit_generator = self

    def bytes(self, n: int) -> bytes:
        assert n == len(self.chunk)
        return self.chunk

    def random_raw(self) -> int:
        return self.words.pop(0)


def test_a_word_in_the_rejection_zone_redraws_below_k_minus_one() -> None:
    # k = 4: the other values are uniform below 3, whose limit is 2**64 - 1; the top word is
    # rejected and the fresh word 5 gives 5 % 3 = 2, i.e. the third value other than 0: 3.
    mech = create("grr", epsilon=1.0, domain=4)
    top = b"\xff" * 8  # u = 2**64 - 1: never kept; w = 2**64 - 1: in the rejection zone
    gen = _ScriptedGenerator(top + top, [5])
    assert mech._perturb_one(0, gen) == 3  # type: ignore[arg-type]
    assert gen.words == []


def test_the_constructor_takes_keywords_only() -> None:
    from client_sdk.mechanisms.grr import GeneralizedRR

    with pytest.raises(TypeError):
        GeneralizedRR(1.0, 4)  # type: ignore[misc]
    assert GeneralizedRR(epsilon=1.0, domain=4).k == 4
