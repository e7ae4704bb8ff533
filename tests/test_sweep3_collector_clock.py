"""``ldp serve`` refuses to start with a test clock that is not a date (third sweep: with
``LDP_TODAY=2026-13-01`` it started, and every request that needed the date failed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_collector_campaign_cli import ldp

LDP = str(Path(sys.executable).with_name("ldp"))


@pytest.mark.parametrize("variable", ["LDP_TODAY", "LDP_TODAY_FILE"])
def test_a_bad_test_clock_stops_the_start(tmp_path: Path, variable: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    if variable == "LDP_TODAY":
        env[variable] = "2026-13-01"
    else:
        (tmp_path / "today").write_text("2026-13-01\n")
        env[variable] = str(tmp_path / "today")
    done = subprocess.run(
        [LDP, "serve", "--dev", "-p", "0", "--database", str(tmp_path / "ldp.db")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "must be an ISO date like 2026-11-21, got '2026-13-01'" in done.stderr
    assert "listening on" not in done.stdout


def test_campaign_commands_with_db_date_by_the_collector_clock(tmp_path: Path) -> None:
    """``ldp campaign create|archive --db`` date the campaign as the collector serving the
    database does, by its clock (``LDP_TODAY`` in tests and benchmarks); they used the wall
    clock, so a campaign archived on a test day was dated on another."""
    from collector.storage import open_storage

    db = str(tmp_path / "ldp.db")
    store = open_storage(db, create=True)
    store.migrate()
    store.close()
    made = ldp(
        "create",
        "clocked",
        "--db",
        db,
        "--domain",
        "a,b",
        "-m",
        "grr",
        "-e",
        "1",
        LDP_TODAY="2031-02-03",
    )
    assert made.returncode == 0, made.stderr
    shown = ldp("show", "clocked", "--db", db, "--format", "json")
    assert json.loads(shown.stdout)["created"] == "2031-02-03", shown.stdout
    gone = ldp("archive", "clocked", "--db", db, LDP_TODAY="2031-02-05")
    assert gone.returncode == 0, gone.stderr
    shown = ldp("show", "clocked", "--db", db, "--format", "json")
    assert json.loads(shown.stdout)["archived"] == "2031-02-05", shown.stdout
    bad = ldp("archive", "clocked", "--db", db, LDP_TODAY="2031-13-05")
    assert bad.returncode == 1 and "must be an ISO date" in bad.stderr, bad.stderr
