"""A shuffled report made before the device heard its shuffler's clock leaves with the
shuffler's day too.

A shuffled campaign's reports carry the shuffler's day (``tests/test_sweep7_sdk_shuffled_day``),
but the shuffler's ``Date`` is heard only on a submission, so each session's reports made
before its first submission carried the device's own day. With a device clock days off the
collector refused them behind the shuffler, where the device never hears of it: lost, and
counted as acknowledged (a new user's walk-through: a clock 5 days ahead, two sessions, the
first report of each refused). Such a report is now marked when stored and given the
shuffler's day before it leaves, the shuffler's clock heard first (``/healthz``) if need be.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from tests.test_sweep7_sdk_shuffled_day import (
    OUE,
    Collector,
    Shuffler,
    campaign_config,
    device,
    sealed_days,
    servers,  # noqa: F401 - the fixture
    utc_today,
)


def through_the_shuffler(
    served: tuple[str, type[Collector], str, type[Shuffler]],
) -> tuple[str, type[Shuffler]]:
    """Campaign ``q`` served through the shuffler: the collector's URL and the shuffler."""
    url, collector, shuffler_url, shuffler = served
    body = campaign_config("q", OUE)
    body["shuffler"] = shuffler_url
    collector.resources = {"q": body}
    return url, shuffler


def test_every_session_s_first_reports_leave_with_the_shufflers_day(
    servers: tuple[str, type[Collector], str, type[Shuffler]],  # noqa: F811
    tmp_path: Path,
) -> None:
    url, shuffler = through_the_shuffler(servers)
    ahead = utc_today() + dt.timedelta(days=5)
    stored = []
    for _ in range(2):  # two sessions: the shuffler's clock is not kept between them
        with device(url, tmp_path, clock=lambda: ahead) as client:
            client.prefetch("q")
            stored.append(client.report("q", "a"))
            assert client.flush(timeout=30)
            sent = [r["day"] for r in client.sent_reports()]
    today = utc_today().isoformat()
    assert [r.day for r in stored] == [ahead.isoformat()] * 2  # stored before it was heard
    assert sealed_days(shuffler.submitted) == [today] * 2
    assert sent == [today] * 2


def test_a_report_stamped_once_the_clock_was_heard_is_not_moved_again(
    servers: tuple[str, type[Collector], str, type[Shuffler]],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Only the marked reports move: one stored with the shuffler's day keeps it."""
    url, shuffler = through_the_shuffler(servers)
    behind = utc_today() - dt.timedelta(days=40)
    with device(url, tmp_path, clock=lambda: behind) as client:
        client.prefetch("q")
        first = client.report("q", "a")
        assert client.flush(timeout=30)
        second = client.report("q", "b")
        assert client.flush(timeout=30)
    today = utc_today().isoformat()
    assert (first.day, second.day) == (behind.isoformat(), today)
    assert sealed_days(shuffler.submitted) == [today] * 2
