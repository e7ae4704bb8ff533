"""A default ``retention_days`` above ``LDP_MAX_RETENTION_DAYS`` says where it came from.

Found by an exploratory QA run: ``LDP_MAX_RETENTION_DAYS=10 ldp campaign create mr1 ...``
without ``--retention-days`` said "'retention_days' (30) exceeds this server's ceiling": the 30
was nowhere on the command line (it is the default horizon, since reports are kept at least as
long as the horizon). The message now says so and what to pass. Real parts: a collector's
SQLite file made by ``ldp serve --init``, the ``ldp`` CLI, and ``POST /v1/campaigns`` on a
real ``ldp serve`` with the ceiling set.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ldp_cli.main import cli
from tests.support.reports import campaign_body
from tests.support.server import running_collector


def test_the_cli_names_the_default_horizon_and_what_to_pass(tmp_path: Path) -> None:
    with running_collector(tmp_path) as srv:
        db = str(srv.db_path)
    env = {"LDP_MAX_RETENTION_DAYS": "10"}

    def create(cid: str, *extra: str) -> tuple[int, str]:
        args = ["campaign", "create", cid, "--db", db, "--domain", "a,b", "-e", "1", *extra]
        result = CliRunner().invoke(cli, args, env=env)
        return result.exit_code, " ".join(result.output.split())

    code, out = create("mr1")
    assert code == 1
    assert "'retention_days' was not given" in out
    assert "'horizon_days' (its default, 30) of 30" in out
    assert "LDP_MAX_RETENTION_DAYS=10" in out
    assert "pass 'horizon_days' of at most 10 (ldp campaign create: --horizon-days)" in out
    assert "(30) exceeds" not in out

    code, out = create("mr2", "--horizon-days", "20")  # given: not called a default
    assert code == 1 and "'horizon_days' of 20" in out and "its default" not in out

    code, out = create("mr3", "--retention-days", "30", "--horizon-days", "5")  # explicit
    assert code == 1 and "'retention_days' (30) exceeds this server's ceiling" in out

    code, out = create("mr4", "--horizon-days", "10")  # what the message asks for works
    assert code == 0, out


def test_the_http_api_says_the_same(tmp_path: Path) -> None:
    with running_collector(tmp_path, env={"LDP_MAX_RETENTION_DAYS": "10"}) as srv:
        r = srv.post_campaign(campaign_body("mr1"))
        assert r.status_code == 400, r.text
        message = r.json()["error"]["message"]
        assert "'retention_days' was not given" in message
        assert "pass 'horizon_days' of at most 10" in message
        assert srv.post_campaign(campaign_body("mr2", horizon_days=10)).status_code == 201
