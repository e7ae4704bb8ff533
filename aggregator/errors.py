"""Exceptions raised by the aggregator; all derive from ``client_sdk.errors.LDPError``."""

from __future__ import annotations

from client_sdk.errors import LDPError


class AggregatorError(LDPError):
    """Base class of aggregator errors."""


class NotEnoughReports(AggregatorError):
    """A window holds fewer reports than the campaign's minimum; its numbers would be noise."""

    def __init__(self, n: int, minimum: int) -> None:
        super().__init__(f"not enough reports yet ({n} of {minimum})")
        self.n = n
        self.minimum = minimum
