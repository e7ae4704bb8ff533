"""Property tests: garbage at every collector endpoint, for every kind of campaign.

Campaign bodies of every kind (categorical, numeric mean and distribution, alpha-point,
several attributes, open-domain) with any field replaced by arbitrary JSON or left out are
answered 201 or a 4xx in the one error shape, never a 5xx; garbage reports are rejected one
by one (the valid ones in the batch still go in, the counts add up); arbitrary estimate queries
are answered 200 or a 4xx. ``tests/test_collector_ingest.py`` does the same for the reports of
the categorical oracles.
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client_sdk.mechanisms import from_config
from collector import create_app
from tests.support.garbage import bearer, mutated
from tests.support.garbage import json_values as garbage_values
from tests.support.reports import today
from tests.support.server import TOKENS

ADMIN, ANALYST, INGEST = bearer("admin"), bearer("analyst"), bearer("ingest")
_ids = itertools.count()

#: One valid body per kind of campaign; the properties start from these.
BODIES: dict[str, dict[str, Any]] = {
    "categorical": {"id": "cat", "domain": ["a", "b", "c"], "mechanism": "oue", "epsilon": 1.0},
    "memoised": {"id": "rap", "domain": ["a", "b", "c"], "mechanism": "rappor", "epsilon": 1.0},
    "mean": {"id": "mean", "bounds": [0, 100], "mechanism": "piecewise", "epsilon": 1.0},
    "distribution": {
        "id": "dist",
        "bounds": [0, 100],
        "mechanism": "square_wave",
        "epsilon": 1.0,
        "params": {"integer": True},
    },
    "alpha-point": {"id": "alpha", "bounds": [0, 100], "mechanism": "alpha_point", "epsilon": 1.0},
    "multi": {
        "id": "multi",
        "epsilon": 2.0,
        "mechanism": "auto",
        "attributes": {"o": ["x", "y", "z"], "s": ["F", "M"], "age": {"bounds": [17, 90]}},
        "pairs": [["o", "s"], ["o", "age"]],
    },
    "open-domain": {"id": "open", "epsilon": 4.0, "mechanism": "cms", "max_length": 8},
}
FIELDS = sorted({key for body in BODIES.values() for key in body} | {"expected", "window"})

json_values = garbage_values([2**63, -(2**63) - 1, 10**400, 5e-324, 1e308])


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    app = create_app({"database": str(tmp_path_factory.mktemp("garbage") / "g.db"), **TOKENS})
    client = app.test_client()
    for kind, body in BODIES.items():
        r = client.post("/v1/campaigns", json=body, headers=ADMIN)
        assert r.status_code == 201, r.json
        # Real reports first, so that the estimate properties reach the estimators.
        campaign, payloads = valid_payloads(client, kind, 300)
        items = [{"id": secrets.token_hex(16), "day": today(), "payload": p} for p in payloads]
        r = client.post(
            f"/v1/campaigns/{campaign['id']}/reports",
            json={"digest": campaign["digest"], "reports": items},
            headers=INGEST,
        )
        assert r.json["accepted"] == len(items), r.json
    yield app
    app.extensions["ldp_storage"].close()


def assert_error_shape(response: Any) -> None:
    assert response.status_code < 500, response.get_data(as_text=True)
    if response.status_code >= 400:
        error = response.json["error"]
        assert error["status"] == response.status_code and error["code"] and error["message"]


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_garbage_campaign_bodies_get_a_4xx(app: Flask, kind: str) -> None:
    client = app.test_client()

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(mutated(BODIES[kind], json_values), st.sampled_from(FIELDS), json_values)
    def check(body: Any, field: str, value: Any) -> None:
        if isinstance(body, dict):
            body = {**body, field: value} if field != "id" else body
            body["id"] = f"g{next(_ids)}"
        # json.dumps writes NaN and Infinity as bare words: the collector must refuse those too.
        r = client.post(
            "/v1/campaigns", data=json.dumps(body), content_type="application/json", headers=ADMIN
        )
        assert_error_shape(r)
        assert r.status_code in (201, 400), r.json

    check()


def test_a_mechanism_that_is_not_a_name_is_a_400(app: Flask) -> None:
    """Found by the property above: an open-domain body whose ``mechanism`` was a list or an
    object raised TypeError (unhashable) in the collector, a 500."""
    client = app.test_client()
    for kind, body in BODIES.items():
        for name in ([0, 1], {}, {"a": 1}, 3, True):
            r = client.post(
                "/v1/campaigns",
                json={**body, "id": f"g{next(_ids)}", "mechanism": name},
                headers=ADMIN,
            )
            assert r.status_code == 400, (kind, name, r.json)
            message = r.json["error"]["message"]
            assert "'mechanism' must be a mechanism name (a string)" in message, (kind, message)


def valid_payloads(client: FlaskClient, kind: str, n: int) -> tuple[dict[str, Any], list[Any]]:
    """The campaign resource and ``n`` real perturbed payloads of its mechanism."""
    campaign = client.get(f"/v1/campaigns/{BODIES[kind]['id']}", headers=ANALYST).json
    mech = from_config(campaign["mechanism"])
    values: Any
    if kind == "multi":
        values = {"o": [v % 3 for v in range(n)], "s": [v % 2 for v in range(n)],
                  "age": [17.0 + v % 74 for v in range(n)]}  # fmt: skip
    elif kind == "open-domain":
        words = ["hello", "world", "ldp"]
        return campaign, [mech.perturb(words[i % 3]) for i in range(n)]  # the wire form
    elif kind in ("mean", "distribution", "alpha-point"):
        values = [float(v % 101) for v in range(n)]
    else:
        values = [v % 3 for v in range(n)]
    return campaign, list(mech.encode_many(mech.perturb_many(values, rng=7)))


report_like = st.fixed_dictionaries(
    {
        "id": st.one_of(st.text(max_size=70), st.integers()),
        "day": st.one_of(st.just(today()), st.text(max_size=12), st.dates().map(str)),
        "payload": json_values,
    }
)


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_garbage_reports_never_break_a_batch_of_any_kind(app: Flask, kind: str) -> None:
    client = app.test_client()
    campaign, payloads = valid_payloads(client, kind, 3)

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.lists(
            st.one_of(
                report_like,
                json_values,
                mutated({"id": "x" * 32, "day": today(), "payload": payloads[0]}, json_values),
            ),
            max_size=6,
        )
    )
    def check(garbage: list[Any]) -> None:
        valid = [{"id": secrets.token_hex(16), "day": today(), "payload": p} for p in payloads]
        for item in garbage:
            if isinstance(item, dict) and item.get("id") == "x" * 32:
                item["id"] = secrets.token_hex(16)
        items = valid + garbage
        r = client.post(
            f"/v1/campaigns/{campaign['id']}/reports",
            data=json.dumps({"digest": campaign["digest"], "reports": items}),
            content_type="application/json",
            headers=INGEST,
        )
        assert r.status_code == 200, r.json
        body = r.json
        assert body["accepted"] + body["duplicate"] + body["rejected"] == len(items)
        assert body["accepted"] >= len(valid)

    check()


QUERY_KEYS = ["from", "to", "level", "postprocess", "top", "top_k", "candidate", "candidates",
              "min_reports", "quantiles", "bins", "bootstrap", "trend", "pair",
              "attribute"]  # fmt: skip
#: Levels within 2**-53 of 0 or 1 made 1 - level (or 0.5 + level/2) round to 0 or 1, whose
#: normal quantile raised StatisticsError: a 500 on every estimate path.
QUERY_VALUES = ["", "0", "-1", "1", "0.5", "1e400", "nan", "inf", "2026-11-01", "2026-02-30",
                "abc", "mle", "base-cut", "pattern", "10001", "99999999999999999999",
                "0.5,0.9", "hello", "é", "0.9999999999999999", "1e-17", "1e-320",
                "5e-324"]  # fmt: skip


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_arbitrary_estimate_queries_get_an_answer_or_a_4xx(app: Flask, kind: str) -> None:
    client = app.test_client()
    cid = BODIES[kind]["id"]

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.lists(st.tuples(st.sampled_from(QUERY_KEYS), st.sampled_from(QUERY_VALUES)), max_size=4)
    )
    def check(query: list[tuple[str, str]]) -> None:
        r = client.get(f"/v1/campaigns/{cid}/estimates", query_string=query, headers=ANALYST)
        assert_error_shape(r)

    check()


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_arbitrary_dashboard_queries_get_a_page(app: Flask, kind: str) -> None:
    client = app.test_client()
    signed_in = client.post("/dashboard/login", data={"token": TOKENS["analyst_token"]})
    assert signed_in.status_code == 303
    cid = BODIES[kind]["id"]

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.lists(st.tuples(st.sampled_from(QUERY_KEYS), st.sampled_from(QUERY_VALUES)), max_size=4)
    )
    def check(query: list[tuple[str, str]]) -> None:
        r = client.get(f"/dashboard/campaigns/{cid}", query_string=query)
        # The page, with the status the JSON API refuses the same query with (never a 500).
        assert r.status_code in (200, 400, 422), (query, r.get_data(as_text=True)[:300])

    check()


@pytest.mark.parametrize("level", ["0.9999999999999999", "1e-17", "5e-324"])
def test_levels_next_to_0_and_1_are_answered(app: Flask, level: str) -> None:
    """Found by the properties above: these levels answered 500 (StatisticsError)."""
    client = app.test_client()
    for kind, body in BODIES.items():
        query: list[tuple[str, str]] = [("level", level)]
        if kind == "open-domain":
            query.append(("candidate", "hello"))
        if kind == "categorical":
            query.append(("postprocess", "base-cut"))
        r = client.get(f"/v1/campaigns/{body['id']}/estimates", query_string=query, headers=ANALYST)
        assert r.status_code in (200, 400), (kind, r.json)
        if r.status_code == 400:  # base-cut's alpha = 1 - level is 1.0 below 2**-53
            assert "alpha must be in (0, 1)" in r.json["error"]["message"], r.json
