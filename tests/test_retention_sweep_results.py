"""What a retention sweep reports per campaign, and how the service's sweep thread is started
and paced (collector/retention.py), on a real SQLite file.

The thread's pacing is read through a recording stop event in place of ``threading.Event``:
the scheduler's waits are its whole schedule, and recording them is the only way to see it
without timing the test.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from collector.campaigns import Campaign, campaign_from_request
from collector.ingest import ingest_batch
from collector.retention import DEFAULT_CHUNK, Scheduler, sweep
from collector.storage import Storage, open_storage
from tests.support.pacing import RecordingStop

DAY0 = dt.date(2026, 1, 1)
LATER = DAY0 + dt.timedelta(days=400)


def _campaign(cid: str, **extra: object) -> Campaign:
    body = {"id": cid, "domain": ["a", "b", "c", "d"], "mechanism": "oue", "epsilon": 1.0}
    return campaign_from_request({**body, **extra}, today=DAY0)


def _upload(store: Storage, camp: Campaign, count: int) -> None:
    mech = camp.mechanism
    payloads = mech.encode_many(mech.perturb_many(np.arange(count) % 4, rng=count))
    day = DAY0.isoformat()
    reports = [{"id": f"report-{i:016d}", "day": day, "payload": p} for i, p in enumerate(payloads)]
    body = {"digest": camp.digest, "reports": reports}
    assert ingest_batch(store, camp, body, max_reports=100_000, today=DAY0).accepted == count


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Storage]:
    s = open_storage(str(tmp_path / "collector.db"))
    s.migrate()
    try:
        yield s
    finally:
        s.close()


def test_a_sweep_reports_each_campaign_and_deletes_in_chunks_of_500(store: Storage) -> None:
    """Campaigns are swept in id order; one keeping its reports forever ("a") reports nothing
    done and does not end the sweep; the others delete in chunks of DEFAULT_CHUNK = 500
    reports (1,000 reports: 2 chunks, 1,001: 3), and the longest chunk is a duration in ms."""
    # Created before retention existed: no retention_days, its reports are kept forever.
    forever = dataclasses.replace(_campaign("a"), retention_days=None)
    even, odd = _campaign("b", retention_days=30), _campaign("c", retention_days=30)
    for camp, count in ((forever, 3), (even, 1000), (odd, 1001)):
        store.create_campaign(camp)
        _upload(store, camp, count)
    assert DEFAULT_CHUNK == 500

    done = sweep(store, today=LATER)

    assert done is not None
    results = {c.campaign: c for c in done}
    assert list(results) == ["a", "b", "c"]
    assert results["a"].to_dict() == {
        "campaign": "a",
        "purged_before": None,
        "deleted": 0,
        "chunks": 0,
        "longest_chunk_ms": 0.0,
        "dropped_by_partition": 0,
    }
    assert (results["b"].deleted, results["b"].chunks) == (1000, 2)
    assert (results["c"].deleted, results["c"].chunks) == (1001, 3)
    for cid in ("b", "c"):
        # A chunk holds SQLite's write lock for milliseconds; a minute means a unit slipped.
        assert 0 < results[cid].longest_chunk_ms < 60_000, results[cid]


def test_the_sweep_thread_waits_one_second_first_then_five(store: Storage) -> None:
    """A fresh worker serves before it sweeps (a first wait of at most 1 s), then checks the
    lease every 5 s (the interval, if shorter)."""
    scheduler = Scheduler(store, interval=3600)
    stop = RecordingStop(waits=3)
    scheduler._stop = stop  # type: ignore[assignment]
    scheduler._run()
    assert stop.waits == [1.0, 5.0, 5.0, 5.0]

    short = Scheduler(store, interval=0.5)
    stop = RecordingStop(waits=2)
    short._stop = stop  # type: ignore[assignment]
    short._run()
    assert stop.waits == [0.5, 0.5, 0.5]


def _sweep_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ldp-retention"]


def test_the_sweep_thread_starts_once_per_process_and_never_when_off(store: Storage) -> None:
    before = len(_sweep_threads())
    for interval in (0, -1):
        Scheduler(store, interval=interval).ensure_started()
    assert len(_sweep_threads()) == before  # LDP_RETENTION_INTERVAL <= 0: no sweeping

    scheduler = Scheduler(store, interval=3600)
    try:
        scheduler.ensure_started()
        scheduler.ensure_started()
        assert len(_sweep_threads()) == before + 1
        thread = scheduler._thread
        assert thread is not None and thread.daemon  # never holds the worker's exit

        # A forked worker inherits the parent's pid in the scheduler, and pids are not
        # ordered: a parent with a larger pid than the child must not stop the child's start.
        scheduler._pid = os.getpid() + 1
        scheduler.ensure_started()
        assert len(_sweep_threads()) == before + 2
    finally:
        scheduler.stop()
