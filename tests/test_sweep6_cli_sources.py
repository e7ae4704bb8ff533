"""``ldp estimate`` and ``ldp campaign show`` find and refuse as the other commands do.

Found by the docs-as-written sweep (2026-11-28): ``LDP_DATABASE_FILE=f ldp estimate c`` said
"give --db PATH" while ``ldp campaign list`` (and the collector) read the file the variable
names; ``ldp campaign show 'Bad Id' --url ...`` sent ``GET /v1/campaigns`` before refusing an
id no campaign can have, where ``archive`` refuses it before any request.
"""

from __future__ import annotations

import socket
from pathlib import Path

from click.testing import CliRunner

from ldp_cli.estimate_cmd import _plural
from ldp_cli.main import cli
from tests.support.reports import batch, campaign_body, reports
from tests.support.server import running_collector


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ldp_estimate_reads_the_store_ldp_database_file_names(tmp_path: Path) -> None:
    import requests

    with running_collector(tmp_path) as srv:
        made = requests.post(
            srv.url + "/v1/campaigns",
            json=campaign_body("occ"),
            headers=srv.headers("admin"),
            timeout=30,
        ).json()
        up = requests.post(
            srv.url + "/v1/campaigns/occ/reports",
            json=batch(made, reports(made, 50)),
            headers=srv.headers("ingest"),
            timeout=30,
        )
        assert up.status_code == 200, up.text
        db = srv.db_path
    named = tmp_path / "database-file"
    named.write_text(f"{db}\n")
    runner = CliRunner()
    env = {"LDP_DATABASE_FILE": str(named), "LDP_DATABASE": None, "LDP_URL": None}
    got = runner.invoke(cli, ["estimate", "occ", "--format", "json"], env=env)
    assert got.exit_code == 0, got.output
    assert '"n": 50' in got.output
    both = runner.invoke(cli, ["estimate", "occ"], env={**env, "LDP_URL": "http://127.0.0.1:9"})
    assert both.exit_code == 2 and "LDP_DATABASE_FILE" in both.output


def test_campaign_show_refuses_an_impossible_id_before_any_request() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    got = CliRunner().invoke(
        cli, ["campaign", "show", "Bad Id", "--url", url], env={"LDP_ANALYST_TOKEN": "t" * 20}
    )
    assert got.exit_code == 1
    assert "campaign ids match" in got.output
    assert "reach" not in got.output.lower() and "connect" not in got.output.lower()


def test_counts_of_one_are_singular() -> None:
    assert _plural(1, "candidate") == "1 candidate"
    assert _plural(2, "candidate") == "2 candidates"
    assert _plural(12000, "candidate") == "12,000 candidates"


def test_ldp_estimate_url_does_not_read_ldp_database_file(tmp_path: Path) -> None:
    """Found by the review: an unreadable LDP_DATABASE_FILE made ``ldp estimate --url`` die with
    a traceback; the store is not read when --url asks a collector, and without --url the
    error is one line."""
    env = {"LDP_DATABASE_FILE": str(tmp_path / "missing"), "LDP_DATABASE": None, "LDP_URL": None}
    url = f"http://127.0.0.1:{_closed_port()}"
    asked = CliRunner().invoke(
        cli, ["estimate", "c", "--url", url], env={**env, "LDP_ANALYST_TOKEN": "t" * 20}
    )
    assert asked.exception is None or isinstance(asked.exception, SystemExit), asked.output
    assert "LDP_DATABASE_FILE" not in asked.output
    stored = CliRunner().invoke(cli, ["estimate", "c"], env=env)
    assert stored.exit_code == 1 and isinstance(stored.exception, SystemExit)
    assert "LDP_DATABASE_FILE: cannot read" in stored.output


def test_ldp_mechanisms_refuses_an_option_the_numeric_table_does_not_use() -> None:
    got = CliRunner().invoke(
        cli, ["mechanisms", "-e", "1", "--bounds", "0", "1", "--max-report-bytes", "4"]
    )
    assert got.exit_code == 2 and "--max-report-bytes applies to --k only" in got.output
