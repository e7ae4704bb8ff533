"""``ldp campaign show`` applies LDP_MAX_RETENTION_DAYS however the store is named.

Found by the fifth CLI sweep: docs/COLLECTOR.md says the store commands take the store from
``--db``, ``LDP_DATABASE`` or ``LDP_DATABASE_FILE`` alike, and that ``ldp campaign show`` on a
store gives, in its ``retention_days`` row, the days actually kept where the ceiling shortens
them. With ``LDP_DATABASE`` (or ``_FILE``) instead of ``--db`` the row said "90" while the
ceiling kept 40 days: the ceiling was read only when the ``--db`` flag was given. Through a
collector (``--url``) the command still leaves the collector's ceiling to the collector.

Real parts: the ``ldp`` CLI (click's runner) on a real SQLite collector database.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.campaigns import campaign_from_request
from collector.storage import open_storage
from ldp_cli.main import cli

KEPT = "90 (kept 40 days: LDP_MAX_RETENTION_DAYS=40)"


@pytest.fixture
def database(tmp_path: Path) -> str:
    path = str(tmp_path / "ldp.db")
    store = open_storage(path)
    try:
        store.migrate()
        store.create_campaign(
            campaign_from_request({"id": "occ", "domain": ["a", "b"], "epsilon": 1})
        )
    finally:
        store.close()
    return path


def show(env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(cli, ["campaign", "show", "occ", *args], env=env)
    assert result.exit_code == 0, result.output
    (row,) = [line for line in result.output.splitlines() if line.startswith("retention_days")]
    return row.removeprefix("retention_days").strip()


def test_the_ceiling_with_the_flag(database: str) -> None:
    assert show({"LDP_MAX_RETENTION_DAYS": "40"}, "--db", database) == KEPT


def test_the_ceiling_with_ldp_database(database: str) -> None:
    assert show({"LDP_MAX_RETENTION_DAYS": "40", "LDP_DATABASE": database}) == KEPT


def test_the_ceiling_with_ldp_database_file(database: str, tmp_path: Path) -> None:
    name = tmp_path / "database-name"
    name.write_text(database)
    assert show({"LDP_MAX_RETENTION_DAYS": "40", "LDP_DATABASE_FILE": str(name)}) == KEPT


def test_a_bad_ceiling_is_an_error_whichever_way(database: str) -> None:
    result = CliRunner().invoke(
        cli,
        ["campaign", "show", "occ"],
        env={"LDP_MAX_RETENTION_DAYS": "abc", "LDP_DATABASE": database},
    )
    assert result.exit_code == 1
    assert "LDP_MAX_RETENTION_DAYS is invalid" in result.output
