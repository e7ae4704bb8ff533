"""The SQLite backend through the storage interface: schema, idempotent ingest, tallies."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from client_sdk.mechanisms import Tally
from collector.errors import CampaignExists, ConfigError, StorageUnavailable
from collector.storage import SQLiteStorage, WindowBatch, open_storage
from collector.storage.sqlite import SCHEMA_VERSION
from collector.tallycheck import verify_tallies
from tests.test_storage_backends import campaign, window_batch


@pytest.fixture()
def store(tmp_path: Path) -> SQLiteStorage:
    s = SQLiteStorage(tmp_path / "s.db")
    s.migrate()
    return s


def test_migrate_is_idempotent_and_versioned(store: SQLiteStorage, tmp_path: Path) -> None:
    assert store.migrate() == SCHEMA_VERSION
    assert store.schema_version() == SCHEMA_VERSION
    with sqlite3.connect(tmp_path / "s.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION + 1,))
    newer = SQLiteStorage(tmp_path / "s.db")
    with pytest.raises(StorageUnavailable, match="newer"):
        newer.migrate()


def test_campaigns_round_trip(store: SQLiteStorage) -> None:
    c = campaign("one")
    store.create_campaign(c)
    with pytest.raises(CampaignExists):
        store.create_campaign(c)
    fresh = SQLiteStorage(store.path)
    assert fresh.get_campaign("one") == c
    assert fresh.get_campaign("two") is None
    assert [(x.id, n) for x, n in fresh.list_campaigns()] == [("one", 0)]


def test_ingest_is_idempotent_and_tallies_only_new_reports(store: SQLiteStorage) -> None:
    c = campaign()
    store.create_campaign(c)
    first = window_batch(c, [f"id-{i:016d}" for i in range(100)], seed=1)
    counts = store.ingest(c, {"2026-11-21": first}, rejected=2)
    assert (counts.accepted, counts.duplicate) == (100, 0)
    # Half old ids (with different payloads: must be ignored), half new.
    second = window_batch(c, [f"id-{i:016d}" for i in range(50, 150)], seed=2)
    counts = store.ingest(c, {"2026-11-21": second})
    assert (counts.accepted, counts.duplicate) == (50, 50)
    expected = first.tally(None) + second.tally(list(range(50, 100)))
    assert store.tallies(c) == {"2026-11-21": expected}
    assert store.count_reports(c) == 150
    assert all(check.ok for check in verify_tallies(store))
    (counters,) = store.report_counters()
    assert (counters.accepted, counters.duplicate, counters.rejected) == (150, 50, 2)


def test_tallies_by_window_range(store: SQLiteStorage) -> None:
    c = campaign()
    store.create_campaign(c)
    for day in ("2026-11-01", "2026-11-02", "2026-11-03"):
        store.ingest(c, {day: window_batch(c, [f"{day}-{i:08d}" for i in range(10)])})
    assert list(store.tallies(c, "2026-11-02", None)) == ["2026-11-02", "2026-11-03"]
    assert list(store.tallies(c, None, "2026-11-01")) == ["2026-11-01"]
    assert sorted({w for w, _ in store.iter_reports(c)}) == [
        "2026-11-01",
        "2026-11-02",
        "2026-11-03",
    ]
    assert len(list(store.iter_reports(c, "2026-11-02"))) == 10


def test_a_failed_ingest_stores_nothing(store: SQLiteStorage) -> None:
    c = campaign()
    store.create_campaign(c)
    good = window_batch(c, [f"ok-{i:016d}" for i in range(10)])

    def broken(positions: list[int] | None) -> Tally:
        raise RuntimeError("tally failed")

    with pytest.raises(RuntimeError):
        store.ingest(c, {"2026-11-01": good, "2026-11-02": WindowBatch(good.rows, broken)})
    assert store.count_reports(c) == 0 and store.tallies(c) == {}


def test_tally_check_finds_tampering(store: SQLiteStorage) -> None:
    c = campaign()
    store.create_campaign(c)
    store.ingest(c, {"2026-11-01": window_batch(c, [f"t-{i:016d}" for i in range(20)])})
    with sqlite3.connect(store.path) as conn:
        conn.execute("DELETE FROM reports WHERE report_id = 't-0000000000000000'")
    (check,) = verify_tallies(store)
    assert not check.ok and check.stored.n == 20 and check.recomputed.n == 19


def test_open_storage_urls(tmp_path: Path) -> None:
    assert open_storage(str(tmp_path / "a.db")).path == str(tmp_path / "a.db")
    assert open_storage("sqlite:///relative.db").path == "relative.db"
    assert open_storage(f"sqlite:///{tmp_path}/c.db").path == f"{tmp_path}/c.db"
    with pytest.raises(ConfigError, match="not supported"):
        open_storage("mysql://localhost/ldp")


def test_unreachable_database_folder_is_storage_unavailable(tmp_path) -> None:
    """A folder that cannot be created is a 503-worthy StorageUnavailable, not a raw OSError."""
    from collector.errors import StorageUnavailable
    from collector.storage.sqlite import SQLiteStorage

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    storage = SQLiteStorage(str(blocker / "sub" / "collector.db"))
    with pytest.raises(StorageUnavailable, match="cannot open the SQLite database"):
        storage.migrate()
