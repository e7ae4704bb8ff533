"""The shuffler's durable staging area: one SQLite file, one row per message, nothing else.

A row holds the opaque sealed message and an integer key; no address, no time. ``add`` commits
(WAL, synchronous=FULL) before it returns, so a 202 means the message survives a SIGKILL.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

_SCHEMA = "CREATE TABLE IF NOT EXISTS staged (seq INTEGER PRIMARY KEY, message TEXT NOT NULL)"


class Staging:
    """Durable messages waiting for a batch; safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def add(self, message: str) -> int:
        """Stage one message durably; returns how many are now pending."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute("INSERT INTO staged (message) VALUES (?)", (message,))
                (count,) = self._conn.execute("SELECT count(*) FROM staged").fetchone()
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return int(count)

    def pending(self) -> int:
        with self._lock:
            (count,) = self._conn.execute("SELECT count(*) FROM staged").fetchone()
        return int(count)

    def all(self) -> list[tuple[int, str]]:
        """Every staged (key, message), oldest first."""
        with self._lock:
            rows = self._conn.execute("SELECT seq, message FROM staged ORDER BY seq").fetchall()
        return [(int(seq), str(message)) for seq, message in rows]

    def remove(self, keys: list[int]) -> None:
        """Forget forwarded messages (one transaction)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany("DELETE FROM staged WHERE seq = ?", [(k,) for k in keys])
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
