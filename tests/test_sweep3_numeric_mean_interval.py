"""A distribution campaign's ``mean_ci`` covers the mean where EMS's bootstrap cannot see it.

The bootstrap of EMS carries the reports' randomness, not EMS's smoothing bias, and has no
spread at all for one report or an epsilon near 0: before, a single device's answer had a
zero-width mean interval, and devices all at a bound got an interval beside the truth (EMS
can only move mass inward; 1 of 10 seeds covered 0 at epsilon 0.1). The interval now also
holds the unbiased linear estimate's (``aggregator.numeric.square_wave_linear_mean``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from scipy import stats

from aggregator.numeric import square_wave_linear_mean
from aggregator.results import DistributionEstimates
from aggregator.service import EstimateQuery, estimate_range
from client_sdk import TelemetryClient
from client_sdk.mechanisms import create
from client_sdk.mechanisms.numeric import SquareWave
from tests.support.server import CollectorProcess, running_collector

DAY = "2026-11-27"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("meanci")) as server:
        yield server


def test_one_device_gets_an_interval_not_a_point(srv: CollectorProcess, tmp_path: Path) -> None:
    body = {"id": "one", "bounds": [0, 10], "mechanism": "square_wave", "epsilon": 1.0}
    assert srv.post_campaign({**body, "params": {"integer": True}}).status_code == 201
    with TelemetryClient(srv.url, ingest_token=srv.ingest_token, state_dir=tmp_path) as client:
        client.prefetch("one")
        assert client.report_many("one", np.array([10.0]), simulate_devices=True, rng=5) == 1
        assert client.flush(30)
    r = requests.get(
        f"{srv.url}/v1/campaigns/one/estimates", headers=srv.headers("analyst"), timeout=60
    )
    assert r.status_code == 200, r.text
    got = r.json()
    ci = got["mean_ci"]
    # One report at epsilon 1 says little: the unbiased estimate's worst-case error exceeds the
    # bounds' span, so the interval is the whole range (it was a point at EMS's mean).
    assert (ci["low"], ci["high"]) == (0.0, 10.0), ci
    assert got["trend"][0]["mean_std_error"] > 1.0


@pytest.mark.parametrize(("epsilon", "value"), [(0.1, 0.0), (0.5, 100.0)])
def test_devices_at_a_bound_are_covered_at_the_nominal_level(epsilon: float, value: float) -> None:
    mech = create("square_wave", epsilon=epsilon, bounds=(0, 100))
    runs, covered = 20, 0
    for seed in range(runs):
        gen = np.random.default_rng(seed)
        tally = mech.tally(mech.perturb_many(np.full(3000, value), rng=gen))
        answer = estimate_range(mech, {DAY: tally}, EstimateQuery(trend=False))
        assert isinstance(answer, DistributionEstimates)
        covered += answer.mean_ci.low <= value <= answer.mean_ci.high
    # The interval holds the unbiased one, whose coverage is 0.95: 15 or fewer of 20 has
    # probability 0.016 at 0.95 (before: 1 of 10 at epsilon 0.1).
    assert stats.binom.cdf(15, runs, 0.95) < 0.02
    assert covered > 15, covered


def test_the_linear_mean_is_unbiased_with_its_stated_error() -> None:
    mech = create("square_wave", epsilon=1.0, bounds=(17, 90), integer=True)
    assert isinstance(mech, SquareWave)
    truth_gen = np.random.default_rng(0)
    values = np.round(np.clip(truth_gen.normal(40, 12, 2000), 17, 90))
    zs = []
    for seed in range(200):
        tally = mech.tally(mech.perturb_many(values, rng=np.random.default_rng(100 + seed)))
        est = square_wave_linear_mean(mech, tally)
        zs.append((est.mean - values.mean()) / est.std_error)
    z = np.asarray(zs)
    # Mean of 200 standard normals: sd 0.071, so |mean| < 0.32 fails with probability 6e-6;
    # the stated error is conservative for a fixed population (sd of z at most about 1).
    assert abs(z.mean()) < 0.32, z.mean()
    assert 0.6 < z.std() < 1.2, z.std()
