"""A shuffled campaign's reports carry the shuffler's day, never the collector's.

The day a report carries is sealed inside it. Before, once the collector's ``Date`` was known
every report carried the collector's day, so a collector that answered each device a ``Date``
shifted by its own number of days had that device stamp the tag into every report it made,
through the shuffler, the pins and a shipped sealed key (three devices with correct clocks
shifted by -3, -7 and 0 days were stored in three windows). Now a shuffled campaign takes the
shuffler's ``Date`` (a device clock that is off is still corrected once the shuffler has
answered) and the device's own day before that. A collector and a shuffler that are fakes on
their own ports: the real collector never lies about its clock.
"""

from __future__ import annotations

import base64
import datetime as dt
import email.utils
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from nacl.public import PrivateKey, SealedBox

from client_sdk import PrivacyBudget, TelemetryClient
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving

OUE = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
KEY = PrivateKey.generate()
PUBLIC = base64.b64encode(bytes(KEY.public_key)).decode()
BUDGET = PrivacyBudget(campaign_epsilon=1e6, device_epsilon=1e6)


class Dated(JsonHandler):
    """Answers with a ``Date`` ``shift_days`` days off the true time."""

    shift_days: ClassVar[int] = 0

    def date_time_string(self, timestamp: float | None = None) -> str:
        return email.utils.formatdate(time.time() + self.shift_days * 86400, usegmt=True)


class Collector(Dated):
    resources: ClassVar[dict[str, dict[str, Any]]] = {}
    uploads: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = type(self).resources[self._campaign()]
        self._answer(200, body, {"ETag": f'"{body["digest"]}"'})

    def do_POST(self) -> None:  # noqa: N802
        _, body = self._upload()
        type(self).uploads.append(body)
        n = len(body["reports"])
        self._answer(200, {"accepted": n, "duplicate": 0, "rejected": 0, "errors": []})


class Shuffler(Dated):
    submitted: ClassVar[list[str]] = []

    def do_POST(self) -> None:  # noqa: N802
        data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).submitted.append(data["message"])
        self._answer(202, {"queued": True})


@pytest.fixture
def servers() -> Iterator[tuple[str, type[Collector], str, type[Shuffler]]]:
    collector = type("C", (Collector,), {"resources": {}, "uploads": [], "shift_days": -3})
    shuffler = type("S", (Shuffler,), {"submitted": [], "shift_days": 0})
    with serving(collector) as url, serving(shuffler) as shuffler_url:
        yield url, collector, shuffler_url, shuffler


def device(url: str, state: Path, **options: Any) -> TelemetryClient:
    options = {"close_timeout": 0, "backoff_base": 0.01, "backoff_cap": 0.05, **options}
    return TelemetryClient(
        url,
        ingest_token="t" * 20,
        state_dir=state,
        budget=BUDGET,
        sealed_key=PUBLIC,
        reports_per_window=None,
        **options,
    )


def sealed_days(messages: list[str]) -> list[str]:
    return [
        json.loads(SealedBox(KEY).decrypt(base64.b64decode(m)))["report"]["day"] for m in messages
    ]


def utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def test_a_collector_shifting_its_date_does_not_move_a_shuffled_reports_day(
    servers: tuple[str, type[Collector], str, type[Shuffler]], tmp_path: Path
) -> None:
    url, collector, shuffler_url, shuffler = servers
    body = campaign_config("q", OUE)
    body["shuffler"] = shuffler_url
    collector.resources = {"q": body}
    with device(url, tmp_path) as client:
        client.prefetch("q")  # the collector's (shifted) Date is known from here on
        first = [client.report("q", "a") for _ in range(2)]
        assert client.flush(timeout=30)
        later = [client.report("q", "b") for _ in range(2)]
        assert client.flush(timeout=30)
        skew = client.stats()["clock_skew_seconds"]
    assert skew is not None and skew < -2 * 86400  # the device did see the lie
    today = utc_today().isoformat()
    assert [r.day for r in first + later] == [today] * 4
    assert sealed_days(shuffler.submitted) == [today] * 4
    assert collector.uploads == []


def test_a_device_clock_that_is_off_takes_the_shufflers_day(
    servers: tuple[str, type[Collector], str, type[Shuffler]], tmp_path: Path
) -> None:
    """What following the collector's clock was for (a device clock 40 days behind had its
    reports refused) still holds through the shuffler's clock once it has answered."""
    url, collector, shuffler_url, shuffler = servers
    body = campaign_config("q", OUE)
    body["shuffler"] = shuffler_url
    collector.resources = {"q": body}
    behind = utc_today() - dt.timedelta(days=40)
    with device(url, tmp_path, clock=lambda: behind) as client:
        client.prefetch("q")
        before = client.report("q", "a")  # no shuffler answer yet: the device's own day
        assert client.flush(timeout=30)
        after = client.report("q", "a")
        assert client.flush(timeout=30)
        skews = client.stats()["shuffler_clock_skew_seconds"]
    assert before.day == behind.isoformat()
    assert after.day == utc_today().isoformat()
    assert set(skews) == {shuffler_url} and abs(skews[shuffler_url]) < 3600


def test_a_direct_campaign_still_takes_the_collectors_day(
    servers: tuple[str, type[Collector], str, type[Shuffler]], tmp_path: Path
) -> None:
    """Without a shuffler the collector sees the device's address anyway: its day is used as
    before (a device clock that is off is corrected by it)."""
    url, collector, _, _ = servers
    collector.resources = {"q": campaign_config("q", OUE)}
    with device(url, tmp_path) as client:
        client.prefetch("q")
        report = client.report("q", "a")
        assert client.flush(timeout=30)
    assert report.day == (utc_today() - dt.timedelta(days=3)).isoformat()
    assert [r["day"] for r in collector.uploads[0]["reports"]] == [report.day]
