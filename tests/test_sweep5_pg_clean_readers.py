"""PostgreSQL staging slots: while a long reader holds a slot, the mix's clean step must not
stall every later reader of staging (fifth sweep).

The clean step truncates the old slot under ``ACCESS EXCLUSIVE``. PostgreSQL queues a lock
request, and a later ``ACCESS SHARE`` (``count_reports``, ``iter_reports``) waits behind a
queued exclusive one: while ``tally verify`` or an export held the slot, a plain ``LOCK`` made
every new count wait for the mix's whole lock timeout (4.5 s measured). The clean step now asks
in 50 ms attempts and steps out of the queue between them, so a reader waits at most about one
attempt; here it has a 2 s lock timeout and the mix a 60 s one (before: the reader's count
failed with ``LockNotAvailable``). The long reader ends, the mix finishes, and every report is
counted once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from collector.campaigns import campaign_from_request
from collector.ingest import ingest_batch
from collector.tallycheck import verify_tallies
from tests.support.postgres import fresh_database
from tests.support.reports import campaign_body, reports

psycopg = pytest.importorskip("psycopg")

from collector.storage.postgres import PostgresStorage  # noqa: E402


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_database() as made:
        yield made


def _exclusive_request_waiting(url: str, table: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return bool(
            conn.execute(
                "SELECT EXISTS (SELECT FROM pg_locks WHERE NOT granted "
                "AND mode = 'AccessExclusiveLock' AND relation = %s::regclass)",
                (table,),
            ).fetchone()[0]
        )


def test_a_reader_of_staging_passes_while_the_clean_step_waits_for_a_long_reader(
    url: str,
) -> None:
    store = PostgresStorage(url, staging=True, busy_timeout_ms=60_000)
    store.migrate()
    campaign = campaign_from_request(campaign_body("x"))
    store.create_campaign(campaign)
    items = reports(campaign.to_record(), 12, seed=11)
    body = {"digest": campaign.digest, "reports": items}
    result = ingest_batch(store, campaign, body, max_reports=1000)
    assert result.accepted == 12
    with psycopg.connect(url, autocommit=True) as conn:
        slot = int(conn.execute("SELECT writing FROM mix_slots").fetchone()[0])
    table = f"staged_reports_{slot}"

    long_reader = psycopg.connect(url)  # a transaction left open: tally verify, an export
    long_reader.execute(f"SELECT count(*) FROM {table}").fetchone()
    outcome: dict[str, Any] = {}

    def mix() -> None:
        try:
            outcome["mixed"] = store.mix()
        except Exception as exc:  # reported by the assertions below
            outcome["error"] = exc

    mixer = threading.Thread(target=mix, daemon=True)
    mixer.start()
    try:
        deadline = time.monotonic() + 60
        while not _exclusive_request_waiting(url, table):
            assert time.monotonic() < deadline, "the mix never asked for its exclusive lock"
            assert mixer.is_alive(), outcome
            time.sleep(0.005)
        with psycopg.connect(url, autocommit=True) as reader:
            reader.execute("SET lock_timeout = '2s'")
            # Before: queued behind the clean step's request, this failed at its 2 s timeout.
            counted = reader.execute("SELECT count(*) FROM staged_reports").fetchone()[0]
        assert counted == 0  # the move already took them to reports
    finally:
        long_reader.rollback()
        long_reader.close()
        mixer.join(timeout=120)
    assert not mixer.is_alive()
    assert "error" not in outcome, outcome
    assert outcome["mixed"].moved == 12
    assert store.count_reports(campaign) == 12
    assert all(c.ok for c in verify_tallies(store))
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT other FROM mix_slots").fetchone()[0] == "clean"
