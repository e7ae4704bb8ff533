"""Exact tests of the branch-free helpers of the one-device path (issue 21: mutation survivors).

Every coin of a device report goes through :func:`coin`, :func:`coins_below` or
:func:`lane_coin`, and every uniform choice through :func:`uniform_below`; each is checked here
word for word against the comparison it stands for, at the edges (``u = T - 1`` and ``u = T``)
where an off-by-one would change a privacy ratio, with chosen words, not sampling.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from client_sdk.mechanisms import randomness
from client_sdk.mechanisms.randomness import (
    SCALE,
    at_least,
    coin,
    coins_below,
    covering_epsilon,
    draw,
    draw_lanes,
    exact_threshold,
    lane_coin,
    lane_offsets,
    log_ratio,
    pack_coins,
    select,
    uniform_below,
    word,
    words,
)

EDGES = [0, 1, 2, 1 << 32, (1 << 63) - 1, 1 << 63, SCALE - 2, SCALE - 1]
THRESHOLDS = [1, 2, 1 << 32, 1 << 63, (1 << 63) + 12345, SCALE - 1]


def _raw(values: list[int]) -> bytes:
    return b"".join(v.to_bytes(8, "little") for v in values)


def _lanes(values: list[int]) -> bytearray:
    """What :func:`draw_lanes` returns when the words drawn are ``values``."""
    out = bytearray()
    for v in values:
        out += v.to_bytes(8, "little") + b"\x01"
    return out + b"\x01"


def test_at_least_and_select_are_the_comparison_and_the_choice() -> None:
    for a in EDGES:
        for b in EDGES:
            assert at_least(a, b) == int(a >= b), (a, b)
    assert select(1, 7, 9) == 7 and select(0, 7, 9) == 9


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_coin_is_u_below_the_threshold_at_its_edge(threshold: int) -> None:
    values = sorted({0, threshold - 1, threshold, min(threshold + 1, SCALE - 1), SCALE - 1})
    raw = _raw(values)
    assert [coin(raw, i, threshold) for i in range(len(values))] == [
        int(v < threshold) for v in values
    ]
    lanes = _lanes(values)
    expected = bytearray(int(v < threshold) for v in values)
    assert coins_below(lanes, len(values), lane_offsets(len(values), threshold)) == expected
    assert [lane_coin(lanes, i, threshold) for i in range(len(values))] == list(expected)
    # Only the first `count` lanes are decided.
    assert coins_below(lanes, 2, lane_offsets(2, threshold)) == expected[:2]


def test_lane_offsets_place_the_complement_in_each_72_bit_lane() -> None:
    t = (1 << 63) + 5
    assert lane_offsets(0, t) == 0
    assert lane_offsets(3, t) == sum((SCALE - t) << (72 * i) for i in range(3))
    assert lane_offsets(1, t) == SCALE - t


def test_draw_lanes_marks_every_lane_and_the_top(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = np.random.default_rng(5)
    for count in (1, 3, 17):
        lanes = draw_lanes(count, gen)
        assert len(lanes) == 9 * count + 1
        assert lanes[8::9] == b"\x01" * count and lanes[-1] == 1
    asked: list[int] = []

    def fake(n: int) -> bytes:
        asked.append(n)
        return b"\xff" * n

    monkeypatch.setattr(randomness.os, "urandom", fake)
    lanes = draw_lanes(4, None)
    assert asked == [37] and lanes == _lanes([SCALE - 1] * 4)


def test_pack_coins_is_little_endian_bits_in_whole_bytes() -> None:
    assert pack_coins(bytearray([1])) == b"\x01"
    assert pack_coins(bytearray([0, 1, 1])) == b"\x06"
    assert pack_coins(bytearray([0] * 8)) == b"\x00"
    assert pack_coins(bytearray([1, 0, 0, 0, 0, 0, 0, 0, 1])) == b"\x01\x01"
    assert pack_coins(bytearray([0] * 16 + [1])) == b"\x00\x00\x01"


def test_words_are_the_draws_little_endian_64_bit_words() -> None:
    gen = np.random.default_rng(9)
    raw = draw(3, np.random.default_rng(9))
    assert len(raw) == 24
    assert words(3, gen) == tuple(
        int.from_bytes(raw[8 * i : 8 * i + 8], "little") for i in range(3)
    )
    assert word(_raw([5, SCALE - 1]), 1) == SCALE - 1 and word(_raw([5, 6]), 0) == 5
    assert len(draw(2, None)) == 16


@pytest.mark.parametrize("m", [2, 3, 7, 1000, (1 << 63) + 1])
def test_uniform_below_keeps_words_under_the_last_multiple_and_redraws_the_rest(m: int) -> None:
    limit = SCALE - SCALE % m  # the largest multiple of m not above 2**64
    assert uniform_below(m, 0, None) == 0
    assert uniform_below(m, limit - 1, None) == (limit - 1) % m
    if limit < SCALE:
        # The word at the limit is in the biased tail: fresh words decide, the first one
        # below the limit.
        reference = np.random.default_rng(3)
        fresh = int(reference.bit_generator.random_raw())
        while fresh >= limit:
            fresh = int(reference.bit_generator.random_raw())
        assert uniform_below(m, limit, np.random.default_rng(3)) == fresh % m
        assert uniform_below(m, SCALE - 1, np.random.default_rng(3)) == fresh % m


def test_uniform_below_with_a_power_of_two_uses_every_word() -> None:
    assert uniform_below(4, SCALE - 1, None) == 3  # no tail: never redrawn


@pytest.mark.parametrize(
    ("num", "den"),
    [
        (3, 1),
        (7, 5),
        (SCALE - 1, 1),
        ((1 << 63) + (1 << 11), (1 << 63) - (1 << 11)),
        (10**40 + 1, 10**40),
        (2, 2),
    ],
)
def test_covering_epsilon_is_the_smallest_float_covering_the_ratio(num: int, den: int) -> None:
    eps = covering_epsilon(num, den)
    assert Fraction(math.exp(eps)) >= Fraction(num, den)
    assert eps >= log_ratio(num, den)
    below = math.nextafter(eps, -math.inf)
    assert Fraction(math.exp(below)) < Fraction(num, den) or below < log_ratio(num, den)


@pytest.mark.parametrize(
    ("name", "p", "k"),
    [("rr", 0.5 + 1e-12, 2), ("sue", 0.5 + 1e-12, 4)],
)
def test_a_keep_probability_just_above_one_half_gets_a_covering_epsilon(
    name: str, p: float, k: int
) -> None:
    # The stated epsilon of a p= mechanism is covering_epsilon of its thresholds; for p within
    # a few floats of 1/2 the old one-float-at-a-time search ran for ~2**52 steps (a hang).
    from client_sdk.mechanisms import create

    mech = create(name, p=p, domain=k)
    assert 0 < mech.epsilon < 1e-10
    assert mech.epsilon >= mech.realised_epsilon


def test_the_covering_epsilon_one_float_above_one_half_is_found_at_once() -> None:
    # p = 1/2 + 1 ulp implies epsilon ~ 4e-16, now below MIN_EPSILON, so rr refuses it before
    # its thresholds; the search itself is checked here (it used to take ~2**52 steps).
    from client_sdk.errors import InvalidParameter
    from client_sdk.mechanisms import create

    t = exact_threshold(math.nextafter(0.5, 1))
    eps = covering_epsilon(t, SCALE - t)
    assert 0 < eps < 1e-14 and eps >= log_ratio(t, SCALE - t)
    with pytest.raises(InvalidParameter, match="below the smallest epsilon"):
        create("rr", p=math.nextafter(0.5, 1), domain=2)
