"""A server-wide retention ceiling longer than the calendar (sweep 4, data lifecycle).

``LDP_MAX_RETENTION_DAYS`` accepts up to 2**31 - 1 days. A campaign created before retention
existed (no ``retention_days``) is kept exactly the ceiling, and its purge mark, ``today``
minus the ceiling, fell before 0001-01-01: ``OverflowError`` in ``purge_mark``. Every mark is
worked out before any delete, so one such campaign stopped the whole sweep: ``ldp retention
run`` died with a traceback and the service's sweep failed at every interval, keeping every
other campaign's aged reports past their retention. A mark before the first representable day
means no window can have aged out yet.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.campaigns import Campaign, campaign_from_request
from collector.retention import Scheduler, purge_mark
from collector.storage import Storage, open_storage
from ldp_cli.main import cli
from tests.support.lifecycle import daily_campaign

DATA = Path(__file__).parent / "data"
DAY0 = dt.date(2026, 11, 22)
#: Past the 739 000-odd days between 0001-01-01 and now: the mark fell off the calendar.
HUGE = 1_000_000


def _fresh(store: Storage) -> Campaign:
    return daily_campaign(store, "fresh", start=DAY0, days=4, retention_days=5)


def _legacy_file(tmp_path: Path) -> Path:
    """main-c1588c3's SQLite file (campaigns without retention_days) plus a new campaign
    keeping 5 days with 4 days of reports."""
    db = tmp_path / "ldp.db"
    shutil.copy(DATA / "main-c1588c3.sqlite", db)
    store = open_storage(str(db))
    try:
        store.migrate()
        assert all(c.retention_days is None for c, _ in store.list_campaigns())
        _fresh(store)
    finally:
        store.close()
    return db


def test_a_mark_before_the_first_day_is_no_mark() -> None:
    camp = campaign_from_request(
        {"id": "x", "domain": ["a", "b"], "epsilon": 1.0, "retention_days": 36600}, today=DAY0
    )
    assert purge_mark(camp, DAY0, HUGE) == (DAY0 - dt.timedelta(days=36600)).isoformat()
    legacy = Campaign.from_record({**camp.to_record(), "retention_days": None})
    assert legacy.retention_days is None
    assert purge_mark(legacy, DAY0, HUGE) is None  # was OverflowError
    assert purge_mark(legacy, dt.date(1, 1, 1), 1) is None
    assert purge_mark(legacy, DAY0, 30) == (DAY0 - dt.timedelta(days=30)).isoformat()


def test_ldp_retention_run_with_a_huge_ceiling_still_sweeps(tmp_path: Path) -> None:
    db = _legacy_file(tmp_path)
    today = DAY0 + dt.timedelta(days=8)  # fresh keeps 5 days: windows before 11-25 aged
    ran = CliRunner().invoke(
        cli,
        ["retention", "run", "--db", str(db), "--format", "json"],
        env={"LDP_TODAY": today.isoformat(), "LDP_MAX_RETENTION_DAYS": str(HUGE)},
    )
    assert ran.exception is None or isinstance(ran.exception, SystemExit), ran.exception
    assert ran.exit_code == 0, ran.output
    rows = {r["campaign"]: r for r in json.loads(ran.output)["campaigns"]}
    assert rows["fresh"]["purged_before"] == "2026-11-25"
    assert rows["fresh"]["deleted"] == 30 and rows["fresh"]["reports"] == 10
    for legacy in ("occ", "city", "old"):  # kept: nothing of theirs is a million days old
        assert rows[legacy]["deleted"] == 0 and rows[legacy]["reports"] > 0


def test_the_services_sweep_with_a_huge_ceiling_still_sweeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _legacy_file(tmp_path)
    monkeypatch.setenv("LDP_TODAY", (DAY0 + dt.timedelta(days=8)).isoformat())
    store = open_storage(str(db))
    try:
        # The worker's periodic job as the service runs it: Scheduler.tick wins the lease and
        # sweeps at the collector clock's date (it failed at every interval).
        done = Scheduler(store, interval=3600, max_retention_days=HUGE).tick()
        assert done is not None
        fresh = {c.campaign: c for c in done}["fresh"]
        assert fresh.deleted == 30 and fresh.purged_before == "2026-11-25"
        camp = store.get_campaign("fresh")
        assert camp is not None and store.count_reports(camp) == 10
    finally:
        store.close()
