"""SQLite retention racing ingest and the mixer (fifth sweep, adversarial review).

* An upload checked against the horizon just before the day changed, and committed after a
  retention sweep of the new day deleted its window (and so its report ids), was stored and
  counted a second time: a replay counted twice, in a window ``tally verify`` skips. Ingest
  now refuses it whole (503, nothing stored); the retry is checked against the new day.
* A mix that ran between two purge chunks moved aged staged reports into key ranges the purge
  had walked past: they stayed stored after a complete sweep. The sweep now deletes a window's
  staged reports with its purge mark.

Both races are replayed deterministically: the sweep runs inside the upload's call to storage,
and the mix inside the purge's pause between chunks.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import collector.storage.sqlite as sqlite_backend
from collector import create_app
from collector.errors import StorageBusy
from collector.ingest import payload_json
from collector.retention import sweep
from collector.storage import SQLiteStorage, WindowBatch
from collector.tallycheck import verify_tallies
from tests.support.lifecycle import batch_body, short_campaign, upload_ids
from tests.support.server import ANALYST_TOKEN, INGEST_TOKEN, TOKENS

DAY0 = dt.date(2026, 1, 1)


def _stored_ids(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT report_id FROM reports UNION ALL SELECT report_id FROM staged_reports"
        ).fetchall()
    return sorted(r[0] for r in rows)


@pytest.mark.parametrize("staging", [False, True])
def test_a_replay_checked_before_the_sweep_of_the_next_day_is_not_counted_again(
    tmp_path: Path, staging: bool
) -> None:
    path = tmp_path / "collector.db"
    store = SQLiteStorage(path, staging=staging)
    store.migrate()
    camp = short_campaign()
    store.create_campaign(camp)
    ids = [f"report-{i:012d}" for i in range(8)]
    eve = DAY0 + dt.timedelta(days=3)  # DAY0 is the oldest day the horizon accepts
    assert upload_ids(store, camp, DAY0, ids, today=eve).accepted == 8
    if staging:
        assert store.mix().moved == 8
    # Past midnight a sweep deletes DAY0's window, then the replay, checked on the eve, commits.
    [done] = sweep(store, today=eve + dt.timedelta(days=1)) or []
    assert (done.purged_before, done.deleted) == ("2026-01-02", 8)
    with pytest.raises(StorageBusy, match="retention deleted the reports of windows before"):
        upload_ids(store, camp, DAY0, ids, today=eve)
    assert _stored_ids(path) == []
    [counters] = store.report_counters()
    assert (counters.accepted, counters.duplicate, counters.rejected) == (8, 0, 0)
    assert sum(t.n for t in store.tallies(camp).values()) == 8
    # The client's retry is checked against the new day: refused, and told why.
    again = upload_ids(store, camp, DAY0, ids, today=eve + dt.timedelta(days=1))
    assert (again.accepted, again.duplicate, again.rejected) == (0, 0, 8)
    assert "older than the campaign's horizon" in again.errors[0]["reason"]
    assert all(check.ok for check in verify_tallies(store))
    store.close()


def test_the_storage_refuses_a_window_below_the_mark_whole(tmp_path: Path) -> None:
    """Reports of a kept window in the same upload are not stored either (all or nothing)."""
    path = tmp_path / "collector.db"
    store = SQLiteStorage(path)
    store.migrate()
    camp = short_campaign()
    store.create_campaign(camp)
    store.purge_reports(camp, "2026-01-05")
    mech = camp.mechanism

    def batch(rid: str) -> WindowBatch:
        payload = mech.encode_many(mech.perturb_many(np.array([0]), rng=1))[0]
        rows = [(rid, payload_json(payload))]
        return WindowBatch(rows, lambda _positions: mech.empty_tally())

    windows: Mapping[str, WindowBatch] = {
        "2026-01-05": batch("kept-window-0001"),
        "2026-01-04": batch("aged-window-0001"),
    }
    with pytest.raises(StorageBusy):
        store.ingest(camp, windows)
    assert _stored_ids(path) == [] and store.report_counters()[0].accepted == 0
    store.close()


def test_the_upload_answers_503_with_retry_after_and_the_retry_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    day_file = tmp_path / "today"
    eve = DAY0 + dt.timedelta(days=3)
    day_file.write_text(eve.isoformat())
    monkeypatch.setenv("LDP_TODAY_FILE", str(day_file))
    app = create_app({"database": str(tmp_path / "collector.db"), **TOKENS, "retry_after": 2})
    store = app.extensions["ldp_storage"]
    client = app.test_client()
    ingest = {"Authorization": f"Bearer {INGEST_TOKEN}"}
    try:
        camp = short_campaign()
        store.create_campaign(camp)
        body = batch_body(camp, DAY0, [f"report-{i:012d}" for i in range(5)])
        first = client.post("/v1/campaigns/occ/reports", json=body, headers=ingest)
        assert first.status_code == 200 and first.json["accepted"] == 5

        real_ingest = store.ingest

        def sweep_first(*args: Any, **kwargs: Any) -> Any:
            # Midnight passes between the upload's checks and its write transaction.
            day_file.write_text((eve + dt.timedelta(days=1)).isoformat())
            sweep(store)
            return real_ingest(*args, **kwargs)

        monkeypatch.setattr(store, "ingest", sweep_first)
        replay = client.post("/v1/campaigns/occ/reports", json=body, headers=ingest)
        assert replay.status_code == 503, replay.json
        assert replay.headers["Retry-After"] == "2"
        assert replay.json["error"]["code"] == "storage_unavailable"
        monkeypatch.setattr(store, "ingest", real_ingest)
        retry = client.post("/v1/campaigns/occ/reports", json=body, headers=ingest)
        assert retry.status_code == 200
        assert (retry.json["accepted"], retry.json["rejected"]) == (0, 5)
        analyst = {"Authorization": f"Bearer {ANALYST_TOKEN}"}
        shown = client.get("/v1/campaigns/occ/estimates", headers=analyst)
        assert shown.status_code == 200 and shown.json["n"] == 5, shown.json
        assert store.report_counters()[0].accepted == 5
    finally:
        store.close()


def test_a_mix_between_purge_chunks_leaves_no_aged_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "collector.db"
    store = SQLiteStorage(path, staging=True)
    store.migrate()
    mixer = SQLiteStorage(path, staging=True)  # another worker's connection
    camp = short_campaign()
    store.create_campaign(camp)
    eve = DAY0 + dt.timedelta(days=3)
    assert upload_ids(store, camp, DAY0, [f"b{i:03d}-mixed-xxxxxxxxx" for i in range(20)], eve)
    assert store.mix().moved == 20
    # Staged, not yet mixed; their ids sort before the keys the purge walks first.
    assert upload_ids(store, camp, DAY0, [f"a{i:03d}-staged-xxxxxxxx" for i in range(5)], eve)
    mixes: list[int] = []

    class PauseRunsAMix:
        """The backend's ``time`` module, whose first sleep (a purge's pause) runs a mix."""

        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        def sleep(self, seconds: float) -> None:
            if not mixes:
                mixes.append(-1)
                mixes[0] = mixer.mix().moved
            time.sleep(seconds)

    monkeypatch.setattr(sqlite_backend, "time", PauseRunsAMix())
    [done] = sweep(store, today=eve + dt.timedelta(days=1), chunk=10) or []
    monkeypatch.undo()
    assert _stored_ids(path) == []
    assert done.deleted == 25
    assert mixes == [0]  # nothing aged was left staged for the mix to move
    assert store.count_reports(camp) == 0 and store.staged_count() == 0
    assert sum(t.n for t in store.tallies(camp).values()) == 25
    assert all(check.ok for check in verify_tallies(store))
    mixer.close()
    store.close()
