"""The client's on-device state: one SQLite file in ``state_dir``, shared by its parts.

The file ``ldp-client.sqlite3`` holds the outbox (perturbed reports waiting for the
collector), the log of sent reports (for transparency), the privacy-budget ledger (one row
per campaign, day and epsilons, with its count of reports; see ``ledger``) and a few settings
(consent, the latest day the clock showed). It never holds a true value, nor any domain label
(campaign configurations are cached apart, see ``config_cache``; the ledger keeps SHA-256
digests of the *whole* published domains of memoised campaigns, the same for every device).
One file lets
``report`` charge the budget and enqueue the report in a single transaction: a report is never
stored without its budget charge, and a budget is never charged without its report.

Durability: WAL journal with ``synchronous=NORMAL`` by default, which survives the app being
killed at any point (every committed report is on disk); a power cut can lose the last few
commits. ``durability="full"`` fsyncs every commit instead (slower ``report``).

One client per ``state_dir``: :class:`StateDB` holds an exclusive ``flock`` on
``state_dir/ldp-client.lock`` while open, so a second client (this process or another) fails at
once with :class:`StateDirInUse` instead of racing on the budget. The lock dies with the process.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from client_sdk.errors import (
    InvalidParameter,
    LDPError,
    StateDirInUse,
    StateUnusable,
    StorageFailed,
)

if sys.platform != "win32":
    import fcntl

STATE_FILE = "ldp-client.sqlite3"
LOCK_FILE = "ldp-client.lock"
SCHEMA_VERSION = 2
#: WAL pages after which a committing ``report`` checkpoints inline: a safety net only, since
#: the upload thread checkpoints in the background (see :meth:`StateDB.checkpoint`).
WAL_AUTOCHECKPOINT_PAGES = 8192
DURABILITY_LEVELS = {"normal": "NORMAL", "full": "FULL"}
#: :meth:`StateDB.give_way`: the file counts as busy this long after a foreground write, and
#: background work waits at most ``GIVE_WAY_MAX_SECONDS`` for it to go quiet.
QUIET_SECONDS = 0.001
GIVE_WAY_MAX_SECONDS = 0.02

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign TEXT NOT NULL,
    report_id TEXT NOT NULL UNIQUE,
    day TEXT NOT NULL,
    payload TEXT NOT NULL,
    digest TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS outbox_campaign ON outbox (campaign, digest, seq);
CREATE TABLE IF NOT EXISTS sent (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign TEXT NOT NULL,
    report_id TEXT NOT NULL,
    day TEXT NOT NULL,
    payload TEXT NOT NULL,
    outcome TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (
    campaign TEXT NOT NULL,
    window TEXT NOT NULL,
    reports INTEGER NOT NULL,
    epsilon_sum REAL NOT NULL,
    epsilon_max REAL NOT NULL,
    permanent_epsilon REAL,
    PRIMARY KEY (campaign, window)
);
CREATE TABLE IF NOT EXISTS charges (
    campaign TEXT NOT NULL,
    day TEXT NOT NULL,
    epsilon REAL NOT NULL,
    release TEXT NOT NULL,
    permanent_epsilon REAL NOT NULL,
    reports INTEGER NOT NULL,
    PRIMARY KEY (campaign, day, epsilon, release, permanent_epsilon)
);
CREATE INDEX IF NOT EXISTS charges_day ON charges (day);
CREATE TABLE IF NOT EXISTS release_domain (
    campaign TEXT NOT NULL,
    release TEXT NOT NULL,
    label_digest TEXT NOT NULL,
    PRIMARY KEY (campaign, release, label_digest)
);
CREATE TABLE IF NOT EXISTS settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS device_day (
    report_id TEXT PRIMARY KEY
);
"""


def _columns(conn: sqlite3.Connection) -> dict[str, set[str]]:
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t: {r[1] for r in conn.execute(f"PRAGMA table_info({t!r})")} for t in tables}


def _check_columns(conn: sqlite3.Connection) -> None:
    """Every table of :data:`_SCHEMA` that the file has holds every column it declares (a file
    changed by hand or by another program would fail later, mid-``report``); absent tables are
    made by the schema."""
    expected = sqlite3.connect(":memory:")
    try:
        expected.executescript(_SCHEMA)
        want = _columns(expected)
    finally:
        expected.close()
    have = _columns(conn)
    for table, columns in want.items():
        missing = columns - have.get(table, columns)
        if missing:
            raise sqlite3.DatabaseError(
                f"table {table} lacks the columns {', '.join(sorted(missing))}"
            )


def _migrate(conn: sqlite3.Connection, version: int) -> None:
    """Version 1 kept per-window counts only: turn them into charges (nothing forgotten)."""
    if version == 1:
        conn.execute(
            "INSERT OR IGNORE INTO charges "
            "(campaign, day, epsilon, release, permanent_epsilon, reports) "
            "SELECT campaign, window, epsilon_max, '', 0, reports FROM ledger"
        )


class ClientClosed(LDPError):
    """The client was closed; it no longer accepts reports or touches its state file."""


CLOSED_MESSAGE = "the telemetry client is closed; create a new one"


class StateDB:
    """A thread-safe handle on the state file: one connection, one lock, explicit transactions."""

    def __init__(self, state_dir: str | os.PathLike[str], *, durability: str = "normal") -> None:
        if durability not in DURABILITY_LEVELS:
            raise InvalidParameter(
                f"durability must be one of {sorted(DURABILITY_LEVELS)}, got {durability!r}"
            )
        self.durability = durability
        self.state_dir = Path(state_dir)
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise InvalidParameter(
                f"state_dir {str(self.state_dir)!r} cannot be created: {exc}; pass a writable "
                "directory (the app's private data directory)"
            ) from None
        self.path = self.state_dir / STATE_FILE
        self.lock = threading.RLock()
        #: time.monotonic() when the last foreground transaction was asked for, and when the
        #: last one ended (for give_way; a race between app threads only shortens a wait).
        self._foreground_asked = -math.inf
        self._foreground_ended = -math.inf
        self._closed = False
        self._closed_message = CLOSED_MESSAGE
        self._lock_fd = self._take_lock()
        try:
            self.conn = self._open(durability)
        except BaseException:
            self._release_lock()  # else the next attempt would say "another client holds it"
            raise
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_conn: sqlite3.Connection | None = None

    def _open(self, durability: str) -> sqlite3.Connection:
        """The connection, the schema made or migrated; :class:`StateUnusable` when the file
        is not a state file this SDK can use (left exactly as it is: it holds the ledger)."""
        conn = None
        try:
            conn = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=10.0
            )
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StateUnusable(
                    f"the state file {str(self.path)!r} was written by a newer ldp-telemetry "
                    f"SDK (schema {version}; this one reads up to {SCHEMA_VERSION}): upgrade "
                    "the SDK; the file is left as it is"
                )
            _check_columns(conn)  # before anything is written to the file
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={DURABILITY_LEVELS[durability]}")
            conn.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
            conn.executescript(_SCHEMA)
            _migrate(conn, version)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            return conn
        except BaseException as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, sqlite3.Error):
                raise StateUnusable(
                    f"the state file {str(self.path)!r} cannot be used ({exc}). It holds this "
                    "device's privacy-budget ledger and outbox, so the SDK never replaces it: "
                    "restore it from a backup, or move it away to start afresh (the budget "
                    "this device has spent is then forgotten)"
                ) from None
            raise

    def _take_lock(self) -> int | None:
        if sys.platform == "win32":  # pragma: no cover - no flock; one client per dir by contract
            return None
        try:
            fd = os.open(self.state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:  # a directory in its place, a read-only state_dir, ...
            raise StateUnusable(
                f"the lock file {str(self.state_dir / LOCK_FILE)!r} cannot be opened "
                f"({exc.strerror}); state_dir must be a writable directory of the app's own"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StateDirInUse(
                f"another TelemetryClient holds state_dir {str(self.state_dir)!r} (in this or "
                "another process); use one client per state_dir and share it between threads, "
                "or close the other one first"
            ) from None
        return fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def get_setting(self, name: str) -> str | None:
        with self.reading() as conn:
            row = conn.execute("SELECT value FROM settings WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    @staticmethod
    def put_setting(conn: sqlite3.Connection, name: str, value: str) -> None:
        """Write a setting inside the caller's transaction."""
        conn.execute(
            "INSERT INTO settings (name, value) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (name, value),
        )

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def closed_message(self) -> str:
        """What :class:`ClientClosed` says once the handle is closed (or abandoned)."""
        return self._closed_message

    def give_way(self) -> bool:
        """Background work calls this before each of its transactions: while the app is
        writing (a foreground transaction waits or runs, or ended less than ``QUIET_SECONDS``
        ago) it waits,
        at most ``GIVE_WAY_MAX_SECONDS``, so that a burst of ``report`` calls does not queue
        behind the upload thread's bookkeeping. Never waits when the app is idle. True when
        the app was writing (the caller should then keep its transaction short)."""
        deadline = time.monotonic() + GIVE_WAY_MAX_SECONDS
        waited = False
        while True:
            now = time.monotonic()
            busy = (
                self._foreground_asked > self._foreground_ended
                or now - self._foreground_ended < QUIET_SECONDS
            )
            if not busy or now >= deadline:
                return waited or busy
            waited = True
            time.sleep(min(QUIET_SECONDS, deadline - now))

    @contextlib.contextmanager
    def transaction(self, *, background: bool = False) -> Iterator[sqlite3.Connection]:
        """Hold the lock and run the body in one ``BEGIN IMMEDIATE`` transaction.

        A write the file refuses (disk full, I/O error) raises :class:`StorageFailed`, with
        nothing of the transaction kept. A foreground transaction (the default: ``report``
        and the app's calls) is noted for :meth:`give_way`; ``background=True`` is not.
        """
        if self._closed:  # before the lock, which a forked child must not wait for
            raise ClientClosed(self._closed_message)
        if not background:
            self._foreground_asked = time.monotonic()
        with self.lock:
            if self._closed:
                raise ClientClosed(self._closed_message)
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self.conn
                    self.conn.execute("COMMIT")
                except BaseException:
                    # SQLite ends the transaction itself on some errors (SQLITE_FULL): a
                    # ROLLBACK then would raise "no transaction is active", hiding the error.
                    if self.conn.in_transaction:
                        self.conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise StorageFailed(
                    f"the state file {str(self.path)!r} could not be written ({exc}); nothing "
                    "of this change was kept"
                ) from exc
            finally:
                if not background:
                    self._foreground_ended = time.monotonic()

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """Hold the lock for reads outside a write transaction."""
        if self._closed:
            raise ClientClosed(self._closed_message)
        with self.lock:
            if self._closed:
                raise ClientClosed(self._closed_message)
            yield self.conn

    def checkpoint(self) -> None:
        """Copy the WAL into the database file from a second connection (PASSIVE).

        Runs without the state lock, so ``report`` keeps committing meanwhile; this keeps the
        multi-millisecond checkpoint off the app's threads.
        """
        with self._checkpoint_lock:
            if self._closed:
                return
            if self._checkpoint_conn is None:
                self._checkpoint_conn = sqlite3.connect(
                    self.path, check_same_thread=False, isolation_level=None, timeout=10.0
                )
            self._checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def make_durable(self) -> None:
        """Everything committed so far survives a power cut: with ``durability="normal"`` the
        WAL is synced only when a checkpoint starts, so one runs (``"full"`` syncs every
        commit). The upload thread calls it before reports leave the device: a charge still
        only in an unsynced WAL could be lost with the power after its report had reached the
        collector, and the device would then spend that window's allowance again."""
        if self.durability != "full":
            self.checkpoint()

    def abandon(self, message: str) -> None:
        """In a child made by ``os.fork()``: stop using this handle without touching what the
        child shares with its parent. The SQLite connection is never used again (SQLite
        forbids using a connection across a fork) and the lock descriptor is closed without
        ``LOCK_UN``: a ``flock`` belongs to the open file description the parent shares, so
        unlocking it here released the parent's hold on ``state_dir``. The thread locks are
        replaced, as a thread of the parent that held them does not exist in the child."""
        self._closed = True
        self._closed_message = message
        self.lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)  # the parent's descriptor keeps the flock
            self._lock_fd = None

    def close(self) -> None:
        with self.lock, self._checkpoint_lock:
            if not self._closed:
                self._closed = True
                try:
                    if self._checkpoint_conn is not None:
                        self._checkpoint_conn.close()
                    self.conn.close()
                finally:
                    self._release_lock()
