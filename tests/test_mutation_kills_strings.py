"""Tests that kill surviving mutants of ``client_sdk/mechanisms/openended/strings.py`` (issue 21).

The normalisation's documented limits, at their boundaries, and the error message's shortening
of long values (at most 40 characters shown).
"""

from __future__ import annotations

import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.openended.strings import (
    MAX_LENGTH_LIMIT,
    ValueTooLong,
    check_max_length,
    normalise,
)


def test_max_length_is_one_to_sixty_four_bytes() -> None:
    assert MAX_LENGTH_LIMIT == 64
    for ok in (1, 2, 63, 64):
        assert check_max_length(ok) == ok
    for bad in (0, -1, 65, 1000, True, 8.0, "8", None):
        with pytest.raises(InvalidParameter, match="max_length"):
            check_max_length(bad)


def test_a_value_of_exactly_max_length_bytes_is_kept() -> None:
    assert normalise("abcd", 4) == b"abcd"
    assert normalise("a", 4) == b"a"
    assert normalise("é" * 32, 64) == "é".encode() * 32
    with pytest.raises(ValueTooLong, match="5 bytes"):
        normalise("abcde", 4)


def test_the_error_shows_at_most_forty_characters_of_the_value() -> None:
    forty = "x" * 40
    with pytest.raises(ValueTooLong) as exc:
        normalise(forty, 8)
    assert f"value {forty!r} is 40 bytes" in str(exc.value)
    for length in (41, 42):
        long = "y" * 37 + "z" * (length - 37)
        with pytest.raises(ValueTooLong) as exc:
            normalise(long, 8)
        assert f"value {'y' * 37 + '...'!r} is {length} bytes" in str(exc.value)
    long = "y" * 37 + "z" * 5
    with pytest.raises(ValueTooLong) as exc:
        normalise(long, 8)
    assert f"value {'y' * 37 + '...'!r} is 42 bytes" in str(exc.value)
