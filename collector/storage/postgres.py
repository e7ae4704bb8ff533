"""The PostgreSQL backend (psycopg 3 with a per-process connection pool), chosen by URL.

``open_storage("postgresql://user@host/dbname")`` returns a :class:`PostgresStorage`.

Guarantees (those of :class:`collector.storage.base.Storage`):

* Idempotent ingest across any number of workers and machines: one
  ``INSERT ... ON CONFLICT (campaign, window_start, report_id) DO NOTHING RETURNING report_id``
  per upload,
  rows in report-id order (so two uploads sharing ids lock them in the same order and cannot
  deadlock), and only the returned, newly stored ids are tallied, in the same transaction.
  A report id sent twice to two workers at once is stored and counted once: the second
  insert waits on the first one's uncommitted row and then does nothing. So it is when the
  workers differ in staging (a rolling change of ``LDP_MIX_BATCH``, one replica run with
  ``0``): a staging-off upload locks the staging slots that uploads write (``SHARE``: it waits
  for the staging-on uploads in flight and holds new ones off until it commits) and skips ids
  staged there (``_insert_unstaged``).
* Durable on return: the commit waits for the WAL flush (the server's default
  ``synchronous_commit = on``; do not turn it off for the collector's database).
* Reports partitioned by day (docs/SCALING.md, "Partitioned reports"): partitions exist
  ``partitions_ahead`` days ahead (made by ``migrate``, by the retention sweep, and by an
  ingest that meets a day without one), and retention drops a day's partition whole once every
  campaign's reports of that day aged out, instead of deleting its rows. The idempotency key
  is ``(campaign, window_start, report_id)``: a retried report (same id, same day) is stored
  and counted once, also across partitions being created or dropped.
* No hot row: a window's running tally is split over ``tally_shards`` rows; each ingest adds
  to one shard picked at random and readers sum the shards (docs/SCALING.md has the numbers).
  With staging on, the shard rows are those of the staging slot the upload wrote
  (``staged_tallies``, ``staged_counters``), folded into the settled tables by the mix.
* A lock wait longer than ``busy_timeout_ms``, an exhausted pool, a deadlock or a
  serialisation failure (after one retry) raise :class:`StorageBusy`; a server that cannot be
  reached raises :class:`StorageUnavailable`. Either way the transaction rolled back.

Connections: each process opens its own pool lazily on first use, so a pool never crosses a
gunicorn fork. Schema: versioned migrations in :mod:`collector.storage.postgres_schema`.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from client_sdk.mechanisms import AggregateState, Payload
from collector import clock
from collector.campaigns import Campaign
from collector.errors import (
    CampaignArchived,
    CampaignExists,
    ConfigError,
    StorageBusy,
    StorageError,
    StorageUnavailable,
)
from collector.storage.base import (
    PURGE_CHUNK,
    CampaignRows,
    CampaignUsage,
    IngestCounts,
    MixResult,
    PartitionDrop,
    PurgeResult,
    ReportCounters,
    Storage,
    WindowBatch,
)
from collector.storage.postgres_schema import (
    MIGRATION_LOCK,
    MIGRATIONS,
    MIX_LOCK,
    PARTITION_LOCK,
    SCHEMA_VERSION,
    version_table_sql,
)

try:
    import psycopg
    import psycopg.conninfo
    import psycopg.errors as pg_errors
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError:  # pragma: no cover - exercised only without the extra
    psycopg = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

#: Connections per process: one per request thread of ldp serve (LDP_THREADS, default 4).
DEFAULT_POOL_SIZE = 4
#: Rows per window tally (and per campaign counter) that concurrent ingests spread over.
DEFAULT_TALLY_SHARDS = 16
#: Days ahead of today for which ``reports`` partitions are created in advance.
DEFAULT_PARTITIONS_AHEAD = 7
#: Attempts of an ingest that hit a deadlock or serialisation failure before 503.
_ATTEMPTS = 2
#: Runs of an ingest again in another staging slot, or after a phase change of the mixer it
#: cannot rule out was two switches (``_stage``), before 503: a mix's four steps can each
#: send an upload back once, and each run is one short transaction.
_SWITCHES = 6
#: Day partitions created per transaction (each holds a few locks until it commits).
_PARTITIONS_PER_TRANSACTION = 64
#: Pools of parent processes, kept referenced after a fork so they are never closed (closing
#: would end the parent's sessions over the shared sockets).
_ABANDONED: list[Any] = []

_INSERT_REPORTS = (
    "INSERT INTO reports (campaign, report_id, window_start, payload) "
    "SELECT %s, r, w, p FROM unnest(%s::text[], %s::date[], %s::text[]) AS u (r, w, p) "
    "ON CONFLICT (campaign, window_start, report_id) DO NOTHING RETURNING report_id"
)
#: The partitions of ``reports``: name, bound expression, whether a detach is pending.
_PARTITIONS = (
    "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), i.inhdetachpending "
    "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "WHERE i.inhparent = 'reports'::regclass"
)
_BOUND = re.compile(r"FROM \((.+?)\) TO \((.+?)\)")
#: Day tables of ``reports`` that are no partition of it any more: detached by a retention
#: sweep that stopped before its ``DROP TABLE`` (``drop_aged_partitions`` finishes them).
_DETACHED_LEFTOVERS = (
    "SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' "
    "AND c.relname ~ '^reports_p[0-9]{8}$' AND pg_table_is_visible(c.oid) "
    "AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid)"
)
#: Records a campaign's purge mark (never moved back).
_MARK = (
    "INSERT INTO retention (campaign, purged_before) VALUES (%s, %s::date) "
    "ON CONFLICT (campaign) DO UPDATE SET purged_before = "
    "greatest(retention.purged_before, excluded.purged_before)"
)
#: The two staging slots (partitions of ``staged_reports``, migration 7), used in turns:
#: ingest writes the one ``mix_slots.writing`` names; the mixer works on the other.
_SLOTS = ("staged_reports_0", "staged_reports_1")
#: Which slot ingest writes, and the mixer's phase with the other one: ``writers`` (uploads
#: that read the slot before the switch may still be writing it), ``sealed`` (none can; its
#: rows wait to be moved), ``moved`` (its rows are in ``reports``; their dead tuples wait for
#: the truncation) and ``clean`` (empty files: the next slot to write).
_READ_SLOTS = "SELECT writing, other FROM mix_slots"
#: The other slot may hold live staged rows in these phases (uploads check it for their ids).
_LIVE_PHASES = ("writers", "sealed")
#: What an upload reads before and after staging: the slots, and the version of the row (its
#: ``xmin``, new with every update of the mixer), so that a slot switched away and back
#: between the two reads is told from one never switched.
_READ_SLOTS_VERSION = "SELECT writing, other, xmin::text FROM mix_slots"
#: Milliseconds of each wait of an upload for the uploads still writing the other slot
#: (``_await_writers``), between which it reads the mixer's phase again.
_WRITERS_POLL_MS = 20
#: Milliseconds of each attempt of the mix's clean step at its ``ACCESS EXCLUSIVE`` lock, and
#: of the pause between attempts in which readers queued behind it pass (``_lock_to_truncate``).
_CLEAN_POLL_MS = 50
#: The same into the staging area (unlinkable storage): new ids only. One statement, one
#: snapshot: an id in this slot conflicts (waiting for an uncommitted twin); one already in
#: ``reports`` (mixed) or, while it holds live rows, in the other slot is skipped (a row being
#: mixed is in one of the two in any snapshot). Rows in id order, as ``_INSERT_REPORTS``.
#: Each check is one primary-key probe per report (``LATERAL ... LIMIT 1``: never a join that
#: reads ``reports`` whole, nor an ``= ANY (array)`` filter over a slot, which compares every
#: staged row with every id of the upload and was most of staging's cost before).
_STAGE_REPORTS = (
    "INSERT INTO {slot} (slot, campaign, report_id, window_start, payload) "
    "SELECT %(slot)s, %(pk)s, u.r, u.w, u.p "
    "FROM unnest(%(ids)s::text[], %(days)s::date[], %(texts)s::text[]) AS u (r, w, p) "
    "LEFT JOIN LATERAL (SELECT true AS hit FROM reports x WHERE x.campaign = %(pk)s "
    "AND x.window_start = u.w AND x.report_id = u.r LIMIT 1) m ON true{other_join} "
    "WHERE m.hit IS NULL{other_where} ORDER BY u.r "
    "ON CONFLICT (slot, campaign, report_id) DO NOTHING RETURNING report_id"
)
_OTHER_SLOT_JOIN = (
    " LEFT JOIN LATERAL (SELECT true AS hit FROM {other} o WHERE o.slot = %(other)s "
    "AND o.campaign = %(pk)s AND o.report_id = u.r LIMIT 1) o ON true"
)
#: Phases of the slot uploads do not write in which no upload commits reports into it any
#: more (those still writing it at the switch have committed; a later one sees the switch and
#: runs again): a staging-off upload need not wait for that slot's writers, nor for its move.
_SETTLING_PHASES = ("sealed", "moved")
#: A staging-off upload's read, under its locks on the slots (``LOCK TABLE`` takes no snapshot;
#: this statement, run after them, takes its own once they are held): the mixer's state again,
#: and whether each slot holds any report of the campaign (a prefix of the slot's primary key).
_READ_SLOTS_STAGED = (
    "SELECT writing, other, "
    "EXISTS (SELECT FROM staged_reports_0 WHERE slot = 0 AND campaign = {pk}), "
    "EXISTS (SELECT FROM staged_reports_1 WHERE slot = 1 AND campaign = {pk}) FROM mix_slots"
)
#: The staging-off insert while slots hold reports of the campaign: ``_INSERT_REPORTS`` that
#: also skips an id staged in those slots (one primary-key probe per report and slot, as in
#: ``_STAGE_REPORTS``), rows in the upload's order (that of ``_INSERT_REPORTS``: two uploads
#: sharing ids lock them in one order whichever of the two statements each runs).
_INSERT_UNSTAGED = (
    "INSERT INTO reports (campaign, report_id, window_start, payload) "
    "SELECT %(pk)s, u.r, u.w, u.p FROM unnest(%(ids)s::text[], %(days)s::date[], "
    "%(texts)s::text[]) WITH ORDINALITY AS u (r, w, p, i){joins} WHERE {misses} ORDER BY u.i "
    "ON CONFLICT (campaign, window_start, report_id) DO NOTHING RETURNING report_id"
)
_STAGED_PROBE = (
    " LEFT JOIN LATERAL (SELECT true AS hit FROM staged_reports_{slot} s WHERE s.slot = {slot} "
    "AND s.campaign = %(pk)s AND s.report_id = u.r LIMIT 1) s{slot} ON true"
)
#: ``_INSERT_UNSTAGED`` by the slots holding reports of the campaign.
_INSERTS_UNSTAGED: dict[tuple[int, ...], str] = {
    slots: _INSERT_UNSTAGED.format(
        joins="".join(_STAGED_PROBE.format(slot=s) for s in slots),
        misses=" AND ".join(f"s{s}.hit IS NULL" for s in slots),
    )
    for slots in ((0,), (1,), (0, 1))
}
#: An upload's lock on its campaign row (what the tally rows' foreign key takes anyway).
_KEY_SHARE = "SELECT archived FROM campaigns WHERE pk = %s FOR KEY SHARE"
#: The same with the mixer's state, for a staging-off upload (``mix_slots`` has its one row).
_KEY_SHARE_READ_SLOTS = (
    "SELECT c.archived, m.writing, m.other FROM campaigns c CROSS JOIN mix_slots m "
    "WHERE c.pk = %s FOR KEY SHARE OF c"
)
#: The mix, in one statement (no row crosses to the client): every row of the sealed slot is
#: deleted (row locks only) and inserted into ``reports`` sorted by a random key per row from
#: ``gen_random_uuid()``: 122 bits from ``pg_strong_random``, the server's cryptographic
#: source (OpenSSL's, or the OS's), never the seeded ``random()``. I.i.d. uniform keys give a
#: uniform permutation, ties aside (probability below n^2 / 2^123).
_MOVE_STAGED = (
    "WITH moved AS (DELETE FROM {slot} RETURNING campaign, report_id, window_start, payload) "
    "INSERT INTO reports (campaign, report_id, window_start, payload) "
    "SELECT campaign, report_id, window_start, payload FROM moved ORDER BY gen_random_uuid() "
    "ON CONFLICT (campaign, window_start, report_id) DO NOTHING"
)


def _add_state_sql(column: str, cast: str, slot: int | None) -> str:
    """Add one upload's tally to a window's shard row: the settled ``tally_shards`` (``slot``
    None) or a staging slot's ``staged_tallies_<slot>``. ``column`` is ``support`` (bigint[])
    or ``sums`` (numeric[], exact at any size)."""
    table = "tally_shards" if slot is None else f"staged_tallies_{slot}"
    key = "campaign, window_start, shard" if slot is None else "slot, campaign, window_start, shard"
    first = "" if slot is None else f"{slot}, "
    return (
        f"INSERT INTO {table} AS t ({key}, n, {column}) "
        f"VALUES ({first}%s, %s::date, %s, %s, %s::{cast}[]) "
        f"ON CONFLICT ({key}) DO UPDATE SET n = t.n + excluded.n, "
        f"{column} = ARRAY(SELECT a + b FROM unnest(t.{column}, excluded.{column}) "
        "WITH ORDINALITY AS u (a, b, i) ORDER BY i)"
    )


def _add_counters_sql(slot: int | None) -> str:
    """Add one upload's counters to a campaign's shard row, settled or in a staging slot."""
    table = "report_counters" if slot is None else f"staged_counters_{slot}"
    key = "campaign, shard" if slot is None else "slot, campaign, shard"
    first = "" if slot is None else f"{slot}, "
    return (
        f"INSERT INTO {table} AS c ({key}, accepted, duplicate, rejected) "
        f"VALUES ({first}%s, %s, %s, %s, %s) ON CONFLICT ({key}) DO UPDATE SET "
        "accepted = c.accepted + excluded.accepted, duplicate = c.duplicate + excluded.duplicate, "
        "rejected = c.rejected + excluded.rejected"
    )


#: Per slot (None: settled), the statements an upload adds its tally and counters with.
_ADD_TALLY = {slot: _add_state_sql("support", "bigint", slot) for slot in (None, 0, 1)}
_ADD_SUMS = {slot: _add_state_sql("sums", "numeric", slot) for slot in (None, 0, 1)}
_ADD_COUNTERS = {slot: _add_counters_sql(slot) for slot in (None, 0, 1)}
#: Every tally row, settled and staged, for readers (one statement: one snapshot, and a
#: fold's truncation, which waits for the statement's locks, is seen whole or not at all).
_ALL_TALLIES = (
    "(SELECT campaign, window_start, n, support, sums FROM tally_shards UNION ALL "
    "SELECT campaign, window_start, n, support, sums FROM staged_tallies)"
)
_ALL_COUNTERS = (
    "(SELECT campaign, accepted, duplicate, rejected FROM report_counters UNION ALL "
    "SELECT campaign, accepted, duplicate, rejected FROM staged_counters)"
)
#: The fold of a sealed slot's tallies into ``tally_shards``: its shards summed into one row
#: per campaign and window (shard 0, which only the mixer writes while staging is on), rows
#: written in a random order (``gen_random_uuid()``), so neither a row's value nor its place
#: in the heap singles out one upload of the batch. Element-wise sums by ordinality.
_FOLD_STATE = (
    "INSERT INTO tally_shards AS t (campaign, window_start, shard, n, {column}) "
    "SELECT campaign, window_start, 0, n, v FROM ("
    "SELECT s.campaign, s.window_start, s.n, "
    "ARRAY(SELECT sum(x) FROM {table} e, unnest(e.{column}) WITH ORDINALITY AS u (x, i) "
    "WHERE e.campaign = s.campaign AND e.window_start = s.window_start "
    "GROUP BY i ORDER BY i)::{cast}[] AS v "
    "FROM (SELECT campaign, window_start, sum(n)::bigint AS n FROM {table} "
    "WHERE {column} IS NOT NULL GROUP BY campaign, window_start) s) f "
    "ORDER BY gen_random_uuid() "
    "ON CONFLICT (campaign, window_start, shard) DO UPDATE SET n = t.n + excluded.n, "
    "{column} = ARRAY(SELECT a + b FROM unnest(t.{column}, excluded.{column}) "
    "WITH ORDINALITY AS u (a, b, i) ORDER BY i)"
)
_FOLD_COUNTERS = (
    "INSERT INTO report_counters AS c (campaign, shard, accepted, duplicate, rejected) "
    "SELECT campaign, 0, sum(accepted), sum(duplicate), sum(rejected) FROM {table} "
    "GROUP BY campaign ORDER BY gen_random_uuid() "
    "ON CONFLICT (campaign, shard) DO UPDATE SET "
    "accepted = c.accepted + excluded.accepted, duplicate = c.duplicate + excluded.duplicate, "
    "rejected = c.rejected + excluded.rejected"
)


def redact(url: str) -> str:
    """The URL without its password (for messages and logs); never raises.

    A URL ``urlsplit`` cannot parse (``postgresql://[::1``, a port that is not a number) keeps
    nothing of what stands before its ``@``: it raised ValueError inside the very message
    meant to explain the bad URL.
    """
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        scheme, sep, rest = url.partition("://")
        return f"{scheme}{sep}***@{rest.rpartition('@')[2]}" if "@" in rest else url


def _busy_codes() -> tuple[type[BaseException], ...]:
    return (
        pg_errors.LockNotAvailable,
        pg_errors.QueryCanceled,
        pg_errors.DeadlockDetected,
        pg_errors.SerializationFailure,
        pg_errors.TooManyConnections,
        PoolTimeout,
    )


class _SlotSwitched(Exception):
    """The mixer switched staging slots while an upload was writing the old one: the upload
    rolls back and runs again in the new slot (what it wrote would escape the mix)."""


class _Retry(Exception):
    """A deadlock or serialisation failure: the transaction may be run again."""

    def __init__(self, busy: StorageBusy) -> None:
        super().__init__(str(busy))
        self.busy = busy


class PostgresStorage(CampaignRows, Storage):
    """Storage in one PostgreSQL database; safe across threads, processes and machines."""

    PLACEHOLDER = "%s"

    #: The idempotent insert of an upload's reports (its conflict target is the primary key).
    insert_reports_sql = _INSERT_REPORTS

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_ms: int = 5000,
        pool_size: int = DEFAULT_POOL_SIZE,
        tally_shards: int = DEFAULT_TALLY_SHARDS,
        partitions_ahead: int = DEFAULT_PARTITIONS_AHEAD,
        staging: bool = False,
    ) -> None:
        if psycopg is None:
            raise ConfigError(
                f"database {redact(url)!r} is a postgresql:// URL but psycopg is missing: "
                "pip install 'ldp-telemetry[postgres]'"
            )
        if tally_shards < 1 or tally_shards > 32767:
            raise ConfigError(f"tally_shards must be in [1, 32767], got {tally_shards}")
        try:  # before the pool: it would log libpq's complaint, which quotes the URL whole
            psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.Error as exc:
            reason = str(exc).strip().replace(url, redact(url))
            raise ConfigError(
                f"database {redact(url)!r} is not a PostgreSQL URL libpq can read: {reason}"
            ) from None
        self.url = url
        self.busy_timeout_ms = int(busy_timeout_ms)
        self.pool_size = int(pool_size)
        self.tally_shards = int(tally_shards)
        self.partitions_ahead = max(int(partitions_ahead), 0)
        #: Day ranges [lo, hi) known to have a partition (this process's cache).
        self._ranges: list[tuple[dt.date, dt.date]] = []
        #: True: ingest stages new reports in ``staged_reports`` for :meth:`mix`. False: it
        #: stores them in ``reports``, skipping ids other workers staged.
        self.staging = staging
        self._lock = threading.Lock()
        self._local = threading.local()
        self._pool_pid: tuple[int, Any] | None = None
        CampaignRows.__init__(self)

    def __repr__(self) -> str:
        return f"PostgresStorage({redact(self.url)!r})"

    # -- connections ------------------------------------------------------------------------

    def _configure(self, conn: Any) -> None:
        # A lock wait (a concurrent insert of the same id, a tally shard) gives up in time.
        conn.execute(f"SET lock_timeout = {max(self.busy_timeout_ms, 1)}")

    def _pool(self) -> Any:
        pid = os.getpid()
        with self._lock:
            if self._pool_pid is not None and self._pool_pid[0] == pid:
                return self._pool_pid[1]
            if self._pool_pid is not None:  # inherited through fork: never touch it
                _ABANDONED.append(self._pool_pid[1])
            timeout = max(self.busy_timeout_ms / 1000, 0.5)
            pool = ConnectionPool(
                self.url,
                min_size=1,
                max_size=max(self.pool_size, 1),
                timeout=timeout,
                kwargs={"autocommit": True},
                configure=self._configure,
                open=False,
                name="ldp-collector",
            )
            try:
                pool.open(wait=True, timeout=timeout)
            except PoolTimeout:
                pool.close()
                raise StorageUnavailable(self._why_unreachable()) from None
            self._pool_pid = (pid, pool)
            return pool

    def _why_unreachable(self) -> str:
        try:
            psycopg.connect(self.url, connect_timeout=2).close()
            reason = "no connection within the busy timeout"
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        # libpq quotes a URL it cannot parse whole, password included.
        reason = reason.replace(self.url, redact(self.url))
        return (
            f"cannot connect to PostgreSQL at {redact(self.url)}: {reason}; check that the "
            "server runs and the URL (user, host, port, database) is right"
        )

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        """A pooled connection (autocommit), or this thread's :meth:`snapshot` connection;
        psycopg and pool errors become StorageErrors."""
        try:
            pinned = getattr(self._local, "pinned", None)
            if pinned is not None:
                yield pinned
                return
            with self._pool().connection() as conn:
                yield conn
        except StorageError:
            raise
        except _busy_codes() as exc:
            raise StorageBusy(
                f"PostgreSQL is busy ({type(exc).__name__}: {str(exc).strip()[:200]}); nothing "
                f"was stored, retry (lock and pool waits are capped at {self.busy_timeout_ms} ms)"
            ) from None
        except psycopg.Error as exc:
            raise StorageUnavailable(
                f"PostgreSQL at {redact(self.url)} failed: {type(exc).__name__}: "
                f"{str(exc).strip()[:300]}"
            ) from None

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads in this thread inside the block see one consistent snapshot of the database.

        One ``REPEATABLE READ READ ONLY`` transaction: ``tally verify`` compares running
        tallies with the reports of the same moment even while ingest continues (an ingest's
        reports and tally increments commit together, so a snapshot never splits them).
        """
        if getattr(self._local, "pinned", None) is not None:
            yield  # already inside a snapshot
            return
        with self._conn() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            # Before the snapshot is taken (LOCK takes none; it covers both staging slots): a
            # mix's fold and truncation of a slot commits before this snapshot or waits for
            # the block.
            conn.execute(
                "LOCK TABLE staged_reports, staged_tallies, staged_counters IN ACCESS SHARE MODE"
            )
            self._local.pinned = conn
            try:
                yield
            finally:
                self._local.pinned = None

    def close(self) -> None:
        with self._lock:
            held, self._pool_pid = self._pool_pid, None
        if held is not None and held[0] == os.getpid():
            held[1].close()

    # -- schema -----------------------------------------------------------------------------

    def schema_version(self) -> int:
        with self._conn() as conn:
            return self._version(conn)

    @staticmethod
    def _version(conn: Any) -> int:
        if conn.execute("SELECT to_regclass('schema_version')").fetchone()[0] is None:
            return 0
        return int(conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] or 0)

    def migrate(self) -> int:
        with self._conn() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            version = self._version(conn)
            if version > SCHEMA_VERSION:
                raise StorageUnavailable(
                    f"{redact(self.url)} has schema version {version}, newer than this "
                    f"collector's {SCHEMA_VERSION}: upgrade ldp-telemetry"
                )
            conn.execute(version_table_sql())
            for number in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[number - 1]:
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (number,))
        self.prepare_partitions(clock.today())
        return SCHEMA_VERSION

    # -- partitions of reports --------------------------------------------------------------

    @staticmethod
    def _partitions(conn: Any) -> list[tuple[str, dt.date, dt.date, bool]]:
        """Every partition of ``reports``: (name, first day, day after the last, pending)."""
        out = []
        for name, bound, pending in conn.execute(_PARTITIONS).fetchall():
            match = _BOUND.search(bound or "")
            if match is None:  # pragma: no cover - only range partitions are ever made
                continue
            lo, hi = (
                dt.date.min if v == "MINVALUE" else dt.date.fromisoformat(v.strip("'"))
                for v in match.groups()
            )
            out.append((str(name), lo, hi, bool(pending)))
        return sorted(out, key=lambda p: p[1])

    def _covered(self, day: dt.date) -> bool:
        return any(lo <= day < hi for lo, hi in self._ranges)

    def ensure_partitions(self, days: Iterable[dt.date]) -> list[str]:
        """Create the missing day partitions of ``days``; the names created.

        At most ``_PARTITIONS_PER_TRANSACTION`` per transaction, each under an advisory lock
        (concurrent workers create each once). Each partition is created empty and attached
        (``ATTACH PARTITION`` locks ``reports`` only against other DDL, not against ingest);
        made ahead of time (``partitions_ahead`` days) by ``migrate`` and the retention sweep,
        and by an ingest only for a day without one.
        """
        wanted = sorted(set(days))
        made: list[str] = []
        ranges = self._ranges
        # Every partition made holds several locks until its transaction ends. One upload of a
        # campaign with a long horizon may name thousands of days: created in one transaction
        # they ran out of the server's shared lock table ("out of shared memory", for every
        # session of the cluster) and the upload failed with a 503 on every retry.
        for start in range(0, max(len(wanted), 1), _PARTITIONS_PER_TRANSACTION):
            ranges = self._create_partitions(
                wanted[start : start + _PARTITIONS_PER_TRANSACTION], made
            )
        self._ranges = ranges
        return made

    def _create_partitions(
        self, wanted: list[dt.date], made: list[str]
    ) -> list[tuple[dt.date, dt.date]]:
        """One transaction of :meth:`ensure_partitions`: the missing partitions of ``wanted``
        (their names appended to ``made``); every partition's range afterwards."""
        with self._conn() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (PARTITION_LOCK,))
            parts = self._partitions(conn)
            ranges = [(lo, hi) for _, lo, hi, pending in parts if not pending]
            for day in wanted:
                if any(lo <= day < hi for lo, hi in ranges):
                    continue
                name = f"reports_p{day:%Y%m%d}"
                lo, hi = day.isoformat(), (day + dt.timedelta(days=1)).isoformat()
                # CREATE + ATTACH rather than CREATE ... PARTITION OF: ATTACH takes only a
                # SHARE UPDATE EXCLUSIVE lock on reports, which ingest's inserts never wait on.
                conn.execute(f"CREATE TABLE {name} (LIKE reports INCLUDING DEFAULTS)")
                conn.execute(
                    f"ALTER TABLE {name} ADD CONSTRAINT {name}_range "
                    f"CHECK (window_start >= '{lo}' AND window_start < '{hi}')"
                )
                conn.execute(
                    f"ALTER TABLE reports ATTACH PARTITION {name} FOR VALUES "
                    f"FROM ('{lo}') TO ('{hi}')"
                )
                ranges.append((day, day + dt.timedelta(days=1)))
                made.append(name)
        return ranges

    def prepare_partitions(self, today: dt.date) -> list[str]:
        """Partitions for yesterday through ``partitions_ahead`` days after ``today``."""
        span = range(-1, self.partitions_ahead + 1)
        return self.ensure_partitions(today + dt.timedelta(days=i) for i in span)

    def partitions(self) -> list[tuple[str, str, str]]:
        """Every partition of ``reports``: (name, first day, day after its last) as ISO
        dates (the first day of the pre-partitioning ``reports_legacy`` is ``0001-01-01``)."""
        with self._conn() as conn:
            return [(n, lo.isoformat(), hi.isoformat()) for n, lo, hi, _ in self._partitions(conn)]

    def drop_aged_partitions(self, marks: Sequence[tuple[Campaign, str | None]]) -> PartitionDrop:
        """Drop every partition all of whose days lie before every campaign's purge mark.

        Records each campaign's mark first (estimates then treat those windows as report-less),
        then per partition ``DETACH PARTITION ... CONCURRENTLY`` (ingest is not blocked; it
        waits for the transactions that may still read the partition), works out the reports
        it held per campaign from the running tallies (no scan; once detached, so a mix cannot
        move reports into it uncounted) and ``DROP TABLE``. Nothing is dropped
        while any campaign keeps its reports forever (mark None). A detach left pending by an
        interrupted sweep is finished by the next one, and so is a day table it detached but
        did not drop (its rows counted from the table itself).
        """
        if not marks or any(m is None for _, m in marks):
            return PartitionDrop((), {}, 0.0)
        floor = dt.date.fromisoformat(min(m for _, m in marks if m is not None))
        with self._conn() as conn:
            pks = {campaign.id: self._pk(conn, campaign) for campaign, _ in marks}
            before = dict(conn.execute("SELECT campaign, purged_before FROM retention").fetchall())
            self._record_marks(conn, [(pks[campaign.id], mark) for campaign, mark in marks])
            aged = [p for p in self._partitions(conn) if p[2] <= floor]
            leftovers = [
                str(name)
                for (name,) in conn.execute(_DETACHED_LEFTOVERS).fetchall()
                if dt.datetime.strptime(str(name)[len("reports_p") :], "%Y%m%d").date() < floor
            ]
        if not aged and not leftovers:
            return PartitionDrop((), {}, 0.0)
        names = {pk: cid for cid, pk in pks.items()}
        dropped: list[str] = []
        deleted: dict[str, int] = {}
        longest = 0.0
        for name in leftovers:
            # Detached by a sweep that died before its DROP: no longer a partition, so no
            # later sweep saw it, and its reports outlived their retention. Its rows are all
            # that is left of it (the sweep that detached it reported nothing): counted, dropped.
            with self._conn() as conn:
                began = time.perf_counter()
                for pk, n in conn.execute(
                    f"SELECT campaign, count(*) FROM {name} GROUP BY campaign"
                ).fetchall():
                    cid = names.get(int(pk), str(pk))
                    deleted[cid] = deleted.get(cid, 0) + int(n)
                conn.execute(f"DROP TABLE {name}")
                longest = max(longest, time.perf_counter() - began)
            dropped.append(name)
        for name, lo, hi, pending in aged:
            with self._conn() as conn:
                # (Until the DROP no partition of these days can be made again: the detached
                # table keeps its name, so a mix meeting staged reports of them fails and
                # retries, and purge_reports deletes and counts those.)
                detached, counts, left = self._detach_and_count(conn, name, lo, hi, pending, before)
                for pk, n in [*counts, *left]:
                    cid = names.get(int(pk), str(pk))
                    deleted[cid] = deleted.get(cid, 0) + int(n)
                began = time.perf_counter()
                conn.execute(f"DROP TABLE {name}")
                longest = max(longest, detached + time.perf_counter() - began)
            dropped.append(name)
        if dropped:
            self._ranges = []
        return PartitionDrop(tuple(dropped), deleted, longest)

    @staticmethod
    def _detach_and_count(
        conn: Any,
        name: str,
        lo: dt.date,
        hi: dt.date,
        pending: bool,
        before: Mapping[int, dt.date | None],
    ) -> tuple[float, list[tuple[int, int]], list[tuple[int, int]]]:
        """Detach one aged partition of :meth:`drop_aged_partitions`; the seconds it took and
        the reports it holds per campaign: (campaign key, reports) from the tallies, and from
        the partition itself for windows below a campaign's earlier mark."""
        began = time.perf_counter()
        how = "FINALIZE" if pending else "CONCURRENTLY"
        conn.execute(f"ALTER TABLE reports DETACH PARTITION {name} {how}")
        detached = time.perf_counter() - began
        # Counted once detached: a mix moving staged reports of these days into the partition
        # committed before the detach completed (it waits for every transaction that may
        # write the partition), and none can reach it after; counted before it, reports moved
        # in between were dropped uncounted (no longer staged, so purge_reports did not count
        # them either). From the running tallies (a window's n is its stored reports, the
        # invariant tally verify checks), skipping windows an earlier purge emptied: no scan
        # of the partition being dropped. The settled tallies only: they count the reports in
        # ``reports`` (a mix folds a slot's tallies in the transaction that moves its
        # reports); staged reports are not in the partition, and purge_reports deletes and
        # counts them (summing the slots here too counted each of them twice).
        rows = conn.execute(
            "SELECT campaign, window_start, sum(n) FROM tally_shards "
            "WHERE window_start >= %s::date AND window_start < %s::date "
            "GROUP BY campaign, window_start",
            (lo.isoformat(), hi.isoformat()),
        ).fetchall()
        counts = [
            (int(pk), int(n))
            for pk, window, n in rows
            if before.get(pk) is None or window >= before[pk]
        ]
        # Windows below a campaign's earlier mark: a chunked purge emptied them, or an
        # interrupted sweep only recorded the mark (it records every mark first). What is
        # left there is counted from the partition (an index range per campaign).
        left: list[tuple[int, int]] = []
        for pk, gone in before.items():
            if gone is not None and gone > lo:
                found = conn.execute(
                    f"SELECT count(*) FROM {name} WHERE campaign = %s AND window_start < %s::date",
                    (pk, gone),
                ).fetchone()[0]
                if found:
                    left.append((int(pk), int(found)))
        return detached, counts, left

    # -- campaigns --------------------------------------------------------------------------

    def create_campaign(self, campaign: Campaign) -> None:
        record = json.dumps(campaign.to_record(), sort_keys=True)
        with self._conn() as conn:
            row = conn.execute(
                "INSERT INTO campaigns (id, record) VALUES (%s, %s) "
                "ON CONFLICT (id) DO NOTHING RETURNING pk",
                (campaign.id, record),
            ).fetchone()
        if row is None:
            raise CampaignExists(f"campaign {campaign.id!r} already exists")

    def _reading(self) -> AbstractContextManager[Any]:
        return self._conn()

    def list_campaigns(self) -> list[tuple[Campaign, int]]:
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT c.record, (SELECT coalesce(sum(t.n), 0) FROM {_ALL_TALLIES} t "
                'WHERE t.campaign = c.pk) FROM campaigns c ORDER BY c.id COLLATE "C"'
            ).fetchall()
        return [(Campaign.from_record(json.loads(r[0])), int(r[1])) for r in rows]

    def archive_campaign(self, campaign: Campaign, day: str) -> str:
        with self._conn() as conn, conn.transaction():
            pk = self._pk(conn, campaign)
            # FOR UPDATE conflicts with the KEY SHARE lock every ingest takes on the campaign
            # row: in-flight ingests finish first, later ones wait and then see the archive.
            conn.execute("SELECT 1 FROM campaigns WHERE pk = %s FOR UPDATE", (pk,))
            conn.execute(
                "UPDATE campaigns SET archived = %s::date WHERE pk = %s AND archived IS NULL",
                (day, pk),
            )
            row = conn.execute("SELECT archived FROM campaigns WHERE pk = %s", (pk,)).fetchone()
        return str(row[0].isoformat())

    def archived(self) -> dict[str, str]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT id, archived FROM campaigns WHERE archived IS NOT NULL"
            ).fetchall()
        return {str(r[0]): r[1].isoformat() for r in rows}

    # -- reports and tallies ----------------------------------------------------------------

    def ingest(
        self,
        campaign: Campaign,
        windows: Mapping[str, WindowBatch],
        *,
        rejected: int = 0,
        duplicate: int = 0,
    ) -> IngestCounts:
        # All windows' rows in one statement, in report-id order: concurrent uploads that
        # share ids take the row locks in the same order (no deadlock cycle).
        rows = sorted((rid, w, text) for w, b in windows.items() for rid, text in b.rows)
        ids = [r[0] for r in rows]
        days = [r[1] for r in rows]
        texts = [r[2] for r in rows]
        dates = {dt.date.fromisoformat(w) for w in windows}
        if not all(self._covered(d) for d in dates):
            self.ensure_partitions(dates)
        switches = 0
        attempt = 0
        while attempt < _ATTEMPTS:
            attempt += 1
            try:
                return self._ingest_once(campaign, windows, ids, days, texts, rejected, duplicate)
            except _SlotSwitched:
                # Not a failure: run again in the new slot (a switch waits for the mix
                # before it, so two in one upload are already rare), or in the same slot
                # after a step of the mixer (``_stage``: at most one per step).
                switches += 1
                if switches > _SWITCHES:
                    raise StorageBusy(
                        "the mixer switched staging slots during this upload again and "
                        "again; nothing was stored, retry"
                    ) from None
                attempt -= 1
            except _Retry as retry:
                if attempt == _ATTEMPTS:
                    raise retry.busy from None
            except StorageUnavailable as exc:
                # A partition dropped (or detached) since this process last looked: make it
                # again and retry; the failed transaction stored nothing.
                if not isinstance(exc.__context__, pg_errors.CheckViolation):
                    raise
                if attempt == _ATTEMPTS:
                    raise
                self.ensure_partitions(dates)
        raise AssertionError("unreachable")  # pragma: no cover

    def _ingest_once(
        self,
        campaign: Campaign,
        windows: Mapping[str, WindowBatch],
        ids: list[str],
        days: list[str],
        texts: list[str],
        rejected: int,
        repeats: int,
    ) -> IngestCounts:
        shard = random.randrange(self.tally_shards)
        kind = campaign.mechanism.kind
        # Support, pattern and sketch counts are each at most n: bigint[] holds them.
        bigint = kind in ("frequency", "open_domain")
        try:
            with self._conn() as conn, conn.transaction():
                pk = self._pk(conn, campaign)
                # KEY SHARE (what the tally rows' foreign key takes anyway): an archive's FOR
                # UPDATE waits for this ingest, and an ingest after it reads the archive date.
                # It also stands in for the foreign key reports no longer has (the key is
                # this row's, and campaigns are never deleted).
                # With staging off the mixer's state comes along (no round trip of its own):
                # it chooses the locks on the staging slots (``_lock_slots``).
                archived, *mixer = conn.execute(
                    _KEY_SHARE if self.staging else _KEY_SHARE_READ_SLOTS, (pk,)
                ).fetchone()
                if archived is not None:
                    raise CampaignArchived(campaign.id, archived.isoformat())
                # A statement of its own, after the lock: it sees a mark committed while this
                # ingest waited for it (``_record_marks`` locks the row FOR UPDATE).
                self._refuse_aged(conn, campaign, pk, windows)
                new: set[str] | None = None
                # Where this upload's tally and counters go: the slot its reports are staged
                # into (the mix folds and truncates it with them), or the settled rows.
                slot: int | None = None
                if ids:
                    if self.staging:
                        returned, slot = self._stage(conn, pk, ids, days, texts)
                    else:
                        returned = self._insert_unstaged(conn, pk, ids, days, texts, *mixer)
                    if len(returned) < len(ids):
                        new = set(returned)
                    accepted = len(returned)
                else:
                    accepted = 0
                    if self.staging:
                        slot = conn.execute(_READ_SLOTS).fetchone()[0]
                # Tally rows in window order: two ingests lock shared shards in one order.
                for window in sorted(windows):
                    batch = windows[window]
                    if not batch.rows:
                        continue
                    if new is None:
                        tally = batch.tally(None)
                    else:
                        where = [i for i, (rid, _) in enumerate(batch.rows) if rid in new]
                        if not where:
                            continue
                        tally = batch.tally(where)
                    if bigint:
                        vector: list[Any] = tally.vector()
                        conn.execute(_ADD_TALLY[slot], (pk, window, shard, tally.n, vector))
                    else:
                        vector = [str(v) for v in tally.vector()]  # exact, any size
                        conn.execute(_ADD_SUMS[slot], (pk, window, shard, tally.n, vector))
                conn.execute(
                    _ADD_COUNTERS[slot],
                    (pk, shard, accepted, len(ids) - accepted + int(repeats), int(rejected)),
                )
        except StorageBusy as exc:
            cause = exc.__context__
            if isinstance(cause, pg_errors.DeadlockDetected | pg_errors.SerializationFailure):
                raise _Retry(exc) from None
            raise
        return IngestCounts(accepted=accepted, duplicate=len(ids) - accepted)

    def _insert_unstaged(
        self,
        conn: Any,
        pk: int,
        ids: list[str],
        days: list[str],
        texts: list[str],
        writing: int,
        other: str,
    ) -> list[str]:
        """Store the upload's reports in ``reports`` (staging off); the ids newly stored.

        Exactly once across ``reports`` and the staging slots, also beside workers with
        staging on (a rolling config change, one replica run with ``LDP_MIX_BATCH=0``):
        :meth:`_lock_slots` first waits for the staging-on uploads in flight and holds off new
        ones until this upload commits; the insert then skips an id staged in either slot,
        and ``ON CONFLICT`` one in ``reports`` (committed, or being inserted: it waits for
        it). A staging-on upload waiting for the lock sees these rows once it has it (its
        statement's snapshot is taken after its locks: tested). When no slot holds a report of
        the campaign (always, with staging off everywhere), the insert is
        ``insert_reports_sql``, unchanged. ``writing`` and ``other``: ``mix_slots`` as read
        in this transaction."""
        staged = self._lock_slots(conn, pk, writing, other)
        if staged:
            sql = _INSERTS_UNSTAGED[staged]
            params: Any = {"pk": pk, "ids": ids, "days": days, "texts": texts}
        else:
            sql, params = self.insert_reports_sql, (pk, ids, days, texts)
        return [r[0] for r in conn.execute(sql, params).fetchall()]

    @staticmethod
    def _lock_slots(conn: Any, pk: int, writing: int, other: str) -> tuple[int, ...]:
        """Lock the staging slots for a staging-off upload that read ``mix_slots`` as
        (``writing``, ``other``); the slots (0, 1) holding reports of campaign ``pk``, read
        under the locks.

        ``SHARE`` on every slot a staging-on upload may commit reports into (the written
        one; the other in phase ``writers``) or write after a switch (the other, ``clean``):
        it waits for the uploads writing it (``ROW EXCLUSIVE``) and keeps new ones out, yet
        not other staging-off uploads, nor the mixer's ``writers`` step (``SHARE`` too). On
        the other slot in phases ``sealed`` and ``moved`` only ``ACCESS SHARE``: no upload
        commits reports into it, and a ``SHARE`` lock waited for the move, which holds the
        slot for its whole transaction, tally fold included (seconds for large sketches),
        while staging-on uploads queued behind the waiting lock. ``ACCESS SHARE`` keeps the
        clean step (``ACCESS EXCLUSIVE``), hence the next switch, off until this upload
        commits, so the slots stay as read. The state is read again under the locks (the
        mixer may have moved on meanwhile); if it asks for more, more is locked. Slot 0
        first, the order in which a ``DELETE`` or ``LOCK`` of all of ``staged_reports``
        (retention's purge) takes its partitions (seen in ``pg_locks``: slot 0 held while
        slot 1 is waited for), so the two form no cycle."""
        held: tuple[bool, ...] | None = None  # per slot: SHARE (True) or ACCESS SHARE
        live: list[bool] = []
        while True:
            need = tuple(s == writing or other not in _SETTLING_PHASES for s in (0, 1))
            if held is not None and all(h or not n for h, n in zip(held, need, strict=True)):
                return tuple(s for s in (0, 1) if live[s])
            held = need if held is None else tuple(h or n for h, n in zip(held, need, strict=True))
            # Three statements in one round trip: the simple protocol, hence no parameters
            # (the key is an integer).
            cur = conn.execute(
                "".join(
                    f"LOCK TABLE {_SLOTS[s]} IN {'SHARE' if held[s] else 'ACCESS SHARE'} MODE; "
                    for s in (0, 1)
                )
                + _READ_SLOTS_STAGED.format(pk=int(pk))
            )
            while cur.nextset():
                pass
            writing, other, *live = cur.fetchone()

    @staticmethod
    def _refuse_aged(conn: Any, campaign: Campaign, pk: int, windows: Iterable[str]) -> None:
        """StorageBusy if the upload holds reports of a window below the campaign's purge mark.

        It was checked against the horizon before the day changed, and a sweep has since
        deleted those windows' reports and so forgotten their ids: stored now, a replay would
        be counted a second time. Nothing is stored; the retry is checked against today's
        horizon, which refuses those reports. (An ingest already past this check holds its
        ``FOR KEY SHARE`` on the campaign row, so the mark, recorded under ``FOR UPDATE`` of
        that row, waits for it to commit.)"""
        row = conn.execute("SELECT purged_before FROM retention WHERE campaign = %s", (pk,))
        found = row.fetchone()
        mark = None if found is None or found[0] is None else found[0].isoformat()
        aged = sorted(w for w in windows if mark is not None and w < mark)
        if aged:
            raise StorageBusy(
                f"campaign {campaign.id!r}: retention deleted the reports of windows before "
                f"{mark} while this upload (window {aged[0]}) was being checked; nothing was "
                "stored: retry (reports older than the horizon are refused)"
            )

    @staticmethod
    def _record_marks(conn: Any, marks: Sequence[tuple[int, str | None]]) -> None:
        """Record purge marks (campaign key, window start), in one transaction that first locks
        the campaign rows ``FOR UPDATE``: it waits for the ingests in flight (each holds
        ``FOR KEY SHARE``), and those after it read the new mark (:meth:`_refuse_aged`)."""
        with conn.transaction():
            conn.execute(
                "SELECT pk FROM campaigns WHERE pk = ANY(%s) ORDER BY pk FOR UPDATE",
                ([pk for pk, _ in marks],),
            )
            for pk, mark in marks:
                conn.execute(_MARK, (pk, mark))

    def _stage(
        self, conn: Any, pk: int, ids: list[str], days: list[str], texts: list[str]
    ) -> tuple[list[str], int]:
        """Stage the upload's reports in the slot ingest writes; the ids newly stored, and the
        slot (the upload's tally and counters go to the same slot).

        Exactly once across the two slots and ``reports`` (``_STAGE_REPORTS``). The other slot
        is checked while it may hold live rows (phases ``writers`` and ``sealed``); in phase
        ``writers`` a ``SHARE`` lock first waits for the uploads still writing it (they read
        the slot before the switch), so a twin being written there is committed and seen.
        After the insert, which holds its lock on the slot, the slot is read again: if the
        mixer switched slots meanwhile, the upload runs again in the new one
        (:class:`_SlotSwitched`; its rows might otherwise escape the seal). So it does if the
        mixer changed ``mix_slots`` at all since the first read (its ``xmin``) while the other
        slot was read without its lock: between the two reads two mixes may have switched
        away from this slot and back, the other slot live again with ids this upload never
        checked (a retry of its reports staged there was stored twice). No step waits for
        a mix: the mixer locks only the slot ingest no longer writes, and truncates it only
        once uploads no longer read it.
        """
        slot, other, version = conn.execute(_READ_SLOTS_VERSION).fetchone()
        join = where = ""
        if other in _LIVE_PHASES:
            if other == "writers":
                self._await_writers(conn, slot)
            join = _OTHER_SLOT_JOIN.format(other=_SLOTS[1 - slot])
            where = " AND o.hit IS NULL"
        cur = conn.execute(
            _STAGE_REPORTS.format(slot=_SLOTS[slot], other_join=join, other_where=where),
            {"slot": slot, "other": 1 - slot, "pk": pk, "ids": ids, "days": days, "texts": texts},
        )
        returned = [r[0] for r in cur.fetchall()]
        if returned:
            now, _, again = conn.execute(_READ_SLOTS_VERSION).fetchone()
            # Another slot now, or the mixer changed the row since the first read while the
            # other slot was not being checked with its lock (phases other than ``writers``):
            # two switches may have passed (this slot moved, cleaned and written again), with
            # the other slot live again and never checked for this upload's ids. Run again.
            if now != slot or (again != version and other != "writers"):
                raise _SlotSwitched()
        return returned, int(slot)

    def _await_writers(self, conn: Any, slot: int) -> None:
        """Wait (``SHARE`` lock on the other slot) for the uploads still writing the other
        slot, which read it before the switch, but never for the mix that follows: its move
        holds the lock they hold (``ROW EXCLUSIVE``) for its whole transaction, tally fold
        included (seconds for large sketches), and an upload that read phase ``writers`` just
        before the seal and asked for the lock just after the move began waited for all of it
        (a 503 past the lock timeout). So the lock is tried in short waits; between them, once
        the mixer has moved on (the slot sealed: no upload writes it any more) the upload
        runs again (:class:`_SlotSwitched`) in the phase it then reads."""

        def moved_on() -> None:
            now, phase = conn.execute(_READ_SLOTS).fetchone()
            if now != slot or phase != "writers":
                raise _SlotSwitched()

        self._lock_in_attempts(conn, _SLOTS[1 - slot], "SHARE", _WRITERS_POLL_MS, moved_on)

    def _lock_in_attempts(
        self, conn: Any, tables: str, mode: str, attempt_ms: int, between: Callable[[], None]
    ) -> None:
        """``LOCK TABLE tables IN mode MODE``, asked for in attempts of ``attempt_ms`` each (in
        a savepoint: a lock timeout undoes only the attempt), calling ``between`` after each
        failed one (it may raise to give up); ``LockNotAvailable`` once ``busy_timeout_ms``
        has passed in all. The session's lock timeout holds again afterwards."""
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        while True:
            try:
                with conn.transaction():
                    conn.execute(f"SET LOCAL lock_timeout = {attempt_ms}")
                    conn.execute(f"LOCK TABLE {tables} IN {mode} MODE")
                break
            except pg_errors.LockNotAvailable:
                between()
                if time.monotonic() >= deadline:
                    raise
        conn.execute(f"SET LOCAL lock_timeout = {max(self.busy_timeout_ms, 1)}")

    def tallies(
        self, campaign: Campaign, start: str | None = None, end: str | None = None
    ) -> dict[str, AggregateState]:
        sql = f"SELECT window_start, n, support, sums FROM {_ALL_TALLIES} t WHERE campaign = %s"
        params: list[object] = []
        if start is not None:
            sql += " AND window_start >= %s::date"
            params.append(start)
        if end is not None:
            sql += " AND window_start <= %s::date"
            params.append(end)
        with self._conn() as conn:
            pk = self._pk(conn, campaign)
            rows = conn.execute(sql + " ORDER BY window_start", [pk, *params]).fetchall()
        mech = campaign.mechanism
        out: dict[str, AggregateState] = {}
        for window, n, support, sums in rows:
            key = window.isoformat()
            vector = support if support is not None else [int(v) for v in sums]
            shard = mech.tally_from(int(n), vector)
            out[key] = out[key] + shard if key in out else shard
        return out

    def iter_reports(
        self, campaign: Campaign, window: str | None = None
    ) -> Iterator[tuple[str, Payload]]:
        # Staged reports are stored reports (not yet mixed); an id is in one table only. One
        # statement, one snapshot: a mix committing meanwhile neither hides nor doubles a row.
        where = "campaign = %(pk)s"
        with self._conn() as conn, conn.transaction():
            pk = self._pk(conn, campaign)
            params: dict[str, object] = {"pk": pk}
            if window is not None:
                where += " AND window_start = %(w)s::date"
                params["w"] = window
            sql = (
                f"SELECT window_start, payload FROM reports WHERE {where} UNION ALL "
                f"SELECT window_start, payload FROM staged_reports WHERE {where}"
            )
            # A server-side cursor: memory stays flat however many reports a campaign holds.
            with conn.cursor(name="ldp_iter_reports") as cur:
                cur.itersize = 10_000
                cur.execute(sql, params)
                for w, text in cur:
                    yield w.isoformat(), json.loads(text)

    def count_reports(self, campaign: Campaign) -> int:
        """Stored reports of the campaign (mixed and staged), counted from the rows themselves."""
        with self._conn() as conn:
            pk = self._pk(conn, campaign)
            row = conn.execute(
                "SELECT (SELECT count(*) FROM reports WHERE campaign = %(pk)s) + "
                "(SELECT count(*) FROM staged_reports WHERE campaign = %(pk)s)",
                {"pk": pk},
            )
            return int(row.fetchone()[0])

    def report_counters(self) -> list[ReportCounters]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT c.id, coalesce(sum(r.accepted), 0), coalesce(sum(r.duplicate), 0), "
                "coalesce(sum(r.rejected), 0) FROM campaigns c "
                f"LEFT JOIN {_ALL_COUNTERS} r ON r.campaign = c.pk "
                'GROUP BY c.id ORDER BY c.id COLLATE "C"'
            ).fetchall()
        return [ReportCounters(r[0], int(r[1]), int(r[2]), int(r[3])) for r in rows]

    # -- retention --------------------------------------------------------------------------

    def purge_reports(
        self, campaign: Campaign, before: str, *, chunk: int = PURGE_CHUNK
    ) -> PurgeResult:
        """Chunked ``DELETE`` by primary key (a keyset walk of the key from
        ``(campaign, window_start)`` on, one short transaction per chunk), then a plain
        ``VACUUM`` (no exclusive lock) of the partitions it deleted from, so the freed space is
        reused. Whole aged days are dropped as partitions by :meth:`drop_aged_partitions`
        first; this deletes what remains (days another campaign still keeps)."""
        with self._conn() as conn:
            pk = self._pk(conn, campaign)
            self._record_marks(conn, [(pk, before)])
            # Staged reports of those windows (a few, if any) first: a mix moving them into
            # ``reports`` meanwhile commits before this deletes (row locks) and the walk below
            # finds them there; deleted last, those moved after the walk had passed their keys
            # were in neither place, outlived the sweep and were counted nowhere.
            staged = conn.execute(
                "DELETE FROM staged_reports WHERE campaign = %s AND window_start < %s::date",
                (pk, before),
            ).rowcount
        deleted = staged
        chunks = 0
        longest = 0.0
        touched: set[str] = set()
        after: tuple[object, str] = (dt.date.min, "")
        while True:
            began = time.perf_counter()
            with self._conn() as conn:
                rows = conn.execute(
                    # Keyset walk of the primary key from where the last chunk ended (no
                    # re-reading of the dead entries it left); the outer conditions repeat the
                    # inner ones so both sides touch only the aged partitions (pruning).
                    "DELETE FROM reports WHERE campaign = %s AND window_start < %s::date "
                    "AND (campaign, window_start, report_id) IN (SELECT campaign, window_start, "
                    "report_id FROM reports WHERE campaign = %s AND window_start < %s::date "
                    "AND (window_start, report_id) > (%s::date, %s) "
                    "ORDER BY window_start, report_id LIMIT %s) "
                    "RETURNING tableoid::regclass::text, window_start, report_id",
                    (pk, before, pk, before, after[0], after[1], chunk),
                ).fetchall()
            if not rows:
                break
            touched.update(str(r[0]) for r in rows)
            after = max((r[1], r[2]) for r in rows)
            longest = max(longest, time.perf_counter() - began)
            deleted += len(rows)
            chunks += 1
        if touched:
            with self._conn() as conn:
                conn.execute("VACUUM " + ", ".join(sorted(touched)))
        return PurgeResult(deleted=deleted, chunks=chunks, longest_chunk=longest)

    def purged_before(self, campaign: Campaign) -> str | None:
        with self._conn() as conn:
            pk = self._pk(conn, campaign)
            row = conn.execute(
                "SELECT purged_before FROM retention WHERE campaign = %s", (pk,)
            ).fetchone()
        return None if row is None or row[0] is None else str(row[0].isoformat())

    def usage(self, *, refresh: bool = False) -> list[CampaignUsage]:
        with self._conn() as conn:
            if refresh:
                conn.execute(
                    "INSERT INTO retention (campaign, reports, bytes) "
                    "SELECT c.pk, count(r.campaign), coalesce(sum(pg_column_size(r.*)), 0) "
                    "FROM campaigns c LEFT JOIN (SELECT campaign, report_id, window_start, payload "
                    "FROM reports UNION ALL SELECT campaign, report_id, window_start, payload "
                    "FROM staged_reports) r ON r.campaign = c.pk GROUP BY c.pk "
                    "ON CONFLICT (campaign) DO UPDATE SET reports = excluded.reports, "
                    "bytes = excluded.bytes"
                )
            rows = conn.execute(
                "SELECT c.id, coalesce(t.reports, 0), coalesce(t.bytes, 0), t.purged_before "
                "FROM campaigns c LEFT JOIN retention t ON t.campaign = c.pk "
                'ORDER BY c.id COLLATE "C"'
            ).fetchall()
        return [
            CampaignUsage(str(r[0]), int(r[1]), int(r[2]), r[3].isoformat() if r[3] else None)
            for r in rows
        ]

    # -- unlinkable storage ------------------------------------------------------------------

    def mix(self, *, wait: bool = True) -> MixResult:
        """Move every report staged before the call into ``reports``, never holding a lock an
        upload waits on. Staging has two slots (partitions ``staged_reports_0`` and ``_1``);
        ``mix_slots`` names the one ingest writes. One mix, under the session advisory lock
        ``MIX_LOCK`` (a second mix waits; with ``wait=False`` it returns at once, moving
        nothing), finishes what an earlier one left of the other slot (or folds the counters
        a late upload wrote into it once clean), then, if the written slot holds any staged
        row (reports, tallies or counters), switches ingest to the other slot and:

        1. ``writers`` -> ``sealed``: a ``SHARE`` lock on the old slot waits for uploads that
           read it before the switch (an upload reads the slot again after its insert and
           runs again if it changed, so none can write it later);
        2. ``sealed`` -> ``moved``: one transaction deletes every row of the old slot (row
           locks only) and inserts them into ``reports`` in a random order (``_MOVE_STAGED``:
           cryptographic randomness), in one statement (one xmin for the batch, heap places
           in random order; the rows never cross to this process, whose threads serve
           uploads); in the same transaction the slot's tallies (each upload added to a
           shard row of the slot it staged into) are folded into ``tally_shards``, one row
           per campaign and window in a random order (``_FOLD_STATE``), and deleted: readers
           see reports and tallies moved together and never wait for the fold;
        3. ``moved`` -> ``clean``: under ``ACCESS EXCLUSIVE`` locks the slot's counters are
           folded into ``report_counters`` (one row per campaign; late uploads that staged
           nothing may still add to them), and ``TRUNCATE`` of the slot's reports, tallies
           and counters
           gives them new, empty files and drops the old ones, with the staged tuples and
           the tally row versions (each with its upload's xmin; two versions of a row differ
           by one upload's tally) that no vacuum could remove while any older transaction
           runs (measured). Uploads no longer read that slot (they check it only in phases
           ``writers`` and ``sealed``); a reader of all staging (``count_reports``, a
           :meth:`snapshot`) waits for the truncation or the truncation for it.

        Each step is one transaction recorded in ``mix_slots``: a crash leaves the phase,
        and the next mix resumes from it (each staged row moves exactly once)."""
        began = time.perf_counter()
        moved = 0
        with self._conn() as conn:
            if wait:
                conn.execute("SELECT pg_advisory_lock(%s)", (MIX_LOCK,))
            elif not conn.execute("SELECT pg_try_advisory_lock(%s)", (MIX_LOCK,)).fetchone()[0]:
                return MixResult(moved=0, seconds=time.perf_counter() - began)
            try:
                writing, other = conn.execute(_READ_SLOTS).fetchone()
                if other != "clean":  # an earlier mix stopped part way
                    moved += self._mix_slot(conn, 1 - writing, other)
                elif self._holds_rows(conn, 1 - writing):
                    # Counters an upload that read the slot before its switch wrote after
                    # its fold (all duplicates, or rejected only): fold them now.
                    self._mix_slot(conn, 1 - writing, "moved")
                # Any staged row, counters included: an upload that staged no report (all
                # duplicates, or rejected only) left its counters in the slot, and they must
                # not outlive the mix because no report came after it.
                if self._holds_rows(conn, writing):
                    conn.execute(
                        "UPDATE mix_slots SET writing = %s, other = 'writers'", (1 - writing,)
                    )
                    moved += self._mix_slot(conn, writing, "writers")
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIX_LOCK,))
        return MixResult(moved=moved, seconds=time.perf_counter() - began)

    def _mix_slot(self, conn: Any, slot: int, phase: str) -> int:
        """Take the slot ingest no longer writes from ``phase`` to ``clean`` (steps 1-3 of
        :meth:`mix`); the reports moved."""
        table = _SLOTS[slot]
        tallies, counters = f"staged_tallies_{slot}", f"staged_counters_{slot}"
        if phase == "writers":
            with conn.transaction():
                conn.execute(f"LOCK TABLE {table} IN SHARE MODE")
                conn.execute("UPDATE mix_slots SET other = 'sealed'")
            phase = "sealed"
        moved = 0
        if phase == "sealed":
            with conn.transaction():
                days = [r[0] for r in conn.execute(f"SELECT DISTINCT window_start FROM {table}")]
                # Staged days may lack a partition (an old outbox, a dropped day): make them
                # first, from another connection (a concurrent drop makes this step fail
                # whole and the next mix retry it).
                if not all(self._covered(d) for d in days):
                    self.ensure_partitions(days)
                moved = conn.execute(_MOVE_STAGED.format(slot=table)).rowcount
                # The slot's tallies with its reports, in the same transaction (readers see
                # both moved or neither) and under row locks only: no upload adds to them
                # after the seal (an upload adds a tally only with reports it staged, and one
                # staging here after the seal sees the switch and runs again), and readers
                # (estimates) do not wait for the fold, however long it takes (an open-domain
                # sketch's 262,400 cells per window and shard took seconds).
                self._fold_tallies(conn, tallies)
                conn.execute("UPDATE mix_slots SET other = 'moved'")
            phase = "moved"
        if phase == "moved":
            with conn.transaction():
                # All three at once, reports first: an upload that read this slot before the
                # switch takes them in that order, so it finishes first or waits for the
                # truncation and then writes the empty slot (counted, folded by a later mix).
                # Held for the counters' fold (a few rows per campaign) and the truncation:
                # the tallies were folded with the move (none are left, unless the move was
                # made by a mix of an earlier version).
                self._lock_to_truncate(conn, f"{table}, {tallies}, {counters}")
                self._fold_tallies(conn, tallies)
                conn.execute(_FOLD_COUNTERS.format(table=counters))
                conn.execute(f"TRUNCATE {table}, {tallies}, {counters}")
                conn.execute("UPDATE mix_slots SET other = 'clean'")
        return moved

    def _lock_to_truncate(self, conn: Any, tables: str) -> None:
        """``ACCESS EXCLUSIVE`` on ``tables`` for the clean step, asked for in short attempts.

        A queued ``ACCESS EXCLUSIVE`` request makes every later reader of the slot wait behind
        it: while a long reader (``tally verify``, an export) held the slot, a plain ``LOCK``
        stalled every new ``count_reports`` and ``iter_reports`` for up to the lock timeout
        (4.5 s measured). Each attempt waits :data:`_CLEAN_POLL_MS`, then steps out of the
        queue for as long, so readers pass; after ``busy_timeout_ms`` in all it fails as
        before (the next mix resumes from phase ``moved``)."""
        self._lock_in_attempts(
            conn,
            tables,
            "ACCESS EXCLUSIVE",
            _CLEAN_POLL_MS,
            lambda: time.sleep(_CLEAN_POLL_MS / 1000),
        )

    @staticmethod
    def _fold_tallies(conn: Any, tallies: str) -> None:
        """Fold a sealed slot's tally rows into ``tally_shards`` and delete them (their
        versions go with the slot's truncation)."""
        for column, cast in (("support", "bigint"), ("sums", "numeric")):
            conn.execute(_FOLD_STATE.format(table=tallies, column=column, cast=cast))
        conn.execute(f"DELETE FROM {tallies}")

    @staticmethod
    def _holds_rows(conn: Any, slot: int) -> bool:
        """Whether staging slot ``slot`` holds any row: reports, tallies or counters."""
        return bool(
            conn.execute(
                f"SELECT EXISTS (SELECT FROM {_SLOTS[slot]}) "
                f"OR EXISTS (SELECT FROM staged_tallies_{slot}) "
                f"OR EXISTS (SELECT FROM staged_counters_{slot})"
            ).fetchone()[0]
        )

    def staged_count(self) -> int:
        with self._conn() as conn:
            return int(conn.execute("SELECT count(*) FROM staged_reports").fetchone()[0])

    def claim_run(self, name: str, interval_seconds: float) -> bool:
        with self._conn() as conn:
            # One statement: the row lock makes exactly one concurrent caller see it due.
            row = conn.execute(
                "INSERT INTO leases AS l (name, last_run) VALUES (%s, now()) "
                "ON CONFLICT (name) DO UPDATE SET last_run = now() "
                "WHERE l.last_run <= now() - make_interval(secs => %s) "
                # In the future: the clock stepped back since (NTP, a VM resumed); due now,
                # else no sweep and no mix ran until the clock caught up.
                "OR l.last_run > now() RETURNING 1",
                (name, float(interval_seconds)),
            ).fetchone()
        return row is not None

    @contextmanager
    def exclusive(self, key: int) -> Iterator[bool]:
        """Hold the session advisory lock ``key`` for the block; yields False (and holds
        nothing) when another session holds it."""
        with self._conn() as conn:
            got = bool(conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0])
            try:
                yield got
            finally:
                if got:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def ping(self) -> None:
        with self._conn() as conn, conn.transaction():
            # A real write, rolled back: proves the database is writable (not a read replica).
            conn.execute("INSERT INTO schema_version (version) VALUES (-1)")
            raise psycopg.Rollback()
