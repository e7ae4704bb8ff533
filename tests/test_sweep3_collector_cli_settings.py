"""Operator commands read the collector's retention ceiling as the collector does
(docs/COLLECTOR.md, "Settings": every variable may be given as a ``_FILE``; a bad value is a
clear error naming the variable).

Found by the third collector sweep: ``ldp campaign create --db`` read ``LDP_MAX_RETENTION_DAYS``
with a bare ``int()`` (a ``ValueError`` traceback for ``abc``, and ``0`` accepted as a ceiling)
and, like ``ldp retention run``, ignored ``LDP_MAX_RETENTION_DAYS_FILE``: a campaign was
created with 90 days of retention under a ceiling of 40, and a manual sweep kept reports the
ceiling had aged out.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from collector.ingest import ingest_batch
from collector.storage import open_storage
from ldp_cli.main import cli
from tests.support.reports import batch, reports


@pytest.fixture()
def database(tmp_path: Path) -> str:
    """A SQLite file holding the collector's schema (what ``ldp serve --init`` leaves)."""
    path = str(tmp_path / "collector.db")
    storage = open_storage(path)
    storage.migrate()
    storage.close()
    return path


@pytest.fixture()
def ceiling_file(tmp_path: Path) -> str:
    path = tmp_path / "max_retention_days"
    path.write_text("40\n")
    return str(path)


def _create(database: str, cid: str, env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(
        cli,
        ["campaign", "create", cid, "--db", database, "--domain", "a,b", "-m", "grr", "-e", "1"]
        + ["--format", "json", *args],
        env=env,
    )


def test_campaign_create_reads_the_ceiling_from_its_file(database: str, ceiling_file: str) -> None:
    result = _create(database, "capped", {"LDP_MAX_RETENTION_DAYS_FILE": ceiling_file})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["retention_days"] == 40
    refused = _create(
        database, "over", {"LDP_MAX_RETENTION_DAYS_FILE": ceiling_file}, "--retention-days", "90"
    )
    assert refused.exit_code == 1, refused.output
    assert "40" in refused.output


@pytest.mark.parametrize(
    ("value", "says"), [("abc", "is invalid"), ("0", "must be >= 1"), ("1e3", "is invalid")]
)
def test_campaign_create_refuses_a_ceiling_the_collector_refuses(
    database: str, value: str, says: str
) -> None:
    result = _create(database, "bad-ceiling", {"LDP_MAX_RETENTION_DAYS": value})
    assert result.exit_code == 1, result.output
    assert not isinstance(result.exception, ValueError)
    assert "LDP_MAX_RETENTION_DAYS" in result.output and says in result.output
    storage = open_storage(database, create=False)
    try:
        assert storage.get_campaign("bad-ceiling") is None
    finally:
        storage.close()


def test_retention_run_reads_the_ceiling_from_its_file(database: str, ceiling_file: str) -> None:
    """A report 50 days old of a campaign kept 90 days: the ceiling of 40 ages it out."""
    made = _create(database, "aging", {}, "--retention-days", "90")
    assert made.exit_code == 0, made.output
    today = dt.datetime.now(dt.UTC).date()
    storage = open_storage(database, create=False)
    try:
        campaign = storage.get_campaign("aging")
        assert campaign is not None
        resource = campaign.resource()
        old = (today - dt.timedelta(days=50)).isoformat()
        items = reports(resource, 3, seed=5, day=old)
        # Sent 25 days ago, when that day was within the 30-day horizon.
        answer = ingest_batch(
            storage,
            campaign,
            batch(resource, items),
            max_reports=10,
            today=today - dt.timedelta(days=25),
        )
        assert answer.accepted == 3
    finally:
        storage.close()

    result = CliRunner().invoke(
        cli,
        ["retention", "run", "--db", database, "--format", "json"],
        env={"LDP_MAX_RETENTION_DAYS_FILE": ceiling_file},
    )
    assert result.exit_code == 0, result.output
    (swept,) = [c for c in json.loads(result.output)["campaigns"] if c["campaign"] == "aging"]
    assert swept["purged_before"] == (today - dt.timedelta(days=40)).isoformat()
    assert swept["deleted"] == 3


# The collector's database as the operator commands find it: ``LDP_DATABASE_FILE`` and
# ``LDP_DATABASE_PASSWORD(_FILE)`` were read by ``ldp serve`` only (click reads LDP_DATABASE).


@pytest.mark.parametrize(
    "command",
    [["tally", "verify"], ["mix"], ["retention", "run"], ["campaign", "list"]],
    ids=lambda c: " ".join(c),
)
def test_operator_commands_find_the_database_named_by_its_file(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    secret = tmp_path / "database"
    secret.write_text(database + "\n")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no ldp.db here: the default must not be what is opened
    result = CliRunner().invoke(cli, command, env={"LDP_DATABASE_FILE": str(secret)})
    assert result.exit_code == 0, result.output
    assert not (elsewhere / "ldp.db").exists()


def test_a_postgresql_store_gets_the_password_the_collector_would_use(tmp_path: Path) -> None:
    from collector.settings import with_password
    from ldp_cli.store import opened_store
    from tests.support.postgres import collector_database

    password = "s3cr@t/:%"
    with collector_database("postgresql", tmp_path) as url:
        storage = open_storage(url)
        storage.migrate()
        storage.close()
        user_url = url  # postgresql://user@host:port/db: a user, no password
        secret = tmp_path / "password"
        secret.write_text(password + "\n")
        with pytest.MonkeyPatch.context() as env:
            env.setenv("LDP_DATABASE_PASSWORD_FILE", str(secret))
            with opened_store(user_url) as opened:
                # The server here trusts loopback, so a missing password would still connect:
                # what is checked is the URL the store connects with.
                assert opened.url == with_password(user_url, password)  # type: ignore[attr-defined]


def test_a_bad_synchronous_mode_is_named_once_with_every_mode() -> None:
    from collector.errors import ConfigError
    from collector.settings import load_settings

    with pytest.raises(ConfigError) as caught:
        load_settings({}, environ={"LDP_SYNCHRONOUS": "off"})
    message = str(caught.value)
    assert message.count("'off'") == 1, message
    assert "EXTRA" in message.split(";", 1)[1], message  # the help names every mode too
