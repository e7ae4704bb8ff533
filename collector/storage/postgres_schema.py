"""Versioned PostgreSQL migrations of the collector schema (mirror of ``sqlite.MIGRATIONS``).

Migration ``n`` is ``MIGRATIONS[n - 1]``: a list of SQL statements applied in one transaction
under an advisory lock and recorded in ``schema_version``. Never edit a released migration;
append a new one.

Schema notes (see docs/SCALING.md):

* ``reports`` stores per report only the campaign, the window, the report id and the payload;
  its primary key (``(campaign, report_id)`` up to migration 4, then
  ``(campaign, window_start, report_id)``) is what makes ingest idempotent across workers.
* ``tally_shards`` holds each window's running tally split over shards: an ingest adds to one
  shard picked at random, so concurrent workers rarely wait on the same row lock; readers sum
  the shards. ``report_counters`` is sharded the same way.
* Generic tally state (migration 3): a frequency oracle's support counts stay in
  ``support bigint[]`` (each lies in ``[0, n]``, so int64 is exact; the ingest hot path is
  unchanged), and so do an SS pattern tally's subset counts after them and an open-domain
  campaign's sketch counts (each also in ``[0, n]``);
  every other mechanism's integer vector (numeric sums and sums of squares, which
  pass 2**63 at scale) goes to ``sums numeric[]`` (arbitrary precision, exact). Exactly one of
  the two columns is set per row.
* Partitioned reports (migration 5): ``reports`` is range-partitioned by ``window_start``, one
  partition per day (``reports_pYYYYMMDD``), created ahead of time; retention drops a day's
  partition whole once every campaign's reports of that day aged out. A primary key of a
  partitioned table must contain the partition key, so the key becomes
  ``(campaign, window_start, report_id)``: a report id is unique per campaign and window (a
  retry carries its report's original day, so it is still stored and counted once). The
  migration keeps the existing table, rows untouched, as the partition ``reports_legacy`` for
  every day up to the last one it holds (one read to check its range, one index build).
  ``reports`` has no foreign key to ``campaigns`` from then on (dropping a partition with one
  would lock ``campaigns``, and so every ingest, exclusively).
* Staging in two slots (migration 7): ``staged_reports`` is list-partitioned by ``slot`` into
  ``staged_reports_0`` and ``_1``; ``mix_slots`` (one row) names the slot uploads write and
  the mixer's phase with the other (``PostgresStorage.mix``), so a mix never locks what an
  upload writes.
* Tallies in the two slots (migration 8): with staging on, an upload adds its tally and
  counters to ``staged_tallies_<slot>`` / ``staged_counters_<slot>``, the slot it staged its
  reports into; the mix folds a sealed slot into ``tally_shards`` and ``report_counters`` (one
  row per campaign and window, in random order) and truncates it, so the row versions each
  upload made (``xmin``, and a difference of one report) do not outlive the mix. Readers sum
  the settled tables and both slots. With staging off uploads add to the settled tables.
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
    # Generic tally state: numeric mechanisms' sums in arbitrary-precision numeric[]. Adding a
    # nullable column and dropping NOT NULL rewrite nothing; the check is NOT VALID (old rows
    # all have support set), so the migration is instant on a large table.
    (
        "ALTER TABLE tally_shards ADD COLUMN sums numeric[]",
        "ALTER TABLE tally_shards ALTER COLUMN support DROP NOT NULL",
        "ALTER TABLE tally_shards ADD CONSTRAINT tally_shards_one_state "
        "CHECK ((support IS NULL) <> (sums IS NULL)) NOT VALID",
    ),
    # Retention: per campaign, the window start before which reports were deleted and the
    # stored reports / bytes measured by the last sweep; lease rows for periodic jobs.
    (
        "CREATE TABLE retention (campaign integer PRIMARY KEY REFERENCES campaigns (pk), "
        "purged_before date, reports bigint NOT NULL DEFAULT 0, "
        "bytes bigint NOT NULL DEFAULT 0)",
        "CREATE TABLE leases (name text PRIMARY KEY, last_run timestamptz NOT NULL)",
    ),
    # Reports partitioned by day. In place: the old table (rows untouched) becomes the
    # partition of every day up to its last one; an empty old table is simply replaced.
    (
        "ALTER TABLE reports RENAME TO reports_legacy",
        "ALTER TABLE reports_legacy DROP CONSTRAINT reports_pkey",
        # No foreign key to campaigns any more: dropping a partition that has one takes an
        # ACCESS EXCLUSIVE lock on campaigns, which every ingest reads (a stall of all ingest).
        # Campaigns are never deleted and ingest resolves the key itself (FOR KEY SHARE).
        "ALTER TABLE reports_legacy DROP CONSTRAINT IF EXISTS reports_campaign_fkey",
        "DROP INDEX reports_window",
        "CREATE TABLE reports (campaign integer NOT NULL, "
        "report_id text NOT NULL, window_start date NOT NULL, payload text NOT NULL, "
        "PRIMARY KEY (campaign, window_start, report_id)) PARTITION BY RANGE (window_start)",
        """DO $$
        DECLARE
            cutover date;
        BEGIN
            SELECT max(window_start) + 1 INTO cutover FROM reports_legacy;
            IF cutover IS NULL THEN
                DROP TABLE reports_legacy;
            ELSE
                ALTER TABLE reports_legacy
                    ADD CONSTRAINT reports_legacy_pkey
                    PRIMARY KEY (campaign, window_start, report_id);
                -- A valid CHECK implying the range: ATTACH does not scan the table again.
                EXECUTE format('ALTER TABLE reports_legacy ADD CONSTRAINT reports_legacy_range '
                               'CHECK (window_start < %L)', cutover);
                EXECUTE format('ALTER TABLE reports ATTACH PARTITION reports_legacy '
                               'FOR VALUES FROM (MINVALUE) TO (%L)', cutover);
            END IF;
        END $$""",
    ),
    # Unlinkable storage: the durable staging area ingest writes to when staging is on; the
    # mixer moves its rows into ``reports`` in random order, in one transaction per batch (so
    # every row of a batch has one xmin and a random place in the heap).
    (
        "CREATE TABLE staged_reports (campaign integer NOT NULL REFERENCES campaigns (pk), "
        "report_id text NOT NULL, window_start date NOT NULL, payload text NOT NULL, "
        "PRIMARY KEY (campaign, report_id))",
    ),
    # Staging in two slots used in turns (docs/COLLECTOR.md "Unlinkable storage"): ingest
    # writes the current slot's partition while the mixer seals, moves and truncates the
    # other, so the mixer never holds a lock that an upload waits on. ``mix_slots`` (one row)
    # says which slot ingest writes and how far the mixer got with the other one. Rows staged
    # before the upgrade go to slot 0, the current one.
    (
        "ALTER TABLE staged_reports RENAME TO staged_reports_v6",
        "ALTER INDEX staged_reports_pkey RENAME TO staged_reports_v6_pkey",
        # No foreign key (a per-row check and row lock): ingest holds the campaign row in KEY
        # SHARE mode and resolves the key itself, as for ``reports``; campaigns are never
        # deleted.
        "CREATE TABLE staged_reports (slot smallint NOT NULL, "
        "campaign integer NOT NULL, report_id text NOT NULL, "
        "window_start date NOT NULL, payload text NOT NULL, "
        "PRIMARY KEY (slot, campaign, report_id)) PARTITION BY LIST (slot)",
        "CREATE TABLE staged_reports_0 PARTITION OF staged_reports FOR VALUES IN (0)",
        "CREATE TABLE staged_reports_1 PARTITION OF staged_reports FOR VALUES IN (1)",
        "INSERT INTO staged_reports_0 (slot, campaign, report_id, window_start, payload) "
        "SELECT 0, campaign, report_id, window_start, payload FROM staged_reports_v6",
        "DROP TABLE staged_reports_v6",
        "CREATE TABLE mix_slots (one boolean PRIMARY KEY DEFAULT true CHECK (one), "
        "writing smallint NOT NULL CHECK (writing IN (0, 1)), "
        "other text NOT NULL CHECK (other IN ('writers', 'sealed', 'moved', 'clean')))",
        "INSERT INTO mix_slots (writing, other) VALUES (0, 'clean')",
    ),
    # Tallies and counters in the staging slots (docs/COLLECTOR.md "Unlinkable storage"): an
    # upload that stages into slot s adds its tally and counters to slot s's partitions; the
    # mix folds a sealed slot's rows into ``tally_shards`` / ``report_counters`` (one row per
    # campaign and window) and truncates them with the slot's staged reports, so no row
    # version of one upload survives the mix. Readers sum the settled tables and both slots.
    # Rows written before the upgrade stay where they are (settled).
    (
        "CREATE TABLE staged_tallies (slot smallint NOT NULL, campaign integer NOT NULL, "
        "window_start date NOT NULL, shard smallint NOT NULL, n bigint NOT NULL, "
        "support bigint[], sums numeric[], "
        "CHECK ((support IS NULL) <> (sums IS NULL)), "
        "PRIMARY KEY (slot, campaign, window_start, shard)) PARTITION BY LIST (slot)",
        "CREATE TABLE staged_tallies_0 PARTITION OF staged_tallies FOR VALUES IN (0)",
        "CREATE TABLE staged_tallies_1 PARTITION OF staged_tallies FOR VALUES IN (1)",
        "CREATE TABLE staged_counters (slot smallint NOT NULL, campaign integer NOT NULL, "
        "shard smallint NOT NULL, accepted bigint NOT NULL DEFAULT 0, "
        "duplicate bigint NOT NULL DEFAULT 0, rejected bigint NOT NULL DEFAULT 0, "
        "PRIMARY KEY (slot, campaign, shard)) PARTITION BY LIST (slot)",
        "CREATE TABLE staged_counters_0 PARTITION OF staged_counters FOR VALUES IN (0)",
        "CREATE TABLE staged_counters_1 PARTITION OF staged_counters FOR VALUES IN (1)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)

#: Key of the transaction-level advisory lock that serialises concurrent ``migrate`` calls.
MIGRATION_LOCK = 0x1D9_7E1E
#: Key of the session-level advisory lock held while a retention sweep runs (one at a time,
#: whether started by the service or by ``ldp retention run``).
RETENTION_LOCK = 0x1D9_7E1F
#: Key of the transaction-level advisory lock held while partitions of ``reports`` are created.
PARTITION_LOCK = 0x1D9_7E20
#: Key of the session-level advisory lock held while a mix runs (one mixer at a time, whether
#: the service's or ``ldp mix``).
MIX_LOCK = 0x1D9_7E21


def version_table_sql() -> str:
    """The ``schema_version`` table, created before the first migration."""
    return "CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)"
