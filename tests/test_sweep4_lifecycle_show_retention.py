"""``ldp campaign show``'s ``retention_days`` row tells the days actually kept (sweep 4).

A campaign created before retention existed has no ``retention_days``: the server-wide
``LDP_MAX_RETENTION_DAYS`` keeps it that long (docs/COLLECTOR.md, "Retention"). The row said
"forever (created before retention)" right above ``reports_deleted_before`` with the date a
sweep under that ceiling had deleted its reports before; and a campaign whose retention the
ceiling shortens showed its own, longer, retention only.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from ldp_cli.main import cli

DATA = Path(__file__).parent / "data"


def _row(output: str, name: str) -> str:
    for line in output.splitlines():
        if line.startswith(name + " "):
            return line[len(name) :].strip()
    raise AssertionError(f"no {name} row in:\n{output}")


def test_a_campaign_from_before_retention_under_a_ceiling(tmp_path: Path) -> None:
    db = tmp_path / "ldp.db"
    shutil.copy(DATA / "main-c1588c3.sqlite", db)  # its campaigns have no retention_days
    runner = CliRunner()
    env = {"LDP_TODAY": "2026-11-27", "LDP_MAX_RETENTION_DAYS": "30"}
    swept = runner.invoke(cli, ["retention", "run", "--db", str(db)], env=env)
    assert swept.exit_code == 0, swept.output
    shown = runner.invoke(cli, ["campaign", "show", "occ", "--db", str(db)], env=env)
    assert shown.exit_code == 0, shown.output
    assert _row(shown.output, "reports_deleted_before") == "2026-10-28"
    assert _row(shown.output, "retention_days") == (
        "none (created before retention): kept 30 days (LDP_MAX_RETENTION_DAYS)"
    )
    # Without the ceiling in this environment the row cannot know the collector's: it says
    # both cases, never a bare "forever".
    bare = runner.invoke(cli, ["campaign", "show", "occ", "--db", str(db)], env={})
    row = _row(bare.output, "retention_days")
    assert "LDP_MAX_RETENTION_DAYS" in row and row != "forever (created before retention)"


def test_a_retention_the_ceiling_shortens(tmp_path: Path) -> None:
    db = tmp_path / "ldp.db"
    shutil.copy(DATA / "main-c1588c3.sqlite", db)
    runner = CliRunner()
    made = runner.invoke(
        cli,
        ["campaign", "create", "new", "--db", str(db), "--domain", "a,b", "-e", "1"]
        + ["--horizon-days", "7", "--retention-days", "60"],
        env={"LDP_TODAY": "2026-11-27"},
    )
    assert made.exit_code == 0, made.output
    # The ceiling lowered after the campaign was made: kept max(min(60, 20), 7) = 20 days.
    shown = runner.invoke(
        cli, ["campaign", "show", "new", "--db", str(db)], env={"LDP_MAX_RETENTION_DAYS": "20"}
    )
    assert _row(shown.output, "retention_days") == "60 (kept 20 days: LDP_MAX_RETENTION_DAYS=20)"
    # Below the horizon the horizon wins (collector.retention.keep_days).
    shown = runner.invoke(
        cli, ["campaign", "show", "new", "--db", str(db)], env={"LDP_MAX_RETENTION_DAYS": "3"}
    )
    assert _row(shown.output, "retention_days") == "60 (kept 7 days: LDP_MAX_RETENTION_DAYS=3)"
    plain = runner.invoke(cli, ["campaign", "show", "new", "--db", str(db)], env={})
    assert _row(plain.output, "retention_days") == "60"
