"""A collector that recreates a campaign must not get a device past its own limits.

Found by an adversarial sweep of the SDK from the collector's side (2026-11-27):

* the labels a memoised (``rappor``) release is charged over were cached by the config's
  *digest*, a string the collector sends and the device cannot check. A collector that served
  a six-label domain under the digest it had used for a two-label one had the device count two
  distinct values at most: sixty reports of six values at permanent epsilon 4 were charged 8
  instead of 24, inside a campaign budget of 8 they break three times over;
* the per-window limit counted reports per window *key*, and the window kind (day or week)
  comes from the collector's config. A collector that recreated a weekly campaign as a daily
  one got a second report of the same value, with fresh randomness, on the same day, under
  the default limit of one report per window.

Since the device checks that a config's digest is its own (2026-12), the first attack meets
an earlier refusal: the six-label domain served under the two-label one's digest is not used
at all. The labels are still what the ledger charges, which a campaign honestly recreated with
the bigger domain (under its own digest) shows.

The real collector computes digests honestly and cannot recreate a campaign under the URL a
device knows within one test, so the collector here is a small fake HTTP server that
recreates the campaign on a 409, as a collector whose database was replaced would.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from client_sdk import PrivacyBudget, TelemetryClient
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving

WEDNESDAY = dt.date(2026, 11, 25)
LABELS = ["a", "b", "c", "d", "e", "f"]


class Recreating(JsonHandler):
    """Serves ``versions[campaign]`` in turn: the next one after each upload answered 409
    ``stale_config`` (the first ``stale`` uploads are), the last one for ever."""

    versions: ClassVar[dict[str, list[dict[str, Any]]]] = {}
    stale: ClassVar[int] = 0
    served: ClassVar[dict[str, int]] = {}

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        campaign = self.path.rstrip("/").split("/")[-1]
        versions = type(self).versions[campaign]
        self._answer(200, versions[min(type(self).served.get(campaign, 0), len(versions) - 1)])

    def do_POST(self) -> None:  # noqa: N802
        campaign, body = self._upload()
        items = body["reports"]
        cls = type(self)
        if cls.stale > 0:
            cls.stale -= 1
            cls.served[campaign] = cls.served.get(campaign, 0) + 1  # recreated
            error = {"code": "stale_config", "message": "recreated", "status": 409}
            self._answer(409, {"error": error})
            return
        self._answer(200, {"accepted": len(items), "duplicate": 0, "rejected": 0, "errors": []})


@pytest.fixture
def collector() -> Iterator[tuple[str, type[Recreating]]]:
    handler = type("Collector", (Recreating,), {"versions": {}, "stale": 1, "served": {}})
    with serving(handler) as url:
        yield url, handler


def resource(mechanism: dict[str, Any], window: str = "day") -> dict[str, Any]:
    """Campaign "q" with ``mechanism``, under its own digest."""
    return campaign_config("q", mechanism, window=window)


def client(url: str, tmp_path: Path, today: list[dt.date], **options: Any) -> TelemetryClient:
    """A client whose clock shows ``today[0]``."""
    return TelemetryClient(
        url,
        ingest_token="t" * 20,
        state_dir=tmp_path,
        backoff_base=0.01,
        backoff_cap=0.05,
        clock=lambda: today[0],
        **options,
    )


def test_a_bigger_domain_under_the_same_digest_is_refused(
    collector: tuple[str, type[Recreating]], tmp_path: Path
) -> None:
    """The attack of the first sweep: six labels served under the digest of the two-label
    config. The device refuses that config (its digest is not its own): the report made under
    the old config is uploaded, nothing of the six-label config is stored or charged, and
    after the 409 and the refusal the old config is not used for new reports either."""
    url, handler = collector
    small = create("rappor", epsilon=1.0, domain=LABELS[:2]).config()
    big = create("rappor", epsilon=1.0, domain=LABELS).config()
    forged = {**resource(big), "digest": resource(small)["digest"]}  # the same digest
    handler.versions["q"] = [resource(small), forged]
    budget = PrivacyBudget(campaign_epsilon=100.0, device_epsilon=100.0)
    with client(url, tmp_path, [WEDNESDAY], reports_per_window=None, budget=budget) as device:
        device.prefetch("q")
        assert device.report("q", "a")
        # The upload is answered 409; the refetch serves six labels under the same digest,
        # which is refused; the batch is retried after a backoff and taken.
        assert device.flush(timeout=30)
        assert "is not the config's own" in str(device.configs.unusable("q"))
        assert device.configs.peek("q") is None
        refused = device.report("q", "c")
        assert not refused and "is not the config's own" in refused.message  # type: ignore[union-attr]
        assert device.stats()["dropped_stale"] == 0
        assert [c["reports"] for c in device.privacy_charges("q")] == [1]


def test_a_bigger_domain_under_its_own_digest_is_charged_for_all_its_labels(
    collector: tuple[str, type[Recreating]], tmp_path: Path
) -> None:
    url, handler = collector
    small = create("rappor", epsilon=1.0, domain=LABELS[:2]).config()
    big = create("rappor", epsilon=1.0, domain=LABELS).config()
    handler.versions["q"] = [resource(small), resource(big)]
    budget = PrivacyBudget(campaign_epsilon=100.0, device_epsilon=100.0)
    with client(url, tmp_path, [WEDNESDAY], reports_per_window=None, budget=budget) as device:
        device.prefetch("q")
        assert device.report("q", "a")
        # The upload is answered 409; the refetch serves the campaign recreated with six
        # labels: the report made under two is dropped (stale).
        assert device.flush(timeout=30)
        assert device.stats()["dropped_stale"] == 1
        mech = device.configs.get("q").mechanism
        assert mech.domain == tuple(LABELS)
        for label in LABELS:
            for _ in range(10):
                assert device.report("q", label)
        spent = device.privacy_spent("q")
    # Six distinct values may have been reported: six permanent answers (before: 2 x 4 = 8).
    assert spent.best == pytest.approx(min(spent.sequential, 6 * mech.permanent_epsilon))
    assert spent.best > 2 * mech.permanent_epsilon


def test_a_campaign_recreated_with_daily_windows_gets_no_second_report_that_day(
    collector: tuple[str, type[Recreating]], tmp_path: Path
) -> None:
    url, handler = collector
    oue = create("oue", epsilon=1.0, domain=LABELS).config()
    handler.versions["q"] = [resource(oue, "week"), resource(oue, "day")]
    today = [WEDNESDAY]
    with client(url, tmp_path, today) as device:
        device.prefetch("q")
        assert device.report("q", "a")
        assert device.budget_left("q") == 0
        # The upload is answered 409 and the campaign comes back with daily windows: the
        # week's report is dropped (stale), and it was made today.
        assert device.flush(timeout=30)
        assert device.configs.get("q").window == "day"
        assert device.stats()["dropped_stale"] == 1
        assert device.budget_left("q") == 0
        again = device.report("q", "a")
        assert not again and again.reason == "budget_spent"
        assert [c["reports"] for c in device.privacy_charges("q")] == [1]
        # The next day is a new daily window.
        today[0] = WEDNESDAY + dt.timedelta(days=1)
        assert device.report("q", "a")


def test_a_campaign_recreated_with_weekly_windows_counts_the_days_of_its_week(
    collector: tuple[str, type[Recreating]], tmp_path: Path
) -> None:
    url, handler = collector
    oue = create("oue", epsilon=1.0, domain=LABELS).config()
    handler.versions["q"] = [resource(oue, "day"), resource(oue, "week")]
    today = [WEDNESDAY]
    with client(url, tmp_path, today) as device:
        device.prefetch("q")
        assert device.report("q", "a")  # Wednesday, daily window
        assert device.flush(timeout=30)
        assert device.configs.get("q").window == "week"
        # The weekly window starting Monday already holds Wednesday's report.
        today[0] = WEDNESDAY + dt.timedelta(days=1)
        again = device.report("q", "a")
        assert not again and again.reason == "budget_spent"
        today[0] = WEDNESDAY + dt.timedelta(days=5)  # the next Monday
        assert device.report("q", "a")
