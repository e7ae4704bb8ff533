"""Numeric campaigns whose bounds are near the float range, e.g. ``(-1e300, 1e300)``.

The collector accepts such bounds (a grid step is representable), so their estimates must be
finite numbers: a variance in units of x (``1e600``) overflows although the standard error
(``1e298``) does not. Through a real ``ldp serve`` and the SDK's ``report_many``; the mean's
tolerance is its own standard error.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from aggregator.service import smooth_one
from client_sdk import TelemetryClient
from tests.support.server import CollectorProcess, running_collector

BOUNDS = [-1e300, 1e300]
N = 2000
#: Two-sided normal tail at 4.5 standard errors: 7e-6, so a correct estimator passes.
Z = 4.5
_ids = itertools.count()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("wide")) as server:
        yield server


def values() -> np.ndarray:
    return np.random.default_rng(3).normal(2e299, 3e299, N)


def campaign_with_reports(srv: CollectorProcess, tmp_path: Path, mechanism: str) -> str:
    cid = f"wide{next(_ids)}-{mechanism.replace('_', '-')}"
    body = {"id": cid, "bounds": BOUNDS, "mechanism": mechanism, "epsilon": 2.0}
    r = srv.post_campaign(body)
    assert r.status_code == 201, r.text
    with TelemetryClient(srv.url, ingest_token=srv.ingest_token, state_dir=tmp_path) as client:
        client.prefetch(cid)
        sent = client.report_many(cid, values(), simulate_devices=True, rng=7)
        assert sent == N and client.flush(60)
    return cid


def answer(srv: CollectorProcess, cid: str) -> dict[str, Any]:
    r = requests.get(
        f"{srv.url}/v1/campaigns/{cid}/estimates", headers=srv.headers("analyst"), timeout=120
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    assert body["n"] == N
    return body


def finite(*xs: object) -> bool:
    return all(isinstance(x, float) and math.isfinite(x) for x in xs)


def test_a_mean_over_bounds_near_the_float_range_is_finite_and_right(
    srv: CollectorProcess, tmp_path: Path
) -> None:
    got = answer(srv, campaign_with_reports(srv, tmp_path, "hybrid"))
    truth = float(np.clip(values(), BOUNDS[0], BOUNDS[1]).mean())
    assert finite(got["mean"], got["std_error"], got["worst_case_std_error"]), got
    assert got["std_error"] > 0 and got["worst_case_std_error"] > 0
    # hybrid's per-report variance is the same for every input: the two errors agree closely.
    assert got["std_error"] == pytest.approx(got["worst_case_std_error"], rel=0.2)
    assert abs(got["mean"] - truth) <= Z * got["std_error"], (got["mean"], truth)
    ci = got["ci"]
    assert finite(ci["low"], ci["high"]) and ci["low"] < got["mean"] < ci["high"]
    (window,) = got["trend"]
    assert finite(window["smoothed_mean"], window["smoothed_std_error"]), window
    assert abs(window["smoothed_mean"] - got["mean"]) <= window["smoothed_std_error"]


def test_a_distribution_over_bounds_near_the_float_range_has_a_mean_interval(
    srv: CollectorProcess, tmp_path: Path
) -> None:
    got = answer(srv, campaign_with_reports(srv, tmp_path, "square_wave"))
    ci = got["mean_ci"]
    assert ci is not None and finite(ci["low"], ci["high"]), ci
    assert ci["low"] < got["mean"] < ci["high"]
    (window,) = got["trend"]
    assert finite(window["mean_std_error"], window["smoothed_std_error"]), window


def test_smoothing_a_series_near_the_float_range_scales_like_a_small_one() -> None:
    small = smooth_one([0.6, 0.7, None, 0.65], [0.37, 0.37, None, 0.4])
    huge = smooth_one([6e298, 7e298, None, 6.5e298], [3.7e298, 3.7e298, None, 4e298])
    for s, h in zip(small, huge, strict=True):
        for a, b in zip(s, h, strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                assert b == pytest.approx(a * 1e299, rel=1e-9)
