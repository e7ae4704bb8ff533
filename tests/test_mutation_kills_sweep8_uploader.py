"""The upload thread's config fetches (``Uploader._refresh_each``, 44b420b and 1aeaf3b): what
the eighth mutation sweep found unchecked (docs/MUTATION.md, "eighth sweep").

* A fetch that fails for the collector as a whole (503: overloaded, as unreachable or 429)
  ends the round: the campaigns after it in the list are not asked for in that round (every
  one would fail alike), and they are asked for again later without another ``report``.
* A fetch the collector refuses for good for one campaign (400) does not keep the campaigns
  after it from being fetched.
* A campaign the collector does not have (404) is logged and the thread goes on: other
  campaigns' reports still go up.
* ``last_error`` names the campaign whose config failed and what the collector answered.

The collector is a small fake HTTP server (tests/support/fake_http.py): the real one answers
neither 503 nor 400 on demand. Waits poll for an event with a generous bound (a missing event,
not a slow one, fails them); nothing asserts how long anything took.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from client_sdk import NotSent, TelemetryClient, UnknownCampaign
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving

CONFIG = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
#: Generous bound for an event of the background thread (not a timing claim).
DEADLINE = 30.0


class Collector(JsonHandler):
    """``GET /v1/campaigns/<id>``: the next status of ``plan[id]`` while any is left (an error
    answer), else the campaign; a ``gate`` holds the first GET until the test opens it.
    ``POST .../reports``: the next status of ``posts_plan`` while any is left, then every
    report accepted. Logs each GET's campaign and status."""

    plan: ClassVar[dict[str, list[int]]] = {}
    posts_plan: ClassVar[list[int]] = []
    gets: ClassVar[list[tuple[str, int]]] = []
    accepted: ClassVar[dict[str, int]] = {}
    gate: ClassVar[threading.Event | None] = None
    lock: ClassVar[threading.Lock] = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        cls = type(self)
        campaign = self._campaign()
        gate = cls.gate
        if gate is not None:
            cls.gate = None
            gate.wait(DEADLINE)
        with cls.lock:
            planned = cls.plan.get(campaign) or []
            status = planned.pop(0) if planned else 200
            cls.gets.append((campaign, status))
        if status != 200:
            self._planned_error(status)
            return
        self._answer(200, campaign_config(campaign, CONFIG))

    def do_POST(self) -> None:  # noqa: N802
        cls = type(self)
        campaign, body = self._upload()
        n = len(body["reports"])
        with cls.lock:
            status = cls.posts_plan.pop(0) if cls.posts_plan else 200
            if status == 200:
                cls.accepted[campaign] = cls.accepted.get(campaign, 0) + n
        if status != 200:
            self._planned_error(status)
            return
        self._answer(200, {"accepted": n, "duplicate": 0, "rejected": 0, "errors": []})


@pytest.fixture
def collector() -> Iterator[tuple[str, type[Collector]]]:
    fresh: dict[str, Any] = {"plan": {}, "posts_plan": [], "gets": [], "accepted": {}, "gate": None}
    handler = type("Fake", (Collector,), fresh)
    with serving(handler) as url:
        yield url, handler


def _client(url: str, state: Path, **options: Any) -> TelemetryClient:
    options = {"reports_per_window": None, "close_timeout": 0, "backoff_base": 0,
               "backoff_cap": 0, **options}  # fmt: skip
    return TelemetryClient(url, ingest_token="t" * 20, state_dir=state, **options)


def _wait_for(event: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE
    while not event():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _gets_of(fake: type[Collector], campaign: str) -> list[int]:
    with fake.lock:
        return [status for c, status in fake.gets if c == campaign]


def test_a_config_fetch_failing_for_the_whole_collector_ends_the_round(
    collector: tuple[str, type[Collector]], tmp_path: Path
) -> None:
    """Both campaigns wanted, ``a`` first; the collector answers ``a`` 503 (overloaded) for
    good: no round goes on to ``b``, which would fail alike."""
    url, fake = collector
    fake.plan = {"a": [503] * 10_000}
    with _client(url, tmp_path) as client:
        assert isinstance(client.report("a", "a"), NotSent)
        assert isinstance(client.report("b", "a"), NotSent)
        seen = len(_gets_of(fake, "a"))
        # Several rounds with both in the list (a is asked for again after each failure).
        assert _wait_for(lambda: len(_gets_of(fake, "a")) >= seen + 3), fake.gets
        assert _gets_of(fake, "b") == []
        assert "503" in str(client.stats()["last_error"])


def test_the_campaigns_left_by_a_failed_round_are_fetched_later_without_a_report(
    collector: tuple[str, type[Collector]], tmp_path: Path
) -> None:
    """A round with ``a`` and ``b`` whose first fetch (``a``) gets a 503: both are asked for
    again, so once the collector is back both configs arrive with no further ``report``."""
    url, fake = collector
    fake.plan = {"a": [503, 503]}
    fake.gate = threading.Event()
    gate = fake.gate
    with _client(url, tmp_path) as client:
        assert isinstance(client.report("a", "a"), NotSent)  # round 1: [a], held by the gate
        assert _wait_for(lambda: fake.gate is None)  # the thread is in round 1's fetch
        assert isinstance(client.report("b", "a"), NotSent)  # wanted for round 2: [a, b]
        gate.set()
        # Round 2 fails at a again (503); no report after this point.
        assert _wait_for(lambda: client.configs.peek("b") is not None), fake.gets
        assert _wait_for(lambda: client.configs.peek("a") is not None), fake.gets
        assert _gets_of(fake, "b") == [200]
        assert _gets_of(fake, "a") == [503, 503, 200]


def test_a_config_refused_for_good_does_not_stop_the_other_fetches(
    collector: tuple[str, type[Collector]], tmp_path: Path
) -> None:
    """``a`` is refused (400) every time and stays first in the list: ``b`` is fetched all the
    same, in the same round."""
    url, fake = collector
    fake.plan = {"a": [400] * 10_000}
    with _client(url, tmp_path) as client:
        assert isinstance(client.report("a", "a"), NotSent)
        assert isinstance(client.report("b", "a"), NotSent)
        assert _wait_for(lambda: client.configs.peek("b") is not None), fake.gets
        assert client.report("b", "a")
        assert set(_gets_of(fake, "a")) == {400}


def test_a_campaign_the_collector_does_not_have_leaves_the_thread_working(
    collector: tuple[str, type[Collector]], tmp_path: Path
) -> None:
    url, fake = collector
    fake.plan = {"gone": [404]}
    with _client(url, tmp_path) as client:
        client.prefetch("kept")
        assert isinstance(client.report("gone", "a"), NotSent)
        assert _wait_for(lambda: client.configs.is_gone("gone")), fake.gets
        with pytest.raises(UnknownCampaign):
            client.report("gone", "a")
        assert client.report("kept", "a")
        assert client.flush(timeout=DEADLINE), client.stats()
        assert fake.accepted == {"kept": 1}
        assert client.stats()["last_error"] is None


def test_last_error_names_the_campaign_whose_config_failed_and_the_answer(
    collector: tuple[str, type[Collector]], tmp_path: Path
) -> None:
    url, fake = collector
    fake.plan = {"broken": [500] * 10_000}
    with _client(url, tmp_path, backoff_base=60, backoff_cap=60) as client:
        assert isinstance(client.report("broken", "a"), NotSent)
        assert _wait_for(lambda: client.stats()["last_error"] is not None)
        error = str(client.stats()["last_error"])
    assert "broken" in error and "500" in error, error


def test_an_upload_that_goes_through_after_a_failed_one_clears_last_error(
    collector: tuple[str, type[Collector]], tmp_path: Path
) -> None:
    """A pass whose config fetches all succeeded resets the failure state once its upload is
    settled: ``last_error`` reads None again (and the backoff starts over)."""
    url, fake = collector
    fake.posts_plan = [503]
    with _client(url, tmp_path) as client:
        client.prefetch("c")
        assert client.report("c", "a")
        assert client.flush(timeout=DEADLINE), client.stats()
        assert fake.accepted == {"c": 1}
        assert _wait_for(lambda: client.stats()["last_error"] is None), client.stats()
