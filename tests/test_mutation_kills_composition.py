"""Composition bounds that mutation testing found unchecked (issue 21).

* ``kairouz`` at its boundaries: for ``delta`` equal to ``delta_i`` (Kairouz-Oh-Viswanath's
  delta at which k-fold eps-DP is ``(k - 2i) eps``-DP, summed directly by ``kairouz_delta``) the
  optimum is ``(k - 2i) eps``; one float below it, ``delta_i`` no longer fits and the optimum is
  ``(k - 2(i - 1)) eps``. A bound smaller than that would claim more privacy than holds. The fast
  pass's rounding decides these cases only through the direct check.
* ``compose`` of no reports is 0 (basic), and with ``limit`` it stops at the first bound that is
  at most the limit, equality included.
"""

from __future__ import annotations

import math

import pytest

from client_sdk.composition import advanced, basic, compose, kairouz, kairouz_delta


@pytest.mark.parametrize("k", [10, 50, 200, 1000])
@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0])
def test_kairouz_is_exact_on_both_sides_of_each_boundary(k: int, eps: float) -> None:
    checked = 0
    for i in range(1, min(k // 2, 40) + 1):
        d = kairouz_delta(k, eps, i)
        if not 0 < d < 1:
            continue
        assert kairouz(k, eps, d) == (k - 2 * i) * eps
        assert kairouz(k, eps, math.nextafter(d, 0)) == (k - 2 * (i - 1)) * eps
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("counts", [{}, {1.0: 0}, {0.5: 0, 2.0: 0}])
def test_compose_of_no_reports_is_zero(counts: dict[float, int]) -> None:
    assert compose(counts, 1e-6) == (0.0, "basic")
    assert compose(counts, 1e-6, limit=1.0) == (0.0, "basic")


def test_compose_stops_at_a_bound_equal_to_the_limit() -> None:
    counts = {0.1: 1000, 0.2: 500}
    delta = 1e-6
    total = basic(counts)
    assert advanced(counts, delta) < total  # a smaller bound exists...
    assert compose(counts, delta)[1] != "basic"
    # ...but the basic one already fits the limit, so the check stops there.
    assert compose(counts, delta, limit=total) == (total, "basic")
    adv = advanced(counts, delta)
    assert compose(counts, delta, limit=adv) == (adv, "advanced")
