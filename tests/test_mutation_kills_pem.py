"""Tests that kill surviving mutants of ``client_sdk/mechanisms/openended/pem.py`` (issue 21).

Exact checks of the discovery mechanism's contract: the level of every report is counted in its
own level's block (both oracles), the report size, the strict parser's level range, the
per-report parser (taken when the vectorised one declines) and an empty batch's shape.
"""

from __future__ import annotations

import numpy as np
import pytest

from client_sdk.errors import InvalidReport
from client_sdk.mechanisms import create


class _Int(int):
    """A valid integer the vectorised parser declines (its type is not exactly ``int``)."""


@pytest.mark.parametrize("oracle", ["cms", "hcms"])
def test_each_level_block_counts_the_reports_of_that_level(oracle: str) -> None:
    mech = create("pem", epsilon=1.0, max_length=4, width=8, depth=2, oracle=oracle)
    batch = mech.perturb_many(["abcd", "xy", "z"] * 200, rng=3)
    tally = mech.tally(batch)
    levels = batch[:, 0].astype(np.int64)
    for t, sk in enumerate(mech.sketches):
        assert sk.reports_in(mech.block(tally.counts, t)) == int(np.sum(levels == t))
        # the same block as the level's own reports tallied alone
        assert np.array_equal(mech.block(tally.counts, t), sk.block_counts(batch[levels == t, 1:]))


@pytest.mark.parametrize("oracle", ["cms", "hcms"])
def test_report_bits_add_the_level_field(oracle: str) -> None:
    mech = create("pem", epsilon=1.0, max_length=8, width=64, depth=4, oracle=oracle)
    assert mech.report_bits == mech.sketches[0].report_bits + 3  # levels 0..7: 3 bits
    one = create("pem", epsilon=1.0, max_length=1, width=64, depth=4, oracle=oracle)
    assert one.report_bits == one.sketches[0].report_bits  # a single level costs nothing


@pytest.mark.parametrize("oracle", ["cms", "hcms"])
def test_the_level_must_lie_in_range(oracle: str) -> None:
    mech = create("pem", epsilon=1.0, max_length=3, width=8, depth=2, oracle=oracle)
    good = mech.encode_many(mech.perturb_many(["abc"] * 60, rng=1))
    for p in good:
        assert mech.check_payload(p) == p
    assert any(p[0] == 0 for p in good) and any(p[0] == 2 for p in good)
    for level in (-1, 3, True):
        with pytest.raises(InvalidReport, match="level"):
            mech.check_payload([level, *good[0][1:]])


@pytest.mark.parametrize("oracle", ["cms", "hcms"])
def test_payloads_the_vectorised_parser_declines_decode_one_by_one(oracle: str) -> None:
    """A row of an ``int`` subclass is a valid report that only the per-report parser takes:
    the batch array and the tally are the same as from plain payloads."""
    mech = create("pem", epsilon=1.0, max_length=3, width=8, depth=2, oracle=oracle)
    batch = mech.perturb_many(["abc", "d"] * 50, rng=2)
    plain = mech.encode_many(batch)
    odd = [[p[0], _Int(p[1]), *p[2:]] for p in plain]
    assert mech._decode_fast(odd) is None
    assert np.array_equal(mech.decode_many(odd), batch)
    assert mech.tally(odd) == mech.tally(plain) == mech.tally(batch)


@pytest.mark.parametrize(("oracle", "columns"), [("cms", 1 + 2 + 2), ("hcms", 4)])
def test_an_empty_batch_has_the_layout_of_a_full_one(oracle: str, columns: int) -> None:
    """cms: the level, two row bytes and 16 bits in 2 bytes; hcms: level, row, column, bit."""
    mech = create("pem", epsilon=1.0, max_length=3, width=16, depth=2, oracle=oracle)
    empty = mech.perturb_many([], rng=1)
    assert empty.shape == (0, columns)
    assert empty.shape[1] == mech.perturb_many(["a"], rng=1).shape[1]
    assert mech.tally(empty) == mech.empty_tally()
