"""OLH's documented constants and wire rules at their edges (docs/MECHANISMS.md §4; issue 21).

Mutation survivors showed that the exact collision probability, the variance V0 and the
vectorised decoder's range checks could change without a failing test: their errors (1e-9 in
q*, a report with a = 0 accepted in bulk) are far below what a statistical test sees.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import cast

import numpy as np
import pytest

from client_sdk.errors import InvalidParameter, InvalidReport
from client_sdk.mechanisms import create
from client_sdk.mechanisms.olh import PRIME, collision_probability, olh_v0


def _collision_by_residue_classes(g: int) -> Fraction:
    """sum_r n_r (n_r - 1) / (P (P - 1)), n_r = #{x in [0, P): x mod g = r}, class by class."""
    total = Fraction(0)
    for r in range(g):
        n_r = len(range(r, PRIME, g))
        total += Fraction(n_r * (n_r - 1), PRIME * (PRIME - 1))
    return total


def test_the_hash_prime_is_the_documented_one() -> None:
    assert PRIME == 2**31 - 1


@pytest.mark.parametrize("g", [2, 3, 7, 56, 1000, 65536])
def test_collision_probability_is_exact(g: int) -> None:
    got = collision_probability(g)
    assert got == pytest.approx(float(_collision_by_residue_classes(g)), rel=1e-15, abs=0)
    assert abs(got - 1 / g) < 1e-8  # within about 1e-9 of an ideal family's 1/g


def test_q_star_uses_the_exact_collision_probability() -> None:
    mech = create("olh", epsilon=1.0, domain=20, g=3)
    p, c = mech.p_star, collision_probability(3)
    assert mech.q_star == pytest.approx(c * p + (1 - c) * (1 - p) / 2, rel=1e-15)
    assert mech.q_star != pytest.approx(1 / 3, rel=1e-12, abs=0)  # not the ideal 1/g


def test_v0_is_the_documented_formula_and_oues_at_its_optimum() -> None:
    for eps, g in [(1.0, 3), (2.0, 8), (0.5, 2), (4.0, 56)]:
        e = math.exp(eps)
        assert olh_v0(eps, g) == pytest.approx((e + g - 1) ** 2 / ((e - 1) ** 2 * (g - 1)))
    # At the real g = e^eps + 1 it equals OUE's 4 e^eps / (e^eps - 1)^2: eps = ln 3, g = 4.
    assert olh_v0(math.log(3), 4) == pytest.approx(3.0, rel=1e-12)


def test_hash_range_bounds() -> None:
    for g in (2, 1 << 16):
        assert create("olh", epsilon=1.0, domain=5, g=g).g == g
    for g in (1, 0, (1 << 16) + 1, 2.0, True):
        with pytest.raises(InvalidParameter, match="hash range g"):
            create("olh", epsilon=1.0, domain=5, g=g)


def test_realised_epsilon_is_the_ratio_of_the_thresholds() -> None:
    for eps, g in [(1.0, 3), (2.0, 8), (0.5, 2)]:
        mech = create("olh", epsilon=eps, domain=10, g=g)
        p = Fraction(mech.threshold, 2**64)
        ratio = p * (g - 1) / (1 - p)  # keep the bucket vs report one other bucket
        assert mech.realised_epsilon == pytest.approx(math.log(ratio), rel=1e-12)
        assert mech.realised_epsilon <= eps
        # ... and falls short of it by float rounding only: p = e^eps / (e^eps + g - 1).
        assert mech.realised_epsilon == pytest.approx(eps, rel=1e-9)
        assert mech.p_star == pytest.approx(math.exp(eps) / (math.exp(eps) + g - 1), rel=1e-9)


EDGE_GOOD = [[1, 0, 0], [PRIME - 1, PRIME - 1, 2]]
EDGE_BAD = [
    [0, 5, 1],
    [PRIME, 5, 1],
    [-1, 5, 1],
    [5, -1, 1],
    [5, PRIME, 1],
    [5, 5, -1],
    [5, 5, 3],
]


def test_the_vectorised_decoder_applies_every_range_check() -> None:
    mech = create("olh", epsilon=1.0, domain=10, g=3)
    np.testing.assert_array_equal(mech.decode_many(EDGE_GOOD), np.array(EDGE_GOOD))
    for bad in EDGE_BAD:
        with pytest.raises(InvalidReport):
            mech.check_payload(bad)
        for batch in ([bad], [[1, 0, 0], bad], [[1, 0, 0], bad, [2, 2, 2]]):
            with pytest.raises(
                InvalidReport, match=f"report #{len(batch) - 1 if len(batch) < 3 else 1}"
            ):
                mech.decode_many(batch)
    for wrong_size in ([1, 2], [1, 2, 0, 0]):
        with pytest.raises(InvalidReport, match="three integers"):
            mech.check_payload(wrong_size)


def test_batch_support_counts_are_the_per_report_hashes() -> None:
    mech = create("olh", epsilon=1.0, domain=12, g=5)
    batch = mech.perturb_many(np.arange(12).repeat(10), rng=3)
    expected = np.array(
        [sum(mech.bucket(int(a), int(b), v) == int(y) for a, b, y in batch) for v in range(12)]
    )
    np.testing.assert_array_equal(mech.support_counts(batch), expected)
    for v in range(12):
        np.testing.assert_array_equal(
            mech.supports(batch, v), [mech.bucket(int(a), int(b), v) == y for a, b, y in batch]
        )


def test_the_batch_path_hashes_with_the_family_of_one_device() -> None:
    # epsilon 16: a report keeps its own bucket with probability 1 - 2e-7 (seeded: fixed).
    mech = create("olh", epsilon=16.0, domain=50, g=7)
    values = np.arange(50).repeat(4)
    batch = mech.perturb_many(values, rng=11)
    assert ((batch[:, 0] >= 1) & (batch[:, 0] < PRIME)).all()
    assert ((batch[:, 1] >= 0) & (batch[:, 1] < PRIME)).all()
    hashed = [
        mech.bucket(int(a), int(b), int(x)) for (a, b, _), x in zip(batch, values, strict=True)
    ]
    np.testing.assert_array_equal(batch[:, 2], hashed)


def test_output_distribution_is_over_valid_distinct_reports() -> None:
    # Every key is a report the device can send: integer seeds a in [1, PRIME), b in [0, PRIME)
    # and a bucket in [0, g); 300 distinct seeds (the listed outputs are not all of them).
    mech = create("olh", epsilon=1.0, domain=5, g=3)
    dist = mech.output_distribution(2)
    keys = [cast(tuple[int, int, int], key) for key in dist]
    assert len({(a, b) for a, b, _ in keys}) == 300
    for a, b, y in keys:
        assert all(type(v) is int for v in (a, b, y))
        assert 1 <= a < PRIME and 0 <= b < PRIME and 0 <= y < mech.params()["g"]
    assert 0 < sum(dist.values()) <= 1


class _ForcedWords(np.random.Generator):
    """A real generator (PCG64) whose ``bytes`` returns the given 64-bit words instead.

    A device report is a pure function of the words of its one draw; with words of our choice
    the exact report is known, and any further word would come from the PCG64 underneath
    (its state then moves).
    """

    def __init__(self, words: list[int]) -> None:
        super().__init__(np.random.PCG64(2026))
        self.words = list(words)

    def bytes(self, length: int) -> bytes:
        count = length // 8
        assert length == 8 * count and count <= len(self.words)
        out = b"".join(w.to_bytes(8, "little") for w in self.words[:count])
        del self.words[:count]
        return out


def _expected_report(mech, index: int, words: list[int]) -> list[int]:
    """[a, b, y] from the four words, written from the documented family and k-RR."""
    g = mech.g
    w_a, w_b, w_other, w_keep = words
    a = 1 + w_a % (PRIME - 1)
    b = w_b % PRIME
    h = ((a * index + b) % PRIME) % g
    other = w_other % (g - 1)
    other += other >= h  # the g - 1 buckets other than h
    return [a, b, h if w_keep < mech.threshold else other]


# Words below every rejection limit of their range (2**64 - 2**64 % m > 2**63), at the edges:
# a word of PRIME - 2 gives a = PRIME - 1 (the largest), PRIME - 1 gives a = 1 again, and
# b's word has a non-zero low byte (bytes 8 to 15 of the draw are b's alone).
FORCED = [
    [PRIME - 2, PRIME - 1, 0, 0],
    [PRIME - 1, 12345, 5, 2**63],
    [0, (PRIME << 20) + 7, 2**40 + 3, 2**64 - 1],
    [(PRIME - 1) * 1000 + 17, 255, 2**62, 1],
]


@pytest.mark.parametrize("words", FORCED)
def test_a_device_report_is_exactly_its_four_words(words: list[int]) -> None:
    # The device path maps its one draw of four words to [a, b, y]: a uniform in [1, PRIME)
    # from word 0, b in [0, PRIME) from word 1, the other bucket from word 2, the coin from
    # word 3. No further word is drawn unless one is rejected (none of these is): the
    # generator's own state does not move. A 72-bit "word" (bytes 0 to 8) or a = PRIME would
    # not be the documented report.
    mech = create("olh", epsilon=1.0, domain=40, g=5)
    for index in (0, 7, 39):
        gen = _ForcedWords(words)
        state = gen.bit_generator.state
        report = mech.perturb_index(index, rng=gen)
        assert report == _expected_report(mech, index, words)
        assert 1 <= report[0] < PRIME and 0 <= report[1] < PRIME
        mech.check_payload(report)
        assert gen.bit_generator.state == state
        assert gen.words == []


def test_a_rejected_word_is_replaced_by_a_fresh_one() -> None:
    # Word 0 at or above the largest multiple of PRIME - 1 below 2**64 is rejected (else a would
    # be biased): a fresh word comes from the generator, and a is still in [1, PRIME).
    mech = create("olh", epsilon=1.0, domain=40, g=5)
    limit = 2**64 - 2**64 % (PRIME - 1)
    gen = _ForcedWords([limit, 3, 4, 0])
    state = gen.bit_generator.state
    report = mech.perturb_index(3, rng=gen)
    fresh = np.random.Generator(np.random.PCG64(2026)).bit_generator.random_raw()
    assert fresh < limit  # (PCG64(2026)'s first word is accepted)
    assert report[0] == 1 + int(fresh) % (PRIME - 1)
    assert gen.bit_generator.state != state
