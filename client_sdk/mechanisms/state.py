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

from numbers import Integral
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from client_sdk.errors import InvalidParameter

if TYPE_CHECKING:
    import numpy as np

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


#: Largest count or n a state holds: counts are int64 in NumPy, SQLite and PostgreSQL.
MAX_COUNT = (1 << 63) - 1


def exact_int(value: object, what: str) -> int:
    """``value`` as a Python int if it is an integer (Python or NumPy; a bool is not).

    A float, even 3.0, is refused rather than truncated: a state's integers are exact.
    """
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InvalidParameter(f"{what} must be an integer, got {value!r}")
    return int(value)


def count_array(values: object, n: int, what: str) -> np.ndarray:
    """``values`` as an int64 array of counts in ``[0, n]``; refuses, never truncates.

    Signed integer arrays pass as they are; floats only where every one is a whole number (as
    computed tallies may hold); unsigned and object arrays element by element through
    :func:`exact_int`; anything else (bools, strings, dates) is refused.
    """
    import numpy as np

    if isinstance(n, bool) or not isinstance(n, Integral) or not 0 <= n <= MAX_COUNT:
        raise InvalidParameter(f"a tally's n must be an integer in [0, 2**63), got {n!r}")
    raw = np.asarray(values)
    kind = raw.dtype.kind
    if kind == "i":
        counts = raw.astype(np.int64, copy=False)
        if ((counts < 0) | (counts > n)).any():
            raise InvalidParameter(f"every {what} must lie in [0, n], n = {n}")
        return counts
    if kind == "f":
        if not (np.isfinite(raw).all() and (raw == np.trunc(raw)).all()):
            raise InvalidParameter(f"every {what} must be a whole number")
        items = [int(v) for v in raw.ravel().tolist()]
    elif kind in "uO":
        items = [exact_int(v, what) for v in raw.ravel().tolist()]
    else:
        raise InvalidParameter(f"every {what} must be an integer, got an array of {raw.dtype}")
    if any(not 0 <= v <= n for v in items):
        raise InvalidParameter(f"every {what} must lie in [0, n], n = {n}")
    return np.array(items, dtype=np.int64).reshape(raw.shape)
