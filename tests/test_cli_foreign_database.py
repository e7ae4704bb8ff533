"""``--db`` pointed at a database that is not a collector's: refused, and left untouched.

Found by an exploratory QA run: ``ldp mix``, ``ldp campaign list|show|create`` and ``ldp
retention run`` on PostgreSQL's own ``postgres`` database, or on an empty touched SQLite file,
silently created the collector's tables there and reported success ("no campaigns yet", "mixed
0 staged reports"). ``ldp tally verify`` already refused ("holds no collector schema"); every
command now uses that one check (``ldp_cli.store.require_collector_schema``), with exit status
1 like the CLI's other store errors ("no database file"). ``ldp serve --init``/``--dev`` still
create the schema.

Real parts: the ``ldp`` CLI, real SQLite files, and a PostgreSQL database of its own
(``test_foreign_<random>``, holding another application's table; dropped afterwards).
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner, Result

from ldp_cli.main import cli
from tests.support.postgres import ADMIN_URL, database_url, require_postgres
from tests.support.server import running_collector

FOREIGN_PREFIX = "test_foreign_"

COMMANDS = [
    ["mix"],
    ["campaign", "list"],
    ["campaign", "show", "occ"],
    ["campaign", "create", "occ", "--domain", "a,b", "-e", "1"],
    ["retention", "run"],
    ["tally", "verify"],
]
IDS = ["-".join(c[:2]) for c in COMMANDS]


def ldp(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def refused(result: Result, database: str) -> None:
    assert result.exit_code == 1, result.output
    assert (
        f"{database} holds no collector schema; start the collector with "
        f"'ldp serve --database {database}' first"
    ) in " ".join(result.output.split())


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


# -- SQLite -------------------------------------------------------------------------------------


@pytest.fixture
def other_app_db(tmp_path: Path) -> Path:
    """Another application's SQLite database (rollback journal, one table of its own)."""
    path = tmp_path / "db" / "other.db"
    path.parent.mkdir()
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_an_empty_sqlite_file_is_refused_and_stays_empty(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "db").mkdir()
    empty = tmp_path / "db" / "empty.db"
    empty.touch()
    refused(ldp(*command, "--db", str(empty)), str(empty))
    assert files(tmp_path / "db") == {"empty.db": b""}  # no header, no -wal or -shm


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_another_applications_sqlite_database_is_refused_untouched(
    tmp_path: Path, other_app_db: Path, command: list[str]
) -> None:
    before = files(other_app_db.parent)
    refused(ldp(*command, "--db", str(other_app_db)), str(other_app_db))
    assert files(other_app_db.parent) == before  # byte for byte: not even switched to WAL


def test_ldp_serve_init_still_creates_the_schema_in_an_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "collector.db"
    empty.touch()
    with running_collector(tmp_path, db_path=empty):  # ldp serve --init
        pass
    for command in (["mix"], ["campaign", "list"], ["retention", "run"], ["tally", "verify"]):
        result = ldp(*command, "--db", str(empty))
        assert result.exit_code == 0, (command, result.output)
    assert "no campaigns yet" in ldp("campaign", "list", "--db", str(empty)).output


# -- PostgreSQL ---------------------------------------------------------------------------------


def _tables(url: str) -> list[tuple[str, str]]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', "
            "'information_schema', 'pg_toast') ORDER BY 1, 2"
        ).fetchall()
    return [(str(a), str(b)) for a, b in rows]


@pytest.fixture
def foreign_pg() -> Iterator[str]:
    """A PostgreSQL database of another application: ``test_foreign_<random>`` with a table of
    its own; dropped afterwards (only a ``test_foreign_`` database is ever dropped here)."""
    require_postgres()
    import psycopg

    name = FOREIGN_PREFIX + secrets.token_hex(6)
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = database_url(name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE notes (body text)")
            conn.execute("INSERT INTO notes VALUES ('keep me')")
        yield url
    finally:
        dropped = urlsplit(url).path.lstrip("/")
        assert dropped.startswith(FOREIGN_PREFIX)
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dropped}" WITH (FORCE)')


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_another_applications_postgres_database_is_refused_untouched(
    foreign_pg: str, command: list[str]
) -> None:
    before = _tables(foreign_pg)
    assert [t for _, t in before] == ["notes"]
    refused(ldp(*command, "--db", foreign_pg), foreign_pg)
    assert _tables(foreign_pg) == before


def test_the_message_never_repeats_a_password(foreign_pg: str) -> None:
    parts = urlsplit(foreign_pg)
    netloc = f"{parts.username}:s3cret-pw@{parts.hostname}:{parts.port}"
    with_password = parts._replace(netloc=netloc).geturl()
    result = ldp("mix", "--db", with_password)
    assert result.exit_code == 1, result.output
    assert "s3cret-pw" not in result.output and "holds no collector schema" in result.output


def test_ldp_serve_dev_still_creates_the_schema_in_it(foreign_pg: str, tmp_path: Path) -> None:
    with running_collector(tmp_path, db_url=foreign_pg, extra_args=["--dev"]):
        pass
    assert ("public", "schema_version") in _tables(foreign_pg)
    for command in (["mix"], ["campaign", "list"], ["retention", "run"], ["tally", "verify"]):
        result = ldp(*command, "--db", foreign_pg)
        assert result.exit_code == 0, (command, result.output)
