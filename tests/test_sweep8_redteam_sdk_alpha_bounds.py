"""An ``alpha_point`` campaign served again with other bounds gets independent memoised answers.

A device derives its α-point offset and the word behind each grid point's memoised bit from its
secret and the config's channel (``AlphaPointMean.release_scope``). The channel held the
segments and the thresholds (which the epsilon sets) but not the bounds, which decide the grid
point a value rounds to. A collector that served the campaign again with other bounds, the same
epsilon and segments, had the device replay the same offset and words: two reports of a value
that rounds to the same grid point in both configs (one at the lower bound, say) agreed for
certain, any other value disagreed half the time. Measured at epsilon 0.1, bounds [0, 100] then
[0, 200]: the two bits never differed for the value 0 and differed for 50% of devices for 50,
a test of the value with no epsilon bound at all, while the ledger charged 0.1 + 0.1. Now other
bounds are another release: independent answers, charged as such.

The real collector cannot serve a campaign again with other bounds under the URL a device
knows, so the collector here is a small fake HTTP server serving whichever config the test
names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from client_sdk import PrivacyBudget, TelemetryClient
from client_sdk.mechanisms import create
from tests.support.fake_http import JsonHandler, campaign_config, serving

EPSILON = 0.1
CONFIGS = {
    "narrow": create("alpha_point", epsilon=EPSILON, bounds=(0.0, 100.0)).config(),
    "wide": create("alpha_point", epsilon=EPSILON, bounds=(0.0, 200.0)).config(),
}
DEVICES = 100


class Serving(JsonHandler):
    """Serves campaign ``q`` with ``CONFIGS[current]`` under its own digest; takes every
    upload."""

    current: ClassVar[str] = "narrow"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(200, campaign_config("q", CONFIGS[type(self).current]))

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self._answer(200, {"accepted": 0, "duplicate": 0, "rejected": 0, "errors": []})


@pytest.fixture
def collector() -> Iterator[tuple[str, type[Serving]]]:
    handler = type("Collector", (Serving,), {"current": "narrow"})
    with serving(handler) as url:
        yield url, handler


def test_other_bounds_get_independent_answers_and_a_release_of_their_own(
    collector: tuple[str, type[Serving]], tmp_path: Path
) -> None:
    url, handler = collector
    options: dict[str, Any] = {
        "reports_per_window": None,
        "budget": PrivacyBudget.unlimited(),
        "flush_interval": float("inf"),
        "close_timeout": 0,
    }
    differ = 0
    with TelemetryClient(url, ingest_token="t" * 20, state_dir=tmp_path, **options) as device:
        for _ in range(DEVICES):
            # A fresh device secret each round (consent off and on deletes it): a new device.
            device.set_upload_enabled(False)
            device.set_upload_enabled(True)
            bits = []
            for version in ("narrow", "wide"):
                handler.current = version
                device.configs.refresh("q", conditional=False)  # what a 409 does
                bits.append(device.report("q", 0.0).payload)  # type: ignore[union-attr]
            differ += bits[0] != bits[1]
        charges = device.privacy_charges("q")
        spent = device.privacy_spent("q")
    # Independent bits of probability about one half disagree about half the time (below 20
    # of 100 with probability about 1e-9); with shared answers, never.
    assert differ >= 20, f"the two reports differed for {differ} of {DEVICES} devices"
    assert all(c["permanent_epsilon"] == pytest.approx(EPSILON) for c in charges)
    # Every report charged its epsilon.
    assert spent.reports == 2 * DEVICES
    assert spent.sequential == pytest.approx(2 * DEVICES * EPSILON)
