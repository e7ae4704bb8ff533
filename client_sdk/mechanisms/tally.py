"""The tally: the sufficient statistic of a set of reports, mergeable by addition."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.state import count_array


@dataclass(frozen=True, eq=False)
class Tally:
    """Number of reports ``n`` and, per domain index, how many reports support it.

    Tallies of the same campaign add: ``tally_a + tally_b`` is the tally of both sets of reports.
    Holds no true value, only counts over perturbed reports.
    """

    n: int
    support: np.ndarray

    def __post_init__(self) -> None:
        support = count_array(self.support, self.n, "support count")
        if support.ndim != 1 or support.size < 2:
            raise InvalidParameter("a tally's support must be a 1-D array of at least 2 counts")
        support.setflags(write=False)
        object.__setattr__(self, "support", support)
        object.__setattr__(self, "n", int(self.n))

    @classmethod
    def empty(cls, k: int) -> Tally:
        """The tally of no reports over a domain of ``k`` values."""
        return cls(0, np.zeros(k, dtype=np.int64))

    @property
    def k(self) -> int:
        return int(self.support.size)

    def vector(self) -> list[int]:
        """The support counts as exact Python ints (the generic state, see ``state.py``)."""
        return [int(v) for v in self.support.tolist()]

    def __add__(self, other: object) -> Tally:
        if not isinstance(other, Tally):
            return NotImplemented
        if other.k != self.k:
            raise InvalidParameter(f"cannot add tallies over {self.k} and {other.k} values")
        return Tally(self.n + other.n, self.support + other.support)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tally):
            return NotImplemented
        return self.n == other.n and np.array_equal(self.support, other.support)

    def __hash__(self) -> int:
        return hash((self.n, self.support.tobytes()))

    def __repr__(self) -> str:
        return f"Tally(n={self.n}, support={self.support.tolist()})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form: ``{"n": int, "support": [int, ...]}``."""
        return {"n": self.n, "support": self.support.tolist()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Tally:
        try:
            return cls(int(data["n"]), np.asarray(data["support"], dtype=np.int64))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidParameter(f"not a tally: {exc}") from exc
