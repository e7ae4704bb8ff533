"""Answers of a hostile collector that stopped or wedged the device's uploader.

Found by an adversarial sweep of the SDK from the collector's side (2026-11-27):

* a ``Date`` or ``Retry-After`` header whose year has twenty digits raised OverflowError in
  ``email.utils``; the transport caught only TypeError and ValueError, so the error escaped
  ``prefetch`` and stopped the upload thread for good ("internal error") until the app
  restarted;
* a collector that refused a report for its day while moving its ``Date`` a day forward and
  back had the report re-stamped and resent in the same pass without a pause, for ever:
  about 1,000 requests in 3 seconds, and the reports of every other campaign waited behind it.

The real collector sends neither, so the collector here is a small fake HTTP server.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from client_sdk import TelemetryClient
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving

CONFIG = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
#: A date ``email.utils`` cannot turn into a datetime without an OverflowError.
HUGE_YEAR = "Mon, 01 Jan 99999999999999999999 00:00:00 GMT"
TODAY = dt.datetime.now(dt.UTC).date()


def http_date(day: dt.date) -> str:
    return email.utils.format_datetime(
        dt.datetime(day.year, day.month, day.day, 12, tzinfo=dt.UTC), usegmt=True
    )


class Hostile(JsonHandler):
    """Serves every campaign with :data:`CONFIG`. ``date`` replaces the Date header while set;
    ``busy`` uploads are answered 503 with ``retry_after``; uploads of campaign ``day_refused``
    are refused for their day with a Date that alternates between tomorrow and yesterday, once
    ``gate`` is set. Counts the uploads per campaign and sets ``arrived[campaign]`` on each."""

    date: ClassVar[str | None] = None
    busy: ClassVar[int] = 0
    retry_after: ClassVar[str] = ""
    day_refused: ClassVar[str] = ""
    gate: ClassVar[threading.Event] = threading.Event()
    posts: ClassVar[dict[str, int]] = {}
    arrived: ClassVar[dict[str, threading.Event]] = {}

    def date_time_string(self, timestamp: float | None = None) -> str:
        date = type(self).date
        return super().date_time_string(timestamp) if date is None else date

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(200, campaign_config(self._campaign(), CONFIG))

    def do_POST(self) -> None:  # noqa: N802
        cls = type(self)
        campaign, body = self._upload()
        items = body["reports"]
        cls.posts[campaign] = cls.posts.get(campaign, 0) + 1
        cls.arrived.setdefault(campaign, threading.Event()).set()
        if cls.busy > 0:
            cls.busy -= 1
            error = {"code": "overloaded", "message": "later", "status": 503}
            self._answer(503, {"error": error}, {"Retry-After": cls.retry_after})
            return
        if campaign == cls.day_refused:
            cls.gate.wait(60)
            shift = 1 if cls.posts[campaign] % 2 else -1
            cls.date = http_date(TODAY + dt.timedelta(days=shift))
            errors = [
                {"index": i, "reason": f"day {item['day']} is in the future"}
                for i, item in enumerate(items)
            ]
            self._answer(200, {"accepted": 0, "duplicate": 0, "rejected": len(items),
                               "errors": errors})  # fmt: skip
            return
        self._answer(200, {"accepted": len(items), "duplicate": 0, "rejected": 0, "errors": []})


@pytest.fixture
def collector() -> Iterator[tuple[str, type[Hostile]]]:
    handler = type("Collector", (Hostile,), {"posts": {}, "arrived": {}, "gate": threading.Event()})
    with serving(handler) as url:
        yield url, handler


def client(url: str, tmp_path: Path, **options: Any) -> TelemetryClient:
    options.setdefault("backoff_base", 0.01)
    options.setdefault("backoff_cap", 0.05)
    return TelemetryClient(url, ingest_token="t" * 20, state_dir=tmp_path, **options)


def test_a_date_past_any_calendar_is_ignored(
    collector: tuple[str, type[Hostile]], tmp_path: Path
) -> None:
    url, handler = collector
    handler.date = HUGE_YEAR
    with client(url, tmp_path) as device:
        device.prefetch("q")  # raised OverflowError
        assert device.report("q", "a")
        assert device.flush(timeout=30)
        stats = device.stats()
        assert stats["paused"] is None and stats["accepted"] == 1
        assert stats["clock_skew_seconds"] is None  # no usable Date was ever seen


def test_a_retry_after_past_any_calendar_is_ignored(
    collector: tuple[str, type[Hostile]], tmp_path: Path
) -> None:
    url, handler = collector
    handler.busy, handler.retry_after = 1, HUGE_YEAR
    with client(url, tmp_path) as device:
        device.prefetch("q")
        assert device.report("q", "a")
        # The 503 is retried after the usual backoff; the upload thread stopped for good.
        assert device.flush(timeout=30)
        assert device.stats()["paused"] is None
        assert handler.posts["q"] == 2


def test_a_report_refused_for_its_day_again_and_again_holds_up_nothing(
    collector: tuple[str, type[Hostile]], tmp_path: Path
) -> None:
    url, handler = collector
    handler.day_refused = "q"
    # Uploads start at once; a long backoff: a re-stamped report is resent only after it.
    options = {"flush_interval": 0, "backoff_base": 3600.0, "backoff_cap": 3600.0}
    with client(url, tmp_path, **options) as device:
        device.prefetch("q", "r")
        # Stored two days back (made offline before the collector's clock was known), older
        # than the other campaign's report, so its batch is the first of every pass.
        two_days_back = TODAY - dt.timedelta(days=2)
        device.report_many("q", payloads=["AQ=="], simulate_devices=True, day=two_days_back)
        assert device.report("r", "a")
        handler.gate.set()  # the first upload of q is answered once r's report is stored
        # Before, this pass resent q's report without end and never reached r's.
        assert handler.arrived.setdefault("r", threading.Event()).wait(60)
        assert handler.posts["q"] == 1
        assert device.stats()["restamped_skew"] == 1
        (pending,) = device.pending_reports("q")
        assert pending["day"] == (two_days_back + dt.timedelta(days=1)).isoformat()
        device.close(timeout=0)  # not a last flush: it would wait for the backoff
