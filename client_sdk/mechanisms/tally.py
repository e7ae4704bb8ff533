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
        out: list[int] = self.support.tolist()  # int64 -> exact Python ints
        return out

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
            if "patterns" in data:
                return PatternTally(
                    int(data["n"]),
                    np.asarray(data["support"], dtype=np.int64),
                    np.asarray(data["patterns"], dtype=np.int64),
                    data["d"],
                )
            return cls(int(data["n"]), np.asarray(data["support"], dtype=np.int64))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidParameter(f"not a tally: {exc}") from exc


@dataclass(frozen=True, eq=False)
class PatternTally(Tally):
    """A subset-selection tally that also counts each reported d-subset (its *pattern*).

    ``patterns[r]`` is how many reports were the r-th d-subset of ``range(k)`` in the order of
    ``itertools.combinations`` (:func:`client_sdk.mechanisms.subset.subset_members`); the
    support counts are its column sums and are checked to be. Kept by SS campaigns whose
    ``C(k, d)`` is small (``patterns`` in the mechanism's params): the histogram is what the
    exact per-report likelihood needs (docs/AGGREGATOR.md "Pattern MLE"), and it adds exactly.
    Holds no true value, only counts over perturbed reports. Added to a plain :class:`Tally`
    it gives the plain tally of both (the patterns of the other part are unknown).
    """

    patterns: np.ndarray
    d: int

    def __post_init__(self) -> None:
        super().__post_init__()
        from client_sdk.mechanisms.subset import subset_members

        d = self.d
        if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d < self.k:
            raise InvalidParameter(f"a pattern tally's d must be in [1, {self.k - 1}], got {d!r}")
        members = subset_members(self.k, d)
        patterns = count_array(self.patterns, self.n, "pattern count")
        if patterns.shape != (members.shape[0],):
            raise InvalidParameter(
                f"a pattern tally over k = {self.k}, d = {d} has {members.shape[0]} pattern "
                f"counts (one per d-subset), got {patterns.size}"
            )
        if int(patterns.sum()) != self.n:
            raise InvalidParameter(
                f"a pattern tally's pattern counts must add up to n = {self.n}, "
                f"got {int(patterns.sum())}"
            )
        if not np.array_equal(patterns @ members, self.support):
            raise InvalidParameter("a pattern tally's support counts are not its patterns' sums")
        patterns.setflags(write=False)
        object.__setattr__(self, "patterns", patterns)

    @classmethod
    def of_patterns(cls, k: int, d: int, patterns: np.ndarray) -> PatternTally:
        """The tally of reports with these pattern counts (support counts derived)."""
        from client_sdk.mechanisms.subset import subset_members

        counts = np.asarray(patterns, dtype=np.int64)
        return cls(int(counts.sum()), counts @ subset_members(k, d), counts, d)

    def vector(self) -> list[int]:
        """Support counts, then pattern counts (the generic state, see ``state.py``)."""
        support: list[int] = self.support.tolist()
        patterns: list[int] = self.patterns.tolist()
        return support + patterns

    def __add__(self, other: object) -> Tally:
        if isinstance(other, PatternTally) and other.k == self.k and other.d == self.d:
            return PatternTally(
                self.n + other.n,
                self.support + other.support,
                self.patterns + other.patterns,
                self.d,
            )
        return super().__add__(other)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tally):
            return NotImplemented
        return (
            isinstance(other, PatternTally)
            and self.d == other.d
            and super().__eq__(other)
            and np.array_equal(self.patterns, other.patterns)
        )

    def __hash__(self) -> int:
        return hash((self.n, self.support.tobytes(), self.d, self.patterns.tobytes()))

    def __repr__(self) -> str:
        return (
            f"PatternTally(n={self.n}, support={self.support.tolist()}, d={self.d}, "
            f"patterns={self.patterns.tolist()})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form: ``{"n", "support", "d", "patterns"}``."""
        return {**super().to_dict(), "d": self.d, "patterns": self.patterns.tolist()}
