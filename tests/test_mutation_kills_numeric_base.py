"""The numeric mechanisms' shared device, batch and tally code at its edges (issue 21).

Mutation testing of ``client_sdk/mechanisms/numeric/base.py`` found that the tally's NumPy
blocks of 2**20 reports were not small enough for large grids: Piecewise and Hybrid sum the
squares of their reports in int64, and at ``grid = 2**24`` (outputs near 2**25, squares near
2**50) 10,000 reports near the top already overflowed (a negative sum of squares refused as a
tally, or a wrapped positive one). The block is now bounded by the largest summed term.
"""

from __future__ import annotations

import numpy as np
import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric import NumericTally, create
from client_sdk.mechanisms.numeric.base import _BLOCK


def _exact_sums(mech, batch: np.ndarray) -> tuple[int, ...]:
    """The tally sums computed report by report in Python ints (no overflow possible)."""
    reports = [int(v) for v in batch]
    if mech.name == "piecewise":
        return sum(reports), sum(y * y for y in reports)
    pm = [y for y in reports if y < mech.output_size - 2]
    return len(pm), sum(pm), sum(y * y for y in pm), sum(y == mech.output_size - 1 for y in reports)


@pytest.mark.parametrize("name", ["piecewise", "hybrid"])
def test_sums_of_squares_are_exact_on_the_largest_grid(name: str) -> None:
    # epsilon 8: nearly every report is in the band at the top of the range, so the squares are
    # near (2 * 2**24)**2 = 2**50 and 40,000 of them sum past 2**63.
    mech = create(name, epsilon=8.0, bounds=(0.0, 1.0), grid=1 << 24)
    batch = mech.perturb_many(np.ones(40_000), rng=1)
    exact = _exact_sums(mech, batch)
    assert max(exact) > 2**63  # the case that overflowed int64
    assert mech.tally(batch).values == exact
    assert mech.tally([int(v) for v in batch[:50]]).values == _exact_sums(mech, batch[:50])


def test_the_tally_block_bounds_every_int64_sum() -> None:
    for name, grid in [("piecewise", 1 << 24), ("hybrid", 1 << 20), ("duchi", 1 << 24)]:
        mech = create(name, epsilon=1.0, bounds=(0.0, 1.0), grid=grid)
        block = mech.tally_block
        assert 1 <= block <= _BLOCK
        assert block * mech._largest_tally_term() < 2**63
    # Sums of reports or counts (duchi, square_wave) keep the documented 2**20.
    assert _BLOCK == 1 << 20
    assert create("duchi", epsilon=1.0, bounds=(0, 1)).tally_block == 1 << 20
    assert create("square_wave", epsilon=1.0, bounds=(0, 1)).tally_block == 1 << 20


def test_a_block_of_largest_reports_stays_below_two_to_the_63() -> None:
    # A grid whose largest Piecewise report is 2**22: its square is 2**44, so 2**19 of them sum
    # to exactly 2**63, one past int64. The block must hold at most 2**19 - 1 of them.
    mech = create("piecewise", epsilon=16.0, bounds=(0.0, 1.0), grid=4_192_898)
    top = mech.output_size - 1
    assert top == 2**22
    assert mech.tally_block == 2**19 - 1
    batch = np.full(2**19, top, dtype=np.int64)
    assert mech.tally(batch).values == (2**19 * top, 2**63)


def test_a_tally_over_many_blocks_is_the_sum_of_its_blocks() -> None:
    # A batch longer than one block: the per-block sums are added, none is dropped or repeated.
    mech = create("piecewise", epsilon=2.0, bounds=(0.0, 1.0), grid=1 << 24)
    block = mech.tally_block
    batch = mech.perturb_many(np.linspace(0, 1, 2 * block + 17), rng=4)
    assert mech.tally(batch).values == _exact_sums(mech, batch)
    assert mech.tally(batch).n == batch.size
    with pytest.raises(InvalidParameter):
        mech.check_tally(NumericTally(1, (1,)))


def test_grid_inputs_at_both_ends_are_reported_and_others_refused() -> None:
    mech = create("piecewise", epsilon=1.0, bounds=(0.0, 1.0), grid=16)
    for i in (0, 16):
        assert 0 <= mech.perturb_index(i) < mech.output_size
    for bad in (-1, 17, True, 1.0):
        with pytest.raises(InvalidParameter, match="grid index"):
            mech.perturb_index(bad)  # type: ignore[arg-type]
    batch = mech.perturb_grid_many(np.array([0, 0, 16, 5]), rng=1)
    assert batch.shape == (4,) and batch.min() >= 0 and batch.max() < mech.output_size
    for bad_batch in (np.array([-1, 3]), np.array([0, 17]), np.array([[1]]), np.array([0.5])):
        with pytest.raises(InvalidParameter, match="grid indices"):
            mech.perturb_grid_many(bad_batch, rng=1)


def test_a_batch_tally_refuses_reports_outside_the_output_range() -> None:
    mech = create("duchi", epsilon=1.0, bounds=(0.0, 1.0), grid=16)
    assert mech.tally(np.array([0, 1, 1])).values == (2,)
    for bad in (np.array([2]), np.array([-1, 0]), np.array([[0, 1]]), np.array([0.0, 1.0])):
        with pytest.raises(InvalidParameter, match="batch"):
            mech.tally(bad)


def test_perturb_many_reports_every_value_across_chunks() -> None:
    # More values than one chunk (2**13): every one is reported, in order, by the seeded sampler
    # (epsilon 16 on a grid of 4: nearly every report is in its band, at its own value or
    # above by at most the band width).
    mech = create("piecewise", epsilon=16.0, bounds=(0.0, 4.0), grid=4)
    values = np.tile([0.0, 1.0, 2.0, 3.0, 4.0], 3000)
    batch = mech.perturb_many(values, rng=2)
    assert batch.shape == values.shape
    assert batch.min() >= 0 and batch.max() < mech.output_size
    width = mech.band.width
    inside = (batch >= values) & (batch < values + width)
    assert inside.mean() > 0.99
    assert mech.tally(batch).n == values.size


def test_the_abstract_contract_of_a_numeric_mechanism() -> None:
    # What a new numeric mechanism must define (the module docstring's contract): a subclass
    # missing any of these cannot be instantiated.
    from client_sdk.mechanisms.numeric import NumericMechanism

    assert NumericMechanism.__abstractmethods__ == frozenset(
        {
            "realised_epsilon",
            "output_size",
            "output_weights",
            "_perturb_grid",
            "_perturb_grid_batch",
            "_block_sums",
        }
    )
