"""``ldp retention run``'s messages when a sweep cannot run or stops midway (sweep 4).

* A sweep that stopped midway (here a PostgreSQL lock timeout while one aged day's partition
  waits to be detached) printed the store's "...; nothing was stored, retry": yet every
  campaign's purge mark was recorded (estimates and ``ldp tally verify`` already treat those
  windows as deleted) and the partitions before it were dropped.
* A bad test clock was blamed on the database ("ldp.db: LDP_TODAY must be ...") and read
  only after the store had been opened and migrated.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from collector.storage import open_storage
from ldp_cli.main import cli
from tests.support.lifecycle import daily_campaign
from tests.support.postgres import fresh_database

DAY0 = dt.date(2026, 1, 1)


def _fill(database: str) -> None:
    """One campaign keeping 3 days, 10 reports a day on days 0..5 (partitions by day on
    PostgreSQL)."""
    store = open_storage(database)
    try:
        store.migrate()
        daily_campaign(store, "occ", start=DAY0, days=6, retention_days=3)
    finally:
        store.close()


def test_a_sweep_stopped_midway_says_what_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDP_TODAY", DAY0.isoformat())
    with fresh_database() as url:
        _fill(url)
        runner = CliRunner()
        env = {"LDP_TODAY": (DAY0 + dt.timedelta(days=7)).isoformat()}  # mark 2026-01-05
        blocker = psycopg.connect(url)
        try:
            # An operator's open transaction on one aged day: its detach waits past the lock
            # timeout (5 s) and the sweep stops.
            blocker.execute("LOCK TABLE reports_p20260102 IN ACCESS SHARE MODE")
            stopped = runner.invoke(cli, ["retention", "run", "--db", url], env=env)
        finally:
            blocker.rollback()
            blocker.close()
        assert stopped.exit_code == 1, stopped.output
        assert "Traceback" not in stopped.output
        assert "nothing was stored" not in stopped.output.split("(")[0]
        assert "stopped before it finished" in stopped.output
        assert "run 'ldp retention run' again" in stopped.output
        # It may stop before its first write: it says what it may have done, not that it did.
        assert "any purge marks it recorded" in stopped.output
        # What stands: the mark (the windows before it read as deleted) ...
        shown = runner.invoke(
            cli, ["campaign", "show", "occ", "--db", url, "--format", "json"], env=env
        )
        assert json.loads(shown.output)["reports_deleted_before"] == "2026-01-05"
        # ... and the next run finishes.
        again = runner.invoke(cli, ["retention", "run", "--db", url, "--format", "json"], env=env)
        assert again.exit_code == 0, again.output
        (row,) = json.loads(again.output)["campaigns"]
        assert row["purged_before"] == "2026-01-05" and row["reports"] == 20


@pytest.mark.parametrize("value", ["2026-13-45", "yesterday"])
def test_a_bad_clock_is_the_clocks_error_and_leaves_the_file_alone(
    tmp_path: Path, value: str
) -> None:
    db = tmp_path / "ldp.db"
    _fill(str(db))
    before = db.read_bytes()
    ran = CliRunner().invoke(cli, ["retention", "run", "--db", str(db)], env={"LDP_TODAY": value})
    assert ran.exit_code == 1
    assert ran.output.startswith(
        f"Error: LDP_TODAY must be an ISO date like 2026-11-21, got {value!r}"
    ), ran.output
    assert str(db) not in ran.output
    assert db.read_bytes() == before
