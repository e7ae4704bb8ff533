"""Settling an acknowledged batch gives way to the app's own writes (a real SQLite file).

A whole batch settled in one transaction held the state lock for milliseconds, and a
``report`` call arriving then waited for all of it. While the app writes, the upload thread
settles in chunks of ``SETTLE_CHUNK`` reports, each atomic; while it is idle, in one go. The
tests fix ``QUIET_SECONDS`` so that "the app is writing" does not depend on timing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from client_sdk import outbox as outbox_module
from client_sdk import state as state_module
from client_sdk.errors import StorageFailed
from client_sdk.outbox import SETTLE_CHUNK, Outbox, Report
from client_sdk.state import StateDB

N = 2 * SETTLE_CHUNK + 8  # three chunks while busy: 16, 16, 8


def _reports(n: int) -> list[Report]:
    return [Report("c", f"{i:032x}", "2026-11-22", i % 3, "d1") for i in range(n)]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    db = StateDB(tmp_path)
    yield db
    db.close()


@pytest.fixture
def box(db: StateDB) -> Outbox:
    box = Outbox(db)
    box.add_many(_reports(N))
    return box


def _commits(db: StateDB) -> list[str]:
    seen: list[str] = []
    db.conn.set_trace_callback(lambda sql: seen.append(sql) if sql == "COMMIT" else None)
    return seen


def _app_writes(monkeypatch: pytest.MonkeyPatch, db: StateDB) -> None:
    """The app wrote just now and counts as writing for a minute; give_way does not wait."""
    monkeypatch.setattr(state_module, "QUIET_SECONDS", 60.0)
    monkeypatch.setattr(state_module, "GIVE_WAY_MAX_SECONDS", 0.0)
    with db.transaction():
        pass


@contextlib.contextmanager
def _app_transaction_in_thread(db: StateDB, body: Callable[[], object]) -> Iterator[None]:
    """An app (foreground) transaction running ``body`` in another thread: the block runs once
    the transaction has begun, and the thread is joined after it."""
    inside = threading.Event()

    def run() -> None:
        with db.transaction():
            inside.set()
            body()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert inside.wait(10)
        yield
    finally:
        thread.join(10)


def test_give_way_does_not_wait_for_an_idle_app(db: StateDB) -> None:
    assert db.give_way() is False  # nothing written yet
    with db.transaction(background=True):
        pass
    assert db.give_way() is False  # background work is not the app


def test_give_way_reports_an_app_that_writes(db: StateDB, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_module, "GIVE_WAY_MAX_SECONDS", 0.005)
    monkeypatch.setattr(state_module, "QUIET_SECONDS", 0.0)
    with db.transaction():
        pass
    assert db.give_way() is False  # it ended, and nothing counts as recent
    monkeypatch.setattr(state_module, "QUIET_SECONDS", 60.0)
    assert db.give_way() is True  # it ended less than QUIET_SECONDS ago
    # A foreground transaction in progress (here held open in another thread) is busy
    # whatever QUIET_SECONDS says.
    monkeypatch.setattr(state_module, "QUIET_SECONDS", 0.0)
    leave = threading.Event()
    with _app_transaction_in_thread(db, lambda: leave.wait(10)):
        assert db.give_way() is True
        leave.set()
    assert db.give_way() is False


def test_give_way_waits_until_the_app_has_written(
    db: StateDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It returns once the app's transaction is over, not while it runs."""
    monkeypatch.setattr(state_module, "QUIET_SECONDS", 0.0)
    monkeypatch.setattr(state_module, "GIVE_WAY_MAX_SECONDS", 30.0)
    done = threading.Event()

    def write() -> None:
        time.sleep(0.2)  # the app's transaction, still running when give_way starts
        done.set()

    with _app_transaction_in_thread(db, write):
        assert db.give_way() is True
        assert done.is_set()


def test_a_batch_settled_while_the_app_writes_goes_in_atomic_chunks(
    box: Outbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    _app_writes(monkeypatch, box.db)
    batch = box.next_batch(N)
    assert batch is not None and len(batch) == N
    commits = _commits(box.db)
    rejected = {1: "bad one", SETTLE_CHUNK + 1: "bad two", N - 1: "bad three"}
    box.settle(
        batch,
        accepted=N - 4,
        duplicate=0,
        rejected=rejected,
        restamp={SETTLE_CHUNK + 3: "2026-11-23"},
    )
    assert len(commits) == 3  # 16 + 16 + 8
    assert box.pending == 1  # only the re-stamped report stays
    rest = box.next_batch(10)
    assert rest is not None and [r.id for r in rest.reports] == [f"{SETTLE_CHUNK + 3:032x}"]
    assert rest.reports[0].day == "2026-11-23"
    sent = box.sent_reports()
    assert [s["id"] for s in sent] == [f"{i:032x}" for i in range(N) if i != SETTLE_CHUNK + 3]
    assert [s["outcome"] for s in sent].count("acknowledged") == N - 4
    counters = box.counters()
    assert (counters["accepted"], counters["rejected"], counters["restamped_skew"]) == (N - 4, 3, 1)


def test_an_idle_app_gets_the_batch_settled_in_one_transaction(
    box: Outbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_module, "QUIET_SECONDS", 0.0)
    batch = box.next_batch(N)
    assert batch is not None
    commits = _commits(box.db)
    box.settle(batch, accepted=N, duplicate=0, rejected={})
    assert len(commits) == 1
    assert box.pending == 0 and box.counters()["accepted"] == N


def test_a_failure_between_chunks_keeps_the_rest_pending_and_counts_nothing_twice(
    box: Outbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    _app_writes(monkeypatch, box.db)
    batch = box.next_batch(N)
    assert batch is not None
    # A real fault in the second chunk: the file refuses to delete one of its reports.
    box.db.conn.execute(
        "CREATE TRIGGER refuse BEFORE DELETE ON outbox "
        f"WHEN old.report_id = '{SETTLE_CHUNK + 2:032x}' BEGIN SELECT RAISE(ABORT, 'no'); END"
    )
    with pytest.raises(StorageFailed):
        box.settle(batch, accepted=N - 1, duplicate=1, rejected={0: "bad"})
    # The first chunk is settled; the second rolled back whole; the third never ran.
    assert box.pending == N - SETTLE_CHUNK
    assert [s["id"] for s in box.sent_reports()] == [f"{i:032x}" for i in range(SETTLE_CHUNK)]
    counters = box.counters()
    assert (counters["accepted"], counters["duplicate"], counters["rejected"]) == (0, 0, 1)
    box.db.conn.execute("DROP TRIGGER refuse")
    rest = box.next_batch(N)
    assert rest is not None and rest.reports[0].id == f"{SETTLE_CHUNK:032x}"
    # Sent again, the collector answers duplicate for every one of them.
    box.settle(rest, accepted=0, duplicate=len(rest), rejected={})
    assert box.pending == 0
    assert len(box.sent_reports()) == N


def test_the_chunk_sizes_are_what_the_module_says() -> None:
    assert 1 <= outbox_module.SETTLE_CHUNK < outbox_module.SETTLE_CHUNK_IDLE
