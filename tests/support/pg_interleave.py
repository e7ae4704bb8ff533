"""Forcing an interleaving of a PostgreSQL upload with the mixer, with real sessions.

conn = HeldAfterRead(conn, then)   # runs ``then()`` once, right after the first read of
                                   # ``mix_slots`` (its result is already with the client)
upload(store, campaign, items)     # one ingest through the real validation and storage

Only the timing is controlled: the database, the mixer and the other uploads are real.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from collector.campaigns import Campaign
from collector.ingest import BatchResult, ingest_batch
from collector.storage import Storage


class HeldAfterRead:
    """An upload's connection that runs ``then`` once right after its first read of
    ``mix_slots``; everything else goes to the real connection."""

    def __init__(self, conn: Any, then: Callable[[], None]) -> None:
        self._conn = conn
        self._then: Callable[[], None] | None = then

    def execute(self, sql: Any, *args: Any, **kw: Any) -> Any:
        cur = self._conn.execute(sql, *args, **kw)
        if self._then is not None and "FROM mix_slots" in str(sql):
            then, self._then = self._then, None
            then()
        return cur

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def upload(store: Storage, campaign: Campaign, items: list[dict[str, Any]]) -> BatchResult:
    """One upload of ``items`` (report dicts) for ``campaign``, as the HTTP view stores it."""
    body = {"digest": campaign.digest, "reports": items}
    return ingest_batch(store, campaign, body, max_reports=1000)


#: Sessions of the test's database waiting for a lock (heavyweight: table or transaction id).
WAITERS = (
    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
    "WHERE NOT l.granted AND a.datname = current_database()"
)
