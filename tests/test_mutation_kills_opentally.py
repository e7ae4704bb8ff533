"""Tests that kill surviving mutants of ``client_sdk/mechanisms/openended/tally.py`` (issue 21).

``SketchTally``: immutable, its checks at their boundaries, exact addition, and the JSON form.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.openended.tally import SketchTally


def test_a_tally_is_frozen() -> None:
    t = SketchTally(2, [1, 2])
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.n = 3  # type: ignore[misc]
    with pytest.raises(ValueError):
        t.counts[0] = 0


def test_checks_at_their_boundaries() -> None:
    assert SketchTally(0, [0]).size == 1
    assert SketchTally(1, [1, 0, 1]).vector() == [1, 0, 1]
    assert SketchTally.empty(3) == SketchTally(0, [0, 0, 0])
    for n, counts in (
        (0, []),
        (1, [[1]]),
        (1, 1),
        (-1, [0]),
        (2.5, [0]),
        (True, [0]),
        (1, [2]),
        (1, [-1]),
    ):
        with pytest.raises(InvalidParameter):
            SketchTally(n, counts)  # type: ignore[arg-type]


def test_tallies_add_exactly() -> None:
    a, b = SketchTally(3, [0, 3, 1]), SketchTally(5, [5, 0, 2])
    s = a + b
    assert s.n == 8 and s.vector() == [5, 3, 3]
    assert (a + SketchTally.empty(3)) == a
    with pytest.raises(InvalidParameter, match="cannot add"):
        a + SketchTally(1, [1, 1])  # noqa: B018
    with pytest.raises(TypeError):
        a + 1  # type: ignore[operator]  # noqa: B018
    assert a.__add__(1) is NotImplemented  # type: ignore[operator]


def test_json_form_round_trips_and_refuses_what_it_is_not() -> None:
    t = SketchTally(4, np.array([4, 0, 2]))
    assert t.to_dict() == {"n": 4, "counts": [4, 0, 2]}
    assert SketchTally.from_dict(t.to_dict()) == t
    for bad in ({}, {"n": 1}, {"n": "x", "counts": [0]}, {"n": 1, "counts": None}):
        with pytest.raises(InvalidParameter):
            SketchTally.from_dict(bad)


def test_sizes_must_match_both_ways_and_n_takes_part_in_equality() -> None:
    small, large = SketchTally(2, np.array([1, 1])), SketchTally(2, np.array([1, 1, 0]))
    for a, b in ((small, large), (large, small)):
        with pytest.raises(InvalidParameter):
            a + b
    assert SketchTally(2, np.array([1, 1])) != SketchTally(3, np.array([1, 1]))
    assert SketchTally(3, np.array([1, 1])) != SketchTally(2, np.array([1, 1]))
    assert SketchTally(2, np.array([1, 1])) == SketchTally(2, [1, 1])
