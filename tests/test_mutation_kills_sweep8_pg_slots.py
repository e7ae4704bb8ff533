"""PostgreSQL: a staging-off upload's slot locks (``PostgresStorage._lock_slots``), the two
mutants the seventh sweep left (docs/MUTATION.md, "seventh sweep" and "eighth sweep").

1. They and retention's purge form no cycle.

``purge_reports`` deletes a campaign's aged staged reports with one ``DELETE`` of the
partitioned ``staged_reports``, which takes ``ROW EXCLUSIVE`` on slot 0, then on slot 1. A
staging-off upload takes ``SHARE`` on the slots in the same order, slot 0 first. Had it taken
slot 1 first, this interleaving deadlocks: a staging-on upload writes slot 1 (``ROW
EXCLUSIVE``, held here by a session of the test); the staging-off upload waits for slot 1
holding nothing yet; the purge (of another campaign) takes slot 0 and queues for slot 1 behind
the upload; the writer commits: the upload gets slot 1 and waits for slot 0, held by the purge,
which waits for slot 1, held by the upload. The purge's wait, the older, runs out first (the
store caps a lock wait at 5 s) and the retention sweep fails. With slot 0 first the purge just
waits for the upload. ``deadlock_timeout`` is raised to 20 s on the test's database, so a slow
machine cannot have the upload's own deadlock check end the cycle first (it would retry, and
the purge go through).

2. In phase ``moved`` (a mix whose clean step failed: the other slot's reports are moved, its
counters not yet folded) the upload takes only ``ACCESS SHARE`` on the other slot, as in phase
``sealed``: no upload commits reports into it, so the upload does not wait for a session that
writes it (a staging-on upload that read the slot before the switch, writing its counters).

Waits are read from ``pg_locks``; nothing asserts how long anything took.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from collector.campaigns import Campaign, campaign_from_request
from collector.errors import StorageBusy
from tests.support.pg_interleave import WAITERS as _WAITERS
from tests.support.pg_interleave import upload
from tests.support.postgres import fresh_database
from tests.support.reports import campaign_body, reports, today
from tests.support.waiting import eventually

psycopg = pytest.importorskip("psycopg")

from collector.storage.postgres import PostgresStorage  # noqa: E402


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_database() as made:
        with psycopg.connect(made, autocommit=True) as conn:
            name = conn.execute("SELECT current_database()").fetchone()[0]
            conn.execute(f"ALTER DATABASE \"{name}\" SET deadlock_timeout = '20s'")
        yield made


def _read(url: str, sql: str) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchone()


def _in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    done: list[Any] = []

    def run() -> None:
        try:
            done.append(work())
        except Exception as exc:  # handed to the test, which asserts on it
            done.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, done


def test_a_purge_beside_a_staging_off_upload_waiting_for_a_slot_does_not_deadlock(
    url: str,
) -> None:
    on = PostgresStorage(url, staging=True)
    on.migrate()
    off = PostgresStorage(url, staging=False)
    kept: Campaign = campaign_from_request(campaign_body("x"))
    purged: Campaign = campaign_from_request(campaign_body("y"))
    try:
        on.create_campaign(kept)
        on.create_campaign(purged)
        assert _read(url, "SELECT other FROM mix_slots")[0] not in ("sealed", "moved")
        items = reports(kept.to_record(), 3, seed=11)
        with psycopg.connect(url) as writer:
            writer.execute("LOCK TABLE staged_reports_1 IN ROW EXCLUSIVE MODE")
            up, up_done = _in_thread(lambda: upload(off, kept, items))
            eventually(lambda: _read(url, _WAITERS)[0], lambda n: n == 1, what="the upload's wait")
            purge, purge_done = _in_thread(lambda: off.purge_reports(purged, today()))
            eventually(lambda: _read(url, _WAITERS)[0], lambda n: n == 2, what="the purge's wait")
            writer.rollback()  # the staging-on writer commits
        up.join()
        purge.join()
        [stored] = up_done
        [swept] = purge_done
        assert not isinstance(swept, Exception), repr(swept)
        assert not isinstance(stored, Exception), repr(stored)
        assert stored.accepted == 3
    finally:
        off.close()
        on.close()


def test_in_phase_moved_a_staging_off_upload_does_not_wait_for_the_other_slots_writers(
    url: str,
) -> None:
    on = PostgresStorage(url, staging=True)
    on.migrate()
    failing = PostgresStorage(url, staging=True, busy_timeout_ms=100)
    quick = PostgresStorage(url, staging=False, busy_timeout_ms=2000)
    campaign: Campaign = campaign_from_request(campaign_body("x"))
    try:
        on.create_campaign(campaign)
        items = reports(campaign.to_record(), 6, seed=13)
        assert upload(on, campaign, items[:3]).accepted == 3  # staged in slot 0
        with psycopg.connect(url) as reader:
            reader.execute("SELECT count(*) FROM staged_reports_0")  # ACCESS SHARE, held
            with pytest.raises(StorageBusy):
                failing.mix()  # moved, then its clean step cannot lock slot 0
        assert _read(url, "SELECT writing, other FROM mix_slots") == (1, "moved")
        with psycopg.connect(url) as writer:
            writer.execute("LOCK TABLE staged_reports_0 IN ROW EXCLUSIVE MODE")
            result = upload(quick, campaign, items)  # 3 moved already, 3 new
            assert _read(url, _WAITERS)[0] == 0
            writer.rollback()
        assert (result.accepted, result.duplicate) == (3, 3)
        on.mix()
        assert _read(url, "SELECT writing, other FROM mix_slots")[1] == "clean"
        assert _read(url, "SELECT count(*) FROM reports")[0] == 6
    finally:
        quick.close()
        failing.close()
        on.close()
