"""``NumericTally``: exact, checked, mergeable integer sums (issue 21: mutation testing)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric import NumericTally


def test_empty_is_the_neutral_element() -> None:
    empty = NumericTally.empty(3)
    assert empty.n == 0 and empty.values == (0, 0, 0)
    t = NumericTally(4, (1, 0, 7))
    assert t + empty == t and empty + t == t
    assert NumericTally.empty(0) == NumericTally(0, ())


def test_addition_adds_counts_and_sums_exactly() -> None:
    a = NumericTally(3, (2, 10**30))
    b = NumericTally(5, (0, 10**30 + 1))
    assert a + b == NumericTally(8, (2, 2 * 10**30 + 1))
    assert (a + b).values == (2, 2 * 10**30 + 1)
    assert type((a + b).n) is int and all(type(v) is int for v in (a + b).values)
    assert a + b == b + a
    assert a.__add__(3) is NotImplemented


def test_tallies_of_different_layouts_do_not_add() -> None:
    short, long = NumericTally(1, (1,)), NumericTally(1, (1, 2))
    for x, y in ((short, long), (long, short)):
        with pytest.raises(InvalidParameter, match="cannot add numeric tallies of"):
            x + y


@pytest.mark.parametrize(
    "n, values",
    [
        (-1, (0,)),
        (1.0, (0,)),
        (True, (0,)),
        ("1", (0,)),
        (1, (-1,)),
        (1, (0, -5)),
        (1, (True,)),
        (1, (1.5,)),
        (1, ("2",)),
        (2, (1, False)),
    ],
)
def test_bad_counts_and_sums_are_refused(n: object, values: tuple) -> None:
    with pytest.raises(InvalidParameter):
        NumericTally(n, values)  # type: ignore[arg-type]


def test_zero_is_a_valid_count_and_sum() -> None:
    t = NumericTally(0, (0, 0))
    assert t.n == 0 and t.values == (0, 0)
    assert NumericTally(2, [1, 0]).values == (1, 0)  # any sequence, kept as a tuple


def test_a_tally_is_frozen() -> None:
    t = NumericTally(1, (1,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.n = 2  # type: ignore[misc]


def test_dict_round_trip_and_refusals() -> None:
    t = NumericTally(7, (3, 2**70))
    assert NumericTally.from_dict(json.loads(json.dumps(t.to_dict()))) == t
    assert t.to_dict() == {"n": 7, "values": [3, 2**70]}
    assert t.vector() == [3, 2**70]
    assert NumericTally.from_dict({"n": 1, "values": (4,)}) == NumericTally(1, (4,))
    for bad in ({"n": 1}, {"values": [1]}, None, {"n": 1, "values": "12"}, {"n": 1, "values": 3}):
        with pytest.raises(InvalidParameter):
            NumericTally.from_dict(bad)  # type: ignore[arg-type]
