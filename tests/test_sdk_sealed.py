"""The device's side of shuffling (``client_sdk/sealed.py``) against a shuffler and a collector
that answer what the real ones never do: a status that is not a 2xx, a sealed key that is not
one. The real ``ldp shuffle`` answers 202 and the real collector a 32-byte key, so both are
a small fake HTTP server here (the one fault this file needs); ``tests/test_shuffle.py`` runs
the real ones end to end.

Written for the mutants of ``client_sdk/sealed.py`` that survived its first mutation run
(docs/MUTATION.md, seventh session).
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from client_sdk import sealed
from client_sdk.sealed import DEFAULT_JITTER, SealedTransport
from client_sdk.transport import RetryableError

REPO = Path(__file__).resolve().parents[1]
KEY = base64.b64encode(bytes(range(32))).decode()
REPORT = {"id": "0" * 32, "day": "2026-11-26", "payload": "AA=="}


class Both(BaseHTTPRequestHandler):
    """The collector (``GET /v1/sealed/key``, ``GET /v1/campaigns/<id>``) and the shuffler
    (``POST /v1/submit``) on one port; answers and requests are class attributes."""

    key_body: ClassVar[bytes] = json.dumps({"public_key": KEY}).encode()
    key_status: ClassVar[int] = 200
    submit_status: ClassVar[int] = 202
    requests: ClassVar[list[str]] = []

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        type(self).requests.append(f"GET {self.path}")
        if self.path == "/v1/sealed/key":
            self._answer(type(self).key_status, type(self).key_body)
            return
        campaign = self.path.rstrip("/").split("/")[-1]
        url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._answer(200, json.dumps({"id": campaign, "shuffler": url}).encode())

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).requests.append(f"POST {self.path}")
        self._answer(type(self).submit_status, b'{"queued": true}')

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[Both]]]:
    handler = type("Server", (Both,), {"requests": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def transport(server: tuple[str, type[Both]]) -> Iterator[SealedTransport]:
    t = SealedTransport(server[0], "t" * 20, jitter=0.0)
    yield t
    t.close()


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_every_2xx_of_the_shuffler_is_a_staged_message(
    server: tuple[str, type[Both]], transport: SealedTransport, status: int
) -> None:
    server[1].submit_status = status
    result = transport.post_reports("c", "d1", [REPORT, REPORT])
    assert (result.accepted, result.duplicate) == (2, 0)
    assert server[1].requests.count("POST /v1/submit") == 2


@pytest.mark.parametrize("status", [300, 302, 307, 308])
def test_a_3xx_of_the_shuffler_is_not_a_staged_message(
    server: tuple[str, type[Both]], transport: SealedTransport, status: int
) -> None:
    server[1].submit_status = status
    with pytest.raises(RetryableError, match=f"shuffler answered {status}, not a 2xx"):
        transport.post_reports("c", "d1", [REPORT])


@pytest.mark.parametrize(
    "body",
    [b"[1]", b'{"public_key": 5}', b'{"public_key": null}', b'{"public_key": "AAAA"}', b"{}"],
    ids=["list", "number", "null", "short", "missing"],
)
def test_a_sealed_key_that_is_not_one_is_retried_later(
    server: tuple[str, type[Both]], transport: SealedTransport, body: bytes
) -> None:
    """Nothing is sealed to a key the device cannot read; the upload is retried later (a
    list or a number raised TypeError out of the transport)."""
    server[1].key_body = body
    with pytest.raises(RetryableError, match="unreadable sealed key"):
        transport.post_reports("c", "d1", [REPORT])
    assert "POST /v1/submit" not in server[1].requests


def test_a_collector_without_a_sealed_key_is_not_a_gone_campaign(
    server: tuple[str, type[Both]], transport: SealedTransport
) -> None:
    """``GET /v1/sealed/key`` answering 404 ``sealed_not_configured`` raised ``CampaignGone``,
    so the uploader dropped the campaign's reports and forgot its config (counted
    ``dropped_unknown_campaign``). It is a collector not configured yet: retried later."""
    server[1].key_status = 404
    server[1].key_body = b'{"error": {"code": "sealed_not_configured", "message": "no key"}}'
    with pytest.raises(RetryableError, match="serves no sealed key") as caught:
        transport.post_reports("c", "d1", [REPORT])
    assert caught.value.status == 404
    assert "POST /v1/submit" not in server[1].requests


def test_a_shuffler_that_fails_is_the_campaigns_trouble_not_the_collectors(
    server: tuple[str, type[Both]], transport: SealedTransport
) -> None:
    """The uploader skips a campaign whose shuffler fails and goes on with the others: the
    error says who failed."""
    server[1].submit_status = 503
    with pytest.raises(RetryableError) as caught:
        transport.post_reports("c", "d1", [REPORT])
    assert caught.value.peer == "shuffler"


def test_a_cached_config_names_the_shuffler_without_a_request(
    server: tuple[str, type[Both]], transport: SealedTransport
) -> None:
    """The client's cached resource says where to send: no GET of the campaign first (a
    request the collector could time against the upload)."""
    url, handler = server
    resource = {"id": "c", "shuffler": url}
    transport.configs = SimpleNamespace(  # type: ignore[assignment]
        peek=lambda campaign: SimpleNamespace(resource=resource) if campaign == "c" else None,
        # The client's ConfigCache fetches (and verifies) a config it does not hold.
        refresh=lambda campaign: SimpleNamespace(
            resource=transport.fetch_campaign(campaign).body
        ),
    )
    transport.post_reports("c", "d1", [REPORT])
    assert handler.requests == ["GET /v1/sealed/key", "POST /v1/submit"]
    # Without a cached config it asks the collector once.
    transport.post_reports("other", "d1", [REPORT])
    assert handler.requests.count("GET /v1/campaigns/other") == 1


def test_each_message_waits_a_random_pause_of_at_most_the_jitter(
    server: tuple[str, type[Both]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pauses keep a device's reports from arriving together; ``jitter=0`` turns them
    off."""
    pauses: list[float] = []
    # The module's own name for ``time``, not ``time.sleep`` itself: that is every thread's,
    # and a background thread of an earlier test in this process sleeping meanwhile added
    # pauses of its own (4 expected, more counted).
    monkeypatch.setattr(sealed, "time", SimpleNamespace(sleep=pauses.append))
    for jitter, expected in ((0.3, 4), (0.0, 0)):
        pauses.clear()
        t = SealedTransport(server[0], "t" * 20, jitter=jitter)
        try:
            t.post_reports("c", "d1", [REPORT] * 4)
        finally:
            t.close()
        assert len(pauses) == expected
        assert all(0.0 <= p <= jitter for p in pauses)


def test_the_jitter_is_the_documented_one() -> None:
    """docs/SHUFFLE.md states the pause before each sealed message."""
    doc = (REPO / "docs" / "SHUFFLE.md").read_text()
    assert f"after a random pause of up to {DEFAULT_JITTER:g} s" in doc
