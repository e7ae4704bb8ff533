"""A bounded load test (10 s here; 60 s in bench/reliability.py): no errors, every report
stored once, and the collector's memory does not grow beyond noise."""

from __future__ import annotations

from typing import Any

from tests.reliability.checks import create_campaign, integrity, stored_reports
from tests.reliability.loadgen import run_load
from tests.support.server import CollectorProcess

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
