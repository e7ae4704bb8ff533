"""The dashboard draws numeric campaigns whose bounds are narrower than 1e-12.

The collector takes any bounds whose grid step is a float, e.g. ``(1, 1 + 1e-13)`` or
``(0, 1e-300)``; the charts' ticks were rounded to 12 decimals, collapsed to one repeated
value, and the campaign page answered 500 (a division by zero). Through a real ``ldp serve``,
the SDK and the dashboard's sign-in.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests

from client_sdk import TelemetryClient
from collector.dashboard_numeric import value_ticks
from tests.support.server import CollectorProcess, running_collector

_ids = itertools.count()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("narrow")) as server:
        yield server


@pytest.mark.parametrize(
    ("bounds", "mechanism"),
    [
        ((1.0, 1.0 + 1e-13), "square_wave"),
        ((1.0, 1.0 + 1e-13), "hybrid"),
        ((0.0, 1e-300), "square_wave"),
    ],
)
def test_the_campaign_page_draws_narrow_bounds(
    srv: CollectorProcess, tmp_path: Path, bounds: tuple[float, float], mechanism: str
) -> None:
    cid = f"narrow{next(_ids)}"
    body = {"id": cid, "bounds": list(bounds), "mechanism": mechanism, "epsilon": 1.0}
    assert srv.post_campaign(body).status_code == 201
    values = np.random.default_rng(1).uniform(*bounds, 400)
    with TelemetryClient(srv.url, ingest_token=srv.ingest_token, state_dir=tmp_path) as client:
        client.prefetch(cid)
        assert client.report_many(cid, values, simulate_devices=True, rng=3) == 400
        assert client.flush(30)
    session = requests.Session()
    login = session.post(
        f"{srv.url}/dashboard/login",
        data={"token": srv.analyst_token},
        allow_redirects=False,
        timeout=30,
    )
    assert login.status_code == 303
    page = session.get(f"{srv.url}/dashboard/campaigns/{cid}", timeout=120)
    assert page.status_code == 200, page.text[:300]
    assert "400 reports" in page.text or "400" in page.text
    assert not re.search(r"\bNaN\b|\binf\b", page.text)


@pytest.mark.parametrize(
    ("low", "high"), [(1.0, 1.0 + 1e-13), (0.0, 1e-300), (17.0, 90.0), (-1e300, 1e300)]
)
def test_ticks_cover_the_bounds_and_increase(low: float, high: float) -> None:
    ticks = value_ticks(low, high)
    assert len(ticks) >= 2 and all(a < b for a, b in zip(ticks[:-1], ticks[1:], strict=True))
    assert ticks[0] <= low and ticks[-1] >= high
