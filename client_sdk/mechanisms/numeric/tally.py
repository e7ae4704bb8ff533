"""The aggregate of numeric reports: exact integers, mergeable by addition.

``NumericTally(n, values)`` holds the number of reports and a tuple of integer sums whose meaning
the mechanism defines (:attr:`NumericMechanism.tally_fields`): a count of ones (``duchi``), the
sum and the sum of squares of output grid indices (``piecewise``), a histogram over the output
grid (``square_wave``). Python ints: no overflow, and ``a + b == b + a`` holds exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from client_sdk.errors import InvalidParameter


@dataclass(frozen=True)
class NumericTally:
    """``n`` reports and the integer sums of a numeric mechanism; tallies of a campaign add."""

    n: int
    values: tuple[int, ...]

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 0:
            raise InvalidParameter(f"a tally's n must be an integer >= 0, got {self.n!r}")
        vals = tuple(self.values)
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidParameter(f"a tally's sums are integers >= 0, got {v!r}")
        object.__setattr__(self, "values", vals)

    @classmethod
    def empty(cls, size: int) -> NumericTally:
        return cls(0, (0,) * size)

    def vector(self) -> list[int]:
        """The sums as exact Python ints (the generic state, see ``mechanisms/state.py``)."""
        return list(self.values)

    def __add__(self, other: object) -> NumericTally:
        if not isinstance(other, NumericTally):
            return NotImplemented
        if len(other.values) != len(self.values):
            raise InvalidParameter(
                f"cannot add numeric tallies of {len(self.values)} and {len(other.values)} sums"
            )
        return NumericTally(
            self.n + other.n, tuple(a + b for a, b in zip(self.values, other.values, strict=True))
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form ``{"n": int, "values": [int, ...]}`` (exact: JSON integers)."""
        return {"n": self.n, "values": list(self.values)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NumericTally:
        try:
            n, values = data["n"], data["values"]
        except (KeyError, TypeError) as exc:
            raise InvalidParameter(f"not a numeric tally: missing {exc}") from None
        if not isinstance(values, Sequence) or isinstance(values, (str, bytes)):
            raise InvalidParameter("a numeric tally's values must be a list of integers")
        return cls(n, tuple(values))
