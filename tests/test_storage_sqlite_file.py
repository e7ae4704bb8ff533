"""The SQLite backend's file handling: the readiness probe's write, a file deleted, replaced or
not a database, the mixer's WAL truncation, the usage figures and the checkpoint thread."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from collector.errors import StorageUnavailable
from collector.storage import SQLiteStorage
from collector.storage.sqlite import _SCRUB_TIMEOUT_MS, PROBE_BYTES, Checkpointer
from tests.support.waiting import eventually
from tests.test_storage_backends import campaign, ids, window_batch


@pytest.fixture()
def store(tmp_path: Path) -> SQLiteStorage:
    s = SQLiteStorage(tmp_path / "s.db")
    s.migrate()
    return s


def _wal_bytes(store: SQLiteStorage) -> int:
    wal = Path(store.path + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def test_the_readiness_probe_commits_a_64_kib_write(store: SQLiteStorage) -> None:
    """docs/COLLECTOR.md: the probe commits a 64 KiB row, so a full disk fails it; a smaller
    write could still fit in a page the file already has."""
    assert PROBE_BYTES == 64 * 1024
    before = _wal_bytes(store)
    store.ping()
    assert _wal_bytes(store) - before >= PROBE_BYTES
    with sqlite3.connect(store.path) as conn:  # and nothing of it stays
        assert conn.execute(
            "SELECT count(*) FROM schema_version WHERE typeof(version) = 'blob'"
        ).fetchone() == (0,)


def test_a_file_deleted_or_replaced_while_serving_is_refused(
    store: SQLiteStorage, tmp_path: Path
) -> None:
    store.ping()
    os.unlink(store.path)
    with pytest.raises(StorageUnavailable, match="was deleted while the collector was serving"):
        store.ping()

    again = SQLiteStorage(tmp_path / "r.db")
    again.migrate()
    again.ping()
    other = SQLiteStorage(tmp_path / "other.db")
    other.migrate()
    other.close()
    os.replace(tmp_path / "other.db", tmp_path / "r.db")
    with pytest.raises(StorageUnavailable, match="was replaced by another file"):
        again.ping()


def test_a_file_that_is_not_a_database_is_not_called_missing(tmp_path: Path) -> None:
    """``ldp serve`` workers open without creating: a file that exists but is not SQLite must
    say so, not that it does not exist."""
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not an SQLite database, " * 200)
    for create in (False, True):
        with pytest.raises(StorageUnavailable) as info:
            SQLiteStorage(path, create=create).ping()
        assert "does not exist" not in str(info.value)
        assert "not a database" in str(info.value)
    with pytest.raises(StorageUnavailable, match="does not exist .ldp serve --init creates it"):
        SQLiteStorage(tmp_path / "missing.db", create=False).ping()


def test_usage_counts_the_stored_bytes_of_ids_and_payloads(store: SQLiteStorage) -> None:
    c = campaign("u")
    store.create_campaign(c)
    batch = window_batch(c, ids("u", 7), seed=3)
    store.ingest(c, {"2026-11-21": batch})
    expected = sum(len(rid.encode()) + len(payload.encode()) for rid, payload in batch.rows)
    (usage,) = store.usage(refresh=True)
    assert (usage.campaign, usage.reports, usage.bytes, usage.purged_before) == (
        "u",
        7,
        expected,
        None,
    )


def test_a_mix_truncates_the_wal(tmp_path: Path) -> None:
    """The WAL holds each upload's frames in commit order: after a mix it is emptied, so what
    the file keeps is the mixed order only (docs/COLLECTOR.md, unlinkable storage)."""
    store = SQLiteStorage(tmp_path / "m.db", staging=True)
    store.migrate()
    c = campaign("m")
    store.create_campaign(c)
    store.ingest(c, {"2026-11-21": window_batch(c, ids("m", 20), seed=4)})
    assert _wal_bytes(store) > 0 and store.staged_count() == 20
    began = time.perf_counter()
    result = store.mix()
    took = time.perf_counter() - began
    assert result.moved == 20 and 0 <= result.seconds <= took  # seconds: its own duration
    assert _wal_bytes(store) == 0
    assert _SCRUB_TIMEOUT_MS == 100  # docs/COLLECTOR.md: the busy timeout it waits at most


def test_the_wal_truncation_gives_up_on_a_reader_without_retrying(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint running elsewhere fails the truncation at once and it is tried again; a
    reader holding an old snapshot makes it wait the busy timeout, and then it gives up (no
    retries that would each block writers for that long)."""
    import collector.storage.sqlite as sqlite_module

    store = SQLiteStorage(tmp_path / "r.db", staging=True)
    store.migrate()
    c = campaign("r")
    store.create_campaign(c)
    store.ingest(c, {"2026-11-21": window_batch(c, ids("r", 5), seed=6)})
    reader = sqlite3.connect(store.path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM reports").fetchone()  # pins its snapshot
        store.ingest(c, {"2026-11-21": window_batch(c, ids("s", 5), seed=7)})
        if store._checkpointer is not None:  # no checkpoint running elsewhere: the reader alone
            store._checkpointer.stop()
        pauses: list[float] = []
        monkeypatch.setattr(sqlite_module.time, "sleep", pauses.append)
        assert store._scrub_wal() is False and pauses == []
        assert _wal_bytes(store) > 0
    finally:
        reader.close()
    monkeypatch.undo()
    assert store._scrub_wal() is True and _wal_bytes(store) == 0
    store.close()


def test_the_checkpoint_thread_survives_a_database_it_cannot_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The thread must never take the worker down: a file it cannot open is logged, and the
    thread ends without raising (its connection was never made, so nothing is closed)."""
    raised: list[BaseException | None] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: raised.append(args.exc_value)
    try:
        with caplog.at_level(logging.WARNING, logger="collector.storage.sqlite"):
            cp = Checkpointer(str(tmp_path / "no-such-dir" / "x.db")).start()
            try:
                eventually(cp._thread.is_alive, lambda alive: not alive, what="the thread's end")
            finally:
                cp.stop()
    finally:
        threading.excepthook = previous
    assert raised == []
    assert "WAL checkpoint thread stopped" in caplog.text


def test_the_checkpointer_takes_its_path_first_and_its_timings_by_name(tmp_path: Path) -> None:
    path = str(tmp_path / "k.db")
    with pytest.raises(TypeError):
        Checkpointer(path, 0.5)  # type: ignore[misc]
    named = Checkpointer(path=path, idle_seconds=0.1, min_interval=0.05)
    assert (named.path, named.idle_seconds, named.min_interval) == (path, 0.1, 0.05)
