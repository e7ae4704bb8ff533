"""SQLite: a report id staged by one process is a duplicate for a process that stores directly
(fifth sweep, adversarial review).

Two collectors on one file with different ``LDP_MIX_BATCH`` (a rolling restart that turns
staging on or off, a second ``ldp serve`` started with other settings) used to disagree: a
process with staging off checked only ``reports`` for known ids, so an id still staged by the
other one was stored again and counted twice; the next mix then dropped the staged copy
(``ON CONFLICT DO NOTHING``) and ``ldp tally verify`` failed. Direct inserts now also look in
``staged_reports`` when the campaign has staged rows. Both stores are separate connections to
a real file, as two worker processes are.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from collector.campaigns import Campaign, campaign_from_request
from collector.ingest import BatchResult, ingest_batch
from collector.storage import SQLiteStorage
from collector.tallycheck import verify_tallies

DAY = dt.date(2026, 1, 1)


def _campaign() -> Campaign:
    body = {"id": "occ", "domain": ["a", "b", "c", "d"], "mechanism": "oue", "epsilon": 1.0}
    return campaign_from_request(body, today=DAY)


def _upload(store: SQLiteStorage, camp: Campaign, ids: list[str]) -> BatchResult:
    mech = camp.mechanism
    payloads = mech.encode_many(mech.perturb_many(np.arange(len(ids)) % 4, rng=3))
    reports = [
        {"id": rid, "day": DAY.isoformat(), "payload": p}
        for rid, p in zip(ids, payloads, strict=True)
    ]
    body = {"digest": camp.digest, "reports": reports}
    return ingest_batch(store, camp, body, max_reports=10_000, today=DAY)


def _ids(n: int, tag: str) -> list[str]:
    return [f"{tag}-{i:012d}" for i in range(n)]


@pytest.mark.parametrize("replay", ["all staged", "staged and new"])
def test_an_id_staged_elsewhere_is_a_duplicate_for_direct_ingest(
    tmp_path: Path, replay: str
) -> None:
    path = tmp_path / "collector.db"
    direct = SQLiteStorage(path, staging=False)
    direct.migrate()
    staging = SQLiteStorage(path, staging=True)
    camp = _campaign()
    direct.create_campaign(camp)
    assert _upload(direct, camp, _ids(4, "mixed")).accepted == 4
    assert _upload(staging, camp, _ids(10, "staged")).accepted == 10
    ids = _ids(10, "staged") + (_ids(6, "fresh") if replay == "staged and new" else [])
    again = _upload(direct, camp, ids)
    fresh = len(ids) - 10
    assert (again.accepted, again.duplicate) == (fresh, 10)
    [counters] = direct.report_counters()
    assert (counters.accepted, counters.duplicate) == (14 + fresh, 10)
    assert sum(t.n for t in direct.tallies(camp).values()) == 14 + fresh
    assert direct.count_reports(camp) == 14 + fresh
    assert staging.mix().moved == 10
    with sqlite3.connect(path) as conn:
        stored = conn.execute("SELECT count(*) FROM reports").fetchone()[0]
    assert stored == 14 + fresh
    assert all(check.ok for check in verify_tallies(direct))
    # The staging process, too, still finds every id (mixed or direct) known.
    assert _upload(staging, camp, ids).accepted == 0
    direct.close()
    staging.close()
