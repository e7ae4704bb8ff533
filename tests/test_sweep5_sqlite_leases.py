"""SQLite lease rows after the wall clock stepped back (fifth sweep, adversarial review).

``claim_run`` compared ``now - last_run`` with the interval; a ``last_run`` in the future (the
clock stepped back after a run: an NTP correction, a VM restored or resumed) made the
difference negative, so no caller won the lease until the clock caught up: no retention sweep
and, with the mixer's two leases, no mix, so reports stayed staged (in upload order) far longer
than ``LDP_MIX_INTERVAL``. A future ``last_run`` now makes the lease due (once per interval).
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import time
from pathlib import Path

import numpy as np

from collector.campaigns import campaign_from_request
from collector.ingest import ingest_batch
from collector.mixing import LEASE, POLL_LEASE, Mixer
from collector.retention import LEASE as RETENTION_LEASE
from collector.storage import SQLiteStorage

AN_HOUR_AHEAD = 3600.0
DAY = dt.date(2026, 1, 1)


def _lease_from_the_future(path: Path, name: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO leases (name, last_run) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET last_run = excluded.last_run",
            (name, time.time() + AN_HOUR_AHEAD),
        )


def test_a_lease_run_in_the_future_is_due_once_per_interval(tmp_path: Path) -> None:
    path = tmp_path / "collector.db"
    store = SQLiteStorage(path)
    store.migrate()
    _lease_from_the_future(path, RETENTION_LEASE)
    assert store.claim_run(RETENTION_LEASE, 600) is True
    assert store.claim_run(RETENTION_LEASE, 600) is False  # one winner per interval again
    store.close()


def test_the_mixer_still_mixes_after_the_clock_stepped_back(tmp_path: Path) -> None:
    path = tmp_path / "collector.db"
    store = SQLiteStorage(path, staging=True)
    store.migrate()
    body = {"id": "occ", "domain": ["a", "b", "c", "d"], "mechanism": "oue", "epsilon": 1.0}
    camp = campaign_from_request(body, today=DAY)
    store.create_campaign(camp)
    mech = camp.mechanism
    payloads = mech.encode_many(mech.perturb_many(np.arange(8) % 4, rng=5))
    reports = [
        {"id": f"report-{i:012d}", "day": DAY.isoformat(), "payload": p}
        for i, p in enumerate(payloads)
    ]
    upload = {"digest": camp.digest, "reports": reports}
    assert ingest_batch(store, camp, upload, max_reports=100, today=DAY).accepted == 8
    _lease_from_the_future(path, LEASE)
    _lease_from_the_future(path, POLL_LEASE)
    mixer = Mixer(store, batch=5, interval=60, poll_seconds=1.0)
    done = mixer.tick()
    assert done is not None and done.moved == 8
    assert store.staged_count() == 0
    store.close()
