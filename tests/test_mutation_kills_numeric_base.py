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
    assert create("duchi", epsilon=1.0, bounds=(0, 1)).tally_block == _BLOCK
    assert create("square_wave", epsilon=1.0, bounds=(0, 1)).tally_block == _BLOCK


def test_a_tally_over_many_blocks_is_the_sum_of_its_blocks() -> None:
    # A batch longer than one block: the per-block sums are added, none is dropped or repeated.
    mech = create("piecewise", epsilon=2.0, bounds=(0.0, 1.0), grid=1 << 24)
    block = mech.tally_block
    batch = mech.perturb_many(np.linspace(0, 1, 2 * block + 17), rng=4)
    assert mech.tally(batch).values == _exact_sums(mech, batch)
    assert mech.tally(batch).n == batch.size
    with pytest.raises(InvalidParameter):
        mech.check_tally(NumericTally(1, (1,)))
