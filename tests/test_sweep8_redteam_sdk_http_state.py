"""Nothing of the HTTP layer ties two uploads of one device together: no cookie, no connection.

Two tags a hostile collector could put on a device through ``requests`` itself, past the
verified digests, the separate uploads and the unlinkable storage:

* a cookie: ``requests.Session`` keeps every ``Set-Cookie`` of every answer and sends it back
  with each later request. A collector that set ``device=<n>`` on its config answers got that
  cookie back on every upload of the device, across campaigns and days (measured: two devices,
  two campaigns, two days: the 4 uploads of one device all carried ``device=2``, those of the
  other ``device=5``);
* a connection: uploads sent ``Connection: close`` and left the closing to the collector. One
  that answered ``Connection: keep-alive`` instead had the device's next uploads ride on the
  same connection (measured: the uploads of three campaigns on one connection).

The collector here is a fake on a loopback port: the real one never does either.
"""

from __future__ import annotations

import base64
import itertools
import json
from pathlib import Path
from typing import Any, ClassVar

from nacl.public import PrivateKey

from client_sdk import PrivacyBudget, TelemetryClient
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving

OUE = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
CAMPAIGNS = ["occupation", "education", "sex"]
PUBLIC = base64.b64encode(bytes(PrivateKey.generate().public_key)).decode()


class Tagging(JsonHandler):
    """A collector that sets a cookie of its own on every answer and keeps every connection
    open, ignoring the device's ``Connection: close``. Numbers each connection it accepts."""

    protocol_version = "HTTP/1.1"
    connections: ClassVar[itertools.count[int]] = itertools.count()
    cookies: ClassVar[itertools.count[int]] = itertools.count()
    shuffler: ClassVar[str | None] = None
    #: (method, campaign, connection number, Cookie header) of every request.
    seen: ClassVar[list[tuple[str, str, int, str | None]]] = []

    def setup(self) -> None:
        super().setup()
        self.number = next(type(self).connections)

    def _tagged(self, status: int, body: Any) -> None:
        self.close_connection = False
        cookie = f"device={next(type(self).cookies)}; Path=/"
        self._answer(status, body, {"Set-Cookie": cookie, "Connection": "keep-alive"})

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        campaign = self._campaign()
        type(self).seen.append(("GET", campaign, self.number, self.headers.get("Cookie")))
        body = campaign_config(campaign, OUE)
        if type(self).shuffler:
            body["shuffler"] = type(self).shuffler
        self._tagged(200, body)

    def do_POST(self) -> None:  # noqa: N802
        if self.path == "/v1/submit":  # serving as the shuffler too
            json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            type(self).seen.append(("SUBMIT", "", self.number, self.headers.get("Cookie")))
            self._tagged(202, {"queued": True})
            return
        campaign, body = self._upload()
        type(self).seen.append(("POST", campaign, self.number, self.headers.get("Cookie")))
        n = len(body["reports"])
        self._tagged(200, {"accepted": n, "duplicate": 0, "rejected": 0, "errors": []})


def _collector(**attrs: Any) -> type[Tagging]:
    return type(
        "T",
        (Tagging,),
        {"connections": itertools.count(), "cookies": itertools.count(), "seen": [], **attrs},
    )


def _device(url: str, state: Path, **options: Any) -> TelemetryClient:
    return TelemetryClient(
        url,
        ingest_token="t" * 20,
        state_dir=state,
        campaigns=CAMPAIGNS,
        budget=PrivacyBudget.unlimited(),
        reports_per_window=None,
        close_timeout=0,
        **options,
    )


def _report_twice(client: TelemetryClient) -> None:
    client.prefetch()
    for _ in range(2):  # two upload passes
        for campaign in CAMPAIGNS:
            assert client.report(campaign, "a")
        assert client.flush(timeout=30)


def test_a_cookie_the_collector_sets_never_comes_back(tmp_path: Path) -> None:
    handler = _collector()
    with serving(handler) as url, _device(url, tmp_path) as client:
        _report_twice(client)
        client.configs.refresh(CAMPAIGNS[0], conditional=True)  # a later request of any kind
    uploads = [row for row in handler.seen if row[0] == "POST"]
    assert len(uploads) == 2 * len(CAMPAIGNS)
    assert [row for row in handler.seen if row[3] is not None] == []


def test_every_upload_is_on_a_connection_of_its_own(tmp_path: Path) -> None:
    handler = _collector()
    with serving(handler) as url, _device(url, tmp_path) as client:
        _report_twice(client)
    uploads = [row[2] for row in handler.seen if row[0] == "POST"]
    fetches = {row[2] for row in handler.seen if row[0] == "GET"}
    assert len(uploads) == 2 * len(CAMPAIGNS)
    assert len(set(uploads)) == len(uploads), handler.seen  # none shares a connection
    assert not set(uploads) & fetches  # nor rides on one a config came on


def test_a_shuffler_s_cookie_never_comes_back_either(tmp_path: Path) -> None:
    handler = _collector()
    with serving(handler) as url:
        handler.shuffler = url  # the collector's own "shuffler": the app pinned none
        with _device(url, tmp_path, sealed_key=PUBLIC) as client:
            client._transport.jitter = 0  # type: ignore[attr-defined]
            _report_twice(client)
    submits = [row for row in handler.seen if row[0] == "SUBMIT"]
    assert len(submits) == 2 * len(CAMPAIGNS)
    assert [row for row in handler.seen if row[3] is not None] == []
