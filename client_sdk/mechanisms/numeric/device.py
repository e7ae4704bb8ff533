"""Exact random draws on one device, from the operating system, in pure Python (no NumPy).

* :func:`u64` is a uniform 64-bit integer from ``os.urandom``; the event ``u64() < T`` has
  probability exactly ``T / 2**64``.
* :func:`randbelow` is an exactly uniform integer in ``[0, m)`` by rejection on 64-bit words
  (no modulo bias; a draw is rejected with probability below ``m / 2**64``).
"""

from __future__ import annotations

import os
import struct

_U64 = struct.Struct("<Q")
_TWO_U64 = struct.Struct("<QQ")
_FOUR_U64 = struct.Struct("<4Q")
_SCALE = 1 << 64


def u64() -> int:
    """One uniform 64-bit integer from the OS."""
    value: int = _U64.unpack(os.urandom(8))[0]
    return value


def two_u64() -> tuple[int, int]:
    """Two independent uniform 64-bit integers from one OS call."""
    return _TWO_U64.unpack(os.urandom(16))


def four_u64() -> tuple[int, int, int, int]:
    """Four independent uniform 64-bit integers from one OS call: all one report needs."""
    a, b, c, d = _FOUR_U64.unpack(os.urandom(32))
    return a, b, c, d


def accept_below(u: int, m: int) -> int | None:
    """``u % m`` when the uniform 64-bit ``u`` falls in the unbiased range, else None."""
    return u % m if u < _SCALE - _SCALE % m else None


def randbelow(m: int) -> int:
    """A uniform integer in ``[0, m)`` (``m >= 1``), exactly, by rejection sampling."""
    if m <= 1:
        return 0
    while True:
        r = accept_below(u64(), m)
        if r is not None:
            return r
