"""The shuffler's durable staging area: one SQLite file, one row per message, nothing else.

A row holds the opaque sealed message and an integer key; no address, no time. ``add`` returns
only once its message is committed (WAL, synchronous=FULL), so a 202 means the message survives
a SIGKILL. Concurrent ``add`` calls share commits (group commit): while one thread writes, the
messages that arrive meanwhile wait together and the next writer commits all of them in one
transaction, so the fsync per commit is paid once per group, not once per message.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS staged (seq INTEGER PRIMARY KEY, message TEXT NOT NULL, "
    "released INTEGER NOT NULL DEFAULT 0)"
)


class ForeignDatabaseError(ValueError):
    """The file is another program's SQLite database (it holds tables other than ``staged``,
    e.g. the collector's): the shuffler refuses it and leaves it untouched."""


def _foreign_tables(path: Path) -> list[str]:
    """Tables and views of an existing SQLite file other than the staging table, read through
    a read-only connection (nothing is written to the file). Raises ``sqlite3.Error`` for a
    file that is not a database."""
    if not path.is_file() or path.stat().st_size == 0:
        return []
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name"
        ).fetchall()
    finally:
        conn.close()
    return [str(name) for (name,) in rows if name != "staged"]


@dataclass
class _Group:
    """Messages committed together; ``done`` once written (or failed with ``error``)."""

    messages: list[str] = field(default_factory=list)
    done: bool = False
    error: BaseException | None = None


class Staging:
    """Durable messages waiting for a batch; safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        """Open (or create) the staging file ``path``.

        Raises :class:`ForeignDatabaseError`, before writing anything, when the file is an
        SQLite database holding tables other than ``staged`` (the collector's own database,
        say), and ``sqlite3.Error`` when it cannot be opened as a database at all.
        """
        self.path = Path(path)
        foreign = _foreign_tables(self.path)
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise ForeignDatabaseError(
                f"{self.path} is another program's database (it holds the tables {shown}; the "
                "collector's own database?), not a shuffler staging file; it was left untouched"
            )
        self._lock = threading.Lock()  # the connection
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute(_SCHEMA)
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(staged)")}
        if "released" not in columns:  # a file staged by an earlier version
            self._conn.execute(
                "ALTER TABLE staged ADD COLUMN released INTEGER NOT NULL DEFAULT 0"
            )
        (count,) = self._conn.execute("SELECT count(*) FROM staged").fetchone()
        self._pending = int(count)
        self._groups = threading.Condition()  # the open group, the writer flag and _pending
        self._open: _Group | None = None
        self._writing = False
        #: Commits made by ``add`` (each holds one or more messages); for the benchmark.
        self.commits = 0

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def add(self, message: str) -> int:
        """Stage one message durably; returns how many are now pending (kept in memory: the
        shuffler is the file's only writer).

        Raises what the write raised (the message is then not staged: answer 5xx).
        """
        with self._groups:
            if self._open is None:
                self._open = _Group()
            group = self._open
            group.messages.append(message)
            while not group.done:
                if self._writing:
                    self._groups.wait()
                    continue
                # No writer and our group not done: it is the open one. Lead it.
                self._open, self._writing = None, True
                self._groups.release()
                try:
                    self._write(group)
                finally:
                    self._groups.acquire()
                    self._writing = False
                    group.done = True
                    if group.error is None:
                        self._pending += len(group.messages)
                    self._groups.notify_all()
            if group.error is not None:
                raise group.error
            return self._pending

    def _write(self, group: _Group) -> None:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    self._conn.executemany(
                        "INSERT INTO staged (message) VALUES (?)", [(m,) for m in group.messages]
                    )
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            except Exception as exc:  # every waiter of the group re-raises it
                group.error = exc
            self.commits += 1

    def pending(self) -> int:
        """Messages in the file now (read from it: another process may be the shuffler)."""
        with self._lock:
            (count,) = self._conn.execute("SELECT count(*) FROM staged").fetchone()
        return int(count)

    def all(self, *, released: bool | None = None) -> list[tuple[int, str]]:
        """Staged (key, message) pairs, oldest first: every one, or only those of a batch
        already released (``released=True``) or not yet (``False``)."""
        query = "SELECT seq, message FROM staged"
        if released is not None:
            query += f" WHERE released = {int(released)}"
        with self._lock:
            rows = self._conn.execute(query + " ORDER BY seq").fetchall()
        return [(int(seq), str(message)) for seq, message in rows]

    def release(self, keys: list[int]) -> None:
        """Mark messages as one released batch (one transaction): from now on they leave
        whatever else is staged, even if a crash or a refused request splits the batch."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(
                    "UPDATE staged SET released = 1 WHERE seq = ?", [(k,) for k in keys]
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def remove(self, keys: list[int]) -> None:
        """Forget forwarded messages (one transaction)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                before = self._conn.total_changes
                self._conn.executemany("DELETE FROM staged WHERE seq = ?", [(k,) for k in keys])
                removed = self._conn.total_changes - before
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        with self._groups:
            self._pending -= removed
