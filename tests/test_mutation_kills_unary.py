"""SUE given a keep probability ``p`` instead of epsilon (docs/MECHANISMS.md §3; issue 21).

'Programming Differential Privacy' ch. 13 uses p = 0.75, q = 0.25, epsilon = ln 9. The stated
epsilon of such a mechanism is the one its exact thresholds realise, rounded up; a mismatched
epsilon is refused. Mutation survivors showed none of this was checked by the unary tests.
"""

from __future__ import annotations

import math

import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create


def test_sue_p_three_quarters_is_epsilon_ln_9() -> None:
    mech = create("sue", p=0.75, domain=4)
    assert mech.p_star == 0.75 and mech.q_star == 0.25
    assert mech.epsilon == pytest.approx(math.log(9), rel=1e-15)
    assert mech.epsilon >= mech.realised_epsilon
    assert mech.params() == {"p": 0.75}
    same = create("sue", p=0.75, epsilon=math.log(9), domain=4)
    assert same.epsilon == mech.epsilon


@pytest.mark.parametrize("p", [0.6, 0.9, 0.99])
def test_sue_stated_epsilon_is_twice_the_log_odds_of_p(p: float) -> None:
    mech = create("sue", p=p, domain=3)
    assert mech.epsilon == pytest.approx(2 * math.log(p / (1 - p)), rel=1e-12)
    assert mech.epsilon >= mech.realised_epsilon


def test_sue_refuses_an_epsilon_that_p_does_not_imply() -> None:
    with pytest.raises(InvalidParameter, match="implies epsilon"):
        create("sue", p=0.75, epsilon=1.0, domain=4)


@pytest.mark.parametrize("p", [0.5, 1.0, 0.2, 1.5, True])
def test_sue_refuses_p_outside_one_half_to_one(p: object) -> None:
    with pytest.raises(InvalidParameter, match="p must be a probability"):
        create("sue", p=p, domain=4)


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
def test_oue_keeps_the_true_bit_with_probability_one_half(eps: float) -> None:
    mech = create("oue", epsilon=eps, domain=6)
    assert mech.p_star == 0.5
    q = 1 / (math.exp(eps) + 1)
    assert mech.q_star == pytest.approx(q, rel=1e-9) and mech.q_star >= q
    assert mech.realised_epsilon <= eps
