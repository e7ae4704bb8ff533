"""SQLite retention (issue 19): the chunked delete with pauses, on a real SQLite file.

It deletes exactly the aged reports while another thread ingests, keeps every tally, leaves
the connection's durability settings as they were, and a ``ldp retention run`` SIGKILLed
midway leaves a consistent database whose next sweep deletes the rest.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from collector.campaigns import Campaign, campaign_from_request
from collector.ingest import ingest_batch
from collector.retention import sweep
from collector.storage import SQLiteStorage, Storage, open_storage
from collector.tallycheck import verify_tallies

DAY0 = dt.date(2026, 1, 1)


def _campaign(cid: str, **extra: object) -> Campaign:
    body = {"id": cid, "domain": ["a", "b", "c", "d"], "mechanism": "oue", "epsilon": 1.0}
    return campaign_from_request({**body, **extra}, today=DAY0)


def _upload(store: Storage, camp: Campaign, day: dt.date, count: int, tag: str = "") -> int:
    """``count`` reports of ``day``; ids start with their index, so in key order the reports
    of every day interleave (each purge chunk's key range holds aged and kept reports)."""
    mech = camp.mechanism
    payloads = mech.encode_many(mech.perturb_many(np.arange(count) % 4, rng=day.toordinal()))
    reports = [
        {"id": f"{i:06d}{tag}-{day.isoformat()}", "day": day.isoformat(), "payload": p}
        for i, p in enumerate(payloads)
    ]
    result = ingest_batch(
        store, camp, {"digest": camp.digest, "reports": reports}, max_reports=100_000, today=day
    )
    return result.accepted


def _ids(path: Path, campaign: str) -> dict[str, str]:
    """Report id -> window of the campaign's stored reports, read from the file directly."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT report_id, window_start FROM reports r JOIN campaigns c ON c.pk = r.campaign "
            "WHERE c.id = ?",
            (campaign,),
        ).fetchall()
    return dict(rows)


def _tallies(store: Storage, camp: Campaign) -> dict[str, dict[str, object]]:
    return {w: t.to_dict() for w, t in store.tallies(camp).items()}


def test_chunked_purge_deletes_exactly_the_aged_reports_while_ingest_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "collector.db"
    store = open_storage(str(path))
    store.migrate()
    occ = _campaign("occ", horizon_days=3, retention_days=5)
    # Same report ids in another campaign: a chunk's key range is the purged campaign's only.
    keep = _campaign("keep", horizon_days=3, retention_days=30)
    store.create_campaign(occ)
    store.create_campaign(keep)
    days = [DAY0 + dt.timedelta(days=i) for i in range(10)]
    for day in days:
        assert _upload(store, occ, day, 60) == 60
        assert _upload(store, keep, day, 60) == 60
    today = days[-1]
    mark = (today - dt.timedelta(days=5)).isoformat()
    stored = _ids(path, "occ")
    aged = {rid for rid, w in stored.items() if w < mark}
    assert len(aged) == 60 * 4
    occ_tallies = _tallies(store, occ)
    keep_before = _ids(path, "keep")

    # Another writer (its own connection, as a second worker) ingests while the purge runs.
    done = threading.Event()
    accepted: list[int] = []

    def ingest() -> None:
        other = open_storage(str(path))
        n = 0
        while not done.is_set() or n == 0:
            accepted.append(_upload(other, keep, today, 20, tag=f"-live{n:04d}"))
            n += 1
        other.close()

    writer = threading.Thread(target=ingest)
    writer.start()
    try:
        swept = sweep(store, today=today, chunk=16)
    finally:
        done.set()
        writer.join()
    assert swept is not None
    mine = {c.campaign: c for c in swept}
    assert mine["occ"].purged_before == mark
    assert mine["occ"].deleted == len(aged)
    assert mine["occ"].chunks == -(-len(aged) // 16)  # chunks of at most 16
    assert mine["keep"].deleted == 0

    # Exactly the aged reports are gone; the other campaign lost nothing and kept its new ones.
    assert _ids(path, "occ") == {rid: w for rid, w in stored.items() if w >= mark}
    after = _ids(path, "keep")
    assert keep_before.items() <= after.items()
    assert len(after) == len(keep_before) + sum(accepted)
    assert _tallies(store, occ) == occ_tallies
    checks = verify_tallies(store)
    assert all(c.ok for c in checks)
    assert sorted(c.window for c in checks if c.skipped) == sorted(
        {w for w in stored.values() if w < mark}
    )
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    # The purge's unsynced commits and manual checkpoints end with it: this connection
    # (ingest's, in a worker) is back to the store's settings.
    assert isinstance(store, SQLiteStorage)
    conn = store._conn()
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 20000
    store.close()


def test_retention_run_killed_midway_leaves_a_consistent_database(tmp_path: Path) -> None:
    path = tmp_path / "collector.db"
    store = open_storage(str(path))
    store.migrate()
    occ = _campaign("occ", horizon_days=1, retention_days=2)
    store.create_campaign(occ)
    days = [DAY0 + dt.timedelta(days=i) for i in range(6)]
    for day in days:
        assert _upload(store, occ, day, 4000) == 4000
    today = days[-1]
    mark = (today - dt.timedelta(days=2)).isoformat()
    stored = _ids(path, "occ")
    aged = {rid for rid, w in stored.items() if w < mark}
    assert len(aged) == 3 * 4000
    tallies = _tallies(store, occ)
    store.close()

    # Chunks of 4 reports, each followed by a pause: 3,000 chunks, seconds of work to cut.
    env = {**os.environ, "LDP_TODAY": today.isoformat()}
    child = subprocess.Popen(
        [sys.executable, "-m", "ldp_cli", "retention", "run", "--database", str(path)]
        + ["--chunk", "4"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        with sqlite3.connect(path) as conn:
            while child.poll() is None:
                left = conn.execute(
                    "SELECT count(*) FROM reports WHERE window_start < ?", (mark,)
                ).fetchone()[0]
                if left < len(aged) - 400:  # some chunks committed
                    break
                time.sleep(0.01)
    finally:
        child.send_signal(signal.SIGKILL)
        _, err = child.communicate()
    assert child.returncode == -signal.SIGKILL, err.decode()

    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    left = {rid for rid, w in _ids(path, "occ").items() if w < mark}
    assert 0 < len(left) < len(aged) and left < aged  # killed midway
    store = open_storage(str(path))
    assert store.purged_before(occ) == mark  # recorded before the first chunk
    assert {rid: w for rid, w in _ids(path, "occ").items() if w >= mark} == {
        rid: w for rid, w in stored.items() if w >= mark
    }
    assert _tallies(store, occ) == tallies
    checks = verify_tallies(store)
    assert all(c.ok for c in checks)
    assert [c.window for c in checks if c.skipped] == sorted({stored[r] for r in aged})

    # The next sweep deletes what is left, and only that.
    again = sweep(store, today=today, chunk=500)
    assert again is not None
    assert {c.campaign: c.deleted for c in again} == {"occ": len(left)}
    assert _ids(path, "occ") == {rid: w for rid, w in stored.items() if w >= mark}
    assert _tallies(store, occ) == tallies
    store.close()
