"""The shuffler's guarantee against the collector that chose the shuffler and serves the key.

A shuffled campaign's reports are sealed to the collector's key and sent through the shuffler
the campaign's config names. Both come from the collector, and neither is in the config digest
(docs/SDK.md): a collector could serve each device its own sealed key (and tell each message's
device by which key opens it) or its own shuffler URL. The app can now ship both:
``TelemetryClient(sealed_key=...)`` (the device never asks for a key) and ``pins={"c": {"digest":
..., "shuffler": url}}`` (a config naming another shuffler, or none, is refused). Also: the
transport took the shuffler from any config it fetched, even one the device then refused
(a digest not its own), so pending reports could be routed by a refused config; it now reads
the verified config only. A fake collector and shuffler on one port (the real collector serves
one key and honest configs: tests/test_shuffle.py runs the real ones).
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from nacl.public import PrivateKey, SealedBox

from client_sdk import InvalidParameter, PrivacyBudget, TelemetryClient
from client_sdk.config_cache import Pin, check_pins
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving

OUE = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
BUDGET = PrivacyBudget(campaign_epsilon=1e6, device_epsilon=1e6)
APP_KEY = PrivateKey.generate()  # the collector's key pair; the app ships the public half
APP_PUBLIC = base64.b64encode(bytes(APP_KEY.public_key)).decode()
OTHER_KEY = PrivateKey.generate()  # what a collector hands one device to tell it apart


class Both(JsonHandler):
    """Collector (configs, ``/v1/sealed/key``, direct uploads) and shuffler (``/v1/submit``)."""

    resources: ClassVar[dict[str, dict[str, Any]]] = {}
    requests: ClassVar[list[str]] = []
    submitted: ClassVar[list[str]] = []
    uploads: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        type(self).requests.append(f"GET {self.path}")
        if self.path == "/v1/sealed/key":
            self._answer(
                200, {"public_key": base64.b64encode(bytes(OTHER_KEY.public_key)).decode()}
            )
            return
        body = type(self).resources.get(self._campaign())
        if body is None:
            self._answer(
                404, {"error": {"code": "unknown_campaign", "message": "no", "status": 404}}
            )
            return
        self._answer(200, body, {"ETag": f'"{body["digest"]}"'})

    def do_POST(self) -> None:  # noqa: N802
        type(self).requests.append(f"POST {self.path}")
        if self.path == "/v1/submit":
            data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            type(self).submitted.append(data["message"])
            self._answer(202, {"queued": True})
            return
        _, body = self._upload()
        type(self).uploads.append(body)
        n = len(body["reports"])
        self._answer(200, {"accepted": n, "duplicate": 0, "rejected": 0, "errors": []})


@pytest.fixture
def both() -> Iterator[tuple[str, type[Both]]]:
    handler = type(
        "Server", (Both,), {"resources": {}, "requests": [], "submitted": [], "uploads": []}
    )
    with serving(handler) as url:
        yield url, handler


def shuffled(url: str, shuffler: str | None, **extra: Any) -> dict[str, Any]:
    body = campaign_config("q", OUE, **extra)
    if shuffler is not None:
        body["shuffler"] = shuffler
    return body


def device(url: str, state: Path, **options: Any) -> TelemetryClient:
    options = {"close_timeout": 0, "backoff_base": 0.01, "backoff_cap": 0.05, **options}
    return TelemetryClient(url, ingest_token="t" * 20, state_dir=state, budget=BUDGET, **options)


def test_a_shipped_sealed_key_is_used_and_the_collector_never_asked(
    both: tuple[str, type[Both]], tmp_path: Path
) -> None:
    url, handler = both
    handler.resources = {"q": shuffled(url, url)}
    with device(url, tmp_path, sealed_key=APP_PUBLIC) as client:
        client.prefetch("q")
        assert client.report("q", "a")
        assert client.flush(timeout=30)
    assert "GET /v1/sealed/key" not in handler.requests
    assert len(handler.submitted) == 1 and handler.uploads == []
    opened = json.loads(SealedBox(APP_KEY).decrypt(base64.b64decode(handler.submitted[0])))
    assert opened["campaign"] == "q"


def test_without_a_shipped_key_the_collectors_key_is_fetched(
    both: tuple[str, type[Both]], tmp_path: Path
) -> None:
    """The old path, unchanged: the key a collector serves is what the message is sealed to
    (here one only that collector's other key pair opens)."""
    url, handler = both
    handler.resources = {"q": shuffled(url, url)}
    with device(url, tmp_path) as client:
        client.prefetch("q")
        assert client.report("q", "a")
        assert client.flush(timeout=30)
    assert "GET /v1/sealed/key" in handler.requests
    assert SealedBox(OTHER_KEY).decrypt(base64.b64decode(handler.submitted[0]))


@pytest.mark.parametrize(
    ("served", "pinned", "words"),
    [
        ("elsewhere", "app", "names the shuffler"),  # another shuffler than the app's
        (None, "app", "names no shuffler"),  # straight to the collector (its IP addresses)
        ("app", None, "the app pins none"),  # a shuffler the app never meant
    ],
)
def test_a_config_whose_shuffler_the_app_did_not_pin_is_refused(
    both: tuple[str, type[Both]], tmp_path: Path, served: str | None, pinned: str | None, words: str
) -> None:
    url, handler = both
    urls = {"app": url, "elsewhere": "http://127.0.0.1:9", None: None}
    body = shuffled(url, urls[served])
    handler.resources = {"q": body}
    pins = {"q": {"digest": body["digest"], "shuffler": urls[pinned]}}
    with device(url, tmp_path, pins=pins) as client:
        with pytest.raises(InvalidParameter, match="unusable config") as caught:
            client.prefetch("q")
        assert words in str(caught.value)
        refused = client.report("q", "a")
        assert not refused and words in refused.message  # type: ignore[union-attr]
        assert client.pending_reports() == [] and client.privacy_charges() == []
        assert client.flush(timeout=10)
    assert handler.submitted == [] and handler.uploads == []


def test_a_config_with_the_pinned_shuffler_is_used(
    both: tuple[str, type[Both]], tmp_path: Path
) -> None:
    url, handler = both
    body = shuffled(url, url + "/")
    handler.resources = {"q": body}
    pins = {"q": {"digest": [body["digest"]], "shuffler": url}}
    with device(url, tmp_path, pins=pins, sealed_key=APP_PUBLIC) as client:
        client.prefetch("q")
        assert client.report("q", "a")
        assert client.flush(timeout=30)
    assert len(handler.submitted) == 1


def test_a_refused_config_never_routes_pending_reports(
    both: tuple[str, type[Both]], tmp_path: Path
) -> None:
    """A report made under the honest, direct config is pending; the collector then serves a
    refused config (a digest of its choosing) that names a shuffler. The report still goes
    straight to the collector under the config the device checked: before, the transport had
    learnt the shuffler from the refused config and sent it there."""
    url, handler = both
    handler.resources = {"q": shuffled(url, None)}
    with device(url, tmp_path, flush_interval=3600, batch_size=1000) as client:
        client.prefetch("q")
        assert client.report("q", "a")
        handler.resources = {"q": shuffled(url, url, digest=secrets.token_hex(32))}
        with pytest.raises(InvalidParameter, match="is not the config's own"):
            client.configs.refresh("q", conditional=False)
        assert client.flush(timeout=30)
    assert handler.submitted == []
    assert [len(body["reports"]) for body in handler.uploads] == [1]


@pytest.mark.parametrize(
    ("pins", "words"),
    [
        ({"q": {"shuffler": "http://s"}}, "'digest' (required)"),
        ({"q": {"digest": "a" * 64, "shufler": "http://s"}}, "got keys ['digest', 'shufler']"),
        ({"q": {"digest": "a" * 64, "shuffler": "s.example"}}, "the shuffler's http(s) URL"),
        ({"q": {"digest": "A" * 64}}, "is not a campaign digest"),
    ],
)
def test_bad_pins_are_refused_when_the_client_is_made(
    tmp_path: Path, pins: dict[str, Any], words: str
) -> None:
    with pytest.raises(InvalidParameter) as caught:
        device("http://127.0.0.1:9", tmp_path, pins=pins)
    assert words in str(caught.value)
    assert not (tmp_path / "state.db").exists()


def test_pins_read_as_pins() -> None:
    digest = "b" * 64
    assert check_pins({"q": digest}) == {"q": Pin(frozenset({digest}))}
    assert check_pins({"q": {"digest": digest, "shuffler": "https://s.example/"}}) == {
        "q": Pin(frozenset({digest}), "https://s.example")
    }
    assert check_pins({"q": {"digest": digest, "shuffler": None}})["q"].shuffler == ""
    assert check_pins(check_pins({"q": {"digest": digest, "shuffler": None}}))["q"].shuffler == ""


@pytest.mark.parametrize(
    "key", ["", "AAAA", base64.b64encode(b"x" * 31).decode(), 5, "not base64!"]
)
def test_a_sealed_key_that_is_not_one_is_refused_when_the_client_is_made(
    tmp_path: Path, key: Any
) -> None:
    with pytest.raises(InvalidParameter, match="sealed_key must be the collector's X25519"):
        device("http://127.0.0.1:9", tmp_path, sealed_key=key)


def test_a_refused_config_naming_a_shuffler_keeps_the_reports_stored_before_it(
    both: tuple[str, type[Both]], tmp_path: Path
) -> None:
    """No verified config at all (the cached one refused, the served one too) and the served
    one names a shuffler: the report made under the honest direct config neither goes to that
    shuffler nor is dropped; it waits, and goes out once a config the device accepts is back."""
    url, handler = both
    handler.resources = {"q": shuffled(url, None)}
    state = tmp_path / "device"
    with device(url, state, flush_interval=3600, batch_size=1000) as client:
        client.prefetch("q")
        assert client.report("q", "a")
        tagged = shuffled(url, url, digest=secrets.token_hex(32))
        (state / "campaigns" / "q.json").write_text(
            json.dumps({"etag": f'"{tagged["digest"]}"', "body": tagged})
        )
    handler.resources = {"q": tagged}
    with device(url, state, flush_interval=3600, batch_size=1000) as client:
        assert not client.flush(timeout=2)
        assert client.stats()["pending"] == 1
        assert handler.submitted == [] and handler.uploads == []
        handler.resources = {"q": shuffled(url, None)}
        client.configs.refresh("q", conditional=False)
        assert client.flush(timeout=30)
    assert handler.submitted == [] and [len(b["reports"]) for b in handler.uploads] == [1]


class Recreating(JsonHandler):
    """Serves ``current``; an upload under another digest is 409 ``stale_config``."""

    current: ClassVar[dict[str, Any]] = {}
    accepted: ClassVar[int] = 0

    def do_GET(self) -> None:  # noqa: N802
        body = type(self).current
        self._answer(200, body, {"ETag": f'"{body["digest"]}"'})

    def do_POST(self) -> None:  # noqa: N802
        _, body = self._upload()
        if body["digest"] != type(self).current["digest"]:
            error = {"code": "stale_config", "message": "stale", "status": 409}
            self._answer(409, {"error": error})
            return
        type(self).accepted += len(body["reports"])
        n = len(body["reports"])
        self._answer(200, {"accepted": n, "duplicate": 0, "rejected": 0, "errors": []})


def test_a_pinned_campaign_recreated_on_the_collector_takes_no_more_reports(
    tmp_path: Path,
) -> None:
    """Found by the review of this sweep: the collector recreated a pinned campaign (another
    config, another digest); its uploads under the pinned digest got 409, the new config was
    refused as not pinned, yet ``report`` went on making and charging reports under the old
    config (5 more here, and after a restart), which nothing would ever accept. After the 409
    and the refusal the old config is no longer used: ``report`` stores and charges nothing
    and says why; the report already made stays."""
    old = campaign_config("q", OUE)
    handler = type("Collector", (Recreating,), {"current": old, "accepted": 0})
    with serving(handler) as url:
        options = {"pins": {"q": old["digest"]}, "reports_per_window": None}
        with device(url, tmp_path, **options) as client:
            client.prefetch("q")
            assert client.report("q", "a")
            assert client.flush(timeout=30) and handler.accepted == 1
            assert client.report("q", "b")  # made before the device hears of the change
            handler.current = campaign_config("q", {**OUE, "epsilon": 2.0})
            assert not client.flush(timeout=3)
            charged = len(client.privacy_charges("q"))
            refused = client.report("q", "c")
            assert not refused and "not pinned by the app" in refused.message  # type: ignore[union-attr]
            assert len(client.privacy_charges("q")) == charged
            assert client.stats()["pending"] == 1
        with device(url, tmp_path, **options) as client:  # the app restarted
            assert not client.report("q", "a")
            assert client.stats()["pending"] == 1
