"""Exceptions raised by ``client_sdk``.

Every exception derives from :class:`LDPError`, so callers can catch "anything from us"::

    LDPError
    ├── InvalidParameter (also ValueError)      bad epsilon, domain, option
    │   └── ValueNotInDomain                     a value outside the campaign's domain
    ├── InvalidReport (also ValueError)          a malformed wire report
    ├── PrivacyBudgetExceeded                    the device has spent its budget
    ├── UnknownCampaign                          no configuration for a campaign
    └── TransportError                           the collector could not be reached
"""

from __future__ import annotations


class LDPError(Exception):
    """Base class of every error raised by the ldp-telemetry packages."""


class InvalidParameter(LDPError, ValueError):
    """An argument breaks a documented rule; the message says the rule and the value."""


class ValueNotInDomain(InvalidParameter):
    """A true value is not one of the domain's labels."""


class InvalidReport(LDPError, ValueError):
    """A wire report does not have the shape its mechanism produces.

    ``index`` is the report's position in a batch when known.
    """

    def __init__(self, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index
        self.reason = message


class PrivacyBudgetExceeded(LDPError):
    """The device already sent as many reports as its budget allows for this window."""


class UnknownCampaign(LDPError):
    """The client has no configuration for a campaign (and could not fetch one)."""


class TransportError(LDPError):
    """The collector could not be reached or answered with an unexpected error."""
