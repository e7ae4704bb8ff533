"""Estimate refusals that mutation testing found unchecked (issue 21).

``estimate`` must refuse a tally whose length differs from the mechanism's domain in either
direction: a longer one would otherwise debias cleanly and serve counts for values the campaign
does not have.

``estimate`` is also the one entry point for open-domain and multi-attribute mechanisms: it must
serve them (and refuse ``bootstrap``/``rng``, which only numeric mechanisms take), and a single
report is enough for a frequency estimate when no minimum is asked for.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator import NotEnoughReports, estimate
from aggregator.estimate import Estimate
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Tally, create
from client_sdk.mechanisms.multi import create as create_multi


@pytest.mark.parametrize("size", [2, 3, 5, 8])
def test_a_tally_of_another_length_is_refused_both_ways(size: int) -> None:
    mech = create("oue", epsilon=1.0, domain=4)
    tally = Tally(10, np.full(size, 3, dtype=np.int64))
    with pytest.raises(InvalidParameter, match=f"tally has {size} counts"):
        estimate(mech, tally)


def test_open_domain_mechanisms_are_served_and_refuse_numeric_options() -> None:
    mech = create("cms", epsilon=1.0, max_length=8, width=64, depth=4)
    tally = mech.tally(mech.perturb_many(["a"] * 300 + ["b"] * 100, rng=1))
    est = estimate(mech, tally, candidates=["a", "b", "c"])
    assert len(est.counts) == 3 and est.n == 400
    for extra in ({"bootstrap": 10}, {"rng": 1}):
        with pytest.raises(InvalidParameter, match="only to numeric mechanisms"):
            estimate(mech, tally, candidates=["a"], **extra)


def test_multi_attribute_mechanisms_are_served_and_refuse_numeric_options() -> None:
    mech = create_multi(
        "smp", epsilon=1.0, attributes={"colour": ["r", "g", "b"], "size": ["S", "L"]}
    )
    gen = np.random.default_rng(2)
    cols = {"colour": gen.integers(0, 3, 400), "size": gen.integers(0, 2, 400)}
    tally = mech.tally(mech.perturb_many(cols, rng=3))
    est = estimate(mech, tally)
    colour, size = est["colour"], est["size"]
    assert isinstance(colour, Estimate) and isinstance(size, Estimate)
    assert len(colour.counts) == 3 and len(size.counts) == 2
    for extra in ({"bootstrap": 10}, {"rng": 1}):
        with pytest.raises(InvalidParameter, match="only to numeric mechanisms"):
            estimate(mech, tally, **extra)


def test_one_report_is_enough_by_default() -> None:
    mech = create("grr", epsilon=1.0, domain=3)
    one = mech.tally(mech.perturb_many(np.array([1]), rng=4))
    assert estimate(mech, one).n == 1
    with pytest.raises(NotEnoughReports, match=r"\(0 of 1\)"):
        estimate(mech, Tally.empty(3))
