"""PostgreSQL unlinkable storage, tallies in the staging slots (migration 8): what the fourth
sweep found.

1. An upload that staged no report (all duplicates, or rejected reports only) adds its counters
   to the slot it read; the mix switched slots only when the written slot held *reports*, so
   those counter rows (one version per upload, stamped with its transaction id) outlived every
   later mix; so did the tallies of a slot whose staged reports retention deleted, and the
   counters an upload that read the slot before its switch wrote after its fold.
2. The mix folded a slot's tallies while holding ``ACCESS EXCLUSIVE`` on the slot's tables, and
   every reader of tallies (estimates, the campaign list, ``/metrics``) reads both slots: they
   waited for the whole fold (an open-domain campaign's 262,400-cell sketches: 8.4 s for 48
   uploads over 7 windows, and estimates of every campaign answered ``StorageBusy`` after the
   5 s lock timeout). The tallies now fold in the move's transaction (row locks only).
3. Retention's per-partition counts summed the staged tallies too, though staged reports are
   not in the partition and ``purge_reports`` deletes and counts them: each was counted twice.
"""

from __future__ import annotations

import datetime as dt
import secrets
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from collector.campaigns import Campaign, campaign_from_request
from collector.ingest import ingest_batch
from collector.retention import sweep
from collector.tallycheck import verify_tallies
from tests.support.postgres import fresh_database
from tests.support.reports import campaign_body, reports

psycopg = pytest.importorskip("psycopg")

from collector.storage.postgres import _ADD_COUNTERS, PostgresStorage  # noqa: E402


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_database() as made:
        yield made


def staged_rows(url: str) -> tuple[int, int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM staged_reports), (SELECT count(*) FROM staged_tallies), "
            "(SELECT count(*) FROM staged_counters)"
        ).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def upload(
    store: PostgresStorage, campaign: Campaign, items: list[dict[str, Any]], **kw: Any
) -> Any:
    body = {"digest": campaign.digest, "reports": items}
    return ingest_batch(store, campaign, body, max_reports=1000, **kw)


def setup(url: str, **body: Any) -> tuple[PostgresStorage, Campaign]:
    store = PostgresStorage(url, staging=True)
    store.migrate()
    campaign = campaign_from_request(campaign_body("x", **body))
    store.create_campaign(campaign)
    return store, campaign


def test_counters_and_tallies_of_a_slot_without_reports_do_not_outlive_the_mix(url: str) -> None:
    store, campaign = setup(url)
    try:
        items = reports(campaign.to_record(), 5, seed=1)
        assert upload(store, campaign, items).accepted == 5
        assert store.mix().moved == 5
        assert upload(store, campaign, items).duplicate == 5  # all duplicates
        bad = [{"id": secrets.token_hex(16), "day": items[0]["day"], "payload": "no"}]
        assert upload(store, campaign, bad).rejected == 1  # rejected only
        assert staged_rows(url)[2] > 0
        store.mix()
        assert staged_rows(url) == (0, 0, 0)
        # What an upload that read the slot before its switch writes after the fold: counters
        # in the slot now clean (the next one to be written).
        with psycopg.connect(url, autocommit=True) as conn:
            writing = conn.execute("SELECT writing FROM mix_slots").fetchone()[0]
            pk = conn.execute("SELECT pk FROM campaigns").fetchone()[0]
            conn.execute(_ADD_COUNTERS[1 - writing], (pk, 3, 0, 2, 0))
        store.mix()
        assert staged_rows(url) == (0, 0, 0)
        # Staged reports deleted by retention: their tallies stay, settled by the next mix.
        more = reports(campaign.to_record(), 4, seed=2)
        assert upload(store, campaign, more).accepted == 4
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DELETE FROM staged_reports")  # what purge_reports does to them
        assert staged_rows(url)[:2] == (0, 1)
        store.mix()
        assert staged_rows(url) == (0, 0, 0)
        assert sum(t.n for t in store.tallies(campaign).values()) == 9
        [counters] = store.report_counters()
        assert (counters.accepted, counters.duplicate, counters.rejected) == (9, 7, 1)
        assert store.count_reports(campaign) == 5
    finally:
        store.close()


def waiting_fold(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return bool(
            conn.execute(
                "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO tally_shards%')"
            ).fetchone()[0]
        )


def test_readers_of_tallies_do_not_wait_for_the_fold(url: str) -> None:
    """The fold is held up (a row lock on the settled row it adds to, as a slow fold would
    take long): tallies, counters, the campaign list and a snapshot's verify answer at once
    (a reader with a 200 ms lock timeout) and see the slot whole, before the fold."""
    store, campaign = setup(url)
    store.busy_timeout_ms = 60_000  # the mixer waits for the blocker below
    reader = PostgresStorage(url, busy_timeout_ms=200)
    try:
        items = reports(campaign.to_record(), 10, seed=3)
        assert upload(store, campaign, items[:5]).accepted == 5
        assert store.mix().moved == 5  # the settled shard-0 row of the window exists
        assert upload(store, campaign, items[5:]).accepted == 5
        blocker = psycopg.connect(url)
        done: list[Any] = []
        try:
            blocker.execute("SELECT 1 FROM tally_shards WHERE shard = 0 FOR UPDATE")
            mixer = threading.Thread(target=lambda: done.append(store.mix()))
            mixer.start()
            while not waiting_fold(url):
                mixer.join(0.01)
                assert mixer.is_alive(), done
            assert sum(t.n for t in reader.tallies(campaign).values()) == 10
            assert [c.accepted for c in reader.report_counters()] == [10]
            assert [n for _, n in reader.list_campaigns()] == [10]
            assert reader.count_reports(campaign) == 10
            with reader.snapshot():
                assert all(c.ok for c in verify_tallies(reader))
        finally:
            blocker.rollback()
            blocker.close()
            mixer.join()
        assert done[0].moved == 5
        assert staged_rows(url) == (0, 0, 0)
        assert all(c.ok for c in verify_tallies(reader))
        assert sum(t.n for t in reader.tallies(campaign).values()) == 10
    finally:
        reader.close()
        store.close()


def test_retention_counts_each_staged_report_once(url: str) -> None:
    """A day partition dropped while some of its window's reports are still staged: the
    partition held the mixed ones, purge_reports deletes (and counts) the staged ones."""
    store, campaign = setup(url, horizon_days=2, retention_days=2)
    day = dt.date.today() - dt.timedelta(days=20)
    try:
        store.prepare_partitions(day)
        old = reports(campaign.to_record(), 8, seed=4, day=day.isoformat())
        assert upload(store, campaign, old[:5], today=day).accepted == 5
        assert store.mix().moved == 5
        assert upload(store, campaign, old[5:], today=day).accepted == 3
        [result] = sweep(store, today=day + dt.timedelta(days=10)) or []
        assert (result.deleted, result.dropped) == (8, 5)
        assert store.count_reports(campaign) == 0
    finally:
        store.close()
