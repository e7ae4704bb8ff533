"""PostgreSQL: workers with staging on and off serving one database store a report id once
(sixth sweep).

A worker started with staging off (``LDP_MIX_BATCH=0``) inserted an upload into ``reports``
with ``ON CONFLICT DO NOTHING`` and never looked at the staging slots; a worker with staging
on checked ``reports`` and the slots, but through its statement's snapshot, which misses a
staging-off upload not yet committed. With both kinds on one database (a rolling config
change, one replica run with ``LDP_MIX_BATCH=0``) a device's retry was stored and counted
twice: once staged, once in ``reports``, one after the other or both at once.

Now a staging-off upload locks the slots uploads may write (``SHARE``: it waits for staging-on
uploads in flight and holds new ones off until it commits) and skips ids staged in either
slot. The interleavings are forced with real sessions: an upload is held with its transaction
open right after a given statement (a wrapper of the connection it runs on) while the other
upload starts in a thread; a lock wait is read from ``pg_locks``.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from collector.campaigns import Campaign, campaign_from_request
from collector.errors import StorageBusy
from collector.ingest import BatchResult
from collector.tallycheck import verify_tallies
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
        yield made


@pytest.fixture
def stores(url: str) -> Iterator[tuple[PostgresStorage, PostgresStorage, Campaign]]:
    """A staging-on and a staging-off worker on one database, and a campaign."""
    on = PostgresStorage(url, staging=True)
    on.migrate()
    off = PostgresStorage(url, staging=False)
    campaign = campaign_from_request(campaign_body("x"))
    on.create_campaign(campaign)
    try:
        yield on, off, campaign
    finally:
        off.close()
        on.close()


def read(url: str, sql: str) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchone()


class HeldAfter:
    """A connection that runs ``then`` once, right after the first statement containing
    ``marker`` (its transaction stays open meanwhile); the rest goes to the real one."""

    def __init__(self, conn: Any, marker: str, then: Callable[[], None], fired: list[int]) -> None:
        self._conn = conn
        self._marker = marker
        self._then = then
        self._fired = fired

    def execute(self, sql: Any, *args: Any, **kw: Any) -> Any:
        cur = self._conn.execute(sql, *args, **kw)
        if not self._fired and self._marker in str(sql):
            self._fired.append(1)
            self._then()
        return cur

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def hold(
    monkeypatch: pytest.MonkeyPatch, store: PostgresStorage, marker: str, then: Callable[[], None]
) -> list[int]:
    """Make ``store``'s connections :class:`HeldAfter` ones (``then`` runs once in all); the
    list returned is non-empty once it ran."""
    real = store._conn
    fired: list[int] = []

    @contextmanager
    def held() -> Iterator[Any]:
        with real() as conn:
            yield HeldAfter(conn, marker, then, fired)

    monkeypatch.setattr(store, "_conn", held)
    return fired


def in_thread(work: Callable[[], BatchResult]) -> tuple[threading.Thread, list[Any]]:
    """``work`` started in a thread; the list gets its result or the exception it raised."""
    done: list[Any] = []

    def run() -> None:
        try:
            done.append(work())
        except Exception as exc:  # handed to the test, which asserts on it
            done.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, done


def waits_for_a_lock(url: str, thread: threading.Thread) -> bool:
    """Whether the upload in ``thread`` waits for a lock (False: it finished without one)."""
    alive, waiters = eventually(
        lambda: (thread.is_alive(), read(url, _WAITERS)[0]),
        lambda seen: not seen[0] or seen[1] > 0,
        what="the upload to finish or wait for a lock",
    )
    return bool(alive and waiters > 0)


def settled(on: PostgresStorage, campaign: Campaign, stored: int, accepted: int) -> None:
    """After a full mix: ``stored`` reports, their tally equals the tally of the stored
    reports (``ldp tally verify``), and the counters count each once."""
    on.mix()
    on.mix()
    assert on.staged_count() == 0
    assert on.count_reports(campaign) == stored
    assert sum(t.n for t in on.tallies(campaign).values()) == stored
    checks = verify_tallies(on)
    assert checks and all(c.ok for c in checks), [c.to_dict() for c in checks]
    [counters] = on.report_counters()
    assert counters.accepted == accepted


def twin_waits(
    url: str,
    monkeypatch: pytest.MonkeyPatch,
    campaign: Campaign,
    first_then_twin: tuple[PostgresStorage, PostgresStorage],
    held: str,
    *,
    seed: int,
) -> None:
    """The first store's upload is held after its statement starting with ``held``,
    uncommitted; the same reports then reach the twin store, whose upload must wait for a
    lock and, once the first commits, store none of them."""
    first, twin = first_then_twin
    items = reports(campaign.to_record(), 3, seed=seed)
    seen: dict[str, Any] = {}

    def meanwhile() -> None:
        thread, done = in_thread(lambda: upload(twin, campaign, items))
        seen["waited"] = waits_for_a_lock(url, thread)
        seen["thread"], seen["done"] = thread, done

    fired = hold(monkeypatch, first, held, meanwhile)
    result = upload(first, campaign, items)
    monkeypatch.undo()
    seen["thread"].join()
    assert fired and result.accepted == 3
    [second] = seen["done"]
    kind = "staging-on" if twin.staging else "staging-off"
    assert seen["waited"], f"the {kind} upload did not wait: {second}"
    assert (second.accepted, second.duplicate) == (0, 3)


def test_a_retry_of_a_staged_report_to_a_staging_off_worker_is_a_duplicate(
    stores: tuple[PostgresStorage, PostgresStorage, Campaign],
) -> None:
    """Case (a): staged by a staging-on worker, not yet mixed; the retry reaches a worker with
    staging off. Before: stored in ``reports`` too, accepted twice (the mix then dropped the
    row and kept both tallies)."""
    on, off, campaign = stores
    items = reports(campaign.to_record(), 8, seed=1)
    assert upload(on, campaign, items[:4]).accepted == 4  # staged in slot 0
    assert upload(off, campaign, items[4:6]).accepted == 2  # in reports
    result = upload(off, campaign, items)  # 4 staged, 2 stored, 2 new
    assert (result.accepted, result.duplicate) == (2, 6)
    again = upload(on, campaign, items)  # and back to staging on: all known
    assert (again.accepted, again.duplicate) == (0, 8)
    settled(on, campaign, stored=8, accepted=8)


def test_a_staging_off_upload_skips_the_ids_of_a_slot_being_mixed(
    url: str, stores: tuple[PostgresStorage, PostgresStorage, Campaign]
) -> None:
    """The twin lies in the slot uploads no longer write, sealed by a mix whose move failed
    (here its fold timed out behind a row lock): the upload probes that slot too."""
    on, off, campaign = stores
    items = reports(campaign.to_record(), 6, seed=2)
    failing = PostgresStorage(url, staging=True, busy_timeout_ms=100)
    try:
        assert upload(on, campaign, items[:1]).accepted == 1
        assert on.mix().moved == 1  # the settled shard-0 tally row exists
        assert upload(on, campaign, items[1:4]).accepted == 3  # staged in slot 1
        with psycopg.connect(url) as blocker:
            blocker.execute("SELECT 1 FROM tally_shards WHERE shard = 0 FOR UPDATE")
            with pytest.raises(StorageBusy):
                failing.mix()
            blocker.rollback()
        assert read(url, "SELECT writing, other FROM mix_slots") == (0, "sealed")
        result = upload(off, campaign, items)
        assert (result.accepted, result.duplicate) == (2, 4)
    finally:
        failing.close()
    settled(on, campaign, stored=6, accepted=6)


def test_a_staging_off_upload_waits_for_a_staging_on_upload_of_the_same_id(
    url: str,
    stores: tuple[PostgresStorage, PostgresStorage, Campaign],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Case (b): the staging-on upload has staged the reports, uncommitted, when a retry of
    them reaches a staging-off worker. Before: the staging-off insert did not see them and
    stored them at once (accepted 3: each report counted twice)."""
    on, off, campaign = stores
    twin_waits(url, monkeypatch, campaign, (on, off), "INSERT INTO staged_reports_", seed=3)
    settled(on, campaign, stored=3, accepted=3)


def test_a_staging_on_upload_waits_for_a_staging_off_upload_of_the_same_id(
    url: str,
    stores: tuple[PostgresStorage, PostgresStorage, Campaign],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The other way round: the staging-off upload has inserted the reports into ``reports``,
    uncommitted. The staging-on upload's insert waits for its lock, and its snapshot, taken
    after the lock was granted, sees them (a statement's snapshot in READ COMMITTED is taken
    once its locks are held: this is what the test shows). Before: staged at once, counted
    twice."""
    on, off, campaign = stores
    twin_waits(url, monkeypatch, campaign, (off, on), "INSERT INTO reports", seed=4)
    settled(on, campaign, stored=3, accepted=3)


def test_a_staging_off_upload_locks_again_for_the_state_under_its_locks(
    url: str,
    stores: tuple[PostgresStorage, PostgresStorage, Campaign],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The upload chooses its locks by its read of ``mix_slots`` (with its campaign row; here
    slot 1 sealed, so only ``ACCESS SHARE`` on it), but the mixer may move on before they are
    held: here it moves and cleans slot 1 and switches uploads to it, and a staging-on upload
    stages the same id in slot 1, uncommitted. The read under the locks asks for ``SHARE`` on
    slot 1, which waits for that upload; trusting the first read, the id was stored twice."""
    on, off, campaign = stores
    items = reports(campaign.to_record(), 5, seed=10)
    twin = items[4:]
    failing = PostgresStorage(url, staging=True, busy_timeout_ms=100)
    seen: dict[str, Any] = {}
    off_done = threading.Event()
    try:
        assert upload(on, campaign, items[:1]).accepted == 1
        assert on.mix().moved == 1  # the settled shard-0 tally row exists
        assert upload(on, campaign, items[1:3]).accepted == 2  # slot 1
        with psycopg.connect(url) as blocker:
            blocker.execute("SELECT 1 FROM tally_shards WHERE shard = 0 FOR UPDATE")
            with pytest.raises(StorageBusy):
                failing.mix()
            blocker.rollback()
        assert upload(on, campaign, items[3:4]).accepted == 1  # slot 0
        assert read(url, "SELECT writing, other FROM mix_slots") == (0, "sealed")

        def staged_twin() -> None:  # in the staging-on upload, its twin staged, uncommitted
            seen["staged"] = True
            eventually(
                lambda: off_done.is_set() or read(url, _WAITERS)[0] > 0,
                bool,
                what="the staging-off upload to finish or wait for a lock",
            )
            seen["waited"] = not off_done.is_set()

        def meanwhile() -> None:  # the staging-off upload has read (0, sealed)
            assert on.mix().moved == 3  # slot 1 moved and cleaned, slot 0 mixed too
            assert read(url, "SELECT writing, other FROM mix_slots") == (1, "clean")
            hold(monkeypatch, on, "INSERT INTO staged_reports_1", staged_twin)
            thread, done = in_thread(lambda: upload(on, campaign, twin))
            seen["thread"], seen["done"] = thread, done
            eventually(lambda: seen.get("staged", False), bool, what="the twin staged")

        fired = hold(monkeypatch, off, "mix_slots", meanwhile)
        try:
            result = upload(off, campaign, twin)
        finally:
            off_done.set()
            if "thread" in seen:
                seen["thread"].join()
        monkeypatch.undo()
    finally:
        failing.close()
    assert fired, f"the staging-off upload never read mix_slots: {result}"
    [staged] = seen["done"]
    assert staged.accepted == 1
    assert seen["waited"], f"the staging-off upload did not wait: {result}"
    assert (result.accepted, result.duplicate) == (0, 1)
    settled(on, campaign, stored=5, accepted=5)


def test_a_staging_off_upload_does_not_wait_for_the_move(
    url: str, stores: tuple[PostgresStorage, PostgresStorage, Campaign]
) -> None:
    """A mix's move holds the slot it empties (``ROW EXCLUSIVE``) for its whole transaction,
    tally fold included (seconds for large sketches). A staging-off upload takes only
    ``ACCESS SHARE`` on that slot (no upload commits reports into it any more) and still
    skips the ids being moved; with ``SHARE`` on all of ``staged_reports`` it waited for the
    whole move (here: a 503 at its lock timeout, the move held up by a row lock)."""
    on, off, campaign = stores
    quick = PostgresStorage(url, staging=False, busy_timeout_ms=2000)
    mixer = PostgresStorage(url, staging=True, busy_timeout_ms=600_000)
    day = today()
    earlier = (dt.date.fromisoformat(day) - dt.timedelta(days=1)).isoformat()
    quick.ensure_partitions([dt.date.fromisoformat(earlier)])
    items = reports(campaign.to_record(), 6, seed=5)
    fresh = reports(campaign.to_record(), 3, seed=6, day=earlier)
    blocker = psycopg.connect(url)
    done: list[Any] = []
    moving = threading.Thread(target=lambda: done.append(mixer.mix()))
    try:
        assert upload(on, campaign, items[:1]).accepted == 1
        assert on.mix().moved == 1  # the settled shard-0 tally row of today exists
        assert upload(on, campaign, items[1:]).accepted == 5
        blocker.execute(
            "SELECT 1 FROM tally_shards WHERE shard = 0 AND window_start = %s FOR UPDATE", (day,)
        )
        moving.start()
        eventually(
            lambda: read(
                url,
                "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = "
                "current_database() AND wait_event_type = 'Lock' "
                "AND query LIKE 'INSERT INTO tally_shards%')",
            )[0],
            bool,
            what="the move's fold to wait for the row lock",
        )
        result = upload(quick, campaign, items[2:4] + fresh)  # during the move
        assert (result.accepted, result.duplicate) == (3, 2)
        assert moving.is_alive()  # the move still waits: the upload did not
    finally:
        blocker.rollback()
        if moving.is_alive():
            moving.join()
        blocker.close()
        mixer.close()
        quick.close()
    assert [d.moved for d in done] == [5]
    settled(on, campaign, stored=9, accepted=9)


def test_a_deadlock_at_the_slots_lock_ends_in_a_retry(
    url: str, stores: tuple[PostgresStorage, PostgresStorage, Campaign]
) -> None:
    """A staging-off upload that holds one slot and waits for the other, held by a session
    that then asks for the first: PostgreSQL cancels the upload (``DeadlockDetected``, the
    first waiter checks first) and the upload runs again instead of answering 503."""
    on, off, campaign = stores
    items = reports(campaign.to_record(), 3, seed=7)
    with psycopg.connect(url) as other:
        other.execute("LOCK TABLE staged_reports_1 IN ROW EXCLUSIVE MODE")
        thread, done = in_thread(lambda: upload(off, campaign, items))
        assert waits_for_a_lock(url, thread)
        # The cycle. Granted only once the upload's transaction ended (the upload holds
        # slot 0 until then), while this session still holds slot 1: the upload's first
        # attempt was cancelled, and the result below is a second attempt's.
        other.execute("LOCK TABLE staged_reports_0 IN ROW EXCLUSIVE MODE")
        assert thread.is_alive() and not done
        other.rollback()
    thread.join()
    [result] = done
    assert isinstance(result, BatchResult), result
    assert result.accepted == 3
    settled(on, campaign, stored=3, accepted=3)


def test_a_staging_off_upload_keeps_the_plain_insert_while_nothing_of_its_campaign_is_staged(
    url: str,
    stores: tuple[PostgresStorage, PostgresStorage, Campaign],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hot path: reports of another campaign staged, none of this one: the upload's
    insert is ``insert_reports_sql`` unchanged (no probe of the slots per report)."""
    on, off, campaign = stores
    other = campaign_from_request(campaign_body("y"))
    on.create_campaign(other)
    assert upload(on, other, reports(other.to_record(), 2, seed=8)).accepted == 2
    statements: list[str] = []
    real = off._conn

    class Recording:
        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def execute(self, sql: Any, *args: Any, **kw: Any) -> Any:
            statements.append(str(sql))
            return self._conn.execute(sql, *args, **kw)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

    @contextmanager
    def recording() -> Iterator[Any]:
        with real() as conn:
            yield Recording(conn)

    monkeypatch.setattr(off, "_conn", recording)
    assert upload(off, campaign, reports(campaign.to_record(), 3, seed=9)).accepted == 3
    monkeypatch.undo()
    inserts = [s for s in statements if s.startswith("INSERT INTO reports")]
    assert inserts == [off.insert_reports_sql]
