"""The aggregate state of a campaign, whatever its mechanism estimates.

Every mechanism turns reports into one state type that satisfies :class:`AggregateState`:

* ``n``: the number of reports, and ``vector()``: a list of exact (Python) integers whose
  meaning the mechanism defines (support counts of a frequency oracle, sums of grid indices and
  of their squares of a mean mechanism, an output histogram of a distribution mechanism);
* ``a + b`` is the state of both sets of reports and ``a + b == b + a`` exactly (integers);
* ``to_dict()`` is a JSON-safe, exact form;
* ``mech.empty_tally()`` is the state of no reports and ``mech.tally_from(n, vector)`` rebuilds
  one from storage, validated against the mechanism's layout.

Storage and ``ldp tally verify`` handle only ``(n, vector)``; the mechanism's own estimator
(``aggregator.estimate``) turns the state into a typed estimate.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

#: What a mechanism estimates: ``"frequency"`` (one count per domain value), ``"mean"`` or
#: ``"distribution"`` of a bounded number, or ``"multi"``: several attributes per report
#: (``client_sdk.mechanisms.multi``, docs/MECHANISMS.md §22), or ``"open_domain"``: counts of
#: strings nobody listed in advance (``client_sdk.mechanisms.openended``).
KINDS = ("frequency", "mean", "distribution", "multi", "open_domain")


@runtime_checkable
class AggregateState(Protocol):
    """``n`` reports and a vector of exact integers; mergeable by addition."""

    @property
    def n(self) -> int: ...

    def vector(self) -> list[int]:
        """The state's integers (exact Python ints, in the mechanism's layout)."""
        ...

    def __add__(self, other: Any) -> Any: ...

    def to_dict(self) -> dict[str, Any]: ...
