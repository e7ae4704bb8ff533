"""``create(name, epsilon=..., bounds=(low, high))`` for the numeric mechanisms.

These names are part of the one registry, ``client_sdk.mechanisms.registry`` (``create`` with
``bounds=``, ``REGISTRY``, ``from_config``; docs/MECHANISMS.md §20). ``"auto"`` picks the
mean mechanism with the smallest worst-case variance at ``epsilon``, or the smallest variance
averaged over declared values (:func:`choose_mean`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric.alpha_point import AlphaPointMean
from client_sdk.mechanisms.numeric.base import NumericMechanism
from client_sdk.mechanisms.numeric.mean import Duchi, Hybrid, OneBitMean, Piecewise, choose_mean
from client_sdk.mechanisms.numeric.square_wave import SquareWave
from client_sdk.mechanisms.validation import config_parts

NUMERIC_MECHANISMS: dict[str, type[NumericMechanism]] = {
    "duchi": Duchi,
    "piecewise": Piecewise,
    "hybrid": Hybrid,
    "1bitmean": OneBitMean,
    "square_wave": SquareWave,
    "alpha_point": AlphaPointMean,
}


def create(name: str, *, epsilon: float, bounds: Any, **params: Any) -> NumericMechanism:
    """The numeric mechanism ``name`` at ``epsilon`` on ``bounds = (low, high)``.

    ``params``: ``grid`` (input grid steps; default 2**16 for means, 512 for ``square_wave``),
    ``segments`` for ``alpha_point``, ``expected={"mean": m, "sd": s}`` for ``auto``.
    """
    if name == "auto":
        return choose_mean(epsilon=epsilon, bounds=bounds, **params).chosen
    cls = NUMERIC_MECHANISMS.get(name) if isinstance(name, str) else None
    if cls is None:
        close = difflib.get_close_matches(str(name), [*NUMERIC_MECHANISMS, "auto"], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidParameter(
            f"unknown numeric mechanism {name!r}{hint} (choose one of: "
            + ", ".join([*NUMERIC_MECHANISMS, "auto"])
            + ")"
        )
    try:
        return cls(epsilon=epsilon, bounds=bounds, **params)
    except TypeError as exc:  # an unknown keyword
        raise InvalidParameter(f"{name}: {exc}") from None


def from_config(config: Mapping[str, Any]) -> NumericMechanism:
    """Rebuild a mechanism from its :meth:`~NumericMechanism.config`."""
    name, epsilon, bounds, params = config_parts(config, "bounds", "a numeric mechanism")
    return create(name, epsilon=epsilon, bounds=bounds, **params)
