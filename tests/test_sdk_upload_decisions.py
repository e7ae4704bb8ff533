"""The uploader's and the transport's decisions on answers, one by one (mutation testing of
``client_sdk/uploader.py`` and ``transport.py`` on 2026-11-27 left these unchecked).

* An error answer is classified by status *and* code: only 409 ``stale_config`` is a stale
  config, only 410 ``campaign_archived`` an archived campaign; any other code is a plain
  refusal, whatever it sorts next to.
* After a 413 the batch size is halved to a whole number of reports.
* Reports the collector rejects as invalid are logged; reports only re-stamped are not.
* A campaign recreated under a digest that sorts *before* the old one is still recreated.
* A failed upload is retried by the background thread after its backoff, without a flush.

The real collector sends only the right codes and cannot be made to send the others, so the
collector here is a small fake HTTP server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from client_sdk import TelemetryClient
from client_sdk.mechanisms import create
from client_sdk.transport import (
    AuthError,
    BatchTooLarge,
    CampaignArchived,
    CampaignGone,
    PermanentError,
    StaleConfig,
    Transport,
)
from tests.support.fake_http import JsonHandler, campaign_config, serving
from tests.support.waiting import eventually

CONFIG = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
#: Generous bound for the background thread to retry after a 50 ms backoff (not a timing claim).
DEADLINE = 60.0


class Fake(JsonHandler):
    """``GET /v1/campaigns/<id>``: the campaign with mechanism ``configs[id]`` (default
    :data:`CONFIG`) under its own digest, or
    for ids ``e-<status>-<code>`` that error answer. ``POST .../reports``: per campaign, the
    next entry of ``plan[id]`` if any (``("status", status, code)``, ``("reject", reason)``,
    ``("limit", n)``: 413 above n reports), else all accepted. Counts the reports accepted."""

    configs: ClassVar[dict[str, dict[str, Any]]] = {}
    plan: ClassVar[dict[str, list[tuple[Any, ...]]]] = {}
    accepted: ClassVar[dict[str, int]] = {}
    lock: ClassVar[threading.Lock] = threading.Lock()

    def _error(self, status: int, code: str) -> None:
        self._answer(status, {"error": {"code": code, "message": code, "status": status}})

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        campaign = self.path.rstrip("/").split("/")[-1]
        if campaign.startswith("e-"):
            _, status, code = campaign.split("-", 2)
            self._error(int(status), code)
            return
        self._answer(200, self._resource(campaign))

    def _resource(self, campaign: str) -> dict[str, Any]:
        return campaign_config(campaign, type(self).configs.get(campaign, CONFIG))

    def do_POST(self) -> None:  # noqa: N802
        cls = type(self)
        campaign, body = self._upload()
        items = body["reports"]
        with cls.lock:
            steps = cls.plan.get(campaign, [])
            step = steps[0] if steps else None
            if step is not None and step[0] != "limit":
                steps.pop(0)
        if step is not None and step[0] == "status":
            self._error(step[1], step[2])
            return
        if step is not None and step[0] == "limit" and len(items) > step[1]:
            self._error(413, "payload_too_large")
            return
        if body["digest"] != self._resource(campaign)["digest"]:
            self._error(409, "stale_config")
            return
        rejected = 1 if step is not None and step[0] == "reject" else 0
        errors = [{"index": 0, "reason": step[1]}] if rejected and step is not None else []
        with cls.lock:
            cls.accepted[campaign] = cls.accepted.get(campaign, 0) + len(items) - rejected
        self._answer(200, {"accepted": len(items) - rejected, "duplicate": 0,
                           "rejected": rejected, "errors": errors})  # fmt: skip


@pytest.fixture
def fake() -> Iterator[tuple[str, type[Fake]]]:
    handler = type("Collector", (Fake,), {"configs": {}, "plan": {}, "accepted": {}})
    with serving(handler) as url:
        yield url, handler


def _client(url: str, state: Path, **options: Any) -> TelemetryClient:
    options = {"reports_per_window": None, "close_timeout": 0, **options}
    return TelemetryClient(url, ingest_token="t", state_dir=state, **options)


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (409, "stale_config", StaleConfig),
        (409, "aaa_conflict", PermanentError),  # sorts before stale_config
        (409, "zzz_conflict", PermanentError),  # sorts after it
        (410, "campaign_archived", CampaignArchived),
        (410, "aaa_gone", PermanentError),
        (410, "zzz_gone", PermanentError),
        (404, "not_found", CampaignGone),
        (401, "unauthorized", AuthError),
        (403, "forbidden", AuthError),
        (413, "payload_too_large", BatchTooLarge),
        (422, "whatever", PermanentError),
    ],
)
def test_an_error_answer_is_classified_by_status_and_code(
    fake: tuple[str, type[Fake]], status: int, code: str, expected: type[Exception]
) -> None:
    url, _ = fake
    transport = Transport(url, "t")
    try:
        with pytest.raises(PermanentError) as caught:
            transport.fetch_campaign(f"e-{status}-{code}")
    finally:
        transport.close()
    assert type(caught.value) is expected
    assert caught.value.code == code


def test_a_batch_refused_as_too_large_halves_to_whole_reports(
    fake: tuple[str, type[Fake]], tmp_path: Path
) -> None:
    url, collector = fake
    collector.plan["big"] = [("limit", 2)]
    with _client(url, tmp_path, batch_size=5) as client:
        client.prefetch("big")
        for _ in range(5):
            assert client.report("big", "a")
        assert client.flush(timeout=DEADLINE)
        size = client._uploader.batch_size
        assert type(size) is int and size == 2
    assert collector.accepted["big"] == 5


def test_only_reports_rejected_as_invalid_are_logged(
    fake: tuple[str, type[Fake]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url, collector = fake
    collector.plan["bad"] = [("reject", "payload is not a valid report")]
    caplog.set_level(logging.WARNING, logger="client_sdk.uploader")
    with _client(url, tmp_path) as client:
        client.prefetch("bad")
        assert client.report("bad", "a")
        assert client.report("bad", "b")
        assert client.flush(timeout=DEADLINE)
        assert client.stats()["rejected"] == 1
    assert any("rejected 1 of 2 reports for bad as invalid" in r.message for r in caplog.records)


def test_a_campaign_recreated_under_a_digest_that_sorts_first_is_recreated(
    fake: tuple[str, type[Fake]], tmp_path: Path
) -> None:
    url, collector = fake
    # The device takes only a config's own digest: the recreated campaign has another config
    # (another epsilon), chosen so that its digest sorts before the old one.
    new, old = sorted(
        (CONFIG, {**CONFIG, "epsilon": 2.0}),
        key=lambda config: campaign_config("redo", config)["digest"],
    )
    collector.configs["redo"] = old
    with _client(url, tmp_path) as client:
        client.prefetch("redo")
        assert client.report("redo", "a")
        collector.configs["redo"] = new  # the upload now gets a 409 stale_config
        client.flush(timeout=DEADLINE)
        stats = client.stats()
        assert stats["dropped_stale"] == 1 and stats["pending"] == 0
    assert collector.accepted.get("redo", 0) == 0


def test_a_failed_upload_is_retried_after_its_backoff_without_a_flush(
    fake: tuple[str, type[Fake]], tmp_path: Path
) -> None:
    url, collector = fake
    collector.plan["later"] = [("status", 500, "internal")]
    options = {"backoff_base": 0.05, "backoff_cap": 0.05, "flush_interval": 0.05}
    with _client(url, tmp_path, **options) as client:
        client.prefetch("later")
        assert client.report("later", "a")
        # Wait for the 500 to be served, not for ``last_error``: the retry after a backoff of
        # at most 50 ms clears it again, and a poll that missed that window waited out the
        # whole deadline (then the second wait had none left).
        eventually(
            lambda: list(collector.plan["later"]), lambda left: not left, what="the 500 served"
        )
        # A report made during the backoff wakes the thread, which waits out the rest of it.
        assert client.report("later", "b")
        accepted = eventually(
            lambda: collector.accepted.get("later", 0),
            lambda n: n >= 2,
            what="both reports accepted",
            timeout=DEADLINE,
        )
        assert accepted == 2, client.stats()
