"""PostgreSQL: a replay checked before the day changed, committed after a sweep of the new day
(fifth sweep; the SQLite twin is ``tests/test_sweep5_sqlite_retention_race.py``).

A sweep deletes an aged window's reports and with them their ids; an upload of the same ids,
checked against the horizon on the eve, was then stored and counted a second time. Ingest now
reads the campaign's purge mark after its ``FOR KEY SHARE`` on the campaign row (the mark is
recorded under ``FOR UPDATE`` of that row, so it waits for ingests in flight) and refuses such
an upload whole (503, nothing stored); the retry is checked against the new day's horizon.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import psycopg
import pytest

from collector.errors import StorageBusy
from collector.retention import sweep
from collector.storage.postgres import PostgresStorage
from collector.tallycheck import verify_tallies
from tests.support.lifecycle import short_campaign, upload_ids
from tests.support.postgres import fresh_database

DAY0 = dt.date(2026, 1, 1)


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_database() as made:
        yield made


def _stored(url: str) -> int:
    with psycopg.connect(url) as conn:
        return int(
            conn.execute(
                "SELECT (SELECT count(*) FROM reports) + (SELECT count(*) FROM staged_reports)"
            ).fetchone()[0]
        )


@pytest.mark.parametrize("staging", [False, True])
def test_a_replay_checked_before_the_sweep_of_the_next_day_is_not_counted_again(
    url: str, staging: bool
) -> None:
    store = PostgresStorage(url, staging=staging, partitions_ahead=3)
    try:
        store.migrate()
        camp = short_campaign()
        store.create_campaign(camp)
        ids = [f"report-{i:012d}" for i in range(8)]
        eve = DAY0 + dt.timedelta(days=3)  # DAY0 is the oldest day the horizon accepts
        assert upload_ids(store, camp, DAY0, ids, today=eve).accepted == 8
        if staging:
            assert store.mix().moved == 8
        # Past midnight a sweep deletes DAY0's window; then the replay, checked on the eve,
        # reaches storage.
        done = sweep(store, today=eve + dt.timedelta(days=1))
        assert done is not None and {c.campaign: c.deleted for c in done} == {"occ": 8}
        with pytest.raises(StorageBusy, match="retention deleted the reports of windows before"):
            upload_ids(store, camp, DAY0, ids, today=eve)  # before: 8 accepted a second time
        assert _stored(url) == 0
        [counters] = store.report_counters()
        assert (counters.accepted, counters.duplicate, counters.rejected) == (8, 0, 0)
        again = upload_ids(store, camp, DAY0, ids, today=eve + dt.timedelta(days=1))
        assert (again.accepted, again.duplicate, again.rejected) == (0, 0, 8)
        # A window the mark keeps still takes its reports.
        kept = DAY0 + dt.timedelta(days=2)
        assert upload_ids(store, camp, kept, ["other-" + i for i in ids], today=eve).accepted == 8
        assert all(check.ok for check in verify_tallies(store))
    finally:
        store.close()
