"""``ldp tally verify``'s check (collector/tallycheck.py) on a real SQLite file: every window's
running tally against the tally of its stored reports, both ways, and retention's windows.

Tampering is done with sqlite3 on the file, as whoever holds the database could.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path

import pytest

from client_sdk.mechanisms import Tally
from collector import tallycheck
from collector.campaigns import campaign_from_request
from collector.retention import sweep
from collector.storage import SQLiteStorage
from collector.tallycheck import WindowCheck, recompute, verify_tallies
from tests.test_storage_backends import campaign, window_batch


@pytest.fixture()
def store(tmp_path: Path) -> SQLiteStorage:
    s = SQLiteStorage(tmp_path / "s.db")
    s.migrate()
    return s


def ids(window: str, n: int) -> list[str]:
    return [f"r{window.replace('-', '')}-{i:08d}" for i in range(n)]


def test_a_tally_without_reports_and_reports_without_a_tally_both_fail(
    store: SQLiteStorage,
) -> None:
    c = campaign()
    store.create_campaign(c)
    days = ["2026-11-01", "2026-11-02", "2026-11-03"]
    store.ingest(c, {d: window_batch(c, ids(d, 10), seed=i) for i, d in enumerate(days)})
    with sqlite3.connect(store.path) as conn:
        conn.execute("DELETE FROM reports WHERE window_start = '2026-11-01'")
        conn.execute("DELETE FROM tallies WHERE window_start = '2026-11-02'")
    checks = {check.window: check for check in verify_tallies(store)}
    assert sorted(checks) == days
    assert not checks["2026-11-01"].ok and checks["2026-11-01"].recomputed is None
    assert not checks["2026-11-02"].ok and checks["2026-11-02"].stored is None
    assert checks["2026-11-03"].ok


def test_a_missing_side_passes_only_when_the_other_is_empty() -> None:
    empty, three = Tally(0, [0, 0]), Tally(3, [1, 2])
    assert WindowCheck("c", "w", None, None).ok
    assert WindowCheck("c", "w", empty, None).ok
    assert WindowCheck("c", "w", None, empty).ok
    assert not WindowCheck("c", "w", three, None).ok
    assert not WindowCheck("c", "w", None, three).ok
    assert not WindowCheck("c", "w", three, Tally(3, [2, 1])).ok
    assert WindowCheck("c", "w", three, None, skipped=True).ok


def test_windows_retention_emptied_are_skipped_and_the_first_kept_one_is_checked(
    store: SQLiteStorage,
) -> None:
    day0 = dt.date(2026, 1, 1)
    body = {"id": "kept", "domain": ["a", "b", "c", "d", "e"], "mechanism": "oue"}
    c = campaign_from_request({**body, "epsilon": 1.0, "retention_days": 30}, today=day0)
    store.create_campaign(c)
    days = [(day0 + dt.timedelta(days=i)).isoformat() for i in range(3)]
    store.ingest(c, {d: window_batch(c, ids(d, 10), seed=i) for i, d in enumerate(days)})
    # 30 days kept: on day0 + 32 the windows before day0 + 2 have aged out.
    (done,) = sweep(store, today=day0 + dt.timedelta(days=32)) or []
    assert done.purged_before == days[2] and done.deleted == 20
    checks = {check.window: check for check in verify_tallies(store, "kept")}
    assert [checks[d].skipped for d in days] == [True, True, False]
    assert all(check.ok for check in checks.values())
    assert checks[days[2]].recomputed == checks[days[2]].stored
    assert checks[days[2]].stored is not None and checks[days[2]].stored.n == 10


def test_a_window_larger_than_a_chunk_is_recomputed_exactly(
    store: SQLiteStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reports are tallied in chunks of ``_CHUNK`` (50,000); here 3, so 10 reports of a window
    are three full chunks and a rest."""
    c = campaign()
    store.create_campaign(c)
    store.ingest(c, {"2026-11-01": window_batch(c, ids("2026-11-01", 10))})
    monkeypatch.setattr(tallycheck, "_CHUNK", 3)
    assert recompute(store, c) == store.tallies(c)
    assert all(check.ok for check in verify_tallies(store))
