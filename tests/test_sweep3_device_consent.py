"""Consent withdrawn while an upload is in flight.

Found by an adversarial sweep of the SDK from the collector's side (2026-11-27): a collector
that holds its answer to an upload (it may take up to a minute to answer) while the user turns
uploads off had the device settle the batch after ``set_upload_enabled(False)`` had deleted
the outbox and the sent log: the batch's reports came back into the sent log the user had
asked to delete, and the pending count went below zero, so ``flush()`` never saw an empty
outbox again in that session (``flush(timeout=math.inf)`` would never return).

The real collector answers at once, so the collector here is a small fake HTTP server that
holds the answer until the test has withdrawn consent.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from client_sdk import TelemetryClient
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving

CONFIG = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()


class Holding(JsonHandler):
    """Serves campaign ``q``; sets ``in_flight`` on an upload and answers it (all accepted)
    once ``gate`` is set."""

    in_flight: ClassVar[threading.Event] = threading.Event()
    gate: ClassVar[threading.Event] = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(200, campaign_config("q", CONFIG))

    def do_POST(self) -> None:  # noqa: N802
        items = self._upload()[1]["reports"]
        type(self).in_flight.set()
        type(self).gate.wait(60)
        self._answer(200, {"accepted": len(items), "duplicate": 0, "rejected": 0, "errors": []})


@pytest.fixture
def collector() -> Iterator[tuple[str, type[Holding]]]:
    events = {"in_flight": threading.Event(), "gate": threading.Event()}
    handler = type("Collector", (Holding,), events)
    with serving(handler) as url:
        yield url, handler
        handler.gate.set()


def test_an_upload_answered_after_consent_was_withdrawn_leaves_nothing_behind(
    collector: tuple[str, type[Holding]], tmp_path: Path
) -> None:
    url, handler = collector
    options = {"reports_per_window": None, "flush_interval": 0, "close_timeout": 0}
    with TelemetryClient(url, ingest_token="t" * 20, state_dir=tmp_path, **options) as device:
        device.prefetch("q")
        for _ in range(3):
            assert device.report("q", "a")
        assert handler.in_flight.wait(60)
        device.set_upload_enabled(False)
        assert device.stats()["pending"] == 0 and device.sent_reports() == []
        handler.gate.set()  # the collector answers now: it took the batch
        device.set_upload_enabled(True)
        fresh = device.report("q", "b")
        assert fresh
        # Returns once the held upload is settled and the fresh report is acknowledged.
        assert device.flush(timeout=30), device.stats()
        assert device.stats()["pending"] == 0
        # The sent log the withdrawal deleted holds only what was sent after it.
        assert [r["id"] for r in device.sent_reports()] == [fresh.id]  # type: ignore[union-attr]
