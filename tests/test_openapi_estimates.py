"""A live ``ldp serve`` answers estimates that fit the schema it publishes, field for field.

The ``Estimates`` schema in /openapi.json is generated from the estimate service's dataclasses
(``aggregator.results``); these tests take real answers from a real collector subprocess (real
perturbed reports over two days) and check that they validate and that every field they hold
is declared (the generated objects also forbid undeclared fields).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import requests

from tests.support.openapi_schema import undeclared_fields, validate
from tests.support.reports import batch, campaign_body, reports
from tests.support.server import running_collector


@pytest.mark.parametrize("mechanism", ["oue", "grr"])
def test_live_estimates_validate_against_the_generated_schema(
    tmp_path: Path, mechanism: str
) -> None:
    today = dt.datetime.now(dt.UTC).date()
    days = [(today - dt.timedelta(days=1)).isoformat(), today.isoformat()]
    with running_collector(tmp_path) as srv:
        r = requests.post(
            srv.url + "/v1/campaigns",
            json=campaign_body("live", mechanism, min_reports=50),
            headers=srv.headers("admin"),
            timeout=30,
        )
        assert r.status_code == 201, r.text
        campaign = r.json()
        for seed, day in enumerate(days):
            items = reports(campaign, 400, seed=seed, day=day)
            up = requests.post(
                f"{srv.url}/v1/campaigns/live/reports",
                json=batch(campaign, items),
                headers=srv.headers("ingest"),
                timeout=30,
            )
            assert up.status_code == 200 and up.json()["accepted"] == 400, up.text
        doc = requests.get(srv.url + "/openapi.json", timeout=10).json()
        schema = doc["components"]["schemas"]["Estimates"]
        for params in ({}, {"from": days[1], "level": "0.9", "postprocess": "norm-sub"}):
            body = srv.estimates("live", **params)
            assert body["kind"] == "frequency" and body["n"] == (800 if not params else 400)
            validate(doc, "Estimates", body)
            assert undeclared_fields(doc, schema, body) == []
            # The fields issue 15 found missing from the hand-written schema are declared now.
            declared = doc["components"]["schemas"]["FrequencyEstimates"]["properties"]
            for name in ("top_k", "trend", "params", "min_reports"):
                assert name in declared and name in body
            row = doc["components"]["schemas"]["ValueEstimate"]["properties"]
            for name in ("raw_count", "raw_frequency", "significant"):
                assert name in row and name in body["values"][0]
        # Errors fit the generated Error schema too (the one envelope).
        for path in ("/v1/campaigns/nope/estimates", "/v1/campaigns/live/estimates?to=2000-01-01"):
            refused = requests.get(srv.url + path, headers=srv.headers("analyst"), timeout=30)
            assert refused.status_code in (404, 422), refused.text
            validate(doc, "Error", refused.json())
        # A wrong field type would be caught: the schema is not vacuous.
        broken = {**body, "n": "many"}
        with pytest.raises(Exception, match="many"):
            validate(doc, "Estimates", broken)
        assert undeclared_fields(doc, schema, {**body, "extra": 1}) == ["$.extra"]
