"""Storage backends behind one narrow interface; ``open_storage`` picks one from a URL."""

from __future__ import annotations

from collector.errors import ConfigError
from collector.storage.base import (
    CampaignUsage,
    IngestCounts,
    MixResult,
    PartitionDrop,
    PurgeResult,
    ReportCounters,
    ReportRow,
    Storage,
    WindowBatch,
)
from collector.storage.sqlite import SQLiteStorage


def open_storage(
    database: str,
    *,
    busy_timeout_ms: int = 5000,
    synchronous: str = "FULL",
    create: bool = True,
    staging: bool = False,
) -> Storage:
    """The backend for ``database``: a file path, ``sqlite:///relative`` / ``sqlite:////abs``,
    or ``postgresql://user@host/dbname`` (needs the ``postgres`` extra).

    The schema is not migrated here; call :meth:`Storage.migrate`. ``create=False``: a missing
    SQLite file is an error instead of a new empty store (directories are never created).
    ``staging=True``: ingest stages reports for :meth:`Storage.mix` (unlinkable storage);
    reading is the same either way.
    """
    if "://" in database:
        scheme, _, rest = database.partition("://")
        if scheme in ("postgresql", "postgres"):
            from collector.storage.postgres import PostgresStorage

            return PostgresStorage(database, busy_timeout_ms=busy_timeout_ms, staging=staging)
        if scheme != "sqlite":
            raise ConfigError(
                f"database URL scheme {scheme!r} is not supported; use a file path, "
                f"sqlite:///path or postgresql://user@host/dbname (got {database!r})"
            )
        # As SQLAlchemy: sqlite:///relative.db and sqlite:////absolute/path.db
        database = rest[1:] if rest.startswith("/") else rest
        if not database:
            raise ConfigError("sqlite:/// URL needs a path, e.g. sqlite:///var/lib/ldp/ldp.db")
    return SQLiteStorage(
        database,
        busy_timeout_ms=busy_timeout_ms,
        synchronous=synchronous,
        create=create,
        staging=staging,
    )


__all__ = [
    "CampaignUsage",
    "IngestCounts",
    "MixResult",
    "PartitionDrop",
    "PurgeResult",
    "ReportCounters",
    "ReportRow",
    "SQLiteStorage",
    "Storage",
    "WindowBatch",
    "open_storage",
]
