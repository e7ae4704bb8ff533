"""The device's disk fills up: ``report`` must not raise into the app, store or charge half a
report, or stop the uploader.

Before, ``report`` raised ``sqlite3.OperationalError: cannot rollback - no transaction is
active`` (SQLite had already ended the transaction on SQLITE_FULL, and the ROLLBACK hid the real
error), and a failed write in the upload thread paused uploads until the app restarted.

The fault is SQLite's own SQLITE_FULL, caused through ``PRAGMA max_page_count`` on the client's
connection: the file cannot grow, exactly as on a full disk (filling a real disk is not
something a test on a shared machine should do). The collector is the small fake of
``test_sdk_hostile_config`` (the real one would do, but the fault is on the device).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_sdk import PrivacyBudget, StorageFailed, TelemetryClient
from tests.test_sdk_hostile_config import GOOD, FakeCollector, resource
from tests.test_sdk_hostile_config import collector as collector  # noqa: F401 - the fixture


def cap_pages(client: TelemetryClient, pages: int | None) -> None:
    """Let the state file grow to ``pages`` pages (None: its size now), or without limit."""
    conn = client._db.conn
    if pages is None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")


@pytest.fixture
def client(
    collector: tuple[str, type[FakeCollector]], tmp_path: Path  # noqa: F811
) -> Iterator[TelemetryClient]:
    url, handler = collector
    handler.resources = {"c": [resource("c", GOOD)]}
    client = TelemetryClient(
        url,
        ingest_token="t" * 20,
        state_dir=tmp_path,
        flush_interval=3600.0,
        backoff_base=0.01,
        backoff_cap=0.05,
        reports_per_window=None,
        budget=PrivacyBudget(campaign_epsilon=1e6, device_epsilon=1e6),
    )
    client.prefetch("c")
    yield client
    client.close(timeout=0)


def fill(client: TelemetryClient, most: int = 5000) -> tuple[int, object]:
    """Report until the state file refuses; returns the reports stored and the refusal."""
    for stored in range(most):
        result = client.report("c", "a")
        if not result:
            return stored, result
    raise AssertionError(f"the state file took {most} reports under the page cap")


def test_a_full_disk_is_not_sent_storage_failed_and_nothing_is_half_stored(
    client: TelemetryClient, collector: tuple[str, type[FakeCollector]]  # noqa: F811
) -> None:
    cap_pages(client, None)
    stored, refused = fill(client)
    assert stored > 0
    assert refused.reason == "storage_failed", refused  # type: ignore[attr-defined]
    assert "database or disk is full" in refused.message  # type: ignore[attr-defined]
    with pytest.raises(StorageFailed):
        refused.raise_()  # type: ignore[attr-defined]
    assert not client.report("c", "a")  # still full: refused again, still no exception
    stats = client.stats()
    assert stats["refused_storage"] == 2  # counted in memory: the file takes no counter
    # Every stored report has its charge and no refused one has: report and charge are one
    # transaction, and the pending count matches the file.
    assert stats["pending"] == stored == len(client.pending_reports())
    assert sum(c["reports"] for c in client.privacy_charges("c")) == stored
    # Space again: reports are stored, and everything uploads.
    cap_pages(client, 1 << 30)
    assert client.report("c", "a")
    assert client.flush(timeout=20), client.stats()
    assert collector[1].accepted == {"c": stored + 1}


def test_the_uploader_outlives_a_state_file_that_refuses_writes(
    client: TelemetryClient, collector: tuple[str, type[FakeCollector]]  # noqa: F811
) -> None:
    """Settling an acknowledged batch writes the sent log. Here that write fails (a temporary
    trigger raises, standing for the full disk: freed outbox pages would otherwise make room).
    The batch stays pending (it is resent, a duplicate for the collector), the thread backs off
    and goes on once the file takes writes again."""
    for _ in range(50):
        assert client.report("c", "a")
    conn = client._db.conn
    conn.execute(
        "CREATE TEMP TRIGGER full BEFORE INSERT ON sent "
        "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
    )
    assert not client.flush(timeout=1)
    # On a loaded machine the first upload may still be on its way after that second: wait
    # for its settling to fail (it ran into this assertion under a mutation run's load).
    deadline = time.monotonic() + 30
    while client.stats()["last_error"] is None and time.monotonic() < deadline:
        time.sleep(0.01)
    # Each round resends the batch (the collector's answer cannot be recorded): the rounds must
    # back off exponentially. Before, the count was reset by every acknowledged upload, ahead
    # of the settling write that failed, so it never passed 1 and ``last_error`` read None for
    # a moment each round (CI caught this assertion in that window).
    uploader = client._uploader
    while uploader._failures < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert uploader._failures >= 4, uploader._failures
    stats = client.stats()
    assert "could not be written (database or disk is full)" in str(stats["last_error"]), stats
    assert stats["paused"] is None and stats["pending"] == 50, stats
    with client._db.lock:
        conn.execute("DROP TRIGGER temp.full")
    assert client.flush(timeout=20), client.stats()
    assert client.stats()["pending"] == 0
    assert collector[1].accepted["c"] >= 50  # the first acknowledged batch came twice


def test_a_refused_write_is_storage_failed_and_leaves_no_transaction_open(
    tmp_path: Path,
) -> None:
    """A write that fails inside ``transaction`` is :class:`StorageFailed` (an LDPError, not
    a bare sqlite3 error: ``set_upload_enabled`` and ``report_many`` raise it too) and leaves no
    open transaction behind (the next one would fail "cannot start a transaction within a
    transaction")."""
    from client_sdk.state import StateDB

    db = StateDB(tmp_path)
    try:
        pages = db.conn.execute("PRAGMA page_count").fetchone()[0]
        db.conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StorageFailed, match="could not be written .database or disk is full"):
            with db.transaction() as conn:
                conn.executemany(
                    "INSERT INTO settings (name, value) VALUES (?, ?)",
                    [(f"k{i}", "x" * 500) for i in range(1000)],
                )
        assert not db.conn.in_transaction
        with db.transaction() as conn:
            conn.execute("DELETE FROM settings WHERE name = 'k0'")
    finally:
        db.close()


def test_a_config_the_disk_cannot_take_is_kept_in_memory(
    collector: tuple[str, type[FakeCollector]], tmp_path: Path  # noqa: F811
) -> None:
    """The on-disk copy of a fetched config is only for working offline after a restart. A
    directory where ``campaigns/c.json`` belongs makes its write fail (as a full disk would);
    the background fetch raised the OSError into the upload thread, which stopped until the app
    restarted. Now the config is used from memory and the reports upload."""
    url, handler = collector
    handler.resources = {"c": [resource("c", GOOD)]}
    (tmp_path / "campaigns" / "c.json").mkdir(parents=True)
    client = TelemetryClient(
        url, ingest_token="t" * 20, state_dir=tmp_path, campaigns=["c"], flush_interval=3600.0
    )
    try:
        client.prefetch("c")  # the blocking fetch meets the same failure
        assert client.report("c", "a")
        assert client.flush(timeout=20), client.stats()
        assert handler.accepted == {"c": 1}
        assert client.stats()["paused"] is None
        assert not list((tmp_path / "campaigns").glob(".*.tmp"))  # no temporary file left
    finally:
        client.close(timeout=0)
