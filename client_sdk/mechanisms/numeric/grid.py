"""Bounds, the declared input grid, and how a device puts a number on it.

A numeric campaign declares ``bounds = (low, high)``. The device clips its value into them and
maps it onto the grid ``low + (high - low) * i / D`` for integers ``i`` in ``[0, D]``. The
mapping is **randomised rounding** (to ``floor(pos)`` or ``floor(pos) + 1`` with the
probabilities that make ``E[i] = pos`` exactly, up to 2**-64), so the mechanisms' estimators are
unbiased for the mean of the *clipped* values, not merely of their rounded versions. Rounding
randomness touches only the input: privacy is proved per grid point, and a mixture over grid
points of epsilon-LDP channels is epsilon-LDP, so the float arithmetic of this step cannot leak.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric.device import u64
from client_sdk.mechanisms.validation import finite_float, number_text

#: Default input grid: 2**16 steps between the bounds (65,537 points).
DEFAULT_GRID = 1 << 16
#: Largest grid accepted (thresholds are 64-bit: the grid must leave room for them).
MAX_GRID = 1 << 24
_SCALE = 1 << 64


def check_bounds(bounds: object) -> tuple[float, float]:
    """``bounds`` as ``(low, high)`` floats: two finite numbers with ``low < high``."""
    pair = None
    if isinstance(bounds, Iterable) and not isinstance(bounds, (str, bytes, dict)):
        pair = tuple(bounds)
    if pair is None or len(pair) != 2:
        raise InvalidParameter(f"bounds must be a pair (low, high), got {bounds!r}")
    low, high = pair
    for name, v in (("low", low), ("high", high)):
        if not isinstance(v, (int, float)) or finite_float(v) is None:
            raise InvalidParameter(f"bounds {name} must be a finite number, got {number_text(v)}")
    if not float(low) < float(high):
        raise InvalidParameter(f"bounds need low < high, got ({low!r}, {high!r})")
    if not math.isfinite(float(high) - float(low)):
        raise InvalidParameter(f"bounds ({low!r}, {high!r}) are too far apart for a float")
    return float(low), float(high)


def check_grid(grid: object, *, name: str = "grid") -> int:
    """A grid size: an int in ``[2, MAX_GRID]``."""
    if isinstance(grid, bool) or not isinstance(grid, int) or not 2 <= grid <= MAX_GRID:
        raise InvalidParameter(f"{name} must be an integer in [2, {MAX_GRID}], got {grid!r}")
    return grid


def check_value(x: object) -> float:
    """A device's true value as a float; NaN and non-numbers are refused (inf is clipped, and
    so is an int beyond the float range, as the infinity of its sign)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise InvalidParameter(f"a numeric value must be a number, got {type(x).__name__}")
    try:
        value = float(x)
    except OverflowError:
        value = math.inf if x > 0 else -math.inf
    if math.isnan(value):
        raise InvalidParameter("a numeric value must not be NaN")
    return value


class Grid:
    """The points ``low + (high - low) * i / size``, ``i = 0 .. size``."""

    def __init__(self, bounds: Any, size: int) -> None:
        self.low, self.high = check_bounds(bounds)
        self.size = check_grid(size)
        self.span = self.high - self.low
        self._scale = self.size / self.span
        if not math.isfinite(self._scale):
            raise InvalidParameter(
                f"bounds ({self.low!r}, {self.high!r}) are too close together for a grid of "
                f"{self.size} steps (the step would be below the smallest float)"
            )

    def position(self, x: float) -> float:
        """Clipped grid position of ``x``, a float in ``[0, size]``."""
        pos = (min(max(x, self.low), self.high) - self.low) * self._scale
        return min(max(pos, 0.0), float(self.size))

    def round(self, x: float, word: int | None = None) -> int:
        """Randomised rounding of ``x`` onto the grid (``E[i] = position``).

        ``word`` is a uniform 64-bit integer; None draws one from the OS. Written flat: this is
        on the one-device path.
        """
        if type(x) is not float or x != x:
            x = check_value(x)
        if x <= self.low:
            return 0
        if x >= self.high:
            return self.size
        pos = (x - self.low) * self._scale
        base = int(pos)  # pos > 0: truncation is floor
        if base >= self.size:
            return self.size
        if word is None:
            word = u64()
        return base + (word < int((pos - base) * _SCALE))

    def value(self, i: float) -> float:
        """The number at grid position ``i`` (``i`` may be fractional, e.g. an estimate)."""
        return self.low + self.span * i / self.size

    def positions(self, values: Any) -> Any:
        """Clipped positions of an array of values (NumPy), refusing NaN."""
        import numpy as np

        arr = np.asarray(values, dtype=float)
        if arr.ndim != 1:
            raise InvalidParameter("values must be a 1-D sequence of numbers")
        if np.isnan(arr).any():
            raise InvalidParameter(f"value #{int(np.flatnonzero(np.isnan(arr))[0])} is NaN")
        # Clip the position, not the value: one pass, and inf maps to an end of the grid.
        return np.clip((arr - self.low) * self._scale, 0.0, float(self.size))

    def round_many(self, values: Any, gen: Any) -> Any:
        """Randomised rounding of an array (``gen`` a NumPy generator), as int64 grid indices."""
        import numpy as np

        pos = self.positions(values)
        base = pos.astype(np.int64)  # pos >= 0: truncation is floor
        # 32-bit words, two per 64-bit draw: P[up] = ceil(frac * 2**32) / 2**32.
        words = gen.bit_generator.random_raw((pos.size + 1) // 2).view(np.uint32)[: pos.size]
        pos -= base
        pos *= float(1 << 32)
        base += words < pos
        return base
