"""A campaign's ``shuffler``: only on a collector with a sealed key, only a usable URL, and
``ldp campaign create --shuffler`` / ``ldp campaign show`` (found by an exploratory QA run).

* A collector without ``LDP_SEALED_KEY_FILE`` (``ldp serve --dev`` makes no key) created a
  shuffled campaign (201) whose devices could never send a report: now 400
  ``sealed_not_configured``, saying how to configure the key.
* ``"http://"`` and ``"http://a b"`` passed the prefix check (201): now 400 unless the URL is an
  absolute http(s) URL with a host, no whitespace, no userinfo and no fragment.
* ``ldp campaign create`` had no ``--shuffler`` (docs/SHUFFLE.md showed one) and ``ldp campaign
  show`` did not list it.

Real parts: ``ldp serve`` on free loopback ports, its SQLite file, the ``ldp`` CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ldp_cli.main import cli
from tests.support.reports import campaign_body
from tests.support.server import ADMIN_TOKEN, running_collector

GOOD = [
    "http://shuffler:8081",
    "https://shuffler.example/ingest?x=1",
    "http://127.0.0.1:9/",
    "http://[::1]:8081",
]
BAD = [
    "http://",
    "https://",
    "http://a b",
    "http://a\tb",
    "http://shuffler:8081/ ",
    "http://a\u00a0b",
    "http://user:pw@shuffler:8081",
    "http://@shuffler",
    "http://shuffler/#frag",
    "http://:8081",
    "http://shuffler:0",
    "http://shuffler:99999",
    "http://shuffler:port",
    "http://[::1",
    "http:shuffler",
    "ftp://shuffler",
    "shuffler:8081",
]


def ldp(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def test_a_collector_without_a_sealed_key_refuses_a_shuffled_campaign(tmp_path: Path) -> None:
    """``ldp serve --dev`` without LDP_SEALED_KEY_FILE: 400 saying what to configure."""
    with running_collector(tmp_path, extra_args=["--dev"]) as srv:
        r = srv.post_campaign(campaign_body("shuf", shuffler="http://shuffler:8081"))
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert (error["code"], error["status"]) == ("sealed_not_configured", 400)
        assert "no sealed key configured" in error["message"]
        assert "LDP_SEALED_KEY_FILE=" in error["message"]
        assert "ldp serve --dev makes none" in error["message"]
        assert srv.post_campaign(campaign_body("plain")).status_code == 201  # no shuffler: fine
        listed = ldp("campaign", "list", "--db", str(srv.db_path), "--format", "json")
        assert [c["id"] for c in json.loads(listed.output)["campaigns"]] == ["plain"]


@pytest.mark.parametrize("url", BAD)
def test_an_unusable_shuffler_url_is_refused(tmp_path: Path, url: str) -> None:
    from collector.campaigns import campaign_from_request
    from collector.errors import APIError

    with pytest.raises(APIError) as refused:
        campaign_from_request(campaign_body("c", shuffler=url), sealed_key=True)
    assert refused.value.status == 400 and refused.value.code == "invalid_campaign"
    assert "'shuffler' must be the http(s) URL of an ldp shuffle (" in refused.value.message


def test_shuffler_urls_over_http_on_a_collector_with_a_key(tmp_path: Path) -> None:
    env = {"LDP_SEALED_KEY_FILE": str(tmp_path / "sealed.key")}
    with running_collector(tmp_path, env=env) as srv:
        for i, url in enumerate(BAD):
            r = srv.post_campaign(campaign_body(f"bad{i}", shuffler=url))
            assert r.status_code == 400, (url, r.text)
            assert r.json()["error"]["code"] == "invalid_campaign", url
        for i, url in enumerate(GOOD):
            r = srv.post_campaign(campaign_body(f"good{i}", shuffler=url))
            assert r.status_code == 201, (url, r.text)
            assert r.json()["shuffler"] == url


def test_ldp_campaign_create_takes_shuffler_and_show_lists_it(tmp_path: Path) -> None:
    key = {"LDP_SEALED_KEY_FILE": str(tmp_path / "sealed.key")}
    with running_collector(tmp_path, env=key) as srv:
        db = str(srv.db_path)
        base = ["--domain", "a,b,c", "-e", "1", "--shuffler"]
        # --url: the collector (which has a key) applies the rules.
        by_url = ldp(
            "campaign", "create", "viaurl", "--url", srv.url, *base, "http://shuffler:8081",
            "--format", "json", env={"LDP_ADMIN_TOKEN": ADMIN_TOKEN},
        )  # fmt: skip
        assert by_url.exit_code == 0, by_url.output
        assert json.loads(by_url.output)["shuffler"] == "http://shuffler:8081"
        bad = ldp(
            "campaign", "create", "badurl", "--url", srv.url, *base, "http://a b",
            env={"LDP_ADMIN_TOKEN": ADMIN_TOKEN},
        )  # fmt: skip
        assert bad.exit_code == 1 and "'shuffler' must be the http(s) URL" in bad.output
        # --db: the same rules, LDP_SEALED_KEY_FILE read from the command's environment.
        no_key = ldp("campaign", "create", "viadb", "--db", db, *base, "https://s.example")
        assert no_key.exit_code == 1
        assert "no sealed key configured" in no_key.output
        assert "LDP_SEALED_KEY_FILE is read from this command's environment" in no_key.output
        by_db = ldp("campaign", "create", "viadb", "--db", db, *base, "https://s.example", env=key)
        assert by_db.exit_code == 0, by_db.output
        plain = ldp("campaign", "create", "plain", "--db", db, "--domain", "a,b", "-e", "1")
        assert plain.exit_code == 0, plain.output

        for where in (["--db", db], ["--url", srv.url]):
            env = {"LDP_ANALYST_TOKEN": srv.analyst_token}
            show = ldp("campaign", "show", "viadb", *where, env=env)
            assert show.exit_code == 0, show.output
            assert any(
                line.split()[:2] == ["shuffler", "https://s.example"]
                for line in show.output.splitlines()
            ), show.output
            show = ldp("campaign", "show", "viaurl", *where, env=env)
            assert "http://shuffler:8081" in show.output
            show = ldp("campaign", "show", "plain", *where, env=env)
            assert "none (devices upload directly)" in show.output
            shown = json.loads(ldp("campaign", "show", "viadb", *where, "--format", "json",
                                   env=env).output)  # fmt: skip
            assert shown["shuffler"] == "https://s.example"
