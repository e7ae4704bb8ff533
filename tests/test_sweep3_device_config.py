"""A campaign digest the device would store and send with every report is checked first.

Found by an adversarial sweep of the SDK from the collector's side (2026-11-27): the config
digest is copied into every report the device stores and into every upload, and the device
took any string. A collector that served a digest of 4 MiB made 20 reports a state file of
100 MB: it could fill the device's storage (and its data plan) at the app's reporting rate.
A digest with a line break made every revalidation request (``If-None-Match``) fail.

The real collector's digests are sha256 hex; the collector here is a small fake HTTP server.
(Since 2026-12 the device also checks that the digest is the config's own,
``tests/test_sweep6_sdk_digest.py``; these digests are refused before that.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from client_sdk import InvalidParameter, TelemetryClient
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving

CONFIG = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()


class Serving(JsonHandler):
    """Serves every campaign with :data:`CONFIG`, ``digest`` (None: the config's own) and the
    fields of ``extra`` (noting each request in ``gets``); takes every upload."""

    digest: ClassVar[str | None] = None
    gets: ClassVar[list[str]] = []
    extra: ClassVar[dict[str, Any]] = {}

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        type(self).gets.append(self.path)
        campaign = self.path.rstrip("/").split("/")[-1]
        body = {**campaign_config(campaign, CONFIG, digest=type(self).digest),
                **type(self).extra}  # fmt: skip
        self._answer(200, body)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self._answer(200, {"accepted": 1, "duplicate": 0, "rejected": 0, "errors": []})


@pytest.fixture
def collector() -> Iterator[tuple[str, type[Serving]]]:
    handler = type("Collector", (Serving,), {"gets": [], "extra": {}, "digest": None})
    with serving(handler) as url:
        yield url, handler


@pytest.mark.parametrize("digest", ["0" * (1 << 20), "ab\r\ncd", "d" * 129])
def test_a_digest_no_collector_makes_is_an_unusable_config(
    collector: tuple[str, type[Serving]], tmp_path: Path, digest: str
) -> None:
    url, handler = collector
    handler.digest = digest
    with TelemetryClient(url, ingest_token="t" * 20, state_dir=tmp_path, close_timeout=0) as device:
        with pytest.raises(InvalidParameter, match="unusable config: its digest"):
            device.prefetch("q")
        refused = device.report("q", "a")
        assert not refused and refused.reason == "not_ready"  # type: ignore[union-attr]
        assert "its digest" in refused.message  # type: ignore[union-attr]
        assert device.stats()["pending"] == 0
        # The collector corrects itself: the campaign is fetched again and used.
        handler.digest = None  # the config's own
        device.prefetch("q")
        assert device.report("q", "a")
        assert device.flush(timeout=30)


def test_an_unusable_config_is_not_fetched_again_by_every_report(
    collector: tuple[str, type[Serving]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, every ``report`` of the campaign started a background fetch at once: a collector
    serving an unusable config of 16 MiB had the device download it at the app's rate."""
    from client_sdk import config_cache

    monkeypatch.setattr(config_cache, "UNUSABLE_REFETCH_BASE", 3600.0)  # no refetch in the test
    url, handler = collector
    handler.digest = "d" * 129
    gets = handler.gets
    with TelemetryClient(url, ingest_token="t" * 20, state_dir=tmp_path, close_timeout=0) as device:
        with pytest.raises(InvalidParameter, match="unusable config"):
            device.prefetch("q")
        assert len(gets) == 1
        for _ in range(10):
            refused = device.report("q", "a")
            assert not refused and refused.reason == "not_ready"  # type: ignore[union-attr]
            assert "cannot use" in refused.message  # type: ignore[union-attr]
            assert device.flush(timeout=30)  # returns once the upload thread is idle again
        assert len(gets) == 1
        # prefetch still asks at once, and a usable answer ends the backoff.
        handler.digest = None  # the config's own
        device.prefetch("q")
        assert len(gets) == 2 and device.report("q", "a")


def test_a_deeply_nested_cached_resource_does_not_escape_report(
    collector: tuple[str, type[Serving]], tmp_path: Path
) -> None:
    """The resource is cached as it came. One nested 500 levels deep (in a field the device
    does not use) parsed in the upload thread, but after a restart ``report``, called from
    deep in an app's stack, read it from disk and raised RecursionError to the app."""
    import sys

    url, handler = collector
    handler.extra = {"description": json.loads("[" * 500 + "]" * 500)}
    options: dict[str, Any] = {"ingest_token": "t" * 20, "state_dir": tmp_path, "close_timeout": 0}
    with TelemetryClient(url, **options) as device:
        device.prefetch("q")

    def deep(frames: int, call: Any) -> Any:
        return call() if frames <= 0 else deep(frames - 1, call)

    with TelemetryClient(url, **options) as device:
        outcome = deep(sys.getrecursionlimit() - 300, lambda: device.report("q", "a"))
        assert outcome or outcome.reason == "not_ready"  # fetched again in the background
        device.prefetch("q")
        assert device.report("q", "a")
