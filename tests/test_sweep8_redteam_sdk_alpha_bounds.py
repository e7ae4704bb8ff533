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

import pytest

from client_sdk.mechanisms import create
from tests.test_sweep3_device_memo import Serving, fresh_devices_report_twice, switching

EPSILON = 0.1
CONFIGS = {
    "narrow": create("alpha_point", epsilon=EPSILON, bounds=(0.0, 100.0)).config(),
    "wide": create("alpha_point", epsilon=EPSILON, bounds=(0.0, 200.0)).config(),
}
DEVICES = 100


@pytest.fixture
def collector() -> Iterator[tuple[str, type[Serving]]]:
    with switching(CONFIGS) as served:
        yield served


def test_other_bounds_get_independent_answers_and_a_release_of_their_own(
    collector: tuple[str, type[Serving]], tmp_path: Path
) -> None:
    url, handler = collector
    pairs, charges, spent = fresh_devices_report_twice(url, handler, tmp_path, 0.0, DEVICES)
    differ = sum(a != b for a, b in pairs)
    # Independent bits of probability about one half disagree about half the time (below 20
    # of 100 with probability about 1e-9); with shared answers, never.
    assert differ >= 20, f"the two reports differed for {differ} of {DEVICES} devices"
    assert all(c["permanent_epsilon"] == pytest.approx(EPSILON) for c in charges)
    # Every report charged its epsilon.
    assert spent.reports == 2 * DEVICES
    assert spent.sequential == pytest.approx(2 * DEVICES * EPSILON)
