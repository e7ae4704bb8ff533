"""EmbeddedCollector: the same app in a background thread on a free loopback port."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest
import requests

from collector import EmbeddedCollector
from tests.support.reports import batch, campaign_body, reports


def test_embedded_collector_serves_and_stops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    db = tmp_path / "embedded.db"
    with EmbeddedCollector(db, tokens={"admin": "admin-token-embedded-123"}) as c:
        assert c.url.startswith("http://127.0.0.1:")
        assert c.admin_token == "admin-token-embedded-123"
        r = requests.post(
            c.url + "/v1/campaigns",
            json=campaign_body("emb"),
            headers={"Authorization": f"Bearer {c.admin_token}"},
            timeout=10,
        )
        assert r.status_code == 201
        campaign = r.json()
        up = requests.post(
            c.url + "/v1/campaigns/emb/reports",
            json=batch(campaign, reports(campaign, 25)),
            headers={"Authorization": f"Bearer {c.ingest_token}"},
            timeout=10,
        )
        assert up.json()["accepted"] == 25
        url = c.url
    with pytest.raises(requests.ConnectionError):
        requests.get(url + "/healthz", timeout=2)
    # No access-log line (it would carry the client address).
    server_lines = [r.getMessage() for r in caplog.records if not r.name.startswith("urllib3")]
    assert not any("127.0.0.1" in line for line in server_lines), server_lines
    # Same database, new instance: the campaign is still there.
    with EmbeddedCollector(db) as again:
        r = requests.get(
            again.url + "/v1/campaigns/emb",
            headers={"Authorization": f"Bearer {again.ingest_token}"},
            timeout=10,
        )
        assert r.json() == campaign
    with pytest.raises(RuntimeError, match="start"):
        _ = EmbeddedCollector(db).url


def test_a_slow_client_does_not_hold_the_embedded_collector(tmp_path: Path) -> None:
    """The server is threaded: a client that sent half a request keeps one thread, and the
    next request is answered meanwhile (single-threaded, it would wait for the first to end).
    The tokens given are used, the missing ones generated, each readable by role."""
    with EmbeddedCollector(tmp_path / "slow.db", tokens={"analyst": "analyst-token-emb-1234"}) as c:
        assert c.analyst_token == "analyst-token-emb-1234" == c.tokens["analyst"]
        assert c.ingest_token == c.tokens["ingest"] and len(c.ingest_token) >= 16
        assert len({c.admin_token, c.analyst_token, c.ingest_token}) == 3
        host, port = c.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as slow:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # no blank line: not done
            assert requests.get(c.url + "/healthz", timeout=10).status_code == 200
