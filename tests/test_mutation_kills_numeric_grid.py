"""The input grid of the numeric mechanisms, exactly (issue 21: mutation testing).

``Grid`` clips a device's number into the bounds and rounds it onto ``low + span i / D`` by
randomised rounding: up with probability ``frac(pos)`` exactly (a 64-bit word below
``floor(frac 2**64)`` on one device, a 32-bit word below ``frac 2**32`` in the batch path). The
checks here are exact: given the words, the rounded index is known.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric.grid import (
    DEFAULT_GRID,
    MAX_GRID,
    Grid,
    check_bounds,
    check_grid,
    check_value,
)

# Bounds away from 0 (low = 0 hides a wrong sign or operator on low) and a span of 40.
GRID = Grid((-10.0, 30.0), 8)  # points -10, -5, 0, ..., 30


def test_documented_grid_sizes() -> None:
    assert DEFAULT_GRID == 2**16
    assert MAX_GRID == 2**24
    assert check_grid(2) == 2 and check_grid(MAX_GRID) == MAX_GRID
    for bad in (1, 0, -3, MAX_GRID + 1, 2.0, True):
        with pytest.raises(InvalidParameter):
            check_grid(bad)


def test_bounds_accept_any_finite_span_and_refuse_an_infinite_one() -> None:
    assert check_bounds((0, 1)) == (0.0, 1.0)
    assert check_bounds([-2, 3.5]) == (-2.0, 3.5)
    with pytest.raises(InvalidParameter, match="too far apart"):
        check_bounds((-1e308, 1e308))
    for bad in ((1, 1), (2, 1), (0, math.inf), (0,), "ab", None):
        with pytest.raises(InvalidParameter):
            check_bounds(bad)


def test_bounds_too_close_for_the_grid_are_refused_by_every_numeric_mechanism() -> None:
    # A step below the smallest float made the scale infinite: perturb(0) then raised an
    # OverflowError instead of saying what is wrong with the campaign.
    from client_sdk.mechanisms import NUMERIC_MECHANISMS, create

    with pytest.raises(InvalidParameter, match="too close together for a grid of 2 steps"):
        Grid((-5e-324, 5e-324), 2)
    assert Grid((0.0, 1e-300), 2**16).position(5e-301) == pytest.approx(2**15)
    for name in sorted(NUMERIC_MECHANISMS):
        with pytest.raises(InvalidParameter, match="too close together"):
            create(name, epsilon=1.0, bounds=(-5e-324, 5e-324))


def test_positions_and_values_are_the_affine_map() -> None:
    assert GRID.span == 40.0
    for x, pos in [(-10.0, 0.0), (-5.0, 1.0), (0.0, 2.0), (12.5, 4.5), (30.0, 8.0)]:
        assert GRID.position(x) == pos
        assert GRID.value(pos) == x
    assert GRID.position(-1e9) == 0.0 and GRID.position(1e9) == 8.0
    assert GRID.position(-math.inf) == 0.0 and GRID.position(math.inf) == 8.0
    values = [-1e9, -10.0, -5.0, 0.0, 12.5, 30.0, 1e9, -math.inf, math.inf]
    np.testing.assert_array_equal(
        GRID.positions(values), [0.0, 0.0, 1.0, 2.0, 4.5, 8.0, 8.0, 0.0, 8.0]
    )
    with pytest.raises(InvalidParameter, match="#1 is NaN"):
        GRID.positions([0.0, math.nan])


def test_one_device_rounding_is_exact_given_its_word() -> None:
    # Up iff word < floor(frac * 2**64): never up from a grid point, even with word 0.
    for x in (-5.0, 0.0, 25.0):
        assert GRID.round(x, 0) == GRID.position(x)
        assert GRID.round(x, 2**64 - 1) == GRID.position(x)
    # 12.5 is position 4.5: up for words below 2**63 exactly.
    assert GRID.round(12.5, 2**63 - 1) == 5
    assert GRID.round(12.5, 2**63) == 4
    # Clipped ends, whatever the word.
    assert GRID.round(-20.0, 0) == 0 and GRID.round(31.0, 0) == 8
    assert GRID.round(30.0, 0) == 8
    with pytest.raises(InvalidParameter, match="NaN"):
        GRID.round(math.nan, 0)
    with pytest.raises(InvalidParameter, match="NaN"):
        GRID.round(np.float64("nan"), 0)


@pytest.mark.parametrize("n", [1, 2, 7, 1000])
def test_batch_rounding_is_exact_given_its_words(n: int) -> None:
    # round_many draws ceil(n / 2) 64-bit words, splits them into n 32-bit halves, and rounds
    # position p up iff half < frac(p) * 2**32. Replayed from a twin generator.
    values = np.linspace(-12.0, 31.0, n)
    gen, twin = np.random.default_rng(5), np.random.default_rng(5)
    got = GRID.round_many(values, gen)
    pos = np.clip((values + 10.0) / 5.0, 0.0, 8.0)
    base = np.floor(pos).astype(np.int64)
    halves = twin.bit_generator.random_raw((n + 1) // 2).view(np.uint32)[:n]
    expected = base + (halves < (pos - base) * 2.0**32)
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == np.int64 and got.min() >= 0 and got.max() <= 8
    assert gen.bit_generator.state == twin.bit_generator.state  # no other word drawn


def test_batch_rounding_is_unbiased_at_a_quarter() -> None:
    # Position 4.25 rounds up with probability 1/4: over 40,000 values the share of 5s is
    # within 5 standard errors (sqrt(3/16 / 40000) = 0.0022) of 0.25.
    got = GRID.round_many(np.full(40_000, 11.25), np.random.default_rng(9))
    assert set(np.unique(got)) <= {4, 5}
    assert abs(np.mean(got == 5) - 0.25) < 5 * math.sqrt(0.25 * 0.75 / 40_000)


def test_an_int_beyond_the_float_range_is_clipped_to_the_end_of_its_sign() -> None:
    assert check_value(10**400) == math.inf and check_value(-(10**400)) == -math.inf
    assert GRID.round(10**400) == GRID.size and GRID.round(-(10**400)) == 0
