"""Exceptions raised by ``client_sdk``.

Every exception derives from :class:`LDPError`, so callers can catch "anything from us"::

    LDPError
    ├── InvalidParameter (also ValueError)      bad epsilon, domain, option
    │   └── ValueNotInDomain                     a value outside the campaign's domain
    ├── InvalidReport (also ValueError)          a malformed wire report
    ├── PrivacyBudgetExceeded                    the device has spent its budget
    │   └── ConfigAboveCeiling                   a campaign asks more epsilon than the app allows
    ├── UnknownCampaign                          no configuration for a campaign
    │   └── CampaignNotReady                     not fetched yet (fetching in the background)
    ├── StateDirInUse                            another client holds the state_dir
    ├── StateUnusable                            the state file is corrupt or from a newer SDK
    ├── StorageFailed                            the state file could not be written (disk full)
    ├── OutboxFull                               report_many cannot enqueue without dropping
    └── TransportError                           the collector could not be reached
        └── AuthenticationFailed                 the collector refused the ingest token

Policy (as in Mozilla's Glean): ``report`` raises only for programming errors (a value outside
the domain, a campaign id the collector confirmed does not exist, a bad argument). Operational
outcomes (not fetched yet, budget spent, uploads disabled) do not raise: ``report`` returns a
falsy :class:`client_sdk.NotSent` naming the reason and ``stats()`` counts them.
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
    """The report would exceed the device's privacy budget or per-window report limit."""


class ConfigAboveCeiling(PrivacyBudgetExceeded):
    """The collector serves a campaign whose epsilon is above the app's ceiling."""


class UnknownCampaign(LDPError):
    """The client has no configuration for a campaign (and could not fetch one)."""


class CampaignNotReady(UnknownCampaign):
    """The campaign's configuration is being fetched in the background; nothing was stored."""


class StateDirInUse(LDPError):
    """Another open client holds the ``state_dir`` lock."""


class StateUnusable(LDPError):
    """The state file (or its lock file) cannot be used: not a database, damaged, missing
    tables or columns, written by a newer SDK. It holds the device's privacy ledger, so the
    SDK never replaces it; the message says the app's choices (restore it, or move it away
    and forget the budget)."""


class StorageFailed(LDPError):
    """The state file could not be written (disk full, I/O error): nothing of the change was
    kept (for a report: nothing stored, nothing charged). ``report`` returns
    ``NotSent("storage_failed")`` instead (its ``raise_()`` raises this); the other methods
    that write, such as ``set_upload_enabled`` and ``report_many``, raise it."""


class OutboxFull(LDPError):
    """``report_many`` could not enqueue every report without dropping pending ones."""


class TransportError(LDPError):
    """The collector could not be reached or answered with an unexpected error."""


class AuthenticationFailed(TransportError):
    """The collector refused the ingest token (401/403): a configuration error of the app."""
