"""The tally of an open-domain campaign: a sketch of exact integer counts, mergeable by addition.

``SketchTally(n, counts)`` holds the number of reports and a flat vector of non-negative integer
counts whose layout the mechanism defines (``cms``: per row the reports in it and the set bits per
bucket; ``hcms``: per row and Hadamard column the reports and their +1 bits; ``pem``: one such
block per prefix level). Its size depends on the sketch parameters only, never on ``n``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.state import count_array


@dataclass(frozen=True, eq=False)
class SketchTally:
    """``n`` reports and the sketch's counts; tallies of one campaign add exactly."""

    n: int
    counts: np.ndarray

    def __post_init__(self) -> None:
        counts = count_array(self.counts, self.n, "sketch count")
        if counts.ndim != 1 or counts.size < 1:
            raise InvalidParameter("a sketch tally's counts must be a 1-D array")
        counts.setflags(write=False)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "n", int(self.n))

    @classmethod
    def empty(cls, size: int) -> SketchTally:
        return cls(0, np.zeros(size, dtype=np.int64))

    @property
    def size(self) -> int:
        return int(self.counts.size)

    def vector(self) -> list[int]:
        """The counts as exact Python ints (the generic state, see ``mechanisms/state.py``)."""
        return [int(v) for v in self.counts.tolist()]

    def __add__(self, other: object) -> SketchTally:
        if not isinstance(other, SketchTally):
            return NotImplemented
        if other.size != self.size:
            raise InvalidParameter(f"cannot add sketches of {self.size} and {other.size} counts")
        return SketchTally(self.n + other.n, self.counts + other.counts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SketchTally):
            return NotImplemented
        return self.n == other.n and np.array_equal(self.counts, other.counts)

    def __hash__(self) -> int:
        return hash((self.n, self.counts.tobytes()))

    def __repr__(self) -> str:
        return f"SketchTally(n={self.n}, size={self.size})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, exact: ``{"n": int, "counts": [int, ...]}``."""
        return {"n": self.n, "counts": self.counts.tolist()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SketchTally:
        try:
            return cls(int(data["n"]), np.asarray(data["counts"], dtype=np.int64))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidParameter(f"not a sketch tally: {exc}") from exc
