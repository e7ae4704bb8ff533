"""Subset selection's exact law and constants (docs/MECHANISMS.md; issue 21).

A subset holding the true value x has probability ``p / C(k-1, d-1)``, one without it
``(1-p) / C(k-1, d)``. The exact-distribution checks of the privacy file are too slow for the
mutation runs, so this file checks the same law by a chi-square test on seeded reports (both
the one-device and the batch path) and the constants by their closed forms; mutants that bend
the partial shuffle or the constants survived without it.
"""

from __future__ import annotations

import base64
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create
from client_sdk.mechanisms.subset import subset_v0

SCALE = 1 << 64


def _positions(payload: str, k: int) -> tuple[int, ...]:
    bits = int.from_bytes(base64.b64decode(payload), "little")
    assert bits >> k == 0, "a bit beyond the domain is set"
    return tuple(i for i in range(k) if bits >> i & 1)


def _law(mech, x: int) -> dict[tuple[int, ...], float]:
    k, d, p = mech.k, mech.d, mech.p_star
    with_x = p / math.comb(k - 1, d - 1)
    without = (1 - p) / math.comb(k - 1, d)
    return {s: with_x if x in s else without for s in itertools.combinations(range(k), d)}


def _chi_square_p_value(observed: dict, law: dict, n: int) -> float:
    cells = sorted(law)
    assert set(observed) <= set(cells), "a report outside the output space"
    obs = np.array([observed.get(c, 0) for c in cells], dtype=float)
    exp = np.array([law[c] * n for c in cells])
    return float(stats.chisquare(obs, exp).pvalue)


@pytest.mark.parametrize(("k", "d", "x"), [(5, 2, 0), (5, 3, 4), (6, 3, 2), (4, 1, 3)])
def test_one_device_reports_follow_the_exact_law(k: int, d: int, x: int) -> None:
    mech = create("ss", epsilon=1.0, domain=k, d=d)
    gen = np.random.default_rng(1000 * k + 10 * d + x)
    n = 6000
    seen: dict[tuple[int, ...], int] = {}
    for _ in range(n):
        s = _positions(mech.perturb(str(x), rng=gen), k)
        assert len(s) == d
        seen[s] = seen.get(s, 0) + 1
    # Seeded, so it either always passes or always fails; 1e-6 leaves no room for a bad seed.
    assert _chi_square_p_value(seen, _law(mech, x), n) > 1e-6


@pytest.mark.parametrize(("k", "d", "x"), [(5, 2, 0), (6, 3, 5)])
def test_batch_reports_follow_the_exact_law(k: int, d: int, x: int) -> None:
    mech = create("ss", epsilon=1.0, domain=k, d=d)
    n = 20000
    batch = mech.perturb_many(np.full(n, x), rng=7 * k + d)
    seen: dict[tuple[int, ...], int] = {}
    for row in mech.encode_many(batch):
        s = _positions(row, k)
        assert len(s) == d
        seen[s] = seen.get(s, 0) + 1
    assert _chi_square_p_value(seen, _law(mech, x), n) > 1e-6


@pytest.mark.parametrize(("eps", "k", "d"), [(1.0, 5, 2), (2.0, 14, 2), (0.5, 30, 9)])
def test_constants_are_the_closed_forms(eps: float, k: int, d: int) -> None:
    mech = create("ss", epsilon=eps, domain=k, d=d)
    p = mech.p_star
    assert mech.q_star == pytest.approx((p * (d - 1) + (1 - p) * d) / (k - 1), rel=1e-15)
    t = Fraction(mech.threshold, SCALE)
    ratio = t / (1 - t) * Fraction(k - d, d)
    assert mech.realised_epsilon == pytest.approx(math.log(ratio), rel=1e-12)
    assert mech.realised_epsilon <= eps
    assert p == pytest.approx(d * math.exp(eps) / (d * math.exp(eps) + k - d), rel=1e-9)
    assert mech.report_bits == min(k, d * math.ceil(math.log2(k)))
    e = math.exp(eps)
    pi = d * e / (d * e + k - d)
    qi = (pi * (d - 1) + (1 - pi) * d) / (k - 1)
    assert subset_v0(eps, k, d) == pytest.approx(qi * (1 - qi) / (pi - qi) ** 2, rel=1e-12)


def test_subset_size_bounds() -> None:
    for d in (1, 4):
        assert create("ss", epsilon=1.0, domain=5, d=d).d == d
    for d in (0, 5, 6, 2.0, True):
        with pytest.raises(InvalidParameter, match="subset size d"):
            create("ss", epsilon=1.0, domain=5, d=d)
