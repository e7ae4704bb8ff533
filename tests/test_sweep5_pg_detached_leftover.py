"""A day partition detached by a sweep that stopped before its DROP (fifth sweep, lifecycle).

``drop_aged_partitions`` detaches an aged day partition (``DETACH PARTITION ... CONCURRENTLY``,
outside a transaction) and then drops it. A sweep killed between the two left a plain table
that is no partition of ``reports`` any more: later sweeps list partitions only, so it was
never dropped and its reports outlived their retention, counted nowhere. The next sweep now
drops such a table and counts its rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import psycopg
import pytest

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


def _tables(url: str, name: str) -> int:
    with psycopg.connect(url) as conn:
        return int(
            conn.execute("SELECT count(*) FROM pg_class WHERE relname = %s", (name,)).fetchone()[0]
        )


def test_a_partition_detached_but_not_dropped_is_dropped_and_counted_by_the_next_sweep(
    url: str,
) -> None:
    store = PostgresStorage(url, partitions_ahead=3)
    try:
        store.migrate()
        daily_campaign(store, "c", start=DAY0, days=10, retention_days=3, per_day=10)
        # What a sweep killed right after its detach leaves: the day's reports in a table of
        # their own (the detach committed; nothing recorded them as deleted).
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER TABLE reports DETACH PARTITION reports_p20260102")
        assert store.count_reports(store.get_campaign("c")) == 90  # type: ignore[arg-type]
        done = sweep(store, today=TODAY)
        assert done is not None
        assert _tables(url, "reports_p20260102") == 0  # before: it stayed, with its 10 reports
        # Days 01-01..01-08 gone (the mark is 01-09): 80 reports, the detached day's included.
        assert {c.campaign: c.deleted for c in done} == {"c": 80}
        assert store.count_reports(store.get_campaign("c")) == 20  # type: ignore[arg-type]
        # A second sweep finds nothing more to do.
        again = sweep(store, today=TODAY)
        assert again is not None and {c.campaign: c.deleted for c in again} == {"c": 0}
    finally:
        store.close()
