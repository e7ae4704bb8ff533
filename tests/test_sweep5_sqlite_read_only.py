"""SQLite: a worker recovers once its read-only database file is writable again (fifth sweep,
adversarial review).

When the file is not writable (permissions, a read-only mount) SQLite opens a connection
read-only, and it stays read-only. Each thread kept its connection for good, so after the
operator fixed the file the worker still answered every upload and readiness probe 503
("attempt to write a readonly database") until it was restarted. A connection that meets that
error is now let go; the next request opens a new one.

As root, file modes do not stop writes, so the test opens the first connection the way SQLite
does for a file it cannot write (``mode=ro``) rather than changing the file's mode.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from collector.campaigns import Campaign, campaign_from_request
from collector.errors import StorageUnavailable
from collector.ingest import ingest_batch
from collector.retention import sweep
from collector.storage import SQLiteStorage
from collector.tallycheck import verify_tallies

DAY = dt.date(2026, 1, 1)


def _campaign() -> Campaign:
    body = {"id": "occ", "domain": ["a", "b", "c", "d"], "mechanism": "oue", "epsilon": 1.0}
    return campaign_from_request({**body, "retention_days": 3, "horizon_days": 3}, today=DAY)


def _upload(store: SQLiteStorage, camp: Campaign, tag: str) -> int:
    mech = camp.mechanism
    payloads = mech.encode_many(mech.perturb_many(np.arange(6) % 4, rng=9))
    reports = [
        {"id": f"{tag}-{i:012d}", "day": DAY.isoformat(), "payload": p}
        for i, p in enumerate(payloads)
    ]
    body = {"digest": camp.digest, "reports": reports}
    return ingest_batch(store, camp, body, max_reports=100, today=DAY).accepted


@pytest.fixture
def read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The database file, and a switch: while ``state["read_only"]``, connections to it open
    read-only (what SQLite does when the file is not writable)."""
    path = tmp_path / "collector.db"
    setup = SQLiteStorage(path)
    setup.migrate()
    setup.create_campaign(_campaign())
    setup.close()
    state: dict[str, Any] = {"path": path, "read_only": True}
    real = sqlite3.connect

    def connect(target: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        if state["read_only"] and str(target) == str(path):
            return real(f"file:{path}?mode=ro", *args, **{**kwargs, "uri": True})
        return real(target, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    return state


def test_uploads_and_the_probe_recover_once_the_file_is_writable(
    read_only: dict[str, Any],
) -> None:
    store = SQLiteStorage(read_only["path"])
    camp = _campaign()
    with pytest.raises(StorageUnavailable, match="readonly"):
        _upload(store, camp, "first")
    with pytest.raises(StorageUnavailable, match="readonly"):
        store.ping()
    read_only["read_only"] = False  # the operator makes the file writable again
    store.ping()
    assert _upload(store, camp, "first") == 6
    assert store.report_counters()[0].accepted == 6
    assert all(check.ok for check in verify_tallies(store))
    store.close()


def test_a_sweep_on_a_read_only_file_fails_clearly_and_runs_once_it_is_writable(
    read_only: dict[str, Any],
) -> None:
    store = SQLiteStorage(read_only["path"])
    camp = _campaign()
    with pytest.raises(StorageUnavailable, match="readonly"):
        sweep(store, today=DAY + dt.timedelta(days=10))
    read_only["read_only"] = False
    [done] = sweep(store, today=DAY + dt.timedelta(days=10)) or []
    assert done.purged_before is not None and store.purged_before(camp) == done.purged_before
    store.close()
