"""``supports`` (which reports support a value; the privacy audit's view) agrees with the tally,
and randomized response's keep-probability form agrees with its epsilon."""

from __future__ import annotations

import math

import numpy as np
import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import MECHANISMS, RandomizedResponse, create

LABELS = ("a", "b", "c", "d", "e")


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_supports_agrees_with_the_per_report_tally(name: str) -> None:
    domain = ("no", "yes") if name == "rr" else LABELS
    mech = create(name, epsilon=1.0, domain=domain)
    values = np.arange(300) % mech.k
    batch = mech.perturb_many(values, rng=4)
    counts = mech.support_counts(batch)
    for index in range(mech.k):
        mask = mech.supports(batch, index)
        assert mask.dtype == bool and mask.shape == (300,)
        per_row = [int(mech.support_counts(batch[i : i + 1])[index]) for i in range(300)]
        assert mask.astype(int).tolist() == per_row, (name, index)
        assert int(mask.sum()) == int(counts[index])


def test_rr_keep_probability_form() -> None:
    two_coin = RandomizedResponse(p=0.75)
    assert two_coin.epsilon == pytest.approx(math.log(3), rel=1e-15)
    assert two_coin.params() == {"p": 0.75}
    assert RandomizedResponse(p=0.75, epsilon=math.log(3)).epsilon == two_coin.epsilon
    assert RandomizedResponse(p=0.75, epsilon=math.log(3) * (1 + 1e-12)).params() == {"p": 0.75}
    with pytest.raises(InvalidParameter, match="give one of them"):
        RandomizedResponse(p=0.75, epsilon=1.0)
    with pytest.raises(InvalidParameter, match="needs epsilon or a keep probability"):
        RandomizedResponse()
    for bad in (0.5, 1.0, 1, True, "0.7", 0.25):
        with pytest.raises(InvalidParameter, match="p must be a probability"):
            RandomizedResponse(p=bad)  # type: ignore[arg-type]
    assert RandomizedResponse(epsilon=1.0).params() == {}


@pytest.mark.parametrize(("k", "bits"), [(2, 1), (3, 2), (4, 2), (5, 3), (1000, 10), (1024, 10)])
def test_grr_report_bits(k: int, bits: int) -> None:
    mech = create("grr", epsilon=1.0, domain=k)
    assert mech.report_bits == bits
    assert isinstance(mech.report_bits, int)


@pytest.mark.parametrize("p", ["0.7", [0.7], 0.5, 1.0, 1.5, True])
def test_sue_keep_probability_must_be_a_number_in_range(p: object) -> None:
    with pytest.raises(InvalidParameter, match="p must be a probability"):
        create("sue", domain=LABELS, p=p)


def test_sue_keep_probability_implies_twice_the_rr_epsilon() -> None:
    # SUE keeps each bit w.p. p: the ratio is (p / (1 - p))**2, epsilon = 2 ln(p / (1 - p)).
    assert create("sue", domain=LABELS, p=0.75).epsilon == pytest.approx(2 * math.log(3))
    assert create("sue", domain=LABELS, p=0.6).epsilon == pytest.approx(2 * math.log(1.5))
