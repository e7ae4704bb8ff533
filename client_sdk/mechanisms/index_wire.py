"""Reports that are one integer in ``[0, size)`` (GRR, Hadamard, the numeric mechanisms).

The check of one wire payload and the parse of a batch, in one place so that every such
mechanism refuses the same payloads with the same words. NumPy is imported on first parse.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from client_sdk.errors import InvalidReport

if TYPE_CHECKING:
    import numpy as np

#: Integers beyond int64 go to the per-report check, which refuses them, not to an overflow.
_I64 = 1 << 63


def check_index(payload: object, size: int, bad: Callable[[str], InvalidReport]) -> int:
    """``payload`` if it is an integer in ``[0, size)`` (a bool is not), else raise ``bad(why)``."""
    if isinstance(payload, bool) or not isinstance(payload, int):
        raise bad(f"a report is an integer in [0, {size}), got {type(payload).__name__}")
    if not 0 <= payload < size:
        raise bad(f"a report is an integer in [0, {size}), got {payload}")
    return payload


def decode_indices(
    payloads: Sequence[object], size: int, check: Callable[[object], object]
) -> np.ndarray:
    """An int64 array of the payloads; :class:`InvalidReport` names the first bad index.

    Plain int64 integers are parsed and range-checked at once; anything else goes through
    ``check`` (the mechanism's ``check_payload``) one payload at a time.
    """
    import numpy as np

    if all(type(p) is int and -_I64 <= p < _I64 for p in payloads):
        arr = np.fromiter(payloads, dtype=np.int64, count=len(payloads))
        bad = np.flatnonzero((arr < 0) | (arr >= size))
        if bad.size == 0:
            return arr
        i = int(bad[0])
        raise InvalidReport(
            f"report #{i}: a report is an integer in [0, {size}), got {payloads[i]}", index=i
        )
    for i, payload in enumerate(payloads):
        try:
            check(payload)
        except InvalidReport as exc:
            raise InvalidReport(f"report #{i}: {exc.reason}", index=i) from None
    return np.fromiter(payloads, dtype=np.int64, count=len(payloads))
