"""What a PostgreSQL sweep says it deleted (sweep 4, data lifecycle).

``ldp retention run`` prints, per campaign, the reports it deleted (``deleted``, of which
``dropped_by_partition``): an operator's record of what the policy removed. Two cases where
the number was not what left the database; both came from ``drop_aged_partitions``
(collector/storage/postgres.py), which counts a dropped partition's reports from the running
tallies instead of from the partition:

* a sweep that stopped midway (a lock timeout here; a SIGKILL or a lost connection alike) has
  already recorded every campaign's purge mark; the next sweep skips every window below those
  marks as "emptied by an earlier purge" and reports the whole partitions it drops as 0
  deleted;
* reports still staged for the mixer (``LDP_MIX_BATCH`` > 0, the default) are in the tallies,
  not in the partition: they are counted once as dropped with the partition and once more by
  the purge's delete of ``staged_reports``.

Both are fixed in ``drop_aged_partitions``: the tallies it counts from are the settled ones
(a mix folds a slot's tallies in the transaction that moves its reports), and windows below a
campaign's earlier mark are counted from the partition itself.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import psycopg
import pytest

from collector.campaigns import Campaign
from collector.errors import CollectorError
from collector.retention import sweep
from collector.storage.postgres import PostgresStorage
from tests.support.lifecycle import daily_campaign
from tests.support.postgres import fresh_database

DAY0 = dt.date(2026, 1, 1)
TODAY = DAY0 + dt.timedelta(days=11)


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("LDP_TODAY", DAY0.isoformat())
    with fresh_database() as made:
        yield made


def _fill(store: PostgresStorage, days: int = 10, per_day: int = 10) -> list[Campaign]:
    """``short`` keeps 3 days, ``long`` 6: at TODAY every partition before long's mark is
    dropped whole, and short's days from there to its own mark are deleted by key."""
    return [
        daily_campaign(store, cid, start=DAY0, days=days, retention_days=keep, per_day=per_day)
        for cid, keep in (("short", 3), ("long", 6))
    ]


def _stored(url: str) -> dict[str, int]:
    """Reports per campaign, counted from the rows (settled and staged)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.id, (SELECT count(*) FROM reports r WHERE r.campaign = c.pk) + "
            "(SELECT count(*) FROM staged_reports s WHERE s.campaign = c.pk) FROM campaigns c"
        ).fetchall()
    return {str(cid): int(n) for cid, n in rows}


def test_the_sweep_after_an_interrupted_one_counts_what_it_drops(url: str) -> None:
    store = PostgresStorage(url, partitions_ahead=3, busy_timeout_ms=300)
    try:
        store.migrate()
        _fill(store)
        assert _stored(url) == {"short": 100, "long": 100}
        # Another session holds a lock on one aged day: that partition's detach waits past the
        # lock timeout and the sweep stops, after it recorded every campaign's purge mark.
        blocker = psycopg.connect(url)
        try:
            blocker.execute("LOCK TABLE reports_p20260101 IN ACCESS SHARE MODE")
            with pytest.raises(CollectorError):
                sweep(store, today=TODAY)
        finally:
            blocker.rollback()
            blocker.close()
        assert {c.id: store.purged_before(c) for c, _ in store.list_campaigns()} == {
            "short": "2026-01-09",
            "long": "2026-01-06",
        }
        done = sweep(store, today=TODAY)  # finishes the job (the stopped one printed nothing)
        assert done is not None
        assert _stored(url) == {"short": 20, "long": 50}  # days 01-09.. / 01-06.. kept
        # Gone: short's days 01-01..01-08, long's 01-01..01-05 (the one partition the first
        # sweep dropped, 12-31, was empty). It said {"short": 30, "long": 0}.
        # It said {"short": 130, "long": 100}.
        assert {c.campaign: c.deleted for c in done} == {"short": 80, "long": 50}
    finally:
        store.close()


def test_staged_reports_of_aged_windows_are_counted_once(url: str) -> None:
    store = PostgresStorage(url, partitions_ahead=3, staging=True)
    try:
        store.migrate()
        _fill(store)
        assert store.staged_count() == 200  # not mixed yet (the mixer runs every minute)
        done = sweep(store, today=TODAY)
        assert done is not None
        after = _stored(url)
        assert after == {"short": 20, "long": 50}
        # It said {"short": 130, "long": 100}.
        assert {c.campaign: c.deleted for c in done} == {"short": 80, "long": 50}
    finally:
        store.close()
