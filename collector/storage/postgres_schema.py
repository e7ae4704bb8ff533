"""Versioned PostgreSQL migrations of the collector schema (mirror of ``sqlite.MIGRATIONS``).

Migration ``n`` is ``MIGRATIONS[n - 1]``: a list of SQL statements applied in one transaction
under an advisory lock and recorded in ``schema_version``. Never edit a released migration;
append a new one.

Schema notes (see docs/SCALING.md):

* ``reports`` stores per report only the campaign, the window, the report id and the payload;
  the primary key ``(campaign, report_id)`` is what makes ingest idempotent across workers.
* ``tally_shards`` holds each window's running tally split over shards: an ingest adds to one
  shard picked at random, so concurrent workers rarely wait on the same row lock; readers sum
  the shards. ``report_counters`` is sharded the same way.
"""

from __future__ import annotations

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE campaigns (pk integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
        "id text NOT NULL UNIQUE, record text NOT NULL)",
        # Per report: campaign, window, report id, payload. Nothing else, by design.
        "CREATE TABLE reports (campaign integer NOT NULL REFERENCES campaigns (pk), "
        "report_id text NOT NULL, window_start date NOT NULL, payload text NOT NULL, "
        "PRIMARY KEY (campaign, report_id))",
        "CREATE INDEX reports_window ON reports (campaign, window_start)",
        "CREATE TABLE tally_shards (campaign integer NOT NULL REFERENCES campaigns (pk), "
        "window_start date NOT NULL, shard smallint NOT NULL, n bigint NOT NULL, "
        "support bigint[] NOT NULL, PRIMARY KEY (campaign, window_start, shard))",
        "CREATE TABLE report_counters (campaign integer NOT NULL REFERENCES campaigns (pk), "
        "shard smallint NOT NULL, accepted bigint NOT NULL DEFAULT 0, "
        "duplicate bigint NOT NULL DEFAULT 0, rejected bigint NOT NULL DEFAULT 0, "
        "PRIMARY KEY (campaign, shard))",
    ),
    # The archive date of a campaign (NULL: open); campaigns are otherwise immutable.
    ("ALTER TABLE campaigns ADD COLUMN archived date",),
)
SCHEMA_VERSION = len(MIGRATIONS)

#: Key of the transaction-level advisory lock that serialises concurrent ``migrate`` calls.
MIGRATION_LOCK = 0x1D9_7E1E


def version_table_sql() -> str:
    """The ``schema_version`` table, created before the first migration."""
    return "CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)"
