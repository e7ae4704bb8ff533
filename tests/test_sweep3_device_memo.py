"""A recreated ``alpha_point`` campaign must get independent memoised answers.

Found by an adversarial sweep of the SDK from the collector's side (2026-11-27): the word
behind a device's memoised bit for a grid point was derived from the device secret, the
campaign id and the grid point, not from the config's thresholds. 1BitMean's threshold at the
middle grid point is exactly one half whatever the epsilon, so a device whose value sits there
sent the *same* bit under epsilon 1 and, after the collector recreated the campaign, under
epsilon 2; a device below the middle could send (1, 0) and one above it (0, 1) (at the bounds
with probability 0.15). The pair of reports told the collector which half the value lies in,
with no epsilon bound at all, while the ledger charged two releases, 1 + 2.

The real collector cannot recreate a campaign under the URL a device knows, so the collector
here is a small fake HTTP server that serves whichever config the test names.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from client_sdk import PrivacyBudget, TelemetryClient
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving

BOUNDS = (0.0, 64.0)
MIDDLE = 32.0  # grid point 32 of 64: every epsilon's threshold there is one half
CONFIGS = {
    "eps1": create("alpha_point", epsilon=1.0, bounds=BOUNDS).config(),
    "eps2": create("alpha_point", epsilon=2.0, bounds=BOUNDS).config(),
}


class Serving(JsonHandler):
    """Serves campaign ``q`` with ``configs[current]`` under its own digest; takes every
    upload."""

    configs: ClassVar[dict[str, dict[str, Any]]] = CONFIGS
    current: ClassVar[str] = "eps1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(200, campaign_config("q", type(self).configs[type(self).current]))

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self._answer(200, {"accepted": 0, "duplicate": 0, "rejected": 0, "errors": []})


@contextmanager
def switching(configs: dict[str, dict[str, Any]]) -> Iterator[tuple[str, type[Serving]]]:
    """A collector serving campaign ``q`` with one of ``configs`` (the first to begin with);
    the test switches by setting ``current`` on the handler it yields."""
    handler = type("Collector", (Serving,), {"configs": configs, "current": next(iter(configs))})
    with serving(handler) as url:
        yield url, handler


@pytest.fixture
def collector() -> Iterator[tuple[str, type[Serving]]]:
    with switching(CONFIGS) as served:
        yield served


def fresh_devices_report_twice(
    url: str, handler: type[Serving], state: Path, value: float, devices: int
) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]], Any]:
    """Per fresh device (consent off and on deletes the secret: a new device), one report of
    ``value`` under each of the handler's configs in turn, as after a 409: the pairs of
    payloads, and the device's charges and spending on ``q``."""
    options: dict[str, Any] = {
        "reports_per_window": None,
        "budget": PrivacyBudget.unlimited(),
        "flush_interval": float("inf"),
        "close_timeout": 0,
    }
    pairs = []
    with TelemetryClient(url, ingest_token="t" * 20, state_dir=state, **options) as device:
        for _ in range(devices):
            device.set_upload_enabled(False)
            device.set_upload_enabled(True)
            payloads = []
            for version in handler.configs:
                handler.current = version
                device.configs.refresh("q", conditional=False)  # what a 409 does
                payloads.append(device.report("q", value).payload)  # type: ignore[union-attr]
            pairs.append(tuple(payloads))
        return pairs, device.privacy_charges("q"), device.privacy_spent("q")


def test_a_recreated_campaign_with_another_epsilon_gets_independent_answers(
    collector: tuple[str, type[Serving]], tmp_path: Path
) -> None:
    url, handler = collector
    pairs, charges, _ = fresh_devices_report_twice(url, handler, tmp_path, MIDDLE, 100)
    # Independent bits of probability one half each disagree half the time; before, never.
    disagree = sum(a != b for a, b in pairs)
    assert 20 <= disagree <= 80, pairs
    # Each config is its own release, charged as such.
    assert sorted({round(c["permanent_epsilon"], 9) for c in charges}) == [1.0, 2.0]
