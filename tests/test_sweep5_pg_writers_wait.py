"""PostgreSQL staging slots: an upload that waits for the uploads still writing the other slot
must not wait for the mix that follows (fifth sweep).

Right after a switch (phase ``writers``) an upload takes a ``SHARE`` lock on the other slot, to
wait for the uploads that read it before the switch. The mix's move holds the lock they hold
(``ROW EXCLUSIVE``) for its whole transaction, tally fold included (seconds for large
sketches). An upload that read phase ``writers`` just before the seal and asked for the lock
just after the move began waited for the whole move: here it failed at its lock timeout
(``StorageBusy``, a 503) while the fold was held up. Now it sees the mixer moved on and runs
again in the phase it then reads.

The interleaving is forced with real sessions: the upload is held right after its read of
``mix_slots`` while the old upload ends, the seal commits and the move starts (its fold held
up by a row lock on the settled tally it adds to).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from collector.campaigns import campaign_from_request
from collector.tallycheck import verify_tallies
from tests.support.pg_interleave import HeldAfterRead, upload
from tests.support.postgres import fresh_database
from tests.support.reports import campaign_body, reports

psycopg = pytest.importorskip("psycopg")

from collector.storage.postgres import PostgresStorage  # noqa: E402


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_database() as made:
        yield made


def read(url: str, sql: str) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchone()[0]


def test_an_upload_after_a_switch_does_not_wait_for_the_move(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStorage(url, staging=True, busy_timeout_ms=1000)
    store.migrate()
    campaign = campaign_from_request(campaign_body("x"))
    store.create_campaign(campaign)
    items = reports(campaign.to_record(), 15, seed=6)
    mixer = PostgresStorage(url, staging=True, busy_timeout_ms=600_000)
    blocker = psycopg.connect(url)
    old = psycopg.connect(url)  # an upload still writing the slot about to be sealed
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(mixer.mix()))
    try:
        assert upload(store, campaign, items[:5]).accepted == 5
        assert store.mix().moved == 5  # the settled shard-0 row exists
        assert upload(store, campaign, items[5:10]).accepted == 5
        writing = read(url, "SELECT writing FROM mix_slots")
        old.execute(f"LOCK TABLE staged_reports_{writing} IN ROW EXCLUSIVE MODE")
        thread.start()
        while read(url, "SELECT other FROM mix_slots") != "writers":
            assert thread.is_alive(), done

        def meanwhile() -> None:
            # The upload read phase writers. The old upload ends, the seal commits, the move
            # begins and its fold waits (as a large one takes long).
            blocker.execute("SELECT 1 FROM tally_shards WHERE shard = 0 FOR UPDATE")
            old.rollback()
            while not read(
                url,
                "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO tally_shards%')",
            ):
                assert thread.is_alive(), done

        real = PostgresStorage._stage
        calls: list[int] = []

        def held(self: PostgresStorage, conn: Any, *args: Any) -> Any:
            calls.append(1)
            return real(self, HeldAfterRead(conn, meanwhile) if len(calls) == 1 else conn, *args)

        monkeypatch.setattr(PostgresStorage, "_stage", held)
        assert upload(store, campaign, items[10:] + items[5:7]).accepted == 5  # during the move
        monkeypatch.undo()
        assert thread.is_alive()  # the move still waits: the upload did not
    finally:
        blocker.rollback()
        old.rollback()
        thread.join()
        blocker.close()
        old.close()
        mixer.close()
    try:
        assert [d.moved for d in done] == [5]
        store.mix()
        assert store.staged_count() == 0
        assert store.count_reports(campaign) == 15
        assert all(c.ok for c in verify_tallies(store))
        [counters] = store.report_counters()
        assert (counters.accepted, counters.duplicate) == (15, 2)
    finally:
        store.close()
