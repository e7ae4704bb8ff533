"""Tests that kill surviving mutants of ``aggregator/topk.py`` (issue 21).

``heavy_hitters``' published figures agree with each other exactly (``threshold = z sigma0``,
``z`` the Bonferroni quantile over the k values, raised to the exact binomial critical value
where that is larger), its arguments are checked at their
boundaries, and ties keep domain order.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from aggregator import estimate
from aggregator.estimate import binomial_critical_z
from aggregator.topk import heavy_hitters
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create


@pytest.fixture(scope="module")
def est():
    mech = create("grr", epsilon=2.0, domain=8)
    values = np.concatenate([np.full(900, 5), np.full(600, 2), np.arange(500) % 8])
    return estimate(mech, mech.tally(mech.perturb_many(values, rng=9)))


@pytest.mark.parametrize("level", [0.95, 0.5, 0.999])
def test_threshold_is_the_bonferroni_quantile_times_sigma0(est, level: float) -> None:
    mech = est.mechanism
    top = heavy_hitters(est, level=level)
    alpha = 1 - level
    assert top.level == level and top.alpha == pytest.approx(alpha, abs=1e-15)
    gaussian = NormalDist().inv_cdf(1 - alpha / mech.k)
    exact = binomial_critical_z(est.n, mech.q_star, alpha / mech.k)
    assert top.z == pytest.approx(max(gaussian, exact), rel=1e-12) and top.z >= gaussian
    p, q = mech.p_star, mech.q_star
    assert top.sigma0 == pytest.approx(math.sqrt(est.n * q * (1 - q)) / (p - q), rel=1e-12)
    assert top.threshold == pytest.approx(top.z * top.sigma0, rel=1e-12)
    expected = [i for i in range(mech.k) if est.counts[i] > top.threshold]
    assert sorted(h.index for h in top.items) == expected
    counts = [h.count for h in top.items]
    assert len(counts) >= 2 and counts == sorted(counts, reverse=True)
    assert top.to_dict()["threshold"] == top.threshold
    assert [v["value"] for v in top.to_dict()["values"]] == [h.value for h in top.items]


def test_the_default_level_is_0_95(est) -> None:
    assert heavy_hitters(est).to_dict() == heavy_hitters(est, level=0.95).to_dict()
    assert heavy_hitters(est).level == 0.95


def test_arguments_are_checked_at_their_boundaries(est) -> None:
    # refused by heavy_hitters itself, naming the caller's argument (an alpha out of range
    # would also be refused further on, with another message)
    for level in (0, 1, 1.0, 1.5, -0.5, True, "0.9"):
        with pytest.raises(InvalidParameter, match=r"^level must be a number in \(0, 1\)"):
            heavy_hitters(est, level=level)  # type: ignore[arg-type]
    for limit in (0, -1, True, 1.5):
        with pytest.raises(InvalidParameter, match="limit"):
            heavy_hitters(est, limit=limit)  # type: ignore[arg-type]
    found = heavy_hitters(est, level=0.95)
    assert len(found.items) >= 2
    assert heavy_hitters(est, limit=len(found.items) + 5).items == found.items
    assert heavy_hitters(est, limit=1).items == found.items[:1]
    assert heavy_hitters(est, limit=None).items == found.items


def test_few_reports_keep_the_family_wise_level() -> None:
    """OUE at epsilon 4 (q* = 0.018), 300 devices all holding value 0, 49 values nobody holds:
    the Gaussian Bonferroni threshold listed a value nobody holds in about a fifth of the
    windows (a null support count is Binomial(300, q*), with a far heavier upper tail). With
    the exact critical value the rate is at most the level: at most 20 of 200 windows here
    (5% expects 10; P(>= 21) < 0.001), and value 0 is always listed."""
    mech = create("oue", epsilon=4.0, domain=50)
    listed_null = 0
    for seed in range(200):
        est = estimate(mech, mech.tally(mech.perturb_many(np.zeros(300, dtype=int), rng=seed)))
        top = heavy_hitters(est)
        assert 0 in [h.index for h in top.items]
        listed_null += any(h.index != 0 for h in top.items)
    assert listed_null <= 20, listed_null
