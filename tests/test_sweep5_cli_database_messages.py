"""What the store commands print about a PostgreSQL ``--db``: one line, and never its password.

Found by the fifth CLI sweep:

* ``ldp tally verify --db postgresql://u:secret@host/db --campaign nope`` and ``ldp estimate
  nope --db ...`` printed "no campaign 'nope' in postgresql://u:secret@host/db": the password
  typed in --db (or LDP_DATABASE) on the terminal and in CI logs. Every other message of these
  commands redacts it (``ldp_cli.store.store_failure``, ``require_collector_schema``).
* A database that does not exist (a typo in the URL) printed psycopg's pool warnings, "error
  connecting in 'ldp-collector': ...", once per attempt, above the one-line error that already
  says why: these commands configure no logging, so Python printed the pool's WARNINGs.

Real parts: the PostgreSQL server at 127.0.0.1:5432 (a database of its own with the
collector's schema, dropped afterwards), the ``ldp`` CLI as subprocesses.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from collector.campaigns import campaign_from_request
from collector.storage import open_storage
from tests.support.postgres import fresh_database

PASSWORD = "s3cret-pw-for-sweep5"


def ldp(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    return subprocess.run(
        [sys.executable, "-m", "ldp_cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def with_password(url: str) -> str:
    """``url`` with a password (the test server trusts loopback, so any password is accepted)."""
    parts = urlsplit(url)
    netloc = f"{parts.username}:{PASSWORD}@{parts.hostname}" + (
        f":{parts.port}" if parts.port else ""
    )
    return urlunsplit(parts._replace(netloc=netloc))


@pytest.fixture(scope="module")
def collector_url() -> Iterator[str]:
    """A collector database holding one campaign, ``occ``; its URL with a password."""
    with fresh_database() as url:
        store = open_storage(url)
        try:
            store.migrate()
            store.create_campaign(
                campaign_from_request(
                    {"id": "occ", "domain": ["a", "b"], "mechanism": "grr", "epsilon": 1}
                )
            )
        finally:
            store.close()
        yield with_password(url)


@pytest.mark.parametrize(
    "args",
    [["tally", "verify", "--campaign", "nope"], ["estimate", "nope"]],
    ids=["tally-verify", "estimate"],
)
def test_no_campaign_names_the_database_without_its_password(
    collector_url: str, args: list[str]
) -> None:
    out = ldp(*args, "--db", collector_url)
    assert out.returncode == 1, out.stderr
    assert PASSWORD not in out.stderr + out.stdout
    assert "no campaign 'nope' in postgresql://postgres:***@127.0.0.1" in out.stderr, out.stderr


def test_a_missing_database_is_one_line(collector_url: str) -> None:
    parts = urlsplit(collector_url)
    missing = urlunsplit(parts._replace(path=parts.path + "_typo"))
    out = ldp("campaign", "list", "--db", missing)
    assert out.returncode == 1
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("Error: cannot connect to PostgreSQL at "), out.stderr
    assert "does not exist" in lines[0]
    assert PASSWORD not in out.stderr
