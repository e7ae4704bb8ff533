"""A distribution campaign's per-window trend uses the same estimator as its answer.

The answer is EMS followed by the plain EM steps the reports support
(``aggregator.numeric.choose_refinement``); the trend's windows used to stop after EMS, whose
kernel smooths a spike away. A range of one window then answered two different means: on
devices that all hold 0 (an integer-valued campaign in [0, 10]) the answer's mean was 0.23 and
the window's 1.68, its interval excluding both the answer and the truth. Through a real
``ldp serve`` and the SDK.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from client_sdk import TelemetryClient
from tests.support.server import CollectorProcess, running_collector

N = 3000


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("trend")) as server:
        yield server


def answer_for(
    srv: CollectorProcess, tmp_path: Path, cid: str, body: dict[str, Any], values: np.ndarray
) -> dict[str, Any]:
    r = srv.post_campaign({"id": cid, "epsilon": 1.0, "mechanism": "square_wave", **body})
    assert r.status_code == 201, r.text
    with TelemetryClient(srv.url, ingest_token=srv.ingest_token, state_dir=tmp_path) as client:
        client.prefetch(cid)
        assert client.report_many(cid, values, simulate_devices=True, rng=11) == values.size
        assert client.flush(60)
    r = requests.get(
        f"{srv.url}/v1/campaigns/{cid}/estimates", headers=srv.headers("analyst"), timeout=120
    )
    assert r.status_code == 200, r.text
    got: dict[str, Any] = r.json()
    assert got["n"] == values.size and len(got["trend"]) == 1
    return got


@pytest.mark.parametrize(
    ("cid", "body", "values"),
    [
        ("spike-int", {"bounds": [0, 10], "params": {"integer": True}}, np.zeros(N)),
        ("spike-grid", {"bounds": [0, 100]}, np.full(N, 40.0)),
    ],
)
def test_a_one_window_trend_equals_the_answer(
    srv: CollectorProcess, tmp_path: Path, cid: str, body: dict[str, Any], values: np.ndarray
) -> None:
    got = answer_for(srv, tmp_path, cid, body, values)
    (window,) = got["trend"]
    median = next(q for q in got["quantiles"] if q["q"] == 0.5)
    se = window["mean_std_error"]
    assert se is not None and se > 0
    # The same reports and estimator: equal up to EMS's stopping tolerance, a small fraction of
    # the mean's own standard error (the two differed by 20 of them).
    assert abs(window["mean"] - got["mean"]) <= 0.1 * se, (window, got["mean"])
    assert window["mean_low"] <= got["mean"] <= window["mean_high"]
    assert window["median"] == pytest.approx(median["value"], abs=(median["high"] - median["low"]))
