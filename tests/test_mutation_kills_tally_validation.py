"""Boundary cases of the tally and the shared argument checks (issue 21: mutation survivors).

Each test states a documented rule at its edge: the largest accepted value and the smallest
refused one, so an off-by-one or a flipped comparison in the check fails here.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import numpy as np
import pytest

from client_sdk.errors import InvalidParameter, ValueNotInDomain
from client_sdk.mechanisms import Tally
from client_sdk.mechanisms.validation import (
    MAX_EPSILON,
    MAX_LABEL_LENGTH,
    check_domain,
    check_epsilon,
    value_error,
)


def test_epsilon_bounds_are_inclusive_at_the_top_only() -> None:
    assert check_epsilon(MAX_EPSILON) == MAX_EPSILON
    assert check_epsilon(1) == 1.0 and isinstance(check_epsilon(1), float)
    assert check_epsilon(1e-9) == 1e-9
    with pytest.raises(InvalidParameter, match="<= 16"):
        check_epsilon(np.nextafter(MAX_EPSILON, np.inf))
    with pytest.raises(InvalidParameter, match="> 0"):
        check_epsilon(0.0)
    with pytest.raises(InvalidParameter, match="> 0"):
        check_epsilon(-1e-300)


def test_domain_size_bounds_are_inclusive() -> None:
    assert check_domain(2, max_k=2, mechanism="m") == ("0", "1")
    assert check_domain(["a", "b", "c"], max_k=3, mechanism="m") == ("a", "b", "c")
    with pytest.raises(InvalidParameter, match="at most 3 domain values, got 4"):
        check_domain(4, max_k=3, mechanism="m")
    with pytest.raises(InvalidParameter, match="at most 2 domain values, got 3"):
        check_domain(["a", "b", "c"], max_k=2, mechanism="m")
    for bad in (0, -3, 1, True, False):
        with pytest.raises(InvalidParameter):
            check_domain(bad, max_k=10, mechanism="m")


def test_domain_label_length_limit_is_inclusive() -> None:
    longest = "x" * MAX_LABEL_LENGTH
    assert check_domain(["a", longest], max_k=10, mechanism="m") == ("a", longest)
    with pytest.raises(InvalidParameter, match=f"is {MAX_LABEL_LENGTH + 1} characters"):
        check_domain(["a", longest + "x"], max_k=10, mechanism="m")


def test_duplicate_label_is_named() -> None:
    with pytest.raises(InvalidParameter, match="'b' appears more than once"):
        check_domain(["a", "b", "c", "b"], max_k=10, mechanism="m")
    with pytest.raises(InvalidParameter, match="label #0"):
        check_domain([None, "b"], max_k=10, mechanism="m")


def test_value_error_suggests_a_close_label_only_for_strings() -> None:
    err = value_error("chrme", ["chrome", "firefox"])
    assert isinstance(err, ValueNotInDomain)
    assert "did you mean 'chrome'?" in str(err) and "2 values" in str(err)
    assert "did you mean" not in str(value_error("zzzzzz", ["chrome", "firefox"]))
    assert "did you mean" not in str(value_error(3, ["3", "4"]))
    assert "in the window" in str(value_error("a", ["b", "c"], where="the window"))


def test_tally_refuses_each_broken_rule() -> None:
    Tally(0, np.zeros(2, dtype=np.int64))  # the smallest valid tally
    Tally(3, np.array([3, 0]))  # a count may equal n
    for n, support in [
        (1, np.array([1])),  # one count
        (1, np.zeros((2, 2))),  # not 1-D
        (-1, np.zeros(2)),
        (True, np.zeros(2)),
        (1.5, np.zeros(2)),
        (2, np.array([3, 0])),  # a count above n
        (2, np.array([-1, 0])),
    ]:
        with pytest.raises(InvalidParameter):
            Tally(n, support)


def test_tally_is_frozen_hashable_and_round_trips() -> None:
    a = Tally(4, [1, 2, 3])
    assert isinstance(a.n, int) and a.support.dtype == np.int64 and a.k == 3
    with pytest.raises(ValueError):
        a.support[0] = 4
    b = Tally.from_dict(a.to_dict())
    assert a.to_dict() == {"n": 4, "support": [1, 2, 3]}
    assert b == a and hash(b) == hash(a) and len({a, b}) == 1
    assert a != Tally(4, [1, 2, 4]) and a != Tally(5, [1, 2, 3])
    assert a.__eq__("x") is NotImplemented and a.__add__(1) is NotImplemented
    assert repr(a) == "Tally(n=4, support=[1, 2, 3])"
    assert Tally.empty(3) == Tally(0, [0, 0, 0])
    assert a + Tally(1, [0, 1, 1]) == Tally(5, [1, 3, 4])
    with pytest.raises(InvalidParameter, match="over 3 and 2 values"):
        _ = a + Tally(1, [0, 1])
    for bad in (
        {"n": 1},
        {"support": [0, 0]},
        {"n": "x", "support": [0, 0]},
        {"n": 1, "support": None},
    ):
        with pytest.raises(InvalidParameter, match="not a tally"):
            Tally.from_dict(bad)


def test_a_tally_cannot_be_changed_after_it_is_made() -> None:
    tally = Tally(3, np.array([1, 2, 0]))
    with pytest.raises(FrozenInstanceError):
        tally.n = 4  # type: ignore[misc]
