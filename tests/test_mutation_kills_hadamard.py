"""Hadamard response's halves, exact law and transform (docs/MECHANISMS.md §5; issue 21).

Value x owns ``C_x = {y : popcount((x+1) & y) even}``; a report is uniform on ``C_x`` with
probability p, else uniform on its complement, so ``P[y | x]`` is ``2p/K`` or ``2(1-p)/K``.
Checked by chi-square on seeded reports of both paths (the privacy file's exact checks are
too slow for the mutation runs), and the fast transform against its definition.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from client_sdk.errors import InvalidReport
from client_sdk.mechanisms import create
from client_sdk.mechanisms.hadamard import walsh_hadamard


def _parity_even(r: int, y: int) -> bool:
    return bin(r & y).count("1") % 2 == 0


@pytest.mark.parametrize("size", [1, 2, 4, 8, 16])
def test_walsh_hadamard_is_its_definition(size: int) -> None:
    hist = np.random.default_rng(size).integers(0, 50, size)
    expected = [
        sum(int(hist[y]) * (1 if _parity_even(r, y) else -1) for y in range(size))
        for r in range(size)
    ]
    np.testing.assert_array_equal(walsh_hadamard(hist), expected)


@pytest.mark.parametrize(("k", "K"), [(2, 4), (3, 4), (5, 8), (7, 8), (8, 16)])
def test_halves_are_balanced_and_pairwise_half_shared(k: int, K: int) -> None:
    mech = create("hr", epsilon=1.0, domain=k)
    assert mech.K == K and mech.report_bits == int(math.log2(K))
    halves = [{y for y in range(K) if mech.in_half(x, y)} for x in range(k)]
    for x, half in enumerate(halves):
        assert half == {y for y in range(K) if _parity_even(x + 1, y)}
        assert len(half) == K // 2
        for other in halves[x + 1 :]:
            assert len(half & other) == K // 4  # why q* = 1/2 exactly
    assert mech.q_star == 0.5


def _law(mech, x: int) -> np.ndarray:
    p = mech.p_star
    return np.array(
        [2 * p / mech.K if mech.in_half(x, y) else 2 * (1 - p) / mech.K for y in range(mech.K)]
    )


@pytest.mark.parametrize(("k", "x"), [(5, 0), (5, 3), (7, 6)])
def test_one_device_and_batch_reports_follow_the_exact_law(k: int, x: int) -> None:
    mech = create("hr", epsilon=1.5, domain=k)
    n = 8000
    gen = np.random.default_rng(31 * k + x)
    one = np.bincount([mech.perturb(str(x), rng=gen) for _ in range(n)], minlength=mech.K)
    batch = mech.perturb_many(np.full(n, x), rng=17 * k + x)
    many = np.bincount(batch, minlength=mech.K)
    for counts in (one, many):
        assert counts.size == mech.K  # nothing outside [0, K)
        # Seeded: deterministic; 1e-6 leaves no room for an unlucky seed.
        assert stats.chisquare(counts, _law(mech, x) * n).pvalue > 1e-6


def test_supports_and_support_counts_use_the_halves() -> None:
    mech = create("hr", epsilon=1.0, domain=6)
    batch = mech.perturb_many(np.arange(6).repeat(7), rng=4)
    for v in range(6):
        expected = [mech.in_half(v, int(y)) for y in batch]
        np.testing.assert_array_equal(mech.supports(batch, v), expected)
        assert mech.support_counts(batch)[v] == sum(expected)


def test_realised_epsilon_and_p_star_are_the_threshold_ratio() -> None:
    mech = create("hr", epsilon=2.0, domain=5)
    t = mech.threshold
    assert mech.p_star == t / 2**64
    assert mech.realised_epsilon == pytest.approx(math.log(t / (2**64 - t)), rel=1e-12)
    assert mech.realised_epsilon <= 2.0


def test_the_vectorised_decoder_checks_the_range() -> None:
    mech = create("hr", epsilon=1.0, domain=5)
    np.testing.assert_array_equal(mech.decode_many([0, 7, 3]), [0, 7, 3])
    for bad in (-1, 8):
        with pytest.raises(InvalidReport, match="report #1"):
            mech.decode_many([0, bad])


def test_integers_beyond_int64_are_refused_as_reports_not_by_an_overflow() -> None:
    # The vectorised decoder takes only payloads in [-2**63, 2**63); larger integers go to the
    # per-report check, which refuses them with their index (an int64 conversion would raise
    # OverflowError instead).
    mech = create("hr", epsilon=1.0, domain=7)
    for batch, index in (
        ([2**63], 0),
        ([0, 2**64 - 1], 1),
        ([3, 1, -(2**63) - 1], 2),
        ([0, 2**63 + 5, 1], 1),
    ):
        with pytest.raises(InvalidReport) as info:
            mech.decode_many(batch)
        assert info.value.index == index
        assert f"report #{index}: " in str(info.value)
    assert mech.decode_many([0, 7, 3]).tolist() == [0, 7, 3]
