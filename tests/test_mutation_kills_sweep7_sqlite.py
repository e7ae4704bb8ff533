"""Mutants of SQLite's mix in slices that the tests let through.

Found by mutation testing of the lines changed since d245125 (``collector/storage/sqlite.py``:
``mix``, ``_claim_mix``), docs/MUTATION.md "Runs of the seventh sweep". Real SQLite files
and the real ingest; what is spied on is where slices end and when the mix checkpoints.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import collector.storage.sqlite as sqlite_module
from collector.errors import StorageError
from collector.storage import SQLiteStorage
from tests.test_sweep6_sqlite_mix_chunks import CAMPAIGN, running_mixes, staged_store


def test_a_mix_moves_slices_of_500_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kills ``MIX_CHUNK = 501`` and ``499``: a slice, one write transaction, holds at most
    500 reports (the size measured in the constant's comment: 32-35 ms of lock with 400,000
    staged; 1000 held it 104-153 ms), and every slice but the last is full."""
    store, staged = staged_store(tmp_path / "s.db", 1001)
    sizes: list[int] = []
    real = SQLiteStorage._mix_slice

    def spy(self: SQLiteStorage, keys: list[tuple[int, str]], lease: str) -> int:
        sizes.append(len(keys))
        return real(self, keys, lease)

    monkeypatch.setattr(SQLiteStorage, "_mix_slice", spy)
    monkeypatch.setattr(sqlite_module, "MIX_PAUSE_S", 0.0)
    assert store.mix().moved == 1001
    assert sizes == [500, 500, 1]
    assert store.count_reports(CAMPAIGN) == len(staged)
    store.close()


def test_a_mix_checkpoints_after_every_fourth_slice_and_at_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills ``number % MIX_CHECKPOINT_SLICES < 0`` (and ``!=``) for ``== 0`` and
    ``enumerate(..., start=0)`` / ``start=2``: the WAL is copied and truncated after slices 4
    and 8 of 9 and once more at the end, as ``mix`` says (without them it grew by every slice,
    3.5 GB for a mix of 400,000 reports)."""
    monkeypatch.setattr(sqlite_module, "MIX_CHUNK", 5)
    monkeypatch.setattr(sqlite_module, "MIX_PAUSE_S", 0.0)
    store, _ = staged_store(tmp_path / "c.db", 45)
    events: list[str] = []
    real_slice, real_scrub = SQLiteStorage._mix_slice, SQLiteStorage._scrub_wal

    def spy_slice(self: SQLiteStorage, keys: list[tuple[int, str]], lease: str) -> int:
        events.append("slice")
        return real_slice(self, keys, lease)

    def spy_scrub(self: SQLiteStorage) -> bool:
        events.append("scrub")
        return real_scrub(self)

    monkeypatch.setattr(SQLiteStorage, "_mix_slice", spy_slice)
    monkeypatch.setattr(SQLiteStorage, "_scrub_wal", spy_scrub)
    assert store.mix().moved == 45
    order = ["slice"] * 4 + ["scrub"] + ["slice"] * 4 + ["scrub"] + ["slice", "scrub"]
    assert events == order
    store.close()


def test_a_mix_lease_goes_stale_after_the_busy_timeout_plus_mix_stale_s(tmp_path: Path) -> None:
    """Kills ``busy_timeout_ms / 1001`` and ``/ 999`` in ``_claim_mix``: the row of a mix that
    did not end counts as running for the busy timeout in seconds plus ``MIX_STALE_S``, no
    more, no less (a busy timeout of 1000 s puts the mutants a second off, where the rows
    below sit half a second inside and outside)."""
    path = tmp_path / "l.db"
    store, _ = staged_store(path, 10)
    store.close()
    store = SQLiteStorage(path, staging=True, busy_timeout_ms=1_000_000)
    limit = 1000.0 + sqlite_module.MIX_STALE_S

    def lease_aged(seconds: float) -> None:
        with closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("DELETE FROM leases WHERE name LIKE 'mix-running %'")
            conn.execute(
                "INSERT INTO leases (name, last_run) VALUES ('mix-running dead', ?)",
                (time.time() - seconds,),
            )

    lease_aged(limit - 0.5)  # still a running mix
    assert store.mix(wait=False).moved == 0 and store.staged_count() == 10
    assert len(running_mixes(path)) == 1
    lease_aged(limit + 0.5)  # stale: deleted, and this mix runs
    assert store.mix(wait=False).moved == 10
    assert running_mixes(path) == []
    store.close()


def test_a_lease_row_the_mix_cannot_delete_is_left_to_go_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills the ``except StorageError`` of ``_release_mix`` replaced: a mix whose reports are
    all moved does not fail because the lock for deleting its lease row was not had (the row
    goes stale on its own, after the busy timeout plus ``MIX_STALE_S``)."""
    store, _ = staged_store(tmp_path / "r.db", 10)
    real_write = SQLiteStorage._write
    calls: list[int] = []

    def write(self: SQLiteStorage) -> Any:
        calls.append(1)
        if len(calls) == 3:  # the lease claimed, one slice moved: now the release
            raise StorageError("database is locked")
        return real_write(self)

    monkeypatch.setattr(SQLiteStorage, "_write", write)
    assert store.mix().moved == 10
    assert len(calls) == 3 and len(running_mixes(tmp_path / "r.db")) == 1
    monkeypatch.undo()
    store.close()
