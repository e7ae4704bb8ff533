"""The embedded SQLite backend (the default), built on sqlite-utils.

Durability: WAL journal with ``synchronous=FULL`` by default, so the WAL is fsynced at every
commit and a 2xx survives a SIGKILL of the server and a power loss. ``NORMAL`` survives a
process crash (what SIGKILL is) but may lose the last commits on power loss.

Concurrency: each process (gunicorn worker) and thread has its own connection; an ingest takes
the write lock up front (``BEGIN IMMEDIATE``) so the read-add-write of a tally row cannot race;
a writer waits up to ``busy_timeout`` and then :class:`StorageBusy` is raised (HTTP 503).

Schema: versioned migrations in ``MIGRATIONS``, applied in order inside a write transaction and
recorded in ``schema_version``.

Tallies: every mechanism's state is stored generically as ``n`` and its integer vector as a
JSON array in ``tallies.support`` (TEXT). JSON integers are exact at any size, so the sums of
squares of numeric mechanisms fit as they are and schema 2 needed no change for them. Schema 3
adds the retention tables (purge marks and measured usage; lease rows). Schema 4 adds
``staged_reports`` (unlinkable storage: see :meth:`SQLiteStorage.mix`).

Unlinkability: ``secure_delete`` is on, so a deleted row (a mixed staged report, a purged one)
is overwritten with zeros in the file, not left in a free page; after each mix (and every few
slices of one) the WAL, which holds the staged rows of each upload in commit order, is
checkpointed and truncated to zero bytes when no reader holds it (otherwise at a later mix).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np
import sqlite_utils

from client_sdk.mechanisms import AggregateState, Payload
from client_sdk.mechanisms.openended.tally import SketchTally
from client_sdk.mechanisms.tally import Tally
from collector.campaigns import Campaign
from collector.errors import (
    CampaignArchived,
    CampaignExists,
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
    PurgeResult,
    ReportCounters,
    Storage,
    WindowBatch,
)

log = logging.getLogger(__name__)

#: Pages in the WAL past which a commit checkpoints (see TUNING_PRAGMAS).
_WAL_AUTOCHECKPOINT = 20000

#: Page reads through a shared memory map instead of read() calls: each worker's private page
#: cache is invalidated whenever another worker commits, the map (the OS page cache) is not.
TUNING_PRAGMAS = (
    "PRAGMA mmap_size = 268435456",
    "PRAGMA cache_size = -16000",
    # Checkpoints run in a background thread (Checkpointer); this only bounds the WAL (~80 MB)
    # if that thread cannot keep up.
    f"PRAGMA wal_autocheckpoint = {_WAL_AUTOCHECKPOINT}",
    # Deleted content is zeroed, not left in free pages (unlinkable storage, retention).
    "PRAGMA secure_delete = ON",
)

#: Bytes the readiness probe writes: an upload of a few hundred reports writes as much.
PROBE_BYTES = 64 * 1024

#: Rows per multi-row INSERT ... RETURNING statement (4 parameters per row).
_CHUNK = 500
#: Most nonzero tally entries an upload computes and keeps before taking the write lock (one
#: window's tally is held whole while computed, then only its nonzero entries).
_PRETALLY_INTS = 1 << 21
#: The mixer's order: OS randomness, never a seeded generator.
_RANDOM = secrets.SystemRandom()
#: Staged reports moved per write transaction of a mix (a slice). A slice is a random draw, so
#: each of its reports lies on its own staged page and lands on its own report page: a slice's
#: commit writes about two pages per report. With 400,000 staged, on a loaded 2-core machine,
#: slices of 500 held the lock 32-35 ms (median; 130 ms at most); under a heavier load 84-92 ms,
#: where slices of 1000 held it 104-153 ms. One transaction for all of them held it 4.4-19 s,
#: up to and past the 5 s busy timeout of the uploads waiting for it.
MIX_CHUNK = 500
#: Pause between two slices of a mix (seconds): longer than the 2 ms an ingest waiting for the
#: write lock sleeps between attempts (:meth:`SQLiteStorage._begin`), so it gets the lock.
MIX_PAUSE_S = 0.004
#: Slices between two checkpoints of a mix, each a PASSIVE one (it copies the WAL into the file
#: beside the writers) and then the truncation (it blocks writers, briefly: little is left to
#: copy). Without them the WAL grew by every slice while uploads kept it from being reset
#: (3.5 GB for a mix of 400,000 reports), and the truncation after the mix blocked writers for
#: 3.9 s. After every slice: truncations of 42 ms instead of 97 (median), the mix 18% longer.
MIX_CHECKPOINT_SLICES = 4
#: Lease rows of running mixes (``leases``: this prefix and a random token; ``last_run``: the
#: time of the mix's last slice): the service's mixer (``mix(wait=False)``) starts no mix
#: beside a running one, whose slices would take turns with it and leave uploads the lock
#: less often.
_MIX_RUNNING = "mix-running"
#: Seconds, past the busy timeout, after which the row of a mix that did not end (killed) no
#: longer counts: a running mix renews it at every slice, which waits at most the busy
#: timeout for the lock after a pause and a checkpoint.
MIX_STALE_S = 10.0
#: Busy timeout (ms) of the truncating WAL checkpoint after a mix: it gives up rather than
#: hold up ingest (the next mix tries again).
_SCRUB_TIMEOUT_MS = 100
#: Attempts of that checkpoint, and the pause between them (seconds), when it fails at once
#: because another connection is running a checkpoint (a worker's :class:`Checkpointer`,
#: nudged by every commit, the mix's own included, runs one right then).
_SCRUB_ATTEMPTS = 5
_SCRUB_PAUSE_S = 0.01
#: Shortest pause between two purge chunks (seconds): longer than the 2 ms an ingest waiting
#: for the write lock sleeps between attempts (:meth:`SQLiteStorage._begin`).
PURGE_PAUSE_S = 0.004
#: Purge chunks between two PASSIVE checkpoints of the purge's own WAL frames.
PURGE_CHECKPOINT_CHUNKS = 8


def _migration_1(db: sqlite_utils.Database) -> None:
    db.table("campaigns").create({"pk": int, "id": str, "record": str}, pk="pk", not_null={"id"})
    db.table("campaigns").create_index(["id"], unique=True)
    # Per report: campaign, window, report id, payload. Nothing else, by design.
    db.execute(
        "CREATE TABLE reports (campaign INTEGER NOT NULL, report_id TEXT NOT NULL, "
        "window_start TEXT NOT NULL, payload TEXT NOT NULL, "
        "PRIMARY KEY (campaign, report_id)) WITHOUT ROWID"
    )
    db.execute(
        "CREATE TABLE tallies (campaign INTEGER NOT NULL, window_start TEXT NOT NULL, "
        "n INTEGER NOT NULL, support TEXT NOT NULL, "
        "PRIMARY KEY (campaign, window_start)) WITHOUT ROWID"
    )
    db.execute(
        "CREATE TABLE report_counters (campaign INTEGER PRIMARY KEY, "
        "accepted INTEGER NOT NULL DEFAULT 0, duplicate INTEGER NOT NULL DEFAULT 0, "
        "rejected INTEGER NOT NULL DEFAULT 0)"
    )


def _migration_2(db: sqlite_utils.Database) -> None:
    # The archive date of a campaign (NULL: open); campaigns are otherwise immutable.
    db.execute("ALTER TABLE campaigns ADD COLUMN archived TEXT")


def _migration_3(db: sqlite_utils.Database) -> None:
    # Retention: per campaign, the window start before which reports were deleted, and the
    # stored reports / bytes measured by the last sweep (what /metrics reads).
    db.execute(
        "CREATE TABLE retention (campaign INTEGER PRIMARY KEY, purged_before TEXT, "
        "reports INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0)"
    )
    # Lease rows: a periodic job (the retention sweep) runs once per interval across workers.
    db.execute("CREATE TABLE leases (name TEXT PRIMARY KEY, last_run REAL NOT NULL)")


def _migration_4(db: sqlite_utils.Database) -> None:
    # Unlinkable storage: the durable staging area ingest writes to when staging is on; the
    # mixer moves its rows into ``reports`` in random order. Keyed by (campaign, report id),
    # no rowid: the layout says nothing of the order reports arrived in.
    db.execute(
        "CREATE TABLE staged_reports (campaign INTEGER NOT NULL, report_id TEXT NOT NULL, "
        "window_start TEXT NOT NULL, payload TEXT NOT NULL, "
        "PRIMARY KEY (campaign, report_id)) WITHOUT ROWID"
    )


MIGRATIONS: tuple[Callable[[sqlite_utils.Database], None], ...] = (
    _migration_1,
    _migration_2,
    _migration_3,
    _migration_4,
)
SCHEMA_VERSION = len(MIGRATIONS)


#: SQLITE_READONLY's message: a connection SQLite opened read-only can never write.
_READ_ONLY = "attempt to write a readonly database"


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def _storage_error(exc: sqlite3.Error) -> StorageError:
    text = str(exc)
    if _is_busy(exc):
        return StorageBusy(f"the database is busy (another writer holds the lock): {text}")
    return StorageUnavailable(f"the database failed: {text}")


class _Mispredicted(Exception):
    """An upload's insert stored other ids than its tallies were computed for (a retry)."""


@dataclass(frozen=True)
class _Delta:
    """What one upload adds to one window's tally: its report count and the nonzero entries of
    its vector (tallies add entry by entry: counts, sums, sketch counters). An upload's tally
    is sparse in a large one (a few of a sketch's 262,144 or more counters per report), so this
    form is small, and adding it to the stored JSON text changes only those entries."""

    n: int
    size: int
    where: list[int]
    values: list[int]

    @classmethod
    def of(cls, tally: AggregateState) -> _Delta:
        array = None
        if type(tally) is SketchTally:
            array = tally.counts
        elif type(tally) is Tally:
            array = tally.support
        if array is not None:
            where = np.flatnonzero(array)
            return cls(tally.n, int(array.size), where.tolist(), array[where].tolist())
        vector = tally.vector()
        nonzero = [i for i, v in enumerate(vector) if v]
        return cls(tally.n, len(vector), nonzero, [vector[i] for i in nonzero])

    def vector(self) -> list[int]:
        vector = [0] * self.size
        for i, value in zip(self.where, self.values, strict=True):
            vector[i] = value
        return vector

    def added_to(self, stored: str) -> str | None:
        """The JSON text of the stored vector ``stored`` plus this one, or None if ``stored``
        is not a flat JSON list of integers of this length.

        Decoding, adding and re-encoding the whole vector held the write lock about 0.1 s per
        window of a default pem campaign (262,400 counters), so one upload spread over the 31
        days a campaign accepts held it for 4 to 5 s: the other uploads, of every campaign,
        waited past their busy timeout (503)."""
        if len(stored) < 2 or stored[0] != "[" or stored[-1] != "]":
            return None
        parts = stored[1:-1].split(",")
        if len(parts) != self.size:
            return None
        try:
            for i, value in zip(self.where, self.values, strict=True):
                parts[i] = str(int(parts[i]) + value)
        except ValueError:
            return None
        return "[" + ",".join(parts) + "]"


class SQLiteStorage(CampaignRows, Storage):
    """SQLite storage in one file; safe across threads and forked worker processes."""

    PLACEHOLDER = "?"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_ms: int = 5000,
        synchronous: str = "FULL",
        create: bool = True,
        staging: bool = False,
    ) -> None:
        self.path = str(path)
        #: True: ingest stages new reports in ``staged_reports`` for :meth:`mix`.
        self.staging = staging
        #: False: a missing file is an error (``ldp serve`` workers never create an empty store).
        self.create = create
        #: (device, inode) of the file when this process first opened it: a file unlinked or
        #: replaced while serving is detected and refused (503), never written to silently.
        self._identity: tuple[int, int] | None = None
        self.busy_timeout_ms = int(busy_timeout_ms)
        self.synchronous = synchronous
        self._local = threading.local()
        CampaignRows.__init__(self)
        self._lock = threading.Lock()
        self._all: list[sqlite3.Connection] = []
        self._sql: dict[tuple[int, bool], str] = {}
        self._checkpointer: Checkpointer | None = None

    def __repr__(self) -> str:
        return f"SQLiteStorage({self.path!r})"

    # -- connections ------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        pid = os.getpid()
        cached = getattr(self._local, "conn", None)
        if cached is not None and cached[0] == pid:
            self._check_identity()
            return cached[1]
        try:
            if self.path == ":memory:" or self.create:
                # Never a directory: a typo'd path must fail, not become an empty store.
                target, uri = self.path, False
            else:
                target, uri = f"file:{quote(os.path.abspath(self.path))}?mode=rw", True
            conn = sqlite3.connect(
                target,
                timeout=self.busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
                uri=uri,
            )
            conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() != "wal" and self.path != ":memory:":
                raise StorageUnavailable(f"could not switch {self.path} to WAL (got {mode})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            for pragma in TUNING_PRAGMAS:
                conn.execute(pragma)
        except sqlite3.Error as exc:
            if not Path(self.path).parent.is_dir():
                raise StorageUnavailable(
                    f"cannot open the SQLite database {self.path}: the directory "
                    f"{Path(self.path).parent} does not exist (it is not created)"
                ) from None
            if not self.create and not os.path.exists(self.path):
                raise StorageUnavailable(
                    f"the SQLite database {self.path} does not exist (ldp serve --init creates it)"
                ) from None
            raise _storage_error(exc) from None
        except OSError as exc:  # the database's folder cannot be reached
            raise StorageUnavailable(
                f"cannot open the SQLite database {self.path}: {exc}"
            ) from None
        if self.path != ":memory:":
            with self._lock:
                if self._identity is None:
                    self._identity = self._stat()
            self._check_identity()
        self._local.conn = (pid, conn)
        with self._lock:
            self._all.append(conn)
        return conn

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _check_identity(self) -> None:
        """Refuse to use a database file that was deleted or replaced since it was opened."""
        if self._identity is None or self.path == ":memory:":
            return
        now = self._stat()
        if now != self._identity:
            what = "deleted" if now is None else "replaced by another file"
            raise StorageUnavailable(
                f"the SQLite database {self.path} was {what} while the collector was serving; "
                "nothing is stored until it is restored and the collector restarted"
            )

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction holding the lock from the start; all or nothing."""
        conn = self._conn()
        try:
            self._begin(conn)
        except StorageError as exc:
            if _READ_ONLY in str(exc):
                self._forget(conn)
            raise
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            if isinstance(exc, sqlite3.Error):
                if _READ_ONLY in str(exc):
                    self._forget(conn)
                raise _storage_error(exc) from None
            raise

    def _forget(self, conn: sqlite3.Connection) -> None:
        """Close this thread's connection: SQLite opened it read-only (the file was not
        writable then) and it stays so; the next call opens one that can write again once the
        file is writable, instead of 503s until a restart."""
        cached = getattr(self._local, "conn", None)
        if cached is not None and cached[1] is conn:
            self._local.conn = None
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)
        try:
            conn.close()
        except sqlite3.Error:
            pass

    def _begin(self, conn: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE``, waiting up to the busy timeout for another writer.

        SQLite's own busy handler sleeps 1, 2, 5, 10, 15, 20, 25 ... ms between attempts, so a
        waiting worker oversleeps a lock held for a few ms by up to 25 ms. Polling every
        0.2 to 2 ms here hands the lock over promptly between gunicorn workers.
        """
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        delay = 0.0002
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc) or time.monotonic() + delay > deadline:
                        raise _storage_error(exc) from None
                time.sleep(delay)
                delay = min(delay * 1.5, 0.002)
        except sqlite3.Error as exc:
            raise _storage_error(exc) from None
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            yield conn
        except sqlite3.Error as exc:
            raise _storage_error(exc) from None

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads in this thread inside the block see one consistent snapshot of the file.

        One deferred read transaction (WAL: pinned at its first read): ``tally verify``
        compares running tallies with the reports of the same moment while workers ingest.
        """
        conn = self._conn()
        if conn.in_transaction:
            yield  # already inside a snapshot
            return
        try:
            conn.execute("BEGIN")
        except sqlite3.Error as exc:
            raise _storage_error(exc) from None
        try:
            yield
        finally:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error:
                pass

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass
        self._local = threading.local()

    # -- schema -----------------------------------------------------------------------------

    def schema_version(self) -> int:
        with self._read() as conn:
            return self._version(conn)

    def file_schema_version(self) -> int | None:
        """The schema version read without writing to the file: 0 for an empty file or one
        without the collector's schema, None when a read-only look cannot tell (the regular
        connection then reads it). :meth:`schema_version` opens the regular connection, which
        switches the file to WAL: an empty file would become a SQLite database, another
        application's keep a changed header (``ldp_cli.store.require_collector_schema``)."""
        try:
            if os.path.getsize(self.path) == 0:
                return 0
            conn = sqlite3.connect(
                f"file:{quote(os.path.abspath(self.path))}?mode=ro", uri=True, timeout=0.1
            )
        except (OSError, sqlite3.Error):
            return None
        try:
            return self._version(conn)
        except sqlite3.Error:  # not a database, a hot journal, a WAL file without its index
            return None
        finally:
            conn.close()

    @staticmethod
    def _version(conn: sqlite3.Connection) -> int:
        has = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        if not has:
            return 0
        row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def migrate(self) -> int:
        # Read first, without the write lock: a gunicorn worker (re)started while another
        # connection holds the lock must still boot when the schema is current; a worker that
        # fails to boot makes gunicorn stop the whole collector (found by tests/reliability).
        try:
            if self.schema_version() == SCHEMA_VERSION:
                return SCHEMA_VERSION
        except StorageError:
            pass  # the write transaction below says what is wrong
        with self._write() as conn:
            version = self._version(conn)
            if version > SCHEMA_VERSION:
                raise StorageUnavailable(
                    f"{self.path} has schema version {version}, newer than this collector's "
                    f"{SCHEMA_VERSION}: upgrade ldp-telemetry"
                )
            db = sqlite_utils.Database(conn)
            if version == 0:
                conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER)")
            for number in range(version + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[number - 1](db)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (number,))
        return SCHEMA_VERSION

    # -- campaigns --------------------------------------------------------------------------

    def create_campaign(self, campaign: Campaign) -> None:
        record = json.dumps(campaign.to_record(), sort_keys=True)
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM campaigns WHERE id = ?", (campaign.id,)).fetchone():
                raise CampaignExists(f"campaign {campaign.id!r} already exists")
            conn.execute("INSERT INTO campaigns (id, record) VALUES (?, ?)", (campaign.id, record))

    def _reading(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._read()

    def list_campaigns(self) -> list[tuple[Campaign, int]]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT c.record, (SELECT coalesce(sum(t.n), 0) FROM tallies t "
                "WHERE t.campaign = c.pk) FROM campaigns c ORDER BY c.id"
            ).fetchall()
        return [(Campaign.from_record(json.loads(r[0])), int(r[1])) for r in rows]

    def archive_campaign(self, campaign: Campaign, day: str) -> str:
        with self._write() as conn:
            pk = self._pk(conn, campaign)
            conn.execute(
                "UPDATE campaigns SET archived = ? WHERE pk = ? AND archived IS NULL", (day, pk)
            )
            row = conn.execute("SELECT archived FROM campaigns WHERE pk = ?", (pk,)).fetchone()
        return str(row[0])

    def archived(self) -> dict[str, str]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id, archived FROM campaigns WHERE archived IS NOT NULL"
            ).fetchall()
        return {str(r[0]): str(r[1]) for r in rows}

    # -- reports and tallies ----------------------------------------------------------------

    def _insert_sql(self, rows: int, *, guard: bool) -> str:
        """Multi-row insert returning the new ids; ``guard``: only ids absent from the other
        table (``reports`` when staging, ``staged_reports`` otherwise) go in."""
        sql = self._sql.get((rows, guard))
        if sql is None:
            into, other = self._tables()
            values = ",".join(["(?,?,?,?)"] * rows)
            if guard:
                sql = (
                    f"INSERT INTO {into} (campaign, report_id, window_start, payload) "
                    f"SELECT column1, column2, column3, column4 FROM (VALUES {values}) AS v "
                    f"WHERE NOT EXISTS (SELECT 1 FROM {other} o WHERE o.campaign = v.column1 "
                    "AND o.report_id = v.column2) ON CONFLICT DO NOTHING RETURNING report_id"
                )
            else:
                sql = (
                    f"INSERT INTO {into} (campaign, report_id, window_start, payload) VALUES "
                    + values
                    + " ON CONFLICT DO NOTHING RETURNING report_id"
                )
            self._sql[(rows, guard)] = sql
        return sql

    def _insert_one_sql(self, *, guard: bool) -> str:
        """The fast path's statement, one row (executemany)."""
        into, other = self._tables()
        if guard:
            return (
                f"INSERT INTO {into} (campaign, report_id, window_start, payload) "
                f"SELECT ?1, ?2, ?3, ?4 WHERE NOT EXISTS (SELECT 1 FROM {other} "
                "WHERE campaign = ?1 AND report_id = ?2) ON CONFLICT DO NOTHING"
            )
        return (
            f"INSERT INTO {into} (campaign, report_id, window_start, payload) "
            "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"
        )

    def _tables(self) -> tuple[str, str]:
        """(the table ingest writes, the other table a report id may already be in)."""
        return ("staged_reports", "reports") if self.staging else ("reports", "staged_reports")

    def ingest(
        self,
        campaign: Campaign,
        windows: Mapping[str, WindowBatch],
        *,
        rejected: int = 0,
        duplicate: int = 0,
    ) -> IngestCounts:
        repeats = duplicate
        accepted = duplicate = 0
        # Inserting in key order touches B-tree pages in order: faster than random order.
        ordered = {w: sorted(b.rows) for w, b in windows.items() if b.rows}
        checkpointer = self._checkpointer
        if checkpointer is None or checkpointer.pid != os.getpid():
            checkpointer = self._checkpointer = Checkpointer(self.path).start()
        # The tallies are computed before the write lock: a tally costs up to O(reports x k)
        # (olh), which under the lock stalled every other upload of every campaign (k = 65,536:
        # 5 to 10 s per upload of 5,000 reports, past the others' busy timeout: 503s). First
        # every id is predicted new (an upload's usual case: no read); an upload holding ids
        # already stored (a retry) rolls back, reads which are stored, tallies the others and
        # runs again; only one racing another upload of the same ids is tallied under the lock.
        for read_ids in (False, True):
            ready = self._pretally(campaign, windows, ordered, read_ids=read_ids)
            try:
                accepted, duplicate = self._ingest_locked(
                    campaign, windows, ordered, ready, final=read_ids, counts=(rejected, repeats)
                )
            except _Mispredicted:
                continue
            break
        checkpointer.nudge()
        return IngestCounts(accepted=accepted, duplicate=duplicate)

    def _ingest_locked(
        self,
        campaign: Campaign,
        windows: Mapping[str, WindowBatch],
        ordered: Mapping[str, list[tuple[str, str]]],
        ready: Mapping[str, tuple[set[str] | None, _Delta | None]],
        *,
        final: bool,
        counts: tuple[int, int],
    ) -> tuple[int, int]:
        """The write transaction of :meth:`ingest`: (accepted, duplicate). ``ready`` holds
        the tallies computed before it; a window whose insert stores other ids than predicted
        raises :class:`_Mispredicted` (everything rolled back) unless ``final``, where it is
        tallied here."""
        rejected, repeats = counts
        accepted = duplicate = 0
        with self._write() as conn:
            pk = self._pk(conn, campaign)
            # Inside the write transaction: an archive commits either before (refused here)
            # or after this ingest, never in between.
            archived, mark = conn.execute(
                "SELECT c.archived, r.purged_before FROM campaigns c "
                "LEFT JOIN retention r ON r.campaign = c.pk WHERE c.pk = ?",
                (pk,),
            ).fetchone()
            if archived is not None:
                raise CampaignArchived(campaign.id, archived)
            aged = sorted(w for w in ordered if mark is not None and w < mark)
            if aged:
                # The upload was checked against the horizon before a retention sweep (the
                # day changed meanwhile) deleted these windows' reports, and so their ids: a
                # replay would be stored and counted again. Nothing is stored; the retry is
                # checked against today's horizon, which refuses these reports.
                raise StorageBusy(
                    f"campaign {campaign.id!r}: retention deleted the reports of windows "
                    f"before {mark} while this upload (window {aged[0]}) was being checked; "
                    "nothing was stored: retry (reports older than the horizon are refused)"
                )
            # Direct inserts also look for ids still staged (a process with staging on, or
            # staging turned off with reports left staged): never stored and counted twice.
            guard = self.staging or bool(
                ordered
                and conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM staged_reports WHERE campaign = ?)", (pk,)
                ).fetchone()[0]
            )
            for window, rows in ordered.items():
                batch = windows[window]
                new = self._insert_new(conn, pk, window, rows, guard=guard)
                count = len(rows) if new is None else len(new)
                predicted = ready.get(window)
                delta: _Delta | None
                if predicted is not None and predicted[0] == new:
                    delta = predicted[1]  # exactly the ids predicted new were stored
                elif predicted is not None and not final:
                    raise _Mispredicted  # rolled back: the caller reads the ids stored
                elif new is None:
                    delta = _Delta.of(batch.tally(None))
                else:
                    positions = [i for i, (rid, _) in enumerate(batch.rows) if rid in new]
                    delta = _Delta.of(batch.tally(positions))
                accepted += count
                duplicate += len(rows) - count
                if count:
                    assert delta is not None
                    self._add_tally(conn, campaign, pk, window, delta)
            conn.execute(
                "INSERT INTO report_counters (campaign, accepted, duplicate, rejected) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (campaign) DO UPDATE SET "
                "accepted = accepted + excluded.accepted, "
                "duplicate = duplicate + excluded.duplicate, "
                "rejected = rejected + excluded.rejected",
                (pk, accepted, duplicate + repeats, rejected),
            )
        return accepted, duplicate

    def _pretally(
        self,
        campaign: Campaign,
        windows: Mapping[str, WindowBatch],
        ordered: Mapping[str, list[tuple[str, str]]],
        *,
        read_ids: bool,
    ) -> dict[str, tuple[set[str] | None, _Delta | None]]:
        """Per window, before the write lock: the ids predicted new (None: all of them) and
        the nonzero entries of those reports' tally, for ``ingest`` to add when the insert
        stores exactly those.

        Without ``read_ids`` every id is predicted new. With it, the prediction reads which
        ids are already stored (``reports`` and ``staged_reports``, one snapshot per
        statement), so a retry holding known ids is tallied here too. One tally is held whole
        at a time; the nonzero entries kept stay within about ``_PRETALLY_INTS`` (the windows
        left out are tallied under the lock, one at a time).
        """
        ready: dict[str, tuple[set[str] | None, _Delta | None]] = {}
        known: set[str] = set()
        ids = [rid for rows in ordered.values() for rid, _ in rows] if read_ids else []
        if ids:
            with self._read() as conn:
                pk = self._pk(conn, campaign)
                for start in range(0, len(ids), _CHUNK):
                    chunk = ids[start : start + _CHUNK]
                    marks = ",".join("?" * len(chunk))
                    known.update(
                        r[0]
                        for r in conn.execute(
                            f"SELECT report_id FROM reports WHERE campaign = ? AND report_id IN "
                            f"({marks}) UNION ALL SELECT report_id FROM staged_reports WHERE "
                            f"campaign = ? AND report_id IN ({marks})",
                            [pk, *chunk, pk, *chunk],
                        )
                    )
        held = 0
        for window in ordered:
            if held >= _PRETALLY_INTS:
                break
            batch = windows[window]
            fresh = [i for i, (rid, _) in enumerate(batch.rows) if rid not in known]
            if not fresh:
                ready[window] = (set(), None)  # nothing to add: all of them are stored
                continue
            if len(fresh) == len(batch.rows):
                tally, new = batch.tally(None), None
            else:
                tally, new = batch.tally(fresh), {batch.rows[i][0] for i in fresh}
            delta = _Delta.of(tally)
            ready[window] = (new, delta)
            held += len(delta.where) + 1
        return ready

    def _insert_new(
        self,
        conn: sqlite3.Connection,
        pk: int,
        window: str,
        rows: list[tuple[str, str]],
        *,
        guard: bool,
    ) -> set[str] | None:
        """Insert the rows whose id is new; None if all were new, else the set of new ids.

        Fast path: one executemany; when ``total_changes`` shows every row went in, done.
        Otherwise (a retry holding known ids) undo it to a savepoint and insert again with
        ``RETURNING`` to learn exactly which ids are new.
        """
        conn.execute("SAVEPOINT batch")
        before = conn.total_changes
        conn.executemany(
            self._insert_one_sql(guard=guard), [(pk, rid, window, text) for rid, text in rows]
        )
        if conn.total_changes - before == len(rows):
            conn.execute("RELEASE batch")
            return None
        conn.execute("ROLLBACK TO batch")
        conn.execute("RELEASE batch")
        new: set[str] = set()
        for start in range(0, len(rows), _CHUNK):
            chunk = rows[start : start + _CHUNK]
            params: list[object] = []
            for report_id, text in chunk:
                params += (pk, report_id, window, text)
            cur = conn.execute(self._insert_sql(len(chunk), guard=guard), params)
            new.update(r[0] for r in cur.fetchall())
        return new

    @staticmethod
    def _add_tally(
        conn: sqlite3.Connection, campaign: Campaign, pk: int, window: str, delta: _Delta
    ) -> None:
        row = conn.execute(
            "SELECT n, support FROM tallies WHERE campaign = ? AND window_start = ?", (pk, window)
        ).fetchone()
        if row is None:
            n, text = delta.n, json.dumps(delta.vector(), separators=(",", ":"))
        elif (merged := delta.added_to(row[1])) is not None:
            n, text = int(row[0]) + delta.n, merged
        else:  # not a flat list of this length: the mechanism's parser says what is wrong
            mech = campaign.mechanism
            tally = mech.tally_from(delta.n, delta.vector())
            tally = tally + mech.tally_from(int(row[0]), json.loads(row[1]))
            n, text = tally.n, json.dumps(tally.vector(), separators=(",", ":"))
        conn.execute(
            "INSERT OR REPLACE INTO tallies (campaign, window_start, n, support) "
            "VALUES (?, ?, ?, ?)",
            (pk, window, n, text),
        )

    def tallies(
        self, campaign: Campaign, start: str | None = None, end: str | None = None
    ) -> dict[str, AggregateState]:
        with self._read() as conn:
            pk = self._pk(conn, campaign)
            rows = conn.execute(
                "SELECT window_start, n, support FROM tallies WHERE campaign = ? "
                "AND window_start >= ? AND window_start <= ? ORDER BY window_start",
                (pk, start or "", end or "9999-99-99"),
            ).fetchall()
        mech = campaign.mechanism
        return {w: mech.tally_from(int(n), json.loads(support)) for w, n, support in rows}

    def iter_reports(
        self, campaign: Campaign, window: str | None = None
    ) -> Iterator[tuple[str, Payload]]:
        with self._read() as conn:
            pk = self._pk(conn, campaign)
            # Staged reports are stored reports (not yet mixed); an id is in one table only.
            if window is None:
                cur = conn.execute(
                    "SELECT window_start, payload FROM reports WHERE campaign = ?1 UNION ALL "
                    "SELECT window_start, payload FROM staged_reports WHERE campaign = ?1",
                    (pk,),
                )
            else:
                cur = conn.execute(
                    "SELECT window_start, payload FROM reports "
                    "WHERE campaign = ?1 AND window_start = ?2 UNION ALL "
                    "SELECT window_start, payload FROM staged_reports "
                    "WHERE campaign = ?1 AND window_start = ?2",
                    (pk, window),
                )
            for w, text in cur:
                yield w, json.loads(text)

    def count_reports(self, campaign: Campaign) -> int:
        """Stored reports of the campaign (mixed and staged), counted from the rows themselves."""
        with self._read() as conn:
            pk = self._pk(conn, campaign)
            row = conn.execute(
                "SELECT (SELECT count(*) FROM reports WHERE campaign = ?1) + "
                "(SELECT count(*) FROM staged_reports WHERE campaign = ?1)",
                (pk,),
            ).fetchone()
            return int(row[0])

    def report_counters(self) -> list[ReportCounters]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT c.id, coalesce(r.accepted, 0), coalesce(r.duplicate, 0), "
                "coalesce(r.rejected, 0) FROM campaigns c "
                "LEFT JOIN report_counters r ON r.campaign = c.pk ORDER BY c.id"
            ).fetchall()
        return [ReportCounters(*row) for row in rows]

    # -- retention --------------------------------------------------------------------------

    def purge_reports(
        self, campaign: Campaign, before: str, *, chunk: int = PURGE_CHUNK
    ) -> PurgeResult:
        """Chunked delete that leaves the write lock free most of the time.

        Each chunk's key range (at most ``chunk`` aged reports, found by a read outside any
        write lock: a walk of the campaign's primary-key range, no extra index slowing ingest)
        is deleted in one short ``BEGIN IMMEDIATE`` transaction. Between chunks the purge
        sleeps at least as long as the chunk held the lock (and at least
        :data:`PURGE_PAUSE_S`), so a waiting ingest, which polls every 2 ms at most, takes the
        lock before the next chunk. The purge's commits are not fsynced
        (``synchronous = NORMAL`` on its own connection): no fsync is made while it holds the
        lock, and a commit lost to a power cut only brings back reports the next sweep deletes
        again (the purge mark is committed, fsynced, first). The WAL is copied into the file by
        a PASSIVE checkpoint of the purge's connection after every
        :data:`PURGE_CHECKPOINT_CHUNKS` chunks (its automatic checkpoint is off meanwhile),
        outside the lock, so no single checkpoint writes (and fsyncs) much while ingest commits.

        Crash-safe: every chunk commits or not as a whole; a purge killed midway leaves the
        mark and the tallies as they are and some of the aged reports, which the next sweep
        deletes (it starts over from the campaign's first key).

        The mark's transaction also deletes the staged reports of those windows (a mix between
        chunks cannot move them behind the walk), and from then on :meth:`ingest` refuses an
        upload with reports below the mark (:class:`StorageBusy`): one checked against the
        horizon before the day changed would store forgotten ids a second time.
        """
        with self._write() as conn:
            pk = self._pk(conn, campaign)
            conn.execute(
                "INSERT INTO retention (campaign, purged_before) VALUES (?, ?) "
                "ON CONFLICT (campaign) DO UPDATE SET purged_before = "
                "max(coalesce(purged_before, ''), excluded.purged_before)",
                (pk, before),
            )
            # Staged reports of those windows go with the mark: a mix during the chunks below
            # would otherwise move them into key ranges the walk has passed (left stored until
            # the next sweep). Once the mark is committed ingest stores nothing below it.
            staged = conn.execute(
                "DELETE FROM staged_reports WHERE campaign = ? AND window_start < ?", (pk, before)
            ).rowcount
        deleted, chunks = staged, 0
        longest = 0.0
        after = ""
        conn = self._conn()
        self._unsynced(conn)
        try:
            while True:
                with self._read() as conn:
                    # The last key of the next ``chunk`` aged reports (they lie between
                    # ``after`` and it: a range delete, one B-tree walk).
                    row = conn.execute(
                        "SELECT max(report_id), count(*) FROM (SELECT report_id FROM reports "
                        "WHERE campaign = ? AND report_id > ? AND window_start < ? "
                        "ORDER BY report_id LIMIT ?)",
                        (pk, after, before, chunk),
                    ).fetchone()
                if not row[1]:
                    break
                last = str(row[0])
                with self._write() as conn:
                    began = time.perf_counter()  # lock held from here (waiting excluded)
                    cur = conn.execute(
                        "DELETE FROM reports WHERE campaign = ? AND report_id > ? "
                        "AND report_id <= ? AND window_start < ?",
                        (pk, after, last, before),
                    )
                    deleted += cur.rowcount
                held = time.perf_counter() - began
                longest = max(longest, held)
                chunks += 1
                after = last
                if chunks % PURGE_CHECKPOINT_CHUNKS == 0:
                    self._passive_checkpoint(conn)
                time.sleep(max(PURGE_PAUSE_S, held))
            with self._write() as conn:  # staged since by a process without the mark check
                began = time.perf_counter()
                deleted += conn.execute(
                    "DELETE FROM staged_reports WHERE campaign = ? AND window_start < ?",
                    (pk, before),
                ).rowcount
                longest = max(longest, time.perf_counter() - began)
            self._passive_checkpoint(conn)
        finally:
            self._resynced(conn)
        return PurgeResult(deleted=deleted, chunks=chunks, longest_chunk=longest)

    def _passive_checkpoint(self, conn: sqlite3.Connection) -> None:
        """Copy what it can of the WAL into the file without waiting for or blocking anyone."""
        if self.path == ":memory:":
            return
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            log.debug("passive checkpoint skipped: %s", exc)

    def purged_before(self, campaign: Campaign) -> str | None:
        with self._read() as conn:
            pk = self._pk(conn, campaign)
            row = conn.execute(
                "SELECT purged_before FROM retention WHERE campaign = ?", (pk,)
            ).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def usage(self, *, refresh: bool = False) -> list[CampaignUsage]:
        if refresh:
            with self._read() as conn:
                measured = conn.execute(
                    "WITH r AS (SELECT campaign, report_id, payload FROM reports UNION ALL "
                    "SELECT campaign, report_id, payload FROM staged_reports) "
                    "SELECT c.pk, (SELECT count(*) FROM r WHERE r.campaign = c.pk), "
                    "(SELECT coalesce(sum(length(CAST(r.report_id AS BLOB)) + "
                    "length(CAST(r.payload AS BLOB))), 0) FROM r "
                    "WHERE r.campaign = c.pk) FROM campaigns c"
                ).fetchall()
            with self._write() as conn:
                conn.executemany(
                    "INSERT INTO retention (campaign, reports, bytes) VALUES (?, ?, ?) "
                    "ON CONFLICT (campaign) DO UPDATE SET reports = excluded.reports, "
                    "bytes = excluded.bytes",
                    measured,
                )
        with self._read() as conn:
            rows = conn.execute(
                "SELECT c.id, coalesce(t.reports, 0), coalesce(t.bytes, 0), t.purged_before "
                "FROM campaigns c LEFT JOIN retention t ON t.campaign = c.pk ORDER BY c.id"
            ).fetchall()
        return [CampaignUsage(str(r[0]), int(r[1]), int(r[2]), r[3]) for r in rows]

    # -- unlinkable storage ------------------------------------------------------------------

    def mix(self, *, wait: bool = True) -> MixResult:
        """Move the reports staged when the call starts into ``reports``, in an order drawn
        from OS randomness, in write transactions of at most :data:`MIX_CHUNK` reports.

        Unlinkable: the staged keys are read once (one snapshot, outside the write lock) and
        shuffled with ``secrets.SystemRandom``; each transaction moves the next consecutive
        slice of that permutation, inserting into ``reports`` in permutation order and deleting
        from ``staged_reports`` (zeroed in the file: ``secure_delete``). Which reports share a
        transaction (its WAL frames, the pages it writes) and where they land depends on the
        OS's randomness alone, never on devices or the order of uploads. Reports staged after
        the start are left for the next mix. Every :data:`MIX_CHECKPOINT_SLICES` slices and at
        the end the WAL is copied into the file and truncated, best effort (the truncation
        gives up after ``_SCRUB_TIMEOUT_MS`` if a reader holds the WAL; the next one tries
        again): the frames of the uploads and of the slices are gone.

        Exactly once: a slice moves only rows still staged (one moved by a mix running beside
        this one, or deleted by retention, is skipped) and its insert and delete commit
        together, so at every commit each report is in exactly one of the two tables; a crash
        between slices leaves the rest staged for the next mix. Tallies are not touched (they
        are updated at upload).

        Between slices the lock is free for :data:`MIX_PAUSE_S`: an upload waits for one slice
        at most, not for the whole mix. ``wait=False`` (the service's mixer): return at once,
        moving nothing, if another mix is running (its lease row, :data:`_MIX_RUNNING`)."""
        began = time.perf_counter()
        size = MIX_CHUNK
        with self._read() as conn:
            if not conn.execute("SELECT EXISTS (SELECT 1 FROM staged_reports)").fetchone()[0]:
                return MixResult(moved=0, seconds=time.perf_counter() - began)
        conn = self._conn()
        lease = self._claim_mix(wait=wait)
        if lease is None:
            return MixResult(moved=0, seconds=time.perf_counter() - began)
        moved = 0
        try:
            with self._read() as conn:
                keys: list[tuple[int, str]] = conn.execute(
                    "SELECT campaign, report_id FROM staged_reports"
                ).fetchall()
            _RANDOM.shuffle(keys)
            # As the purge: a slice lost to a power cut is staged again, whole (its insert and
            # delete are one commit).
            self._unsynced(conn)
            for number, start in enumerate(range(0, len(keys), size), start=1):
                if start:
                    time.sleep(MIX_PAUSE_S)
                moved += self._mix_slice(keys[start : start + size], lease)
                if number % MIX_CHECKPOINT_SLICES == 0:
                    self._passive_checkpoint(conn)
                    self._scrub_wal()
        finally:
            self._resynced(conn)
            self._release_mix(lease)
        if moved:
            self._passive_checkpoint(conn)
            self._scrub_wal()
        return MixResult(moved=moved, seconds=time.perf_counter() - began)

    @staticmethod
    def _unsynced(conn: sqlite3.Connection) -> None:
        """For a long job of many write transactions (a purge, a mix): no fsync while the
        write lock is held (``synchronous = NORMAL``: a commit lost to a power cut is undone
        whole) and checkpoints of the job's own, outside the lock, instead of the automatic
        one. :meth:`_resynced` restores both."""
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA wal_autocheckpoint = 0")

    def _resynced(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute(f"PRAGMA wal_autocheckpoint = {_WAL_AUTOCHECKPOINT}")
        except sqlite3.Error:  # closed: a read-only connection was let go (_forget)
            pass

    def _claim_mix(self, *, wait: bool) -> str | None:
        """Record a running mix (a new lease row); None, recording nothing, when ``wait`` is
        False and another mix renewed its row within the busy timeout plus
        :data:`MIX_STALE_S`. Rows older than that, or in the future (the clock stepped back),
        are deleted: their mixes were killed, or renew them at their next slice."""
        lease = f"{_MIX_RUNNING} {secrets.token_hex(8)}"
        pattern = f"{_MIX_RUNNING} %"
        with self._write() as conn:
            now = time.time()
            conn.execute(
                "DELETE FROM leases WHERE name LIKE ? AND NOT (last_run <= ? AND last_run > ?)",
                (pattern, now, now - self.busy_timeout_ms / 1000 - MIX_STALE_S),
            )
            running = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM leases WHERE name LIKE ?)", (pattern,)
            ).fetchone()[0]
            if running and not wait:
                return None
            conn.execute("INSERT INTO leases (name, last_run) VALUES (?, ?)", (lease, now))
        return lease

    def _release_mix(self, lease: str) -> None:
        """Delete the mix's lease row; if that fails, the row goes stale on its own."""
        try:
            with self._write() as conn:
                conn.execute("DELETE FROM leases WHERE name = ?", (lease,))
        except StorageError as exc:
            log.debug("the lease row of a mix is left to go stale: %s", exc)

    def _mix_slice(self, keys: list[tuple[int, str]], lease: str) -> int:
        """One write transaction: the rows of ``keys`` still staged go into ``reports`` in the
        order of ``keys`` and out of ``staged_reports``, and the mix's lease row is renewed;
        how many moved."""
        with self._write() as conn:
            # Ingest never stages an id already in reports (both checked under the write
            # lock), so every row goes in; DO NOTHING only guards a hand-edited file.
            conn.executemany(
                "INSERT INTO reports (campaign, report_id, window_start, payload) "
                "SELECT campaign, report_id, window_start, payload FROM staged_reports "
                "WHERE campaign = ? AND report_id = ? ON CONFLICT DO NOTHING",
                keys,
            )
            moved = conn.executemany(
                "DELETE FROM staged_reports WHERE campaign = ? AND report_id = ?", keys
            ).rowcount
            conn.execute(
                "INSERT INTO leases (name, last_run) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET last_run = excluded.last_run",
                (lease, time.time()),
            )
        return moved

    def _scrub_wal(self) -> bool:
        """Copy the WAL into the file and truncate it to zero bytes (the frames of each
        upload, in commit order, are gone). A checkpoint another connection is running makes
        the attempt fail at once: it is tried again, up to :data:`_SCRUB_ATTEMPTS` times. A
        reader or writer that holds the WAL for the whole busy timeout makes it give up (the
        next mix tries again). True when the WAL was truncated."""
        if self.path == ":memory:":
            return False
        conn = self._conn()
        try:
            conn.execute(f"PRAGMA busy_timeout = {_SCRUB_TIMEOUT_MS}")
            for _ in range(_SCRUB_ATTEMPTS):
                began = time.monotonic()
                if not conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
                    return True
                if time.monotonic() - began >= _SCRUB_TIMEOUT_MS / 2000:
                    break  # it waited: a reader or writer holds the WAL, not a checkpoint
                time.sleep(_SCRUB_PAUSE_S)
            log.debug("WAL not truncated after a mix: a reader holds it")
        except sqlite3.Error as exc:
            log.debug("WAL not truncated after a mix: %s", exc)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
        return False

    def staged_count(self) -> int:
        with self._read() as conn:
            return int(conn.execute("SELECT count(*) FROM staged_reports").fetchone()[0])

    def claim_run(self, name: str, interval_seconds: float) -> bool:
        with self._write() as conn:
            # Read under the write lock: the runs recorded are in the order of their clocks.
            now = time.time()
            row = conn.execute("SELECT last_run FROM leases WHERE name = ?", (name,)).fetchone()
            # A last run in the future: the wall clock stepped back since (NTP, a VM resumed).
            # Due now; otherwise no sweep and no mix ran until the clock caught up again.
            if row is not None and 0 <= now - float(row[0]) < interval_seconds:
                return False
            conn.execute(
                "INSERT INTO leases (name, last_run) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET last_run = excluded.last_run",
                (name, now),
            )
        return True

    def ping(self) -> None:
        # A real write of PROBE_BYTES, committed (so it reaches the WAL and is fsynced), then
        # gone: a write rolled back before commit never touches the disk and succeeds on a
        # full one. The row is inserted and deleted in the same transaction: never visible.
        with self._write() as conn:
            conn.execute(
                "INSERT INTO schema_version (version) VALUES (zeroblob(?))", (PROBE_BYTES,)
            )
            conn.execute("DELETE FROM schema_version WHERE typeof(version) = 'blob'")


class Checkpointer:
    """PASSIVE WAL checkpoints in a daemon thread, off the writers' critical path.

    With SQLite's automatic checkpoints the writer whose commit crosses the threshold copies the
    WAL into the database (and fsyncs it) while it holds the write lock, stalling every other
    worker. A PASSIVE checkpoint from another connection runs alongside writers instead; the
    WAL is rewound once a checkpoint has caught up. Durability is unchanged: a commit is durable
    when its WAL frames are fsynced.
    """

    def __init__(self, path: str, *, idle_seconds: float = 0.5, min_interval: float = 0.2) -> None:
        self.path = path
        self.pid = os.getpid()
        self.idle_seconds = idle_seconds
        self.min_interval = min_interval
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ldp-wal-checkpoint", daemon=True)

    def start(self) -> Checkpointer:
        self._thread.start()
        return self

    def nudge(self) -> None:
        """A commit happened: checkpoint soon."""
        self._wake.set()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        conn = None
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            while not self._stopped.is_set():
                self._wake.wait(self.idle_seconds)
                self._wake.clear()
                if self._stopped.is_set():
                    break
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    # Let a few commits gather: a page written by several of them is copied
                    # once, and fewer WAL frames are read back (-35% preads measured).
                    self._stopped.wait(self.min_interval)
                except sqlite3.Error as exc:
                    log.debug("background checkpoint skipped: %s", exc)
                    self._stopped.wait(0.05)
        except Exception as exc:  # the thread must never take the worker down
            log.warning("WAL checkpoint thread stopped: %s", exc)
        finally:
            if conn is not None:
                conn.close()
