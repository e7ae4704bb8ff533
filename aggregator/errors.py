"""Exceptions raised by the aggregator; all derive from ``client_sdk.errors.LDPError``."""

from __future__ import annotations

from client_sdk.errors import LDPError


class AggregatorError(LDPError):
    """Base class of aggregator errors."""


class NotEnoughReports(AggregatorError):
    """A window holds fewer reports than the campaign's minimum; its numbers would be noise."""

    def __init__(self, n: int, minimum: int, part: str | None = None, why: str = "") -> None:
        where = "" if part is None else f" for {part}"
        super().__init__(f"not enough reports yet{where} ({n} of {minimum}){why}")
        self.n = n
        self.minimum = minimum
        #: What lacks the reports when it is not the whole range (an attribute of a campaign
        #: with several), else None.
        self.part = part
