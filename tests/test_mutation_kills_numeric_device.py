"""The numeric device's exact draws from the OS (issue 21: mutation testing).

``accept_below(u, m)`` keeps the 64-bit word ``u`` only below the largest multiple of ``m`` not
above 2**64 (so ``u % m`` is exactly uniform); ``randbelow`` retries until a word is kept. A
wrong limit biases the draw by at most ``m / 2**64``, which no sample shows: these checks sit on
the limit itself.
"""

from __future__ import annotations

import pytest

from client_sdk.mechanisms.numeric.device import accept_below, four_u64, randbelow, two_u64, u64


@pytest.mark.parametrize("m", [2, 3, 7, 1000, (1 << 63) + 1, (1 << 64) - 1])
def test_accept_below_keeps_exactly_the_words_below_the_largest_multiple(m: int) -> None:
    limit = (1 << 64) - (1 << 64) % m
    assert limit % m == 0 and (1 << 64) - limit < m
    for u in (0, 1, m - 1, m, limit - m, limit - 1):
        if 0 <= u < limit:
            assert accept_below(u, m) == u % m
    for u in range(limit, min(limit + 3, 1 << 64)):
        assert accept_below(u, m) is None


def test_accept_below_for_powers_of_two_never_rejects() -> None:
    for m in (1, 2, 1 << 20, 1 << 63):
        assert accept_below((1 << 64) - 1, m) == ((1 << 64) - 1) % m
        assert accept_below(12345, m) == 12345 % m


def test_words_are_64_bit_integers() -> None:
    draws = [u64() for _ in range(64)] + list(two_u64()) + list(four_u64())
    assert all(type(w) is int and 0 <= w < 1 << 64 for w in draws)
    assert len(two_u64()) == 2 and len(four_u64()) == 4
    # 70 draws of 64 bits: some word has its top bit set (else probability 2**-70).
    assert any(w >= 1 << 63 for w in draws)


@pytest.mark.parametrize("m", [2, 3, 5])
def test_randbelow_returns_every_value_in_range(m: int) -> None:
    # 400 draws: a value is missing with probability m (1 - 1/m)**400 < 1e-69.
    seen = [randbelow(m) for _ in range(400)]
    assert all(type(r) is int for r in seen)
    assert set(seen) == set(range(m))


def test_randbelow_of_one_or_less_is_zero() -> None:
    assert randbelow(1) == 0
    assert randbelow(0) == 0
