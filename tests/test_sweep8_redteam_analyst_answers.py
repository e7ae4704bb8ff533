"""Red team, analyst side: real answers of every kind of campaign at their edges, over HTTP.

A real ``ldp serve`` holds one campaign of each kind (categorical with the pattern MLE,
numeric mean, alpha-point counter, Square Wave distribution plain and integer-valued,
multi-attribute, open-domain), each with windows of one to three reports whose true values all
lie outside the bounds (every one clipped), at the extreme epsilons a campaign may declare.
Reports are perturbed by ``client_sdk``'s mechanisms and uploaded over HTTP. Every answer is
checked with a real JSON-schema validator (``jsonschema_rs``) against the schema the same
server publishes in ``/openapi.json`` for ``GET /v1/campaigns/{id}/estimates``, and every
interval must hold its estimate and, for a distribution, lie in the bounds (every value is
clipped to them, so its mean and quantiles are too).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import numpy as np
import pytest
import requests

from client_sdk.mechanisms import from_config
from tests.support.openapi_schema import as_json_schema
from tests.support.server import CollectorProcess, running_collector

ESTIMATES = "/v1/campaigns/{campaign_id}/estimates"
OUTSIDE = (-50.0, 1e9)  # both ends outside every campaign's bounds: each value is clipped
CAMPAIGNS: dict[str, dict[str, Any]] = {
    "cat-ss": {"domain": ["a", "b", "c"], "mechanism": "ss", "epsilon": 0.01},
    "cat-oue": {"domain": ["a", "b", "c"], "mechanism": "oue", "epsilon": 16},
    "mean-hybrid": {"bounds": [0, 10], "mechanism": "hybrid", "epsilon": 0.01},
    "mean-alpha": {"bounds": [0, 10], "mechanism": "alpha_point", "epsilon": 16},
    "dist-sw": {"bounds": [0, 10], "mechanism": "square_wave", "epsilon": 1},
    "dist-sw-int": {
        "bounds": [0, 10],
        "mechanism": "square_wave",
        "epsilon": 1,
        "params": {"integer": True},
    },
    "multi": {
        "attributes": {"occ": ["x", "y"], "sex": ["F", "M"], "age": {"bounds": [17, 90]}},
        "mechanism": "spl",
        "epsilon": 16,
        "pairs": [["occ", "sex"]],
    },
    "open-pem": {
        "max_length": 4,
        "mechanism": "pem",
        "epsilon": 16,
        "params": {"width": 64, "depth": 4},
    },
}
#: Reports per window, oldest first: windows of one report beside a larger one.
PER_WINDOW = (1, 3, 2)
QUERIES = ("", "?level=1e-300", "?level=0.9999999999999999")


def _values(spec: dict[str, Any], n: int, gen: np.random.Generator) -> Any:
    if "domain" in spec:
        return gen.integers(0, len(spec["domain"]), n)
    if "bounds" in spec:
        return gen.choice(OUTSIDE, n)
    if "attributes" in spec:
        return {
            "occ": gen.integers(0, 2, n),
            "sex": gen.integers(0, 2, n),
            "age": gen.choice(OUTSIDE, n),
        }
    return [str(v) for v in gen.choice(["ab", "é"], n)]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CollectorProcess, Any]]:
    """The collector with every campaign of ``CAMPAIGNS`` and its windows, and a validator of
    the estimate answer's served schema."""
    tmp: Path = tmp_path_factory.mktemp("sweep8-answers")
    with running_collector(tmp, env={"LDP_RATE_LIMIT": "0"}) as srv:
        document = requests.get(srv.url + "/openapi.json", timeout=30).json()
        schema = document["paths"][ESTIMATES]["get"]["responses"]["200"]["content"][
            "application/json"
        ]["schema"]
        validator = jsonschema_rs.validator_for(
            {
                **as_json_schema(schema),
                "components": {"schemas": as_json_schema(document["components"]["schemas"])},
            }
        )
        gen = np.random.default_rng(20261128)
        today = dt.datetime.now(dt.UTC).date()
        for cid, spec in CAMPAIGNS.items():
            created = srv.post_campaign({"id": cid, **spec})
            assert created.status_code == 201, created.text
            campaign = created.json()
            mech: Any = from_config(campaign["mechanism"])
            for back, n in zip((2, 1, 0), PER_WINDOW, strict=True):
                payloads = mech.encode_many(mech.perturb_many(_values(spec, n, gen), rng=gen))
                srv.upload(campaign, payloads, (today - dt.timedelta(days=back)).isoformat())
        yield srv, validator


def _answer(srv: CollectorProcess, validator: Any, cid: str, query: str) -> dict[str, Any]:
    r = requests.get(
        f"{srv.url}/v1/campaigns/{cid}/estimates{query}", headers=srv.headers("analyst"), timeout=60
    )
    assert r.status_code == 200, r.text[:300]
    assert "NaN" not in r.text and "Infinity" not in r.text
    body: dict[str, Any] = r.json()
    errors = [f"{e.instance_path}: {e.message[:160]}" for e in validator.iter_errors(body)]
    assert errors == [], f"{cid}{query}: {errors[:3]}"
    return body


@pytest.mark.parametrize("cid", list(CAMPAIGNS))
def test_one_report_windows_of_every_kind_fit_the_served_schema(
    live: tuple[CollectorProcess, Any], cid: str
) -> None:
    srv, validator = live
    today = dt.datetime.now(dt.UTC).date()
    oldest = (today - dt.timedelta(days=2)).isoformat()
    queries = [*QUERIES, f"?from={oldest}&to={oldest}"]  # a range of one window, one report
    if cid == "cat-ss":
        queries.append("?postprocess=pattern")
    if cid == "open-pem":
        queries.append("?top=1&candidate=ab&candidate=zz")
    for query in queries:
        body = _answer(srv, validator, cid, query)
        assert body["n"] == (1 if "from" in query else sum(PER_WINDOW))


@pytest.mark.parametrize("cid", ["dist-sw", "dist-sw-int"])
@pytest.mark.parametrize("query", QUERIES)
def test_distribution_trend_intervals_stay_in_the_bounds_and_hold_their_estimates(
    live: tuple[CollectorProcess, Any], cid: str, query: str
) -> None:
    """Each window's mean and median interval scales the range's by sqrt(n / n_window): a
    window of one report out of six got a median interval of 7 to 24.15 for values clipped
    to [0, 10] (and a mean interval of -13.83 to 27.66), where the range's own intervals are
    cut to the bounds."""
    srv, validator = live
    body = _answer(srv, validator, cid, query)
    lo, hi = body["bounds"]
    assert lo <= body["mean_ci"]["low"] <= body["mean"] <= body["mean_ci"]["high"] <= hi
    for q in body["quantiles"]:
        assert lo <= q["low"] <= q["value"] <= q["high"] <= hi, q
    assert len(body["trend"]) == len(PER_WINDOW)
    for w in body["trend"]:
        assert all(math.isfinite(w[k]) for k in ("mean", "median", "mean_low", "median_high"))
        assert lo <= w["mean_low"] <= w["mean"] <= w["mean_high"] <= hi, w
        assert lo <= w["median_low"] <= w["median"] <= w["median_high"] <= hi, w
