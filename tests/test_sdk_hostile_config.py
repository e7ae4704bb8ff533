"""The SDK against a collector that serves unusable campaign configs.

The device does not trust the collector. A campaign resource whose mechanism config the
parsers cannot use (a list where a name belongs, params that clash with the config's own
fields, numbers beyond the float range) must be refused with :class:`InvalidParameter`, and the
background uploader must log it and go on. Before, such configs raised TypeError or
OverflowError inside ``from_config``; in the uploader that stopped every upload of the device
("internal error") until the app restarted.

The real collector validates what it serves, so it cannot be made to send these: the collector
here is a small fake HTTP server (the one fault this file needs).
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from client_sdk import TelemetryClient
from client_sdk.config_cache import campaign_digest
from client_sdk.errors import InvalidParameter, UnknownCampaign
from client_sdk.mechanisms import create
from client_sdk.sealed import SealedTransport
from client_sdk.transport import RetryableError
from tests.support.waiting import eventually

GOOD = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
#: Configs that reached ``from_config`` and raised something other than InvalidParameter.
UNUSABLE: list[dict[str, Any]] = [
    {**GOOD, "mechanism": ["oue"]},
    {**GOOD, "mechanism": {"mechanism": "oue"}},
    {**GOOD, "params": [["d", 2]]},
    {**GOOD, "params": {"epsilon": 2.0}},
    {**GOOD, "epsilon": 10**400},
    {"mechanism": "piecewise", "epsilon": 1.0, "bounds": [0, 10**400], "params": {}},
    {"mechanism": "rappor", "epsilon": 1.0, "domain": ["a", "b"],
     "params": {"epsilon_permanent": 10**400}},
    {"mechanism": ["cms"], "epsilon": 4.0, "max_length": 8, "params": {}},
    {"mechanism": "spl", "epsilon": 2.0, "attributes": {"o": ["x", {"y": 1}], "s": ["a", "b"]},
     "params": {}},
    {"mechanism": "spl", "epsilon": 2.0, "attributes": {"o": ["x", "y"], "s": ["a", "b"]},
     "params": {"order": 7}},
    {"mechanism": "spl", "epsilon": 2.0, "attributes": {"o": ["x", "y"], "s": ["a", "b"]},
     "params": {"pairs": [["o", ["s"]]]}},
    {"mechanism": "spl", "epsilon": 2.0,
     "attributes": {"o": ["x", "y"], "age": {"bounds": [0, 10**400]}}, "params": {}},
]  # fmt: skip


#: A body nested deeper than Python's JSON parser can follow: it raised RecursionError, which
#: is no ValueError and stopped the uploader ("internal error") until the app restarted.
DEEP = b"[" * 5000 + b"]" * 5000
#: ``upload_status`` of a campaign whose uploads are answered 200 with :data:`DEEP`.
DEEP_ANSWER = 1
#: ``upload_status`` of a campaign whose reports are all rejected for their day.
DAY_REFUSED = 2


class FakeCollector(BaseHTTPRequestHandler):
    """Serves ``resources[campaign]`` (a later one after each GET, the last one for ever; bytes
    are sent as they are) and answers uploads with ``upload_status``; counts the reports it
    accepted."""

    resources: ClassVar[dict[str, list[Any]]] = {}
    upload_status: ClassVar[dict[str, int]] = {}
    accepted: ClassVar[dict[str, int]] = {}

    def _answer(self, status: int, body: Any) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        campaign = self.path.rstrip("/").split("/")[-1]
        versions = type(self).resources.get(campaign)
        if not versions:
            self._answer(
                404, {"error": {"code": "unknown_campaign", "message": "no", "status": 404}}
            )
            return
        body = versions.pop(0) if len(versions) > 1 else versions[0]
        self._answer(200, body)

    def do_POST(self) -> None:  # noqa: N802
        campaign = self.path.split("/")[-2]
        data = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            data = gzip.decompress(data)
        items = json.loads(data)["reports"]
        status = type(self).upload_status.get(campaign, 200)
        if status == DEEP_ANSWER:
            self._answer(200, DEEP)
            return
        if status == DAY_REFUSED:
            reason = "day 2000-01-01 is older than the campaign's horizon"
            errors = [{"index": i, "reason": reason} for i in range(len(items))]
            answer = {"accepted": 0, "duplicate": 0, "rejected": len(items), "errors": errors}
            self._answer(200, answer)
            return
        if status == 409:
            message = {"code": "stale_config", "message": "digest changed", "status": 409}
            self._answer(409, {"error": message})
            return
        type(self).accepted[campaign] = type(self).accepted.get(campaign, 0) + len(items)
        self._answer(200, {"accepted": len(items), "duplicate": 0, "rejected": 0, "errors": []})

    def log_message(self, *args: Any) -> None:
        pass


def resource(
    campaign: str, mechanism: Any, digest: str | None = None, *, horizon_days: int = 30
) -> dict[str, Any]:
    """A campaign resource whose digest is the config's own unless ``digest`` is given."""
    if digest is None:
        digest = campaign_digest(campaign, mechanism, "day", horizon_days)
    return {"id": campaign, "digest": digest, "window": "day", "horizon_days": horizon_days,
            "mechanism": mechanism}  # fmt: skip


@pytest.fixture
def collector() -> Iterator[tuple[str, type[FakeCollector]]]:
    handler = type("Collector", (FakeCollector,), {"resources": {}, "upload_status": {},
                                                   "accepted": {}})  # fmt: skip
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def bad_and_good(
    url: str, handler: type[FakeCollector], tmp_path: Path, bad: Any
) -> TelemetryClient:
    """A client of two campaigns, ``bad`` served as given and ``good`` served ``GOOD``, with
    ``good`` fetched. "bad" comes first: the background fetch of the constructor's campaigns
    meets it first."""
    handler.resources = {**handler.resources, "bad": [bad], "good": [resource("good", GOOD)]}
    client = TelemetryClient(
        url, ingest_token="t" * 20, state_dir=tmp_path, campaigns=["bad", "good"]
    )
    client.prefetch("good")
    return client


@pytest.mark.parametrize("config", UNUSABLE, ids=range(len(UNUSABLE)))
def test_an_unusable_config_is_refused_and_uploads_go_on(
    collector: tuple[str, type[FakeCollector]], tmp_path: Path, config: dict[str, Any]
) -> None:
    url, handler = collector
    client = bad_and_good(url, handler, tmp_path, resource("bad", config))
    try:
        with pytest.raises(InvalidParameter, match="campaign .bad.: unusable config"):
            client.prefetch("bad")
        refused = client.report("bad", "a")  # NotSent: nothing stored, nothing charged
        assert not refused and refused.reason == "not_ready"  # type: ignore[union-attr]
        assert "a config this device cannot use (campaign 'bad': unusable config" in str(
            refused.message  # type: ignore[union-attr]
        )
        assert client.report("good", "a")
        assert client.flush(timeout=20), client.stats()
        assert handler.accepted == {"good": 1}
        assert not client.stats()["paused"]
    finally:
        client.close(timeout=0)


def test_an_unusable_config_after_a_409_backs_off_and_does_not_stop(
    collector: tuple[str, type[FakeCollector]], tmp_path: Path
) -> None:
    """The collector answers an upload with 409 stale_config, then serves an unusable config
    for the campaign: the batch waits (backoff) and the uploader keeps running."""
    url, handler = collector
    handler.resources = {"c": [resource("c", GOOD), resource("c", UNUSABLE[0])]}
    handler.upload_status = {"c": 409}
    client = TelemetryClient(
        url, ingest_token="t" * 20, state_dir=tmp_path, backoff_base=0.05, backoff_cap=0.1
    )
    try:
        client.prefetch("c")
        assert client.report("c", "a")
        assert not client.flush(timeout=2)  # 409, then the unusable config: it waits
        # Two seconds is no bound on a loaded machine: wait for the refetch to have failed.
        stats = eventually(
            client.stats,
            lambda seen: "unusable" in str(seen["last_error"]),
            what="the unusable config recorded as the last error",
        )
        assert not stats["paused"] and stats["pending"] == 1, stats
        # The collector corrects itself: the next refetch gives a usable config with the
        # reports' digest, and the upload goes through.
        handler.resources["c"] = [resource("c", GOOD)]
        handler.upload_status = {}
        assert client.flush(timeout=20), client.stats()
        assert handler.accepted == {"c": 1}
    finally:
        client.close(timeout=0)


def test_a_deeply_nested_body_is_unreadable_not_fatal(
    collector: tuple[str, type[FakeCollector]], tmp_path: Path
) -> None:
    """:data:`DEEP` as a campaign resource, as the answer to an upload and as the sealed key:
    each is an unreadable answer (retried later), and the other campaign still uploads."""
    url, handler = collector
    handler.resources = {"key": [DEEP]}
    client = bad_and_good(url, handler, tmp_path, DEEP)
    try:
        with pytest.raises(UnknownCampaign, match="unreadable campaign resource"):
            client.prefetch("bad")
        assert client.report("good", "a")
        assert client.flush(timeout=20), client.stats()
        assert handler.accepted == {"good": 1}
        assert not client.stats()["paused"]
    finally:
        client.close(timeout=0)
    handler.upload_status = {"good": DEEP_ANSWER}
    transport = SealedTransport(url, "t" * 20)
    try:
        with pytest.raises(RetryableError, match="unreadable answer to an upload"):
            transport.post_reports("good", "d1", [{"id": "0" * 32, "payload": "AA=="}])
        with pytest.raises(RetryableError, match="unreadable sealed key"):
            transport._collector_key()
    finally:
        transport.close()


def test_a_horizon_past_the_calendar_does_not_stop_the_uploads(
    collector: tuple[str, type[FakeCollector]], tmp_path: Path
) -> None:
    """A config with ``horizon_days`` of a million, then every report rejected for its day
    while the device's clock is off: re-stamping computed a date before year 1 and raised
    OverflowError in the upload thread, which stopped every upload ("internal error")."""
    import datetime as dt

    url, handler = collector
    far = resource("far", GOOD, horizon_days=10**6)
    handler.resources = {"far": [far], "good": [resource("good", GOOD)]}
    handler.upload_status = {"far": DAY_REFUSED}
    two_days_behind = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=2)
    client = TelemetryClient(
        url,
        ingest_token="t" * 20,
        state_dir=tmp_path,
        clock=lambda: two_days_behind,
        reports_per_window=None,
        backoff_base=0.05,
        backoff_cap=0.1,
    )
    try:
        client.prefetch("far", "good")
        assert client.report("far", "a")
        client.flush(timeout=5)
        assert not client.stats()["paused"], client.stats()
        assert client.report("good", "a")
        assert client.flush(timeout=20), client.stats()
        assert handler.accepted.get("good") == 1
    finally:
        client.close(timeout=0)


@pytest.mark.parametrize("horizon", [0, -1, -(10**6)])
def test_a_horizon_under_one_day_is_unusable(horizon: int) -> None:
    """No day could ever be accepted: the config is refused, not used (mutation testing)."""
    from client_sdk.config_cache import CampaignConfig

    body = resource("c", GOOD, horizon_days=horizon)
    with pytest.raises(InvalidParameter, match=f"horizon_days must be >= 1, got {horizon}"):
        CampaignConfig.from_resource(body)
    assert CampaignConfig.from_resource(resource("c", GOOD, horizon_days=1)).horizon_days == 1


@pytest.mark.parametrize(
    "error", [TypeError, ValueError, ZeroDivisionError, OverflowError, KeyError, AttributeError]
)
def test_a_parser_failure_nobody_foresaw_is_an_unusable_config(
    error: type[Exception], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every config that reached ``from_config`` and raised is now an InvalidParameter there,
    so this guard is for the next parser bug: it is injected (the one fault this test fakes).
    Such a config must be refused like any unusable one, never reach the uploader raw."""
    from client_sdk import config_cache

    def broken(config: object) -> object:
        raise error("a parser bug")

    monkeypatch.setattr(config_cache, "from_config", broken)
    with pytest.raises(InvalidParameter, match=f"unusable config \\({error.__name__}\\)"):
        config_cache.CampaignConfig.from_resource(resource("c", GOOD))


#: Two configs of campaign "c" (their digests differ): sorted by digest.
RECREATED = sorted(
    (resource("c", GOOD), resource("c", {**GOOD, "epsilon": 2.0})), key=lambda r: r["digest"]
)


@pytest.mark.parametrize(("old", "new"), [(0, 1), (1, 0)], ids=["up", "down"])
def test_a_changed_digest_is_logged_whichever_way_it_sorts(
    collector: tuple[str, type[FakeCollector]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    old: int,
    new: int,
) -> None:
    """A campaign recreated on the collector gets a new digest; the device says so once per
    change, and not when the digest is the same (mutation testing: ``!=`` became ``>=``).
    The device takes only a config's own digest, so the recreated campaign has another
    config (epsilon 2 for 1), and the new digest sorts before or after the old one."""
    url, handler = collector
    handler.resources = {"c": [RECREATED[old], RECREATED[old], RECREATED[new]]}
    old_digest, new_digest = RECREATED[old]["digest"], RECREATED[new]["digest"]
    client = TelemetryClient(url, ingest_token="t" * 20, state_dir=tmp_path)
    try:
        client.prefetch("c")
        with caplog.at_level("WARNING", logger="client_sdk.config_cache"):
            assert client.configs.refresh("c", conditional=False).digest == old_digest
            assert "changed its config digest" not in caplog.text
            assert client.configs.refresh("c", conditional=False).digest == new_digest
        assert caplog.text.count("campaign c changed its config digest") == 1, caplog.text
    finally:
        client.close(timeout=0)
