"""Two decisions of the upload thread the third mutation sweep of ``client_sdk/uploader.py``
left unchecked (docs/MUTATION.md, "third sweep"):

* After a failed upload, ``_retry_at`` keeps the end of that backoff (only a flush resets it).
  A later wake-up (a batch filled by a new report, or a campaign ``report`` asked for) must
  start a pass once that moment is past: the first branch of ``Uploader._due`` returns the
  time left, ``max(0, retry_at - now)``. The mutant ``retry_at * now`` waits about
  ``retry_at * now`` seconds instead (years, on any machine up for more than a few seconds),
  so the reports and the config wait for the next flush. Reaching that branch needs
  ``_wake`` set: a report that fills ``batch_size``, or ``wake()`` for a wanted config. With
  ``flush_interval`` infinite the time trigger never stands in for it, and with a backoff of
  0 s the backoff is over by the time the test reports again, so no test has to sleep.
* A 3xx answer is the collector's as a whole (a redirect: every campaign would get it), so it
  ends the pass; the other campaigns' reports are not sent in that pass. That holds for every
  status from 300 to 399: RFC 9110 section 15 has a client treat an unknown status as the x00
  of its class, 399 as 300. The mutant ``300 <= status < 399`` takes a 399 for the campaign's
  own error and goes on with the next campaign. Python's HTTP server sends a 399 as readily
  as a 300.

The collector is a small fake HTTP server (tests/support/fake_http.py): the real one sends
neither a 503 on demand nor a 399. Waits poll for an event with a generous bound (a missing
event, not a slow one, fails them); nothing asserts how long anything took.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from client_sdk import TelemetryClient
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving

CONFIG = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
#: Generous bound for an event of the background thread (not a timing claim).
DEADLINE = 30.0


class Collector(JsonHandler):
    """``GET /v1/campaigns/<id>``: the campaign. ``POST .../reports``: the next status of
    ``statuses`` (an error answer) while any is left, then every report accepted. Logs each
    POST's campaign and status and counts the reports accepted per campaign."""

    statuses: ClassVar[list[int]] = []
    posts: ClassVar[list[tuple[str, int]]] = []
    accepted: ClassVar[dict[str, int]] = {}
    lock: ClassVar[threading.Lock] = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(200, campaign_config(self._campaign(), CONFIG))

    def do_POST(self) -> None:  # noqa: N802
        cls = type(self)
        campaign, body = self._upload()
        items = body["reports"]
        n = len(items)
        with cls.lock:
            status = cls.statuses.pop(0) if cls.statuses else 200
            cls.posts.append((campaign, status))
            if status == 200:
                cls.accepted[campaign] = cls.accepted.get(campaign, 0) + n
        if status != 200:
            self._planned_error(status)
            return
        self._answer(200, {"accepted": n, "duplicate": 0, "rejected": 0, "errors": []})


@pytest.fixture
def collector() -> Iterator[tuple[str, type[Collector]]]:
    handler = type("Fake", (Collector,), {"statuses": [], "posts": [], "accepted": {}})
    with serving(handler) as url:
        yield url, handler


def _client(url: str, state: Path, **options: Any) -> TelemetryClient:
    # flush_interval infinite: only the size trigger (or a flush) starts a pass; close_timeout 0:
    # closing does not flush (a flush resets the backoff the first test is about).
    options = {"reports_per_window": None, "close_timeout": 0, "flush_interval": float("inf"),
               **options}  # fmt: skip
    return TelemetryClient(url, ingest_token="t", state_dir=state, **options)


def _wait_for(event: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE
    while not event():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_full_batch_after_a_failed_upload_goes_up_once_the_backoff_is_over(
    collector: tuple[str, type[Collector]], tmp_path: Path
) -> None:
    url, fake = collector
    fake.statuses = [503]
    with _client(url, tmp_path, batch_size=2, backoff_base=0, backoff_cap=0) as client:
        client.prefetch("full")
        assert client.report("full", "a")
        assert client.report("full", "b")  # a full batch: a pass, answered 503
        assert _wait_for(lambda: client.stats()["last_error"] is not None)
        assert fake.posts == [("full", 503)]
        # The backoff (0 s) is over. A third report fills a batch again and wakes the thread,
        # which must send the two at once, leaving the third for the next full batch.
        assert client.report("full", "c")
        assert _wait_for(lambda: fake.accepted.get("full", 0) == 2), (fake.posts, client.stats())
        # The device settles its outbox after the collector's answer, so that is waited for too.
        assert _wait_for(lambda: client.stats()["pending"] == 1), client.stats()
        assert fake.posts == [("full", 503), ("full", 200)]


def test_a_campaign_asked_for_after_a_failed_upload_is_fetched(
    collector: tuple[str, type[Collector]], tmp_path: Path
) -> None:
    url, fake = collector
    fake.statuses = [503]
    with _client(url, tmp_path, batch_size=1, backoff_base=0, backoff_cap=0) as client:
        client.prefetch("first")
        assert client.report("first", "a")  # a full batch: a pass, answered 503
        assert _wait_for(lambda: client.stats()["last_error"] is not None)
        # A campaign the device has not fetched: report() asks the thread for it (a wake-up).
        assert not client.report("second", "a")
        assert _wait_for(lambda: client.configs.peek("second") is not None), client.stats()
        assert client.report("second", "b")


@pytest.mark.parametrize("status", [300, 307, 399])
def test_a_redirect_answer_ends_the_pass_for_every_campaign(
    collector: tuple[str, type[Collector]], tmp_path: Path, status: int
) -> None:
    url, fake = collector
    fake.statuses = [status]
    with _client(url, tmp_path, batch_size=2) as client:
        client.prefetch("one", "two")
        assert client.report("one", "a")
        assert client.report("two", "a")  # two pending: a pass, whose first upload gets the 3xx
        # The pass has ended once its failure is recorded (after every upload it made).
        assert _wait_for(lambda: client.stats()["last_error"] is not None)
        assert f"answered {status}" in str(client.stats()["last_error"])
        assert fake.posts == [("one", status)]  # campaign two waits for the next pass
        assert client.stats()["pending"] == 2
