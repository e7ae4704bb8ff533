"""A bounded load test (10 s here; 60 s in bench/reliability.py): no errors, every report
stored once, and the collector's memory does not grow beyond noise."""

from __future__ import annotations

import datetime as dt
import gc
import secrets
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from client_sdk.mechanisms import from_config
from collector.app import create_app
from tests.reliability.checks import create_campaign, integrity, stored_reports
from tests.reliability.loadgen import run_load
from tests.support.server import CollectorProcess

pytestmark = pytest.mark.slow

SECONDS = 10
RATE = 40  # upload requests per second, 50 reports each


def test_steady_load_has_no_errors_and_no_memory_growth(
    collector: CollectorProcess, figures: dict[str, Any]
) -> None:
    campaign = create_campaign(collector, "oue")
    result = run_load(collector, campaign, seconds=SECONDS, rate=RATE, uploaders=4, batch=50)
    figures["load_10s"] = result.to_dict()
    assert result.errors == 0
    assert result.reports_accepted == result.reports_sent
    assert (
        len(stored_reports(collector.db_path, campaign["id"]))
        == result.reports_sent + result.warmup_reports
    )
    assert integrity(collector.db_path) == "ok"
    # Memory is measured after the warm-up; a steady state grows by noise only (a leak of even
    # 1 KiB per request would add ~0.4 MiB here, per 1 KiB per report ~20 MiB).
    assert result.rss_end_mb <= result.rss_start_mb * 1.1 + 8, result.to_dict()


def test_python_heap_does_not_grow_with_uploads(tmp_path: Path, figures: dict[str, Any]) -> None:
    """The collector's Python heap (tracemalloc, in process) is flat over 1,000 uploads of 50
    reports. What RSS adds under load is SQLite's page cache filling up to its cap
    (``cache_size``, 16 MiB per connection, ``collector/storage/sqlite.py``), then flat."""
    tokens = {"admin_token": "a" * 20, "analyst_token": "b" * 20, "ingest_token": "c" * 20}
    app = create_app({"database": str(tmp_path / "heap.db"), **tokens})
    client = app.test_client()
    campaign = client.post(
        "/v1/campaigns",
        json={"id": "heap", "domain": ["a", "b", "c", "d", "e"], "mechanism": "oue", "epsilon": 1},
        headers={"Authorization": "Bearer " + "a" * 20},
    ).json
    mech = from_config(campaign["mechanism"])
    rng = np.random.default_rng(4)
    ingest = {"Authorization": "Bearer " + "c" * 20}
    day = dt.datetime.now(dt.UTC).date().isoformat()

    def upload() -> None:
        payloads = mech.encode_many(mech.perturb_many(rng.integers(0, 5, 50), rng=rng))
        items = [{"id": secrets.token_hex(16), "day": day, "payload": p} for p in payloads]
        r = client.post(
            "/v1/campaigns/heap/reports",
            json={"digest": campaign["digest"], "reports": items},
            headers=ingest,
        )
        assert r.status_code == 200

    for _ in range(100):  # warm-up: caches, metrics series, statements
        upload()
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(1000):
            upload()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        app.extensions["ldp_storage"].close()
    growth = after - before
    figures["heap_1000_uploads"] = {"python_heap_growth_bytes": growth, "reports": 50_000}
    assert growth < 256 * 1024, f"the Python heap grew by {growth} bytes over 1,000 uploads"
