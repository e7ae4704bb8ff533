"""Exceptions raised by the collector; all derive from ``client_sdk.errors.LDPError``::

CollectorError
├── ConfigError                 a setting is missing or invalid (the service will not start)
├── StorageError                the storage backend failed
│   ├── StorageBusy             the database is locked by another writer: retry (503)
│   └── StorageUnavailable      the database cannot be opened or written (503)
├── CampaignExists              a campaign id is already taken (409)
└── APIError                    an HTTP error with a code, a status and a message
"""

from __future__ import annotations

from dataclasses import dataclass

from client_sdk.errors import LDPError


@dataclass(frozen=True)
class ErrorDetail:
    """What went wrong: a stable machine ``code``, a message for people, the HTTP status."""

    code: str
    message: str
    status: int


@dataclass(frozen=True)
class ErrorEnvelope:
    """The one JSON shape of every HTTP error: ``{"error": {"code", "message", "status"}}``."""

    error: ErrorDetail


class CollectorError(LDPError):
    """Base class of collector errors."""


class ConfigError(CollectorError):
    """A setting is missing or invalid; the message names the setting and the fix."""


class StorageError(CollectorError):
    """The storage backend failed; nothing partial was stored."""


class StorageBusy(StorageError):
    """The database stayed locked by another writer for longer than the busy timeout."""


class StorageUnavailable(StorageError):
    """The database cannot be opened, read or written."""


class CampaignExists(CollectorError):
    """A campaign with this id already exists (campaigns are immutable)."""


class CampaignArchived(CollectorError):
    """The campaign is archived: it takes no more reports (its estimates stay readable)."""

    #: The API error code it is answered with (410 on the direct path, per message on
    #: ``/v1/sealed``).
    code = "campaign_archived"

    def __init__(self, campaign_id: str, archived: str) -> None:
        super().__init__(
            f"campaign {campaign_id!r} was archived on {archived} and takes no more reports; "
            "its estimates stay readable"
        )
        self.campaign_id = campaign_id
        self.archived = archived


class APIError(CollectorError):
    """An HTTP error answered as ``{"error": {"code", "message", "status"}}``."""

    def __init__(
        self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}

    def envelope(self) -> ErrorEnvelope:
        return ErrorEnvelope(ErrorDetail(self.code, self.message, self.status))

    def body(self) -> dict[str, dict[str, object]]:
        """The JSON body: :class:`ErrorEnvelope` (its schema is the OpenAPI ``Error``)."""
        from aggregator.schema import to_json

        body: dict[str, dict[str, object]] = to_json(self.envelope())
        return body
