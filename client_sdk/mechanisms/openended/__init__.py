"""Open-domain mechanisms (issue 16): strings nobody listed in advance.

``create(name, epsilon=..., max_length=...)`` builds one (``OPEN_MECHANISMS``):

* ``cms``: Apple's Count-Mean-Sketch, a frequency oracle for any candidate string;
* ``hcms``: Apple's Hadamard Count-Mean-Sketch, the same with 2-byte reports;
* ``pem``: the Prefix Extending Method, which also discovers the heavy hitters.

Values are normalised (:mod:`.strings`: NFC, UTF-8, at most ``max_length`` bytes); tallies are
sketches (:class:`~.tally.SketchTally`); the collector's estimates are ``aggregator.estimate(mech,
tally, candidates=[...])`` and ``aggregator.discover(mech, tally, top=k)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.openended.base import OpenDomainMechanism
from client_sdk.mechanisms.openended.oracles import (
    CountMeanSketch,
    HadamardCountMeanSketch,
    SketchOracle,
)
from client_sdk.mechanisms.openended.pem import PrefixExtending
from client_sdk.mechanisms.openended.strings import (
    MAX_LENGTH_LIMIT,
    ValueTooLong,
    normalise,
)
from client_sdk.mechanisms.validation import config_parts

OPEN_MECHANISMS: dict[str, type[OpenDomainMechanism]] = {
    "cms": CountMeanSketch,
    "hcms": HadamardCountMeanSketch,
    "pem": PrefixExtending,
}


def create_open(
    name: str, *, epsilon: float, max_length: int, **params: Any
) -> OpenDomainMechanism:
    """Build the open-domain mechanism ``name`` (``OPEN_MECHANISMS``)."""
    cls = OPEN_MECHANISMS.get(name)
    if cls is None:
        raise InvalidParameter(
            f"unknown open-domain mechanism {name!r}; known: {', '.join(OPEN_MECHANISMS)}"
        )
    try:
        return cls(epsilon=epsilon, max_length=max_length, **params)
    except TypeError as exc:
        raise InvalidParameter(f"bad parameters for {name!r}: {exc}") from None


def open_from_config(config: Mapping[str, Any]) -> OpenDomainMechanism:
    """Rebuild an open-domain mechanism from its ``config()`` output."""
    name, epsilon, max_length, params = config_parts(
        config, "max_length", "an open-domain mechanism"
    )
    return create_open(name, epsilon=epsilon, max_length=max_length, **params)


__all__ = [
    "MAX_LENGTH_LIMIT",
    "OPEN_MECHANISMS",
    "CountMeanSketch",
    "HadamardCountMeanSketch",
    "OpenDomainMechanism",
    "PrefixExtending",
    "SketchOracle",
    "ValueTooLong",
    "create_open",
    "normalise",
    "open_from_config",
]
