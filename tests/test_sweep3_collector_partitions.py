"""PostgreSQL: the day partitions one upload names are made in bounded transactions
(docs/SCALING.md, "Partitioned reports").

Found by the third collector sweep: ingest created every missing day partition in one
transaction, and each partition holds several locks until its transaction ends. A device of a
campaign with ``horizon_days`` 3660 sent 3,600 reports, one per past day, through ``ldp
serve``: the transaction ran out of the server's shared lock table ("out of shared memory",
felt by every session of the cluster meanwhile), the upload got a 503 after about 20 s, and so
did every retry.

Reproducing that needs minutes and starves every other PostgreSQL test of locks while it runs,
so this test shows the property that fixes it, on the real server: the partitions are committed
at most ``_PARTITIONS_PER_TRANSACTION`` at a time. A fault in a later batch (a table already
holding a partition's name, which nothing else can make happen on demand) leaves the earlier
batches made; in one transaction it rolled them all back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from collector.storage import postgres as pg
from collector.storage.postgres import PostgresStorage
from tests.support.postgres import fresh_database

pytestmark = pytest.mark.postgres

DAY0 = dt.date(2020, 1, 1)
CHUNK = pg._PARTITIONS_PER_TRANSACTION


@pytest.fixture
def store() -> Iterator[PostgresStorage]:
    with fresh_database() as url:
        opened = PostgresStorage(url, partitions_ahead=0)
        opened.migrate()
        try:
            yield opened
        finally:
            opened.close()


def _made(store: PostgresStorage, days: list[dt.date]) -> list[dt.date]:
    names = {f"reports_p{d:%Y%m%d}": d for d in days}
    with store._conn() as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'reports'"
        ).fetchall()
    return sorted(names[r[0]] for r in rows if r[0] in names)


def test_partitions_are_committed_a_bounded_batch_at_a_time(store: PostgresStorage) -> None:
    assert 1 <= CHUNK <= 256  # a few locks each: far below the default 64 x 100 lock table
    days = [DAY0 + dt.timedelta(days=i) for i in range(2 * CHUNK + 10)]
    blocked = days[CHUNK + 5]  # in the second batch
    with store._conn() as conn:
        conn.execute(f"CREATE TABLE reports_p{blocked:%Y%m%d} (x int)")
    with pytest.raises(Exception, match="already exists"):
        store.ensure_partitions(days)
    # The first batch was committed before the fault; the second batch's transaction was not.
    assert _made(store, days) == days[:CHUNK]
    with store._conn() as conn:
        conn.execute(f"DROP TABLE reports_p{blocked:%Y%m%d}")
    made = store.ensure_partitions(days)  # a retry makes only what is missing
    assert made == [f"reports_p{d:%Y%m%d}" for d in days[CHUNK:]]
    assert _made(store, days) == days
