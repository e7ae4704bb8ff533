"""Exact tests of how random words become events: no sampling, every outcome checked.

A Bernoulli event of probability ``T / 2**64`` is realised from 32-bit words: the high word
decides unless it ties with the threshold's high word, and only then a fresh low word decides.
A tie has probability 2**-32, so no statistical test ever sees one; the fake bit generator here
hands out chosen words (the one fault that cannot be caused otherwise) so each branch is checked
word for word against the 64-bit comparison it stands for.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import randomness
from client_sdk.mechanisms.randomness import (
    SCALE,
    as_generator,
    below,
    bernoulli,
    exact_threshold,
    largest_threshold,
    log_ratio,
    randbelow,
    ratio_at_most,
    require_generator,
    u32_array,
    u64,
)

HALF = 1 << 32


class ChosenWords:
    """A bit generator whose ``random_raw`` returns the 64-bit words it was given, in order."""

    def __init__(self, words: list[int]) -> None:
        self.words = list(words)
        self.calls: list[int | None] = []

    def random_raw(self, size: int | None = None) -> np.ndarray | int:
        self.calls.append(size)
        if size is None:
            return self.words.pop(0)
        taken, self.words = self.words[:size], self.words[size:]
        assert len(taken) == size, "the code asked for more words than the test planned"
        return np.array(taken, dtype=np.uint64)


class FakeGenerator:
    def __init__(self, words: list[int]) -> None:
        self.bit_generator = ChosenWords(words)


def _pack(lo: int, hi: int) -> int:
    """The 64-bit raw word whose two little-endian 32-bit halves are ``lo`` then ``hi``."""
    return lo | (hi << 32)


def test_u32_array_splits_raw_words_little_endian() -> None:
    gen = FakeGenerator([_pack(1, 2), _pack(3, 4)])
    assert u32_array(gen, 3).tolist() == [1, 2, 3]  # type: ignore[arg-type]
    assert gen.bit_generator.calls == [2]
    gen = FakeGenerator([_pack(5, 6), _pack(7, 8)])
    assert u32_array(gen, (2, 2)).tolist() == [[5, 6], [7, 8]]  # type: ignore[arg-type]


def test_below_uses_the_low_word_only_on_a_tie() -> None:
    t_high, t_low = 0x9000_0000, 0x0000_1000
    threshold = t_high * HALF + t_low
    high = np.array([t_high - 1, t_high, t_high + 1, t_high, t_high, 0, HALF - 1], dtype=np.uint32)
    # Three ties, at positions 1, 3 and 4: their low words are below, equal to, above t_low.
    lows = [t_low - 1, t_low, t_low + 1]
    gen = FakeGenerator([_pack(lows[0], lows[1]), _pack(lows[2], 0)])
    out = below(gen, high, threshold)  # type: ignore[arg-type]
    low_words = [0, lows[0], 0, lows[1], lows[2], 0, 0]
    words = [h * HALF + lo for h, lo in zip(high.tolist(), low_words, strict=True)]
    assert out.tolist() == [u < threshold for u in words]
    assert out.tolist() == [True, True, False, False, False, True, False]
    assert gen.bit_generator.calls == [2], "one draw of low words, only for the three ties"


def test_below_draws_nothing_without_a_tie() -> None:
    gen = FakeGenerator([])
    high = np.array([0, 4, 6, HALF - 1], dtype=np.uint32)
    out = below(gen, high, 5 * HALF + 3)  # type: ignore[arg-type]
    assert out.tolist() == [True, True, False, False]
    assert gen.bit_generator.calls == []


@pytest.mark.parametrize("t_low", [0, 1, HALF - 1])
def test_tie_break_realises_the_64_bit_comparison_at_the_edges(t_low: int) -> None:
    t_high = 7
    threshold = t_high * HALF + t_low
    for low in sorted({0, max(t_low - 1, 0), t_low, min(t_low + 1, HALF - 1), HALF - 1}):
        gen = FakeGenerator([_pack(low, 0)])
        out = below(gen, np.array([t_high], dtype=np.uint32), threshold)  # type: ignore[arg-type]
        assert out.tolist() == [t_high * HALF + low < threshold], (t_low, low)


def test_bernoulli_is_the_64_bit_comparison_word_for_word() -> None:
    rng = np.random.default_rng(2021)
    threshold = int(rng.integers(1, 2**62)) * 3 + 1
    t_high = threshold >> 32
    highs = rng.integers(0, HALF, size=40, dtype=np.uint64)
    highs[::4] = t_high  # force ten ties
    lows = rng.integers(0, HALF, size=10, dtype=np.uint64)
    lows[0] = threshold % HALF  # and one exact tie of the low word as well
    words = [int(a) | (int(b) << 32) for a, b in zip(highs[0::2], highs[1::2], strict=True)]
    words += [int(a) | (int(b) << 32) for a, b in zip(lows[0::2], lows[1::2], strict=True)]
    gen = FakeGenerator(words)
    out = bernoulli(gen, 40, threshold)  # type: ignore[arg-type]
    low_iter: Iterator[int] = iter(lows.tolist())
    expected = []
    for h in highs.tolist():
        u = h * HALF + (next(low_iter) if h == t_high else 0)
        expected.append(u < threshold if h == t_high else h < t_high)
    assert out.tolist() == expected
    assert gen.bit_generator.words == []


@pytest.mark.parametrize("threshold", [0, SCALE, -1, SCALE + 1])
def test_below_refuses_thresholds_outside_the_open_range(threshold: int) -> None:
    with pytest.raises(InvalidParameter, match="threshold"):
        below(FakeGenerator([]), np.zeros(1, dtype=np.uint32), threshold)  # type: ignore[arg-type]


def test_below_accepts_the_extreme_thresholds() -> None:
    high = np.array([0, HALF - 1], dtype=np.uint32)
    gen = FakeGenerator([_pack(0, 0)])
    assert below(gen, high, 1).tolist() == [True, False]  # type: ignore[arg-type]
    gen = FakeGenerator([_pack(HALF - 2, 0)])
    assert below(gen, high, SCALE - 1).tolist() == [True, True]  # type: ignore[arg-type]


def test_u64_is_one_raw_word_or_eight_os_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = FakeGenerator([0xDEAD_BEEF_0123_4567])
    assert u64(gen) == 0xDEAD_BEEF_0123_4567  # type: ignore[arg-type]
    monkeypatch.setattr(randomness.os, "urandom", lambda n: bytes(range(1, n + 1)))
    assert u64(None) == int.from_bytes(bytes(range(1, 9)), "little")


def test_os_randbelow_rejects_the_biased_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    # m = 3: 2**32 % 3 == 1, so the single word 2**32 - 1 must be rejected, 2**32 - 2 kept.
    drawn = [HALF - 1, HALF - 2]
    monkeypatch.setattr(randomness.os, "urandom", lambda n: drawn.pop(0).to_bytes(4, "little"))
    assert randbelow(3, None) == (HALF - 2) % 3
    assert drawn == []
    drawn = [HALF - 3]  # below the limit: kept at once
    assert randbelow(3, None) == (HALF - 3) % 3


@pytest.mark.parametrize("m", [2, 3, 5])
def test_randbelow_is_zero_for_one_value_and_takes_every_value_otherwise(m: int) -> None:
    # 200 draws miss one of m <= 5 values with probability below 5 * 0.8**200 = 2e-19.
    assert randbelow(1, None) == 0 and randbelow(0, None) == 0
    gen = np.random.default_rng(5)
    assert {randbelow(m, gen) for _ in range(200)} == set(range(m))
    assert {randbelow(m, None) for _ in range(200)} == set(range(m))


def test_as_generator_accepts_only_none_a_seed_or_a_generator() -> None:
    assert as_generator(None) is None
    g = np.random.default_rng(1)
    assert as_generator(g) is g
    a, b = as_generator(42), as_generator(42)
    assert a is not None and b is not None
    assert a.integers(0, 2**62) == b.integers(0, 2**62)
    for bad in (True, 1.5, "7", np.random.RandomState(1)):
        with pytest.raises(InvalidParameter, match="rng must be None"):
            as_generator(bad)  # type: ignore[arg-type]


def test_require_generator_seeds_from_the_os_when_none() -> None:
    g = np.random.default_rng(3)
    assert require_generator(g) is g
    a, b = require_generator(None), require_generator(None)
    assert isinstance(a, np.random.Generator) and isinstance(b, np.random.Generator)
    # Two OS-seeded generators agree on 8 raw words with probability 2**-512.
    assert a.bit_generator.random_raw(8).tolist() != b.bit_generator.random_raw(8).tolist()


def test_exact_threshold_is_the_floor_of_the_binary_value() -> None:
    assert exact_threshold(0.5) == SCALE // 2
    assert exact_threshold(0.1) == (SCALE * 3602879701896397) // (1 << 55)
    assert exact_threshold(0.0) == 0 and exact_threshold(-1.0) == 0
    assert exact_threshold(1.0) == SCALE and exact_threshold(2.0) == SCALE


def test_ratio_at_most_keeps_a_margin_below_e_to_the_epsilon() -> None:
    import math
    from fractions import Fraction

    bound = Fraction(math.exp(1.0)) * (1 - Fraction(1, 1 << 50))
    num = bound.numerator * 10
    den = bound.denominator * 10
    assert ratio_at_most(num, den, 1.0)
    assert not ratio_at_most(num + 1, den, 1.0)
    assert ratio_at_most(1, 1, 0.0) is False  # the margin: even equality at epsilon 0 fails
    assert ratio_at_most(1, 2, 0.0)


def test_largest_threshold_finds_the_exact_edge_from_either_side() -> None:
    for edge in (1, 2, 3, 1000, SCALE // 3, SCALE - 2):
        for guess in (0.0, 1e-19, 0.25, 0.5, 0.999, 1.0):
            assert largest_threshold(lambda t, e=edge: t <= e, guess) == edge, (edge, guess)
    with pytest.raises(InvalidParameter, match="no sampling threshold"):
        largest_threshold(lambda t: False, 0.5)
    # Threshold 0 (probability 0) may pass a ratio check but is never a sampling threshold.
    for guess in (0.0, 0.5):
        with pytest.raises(InvalidParameter, match="no sampling threshold"):
            largest_threshold(lambda t: t <= 0, guess)


def test_log_ratio_is_accurate_for_huge_integers() -> None:
    import math

    assert log_ratio(3 * SCALE, SCALE) == pytest.approx(math.log(3), rel=1e-15)
    assert log_ratio(SCALE + 1, SCALE) == pytest.approx(1 / SCALE, rel=1e-9)
    assert log_ratio(7, 7) == 0.0


def test_os_is_the_default_source() -> None:
    # Not seeded by anything a caller can see: two fresh draws differ (probability 2**-64 fails).
    assert u64(None) != u64(None)
    assert os.urandom is randomness.os.urandom
