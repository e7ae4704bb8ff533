"""The collector's JSON encoder: standard JSON only (RFC 8259), whatever an answer holds.

Python's ``json`` writes a non-finite float as the bare word ``Infinity`` or ``NaN``, which
browsers' ``JSON.parse`` and most other parsers refuse. The typed answers already say null
where no report measured a number (``aggregator.results``); this encoder is the net under
them: a non-finite float anywhere in a body is written as ``null``, so no answer can be
unreadable. The collector refuses such words on input too (``collector.ingest``).
"""

from __future__ import annotations

import math
from typing import Any

from flask.json.provider import DefaultJSONProvider


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (at any depth of dicts, lists, tuples) as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


class FiniteJSONProvider(DefaultJSONProvider):
    """Flask's provider, keys in the answer's order, compact, non-finite floats as null."""

    sort_keys = False
    compact = True

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        # The common case costs one pass: only a body that holds a non-finite float (the
        # encoder refuses it with ValueError) is walked and encoded again.
        kwargs["allow_nan"] = False
        try:
            return super().dumps(obj, **kwargs)
        except ValueError:
            return super().dumps(finite(obj), **kwargs)
