"""Fuzz the real ``ldp serve`` subprocess from its own ``GET /openapi.json`` with schemathesis.

Every operation is fuzzed with schemathesis' positive (schema-valid) and negative
(schema-violating) generation, under every role (admin, analyst, ingest token; no token; a
wrong token; a malformed Authorization header). Path parameters are pinned to real campaigns
half of the time and uploads get the real digest half of the time, so the generated requests
reach past the 404 and 409 checks. For every answer:

* no 5xx;
* an error (4xx) is JSON in the one envelope ``{"error": {"code", "message", "status"}}`` with
  ``status`` equal to the HTTP status;
* the answer conforms to the document (status code, content type, body schema, headers);
* a refused request (4xx) or any read left storage exactly as it was (campaigns, reports,
  tallies and report counters compared before and after).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks
from schemathesis.generation import GenerationMode

from tests.reliability.checks import create_campaign
from tests.support.reports import batch, reports
from tests.support.server import CollectorProcess, running_collector

pytestmark = pytest.mark.slow

ROLES = ("admin", "analyst", "ingest", "none", "wrong", "malformed")
#: Examples per (operation, generation mode); operations without parameters stop earlier.
EXAMPLES = {
    "POST /v1/campaigns": 130,
    "GET /v1/campaigns": 30,
    "GET /v1/campaigns/{campaign_id}": 70,
    "POST /v1/campaigns/{campaign_id}/reports": 180,
    "GET /v1/campaigns/{campaign_id}/estimates": 110,
}
DEFAULT_EXAMPLES = 20
MIN_REQUESTS = 1000
#: schemathesis checks run on every answer besides ours. Left out: positive_data_acceptance
#: (a schema-valid body may still break a rule JSON Schema cannot say, e.g. 'auto' needs an
#: epsilon: 400 is right) and negative_data_rejection (it does not count 413 as a rejection).
CONFORMANCE = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("fuzz"), workers=2) as server:
        yield server


def snapshot(db: Path) -> tuple[Any, ...]:
    """Everything a request could have stored, as comparable numbers."""
    with sqlite3.connect(db) as conn:
        out = (
            conn.execute("SELECT count(*), group_concat(id) FROM campaigns").fetchone(),
            conn.execute(
                "SELECT (SELECT count(*) FROM reports) + (SELECT count(*) FROM staged_reports)"
            ).fetchone(),
            conn.execute(
                "SELECT coalesce(sum(n), 0), group_concat(support) FROM tallies"
            ).fetchone(),
            conn.execute(
                "SELECT coalesce(sum(accepted), 0), coalesce(sum(duplicate), 0), "
                "coalesce(sum(rejected), 0) FROM report_counters"
            ).fetchone(),
        )
    conn.close()
    return out


def auth_header(srv: CollectorProcess, role: str) -> dict[str, str]:
    if role in ("admin", "analyst", "ingest"):
        return srv.headers(role)
    if role == "wrong":
        return {"Authorization": "Bearer wrong-token-0123456789abcdef"}
    if role == "malformed":
        return {"Authorization": f"Basic {srv.admin_token}"}
    return {}


def header(r: Any, name: str) -> str:
    """A header of a schemathesis response (lower-case names, lists of values)."""
    values = r.headers.get(name.lower()) or [""]
    return str(values[0])


def check_answer(r: Any) -> None:
    assert r.status_code < 500, (r.status_code, r.text[:500])
    if r.status_code >= 400:
        assert header(r, "Content-Type").startswith("application/json"), r.headers
        body = r.json()
        assert set(body) == {"error"}, body
        err = body["error"]
        assert set(err) == {"code", "message", "status"}, body
        assert err["status"] == r.status_code, body
        assert isinstance(err["code"], str) and err["code"], body
        assert isinstance(err["message"], str) and err["message"], body


def check_answer_requests(r: requests.Response) -> None:
    """:func:`check_answer` for a plain ``requests`` answer."""
    assert r.status_code < 500, (r.status_code, r.text[:500])
    if r.status_code >= 400:
        assert r.headers.get("Content-Type", "").startswith("application/json"), r.headers
        body = r.json()
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "status"}
        assert body["error"]["status"] == r.status_code, body


def test_fuzz_every_operation_and_role(srv: CollectorProcess, figures: dict[str, Any]) -> None:
    campaigns = [create_campaign(srv, m) for m in ("oue", "grr", "olh")]
    for c in campaigns:
        r = requests.post(
            f"{srv.url}/v1/campaigns/{c['id']}/reports",
            json=batch(c, reports(c, 50)),
            headers=srv.headers("ingest"),
            timeout=30,
        )
        assert r.status_code == 200
    schema = schemathesis.openapi.from_url(srv.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    document = requests.get(srv.url + "/openapi.json", timeout=10).json()
    # schemathesis leaves out the document's own URL (GET /openapi.json): every other one.
    served = {f"{m.upper()} {p}" for p, methods in document["paths"].items() for m in methods}
    assert {op.label for op in operations} == served - {"GET /openapi.json"}
    counts: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    roles: Counter[str] = Counter()
    session = requests.Session()

    def fuzz(op: Any, mode: GenerationMode) -> None:
        @settings(
            max_examples=EXAMPLES.get(op.label, DEFAULT_EXAMPLES),
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(
            case=op.as_strategy(generation_mode=mode),
            role=st.sampled_from(ROLES),
            pin=st.sampled_from([None, *campaigns]),
            real_digest=st.booleans(),
        )
        def run(case: Any, role: str, pin: Any, real_digest: bool) -> None:
            if pin is not None and "campaign_id" in (case.path_parameters or {}):
                case.path_parameters["campaign_id"] = pin["id"]
                if real_digest and isinstance(case.body, dict) and "digest" in case.body:
                    case.body["digest"] = pin["digest"]
            before = snapshot(srv.db_path)
            headers = {**(case.headers or {}), **auth_header(srv, role)}
            try:
                r = case.call(base_url=srv.url, headers=headers, session=session, timeout=30)
            except (requests.exceptions.InvalidHeader, requests.exceptions.InvalidURL):
                return  # requests refused to send it (e.g. a newline in a header)
            except UnicodeEncodeError:
                return  # a header value that HTTP cannot carry
            counts[op.label] += 1
            statuses[r.status_code] += 1
            roles[role] += 1
            check_answer(r)
            # And the answer matches the document: status, content type, body, headers.
            case.validate_response(r, checks=CONFORMANCE)
            if r.status_code >= 400 or op.method.upper() == "GET":
                assert snapshot(srv.db_path) == before, (op.label, r.status_code, r.text)

        run()

    for op in operations:
        fuzz(op, GenerationMode.POSITIVE)
        if op.path_parameters or op.query or op.headers or op.body:
            fuzz(op, GenerationMode.NEGATIVE)  # else there is nothing to violate
    # schemathesis leaves out GET /openapi.json: it takes no input but the identity.
    for role in ROLES:
        r = session.get(srv.url + "/openapi.json", headers=auth_header(srv, role), timeout=30)
        assert r.status_code == 200 and r.json()["openapi"].startswith("3.0")
        counts["GET /openapi.json"] += 1
        statuses[r.status_code] += 1
        roles[role] += 1
    session.close()
    total = sum(counts.values())
    figures["fuzz_openapi"] = {
        "requests": total,
        "operations": len(counts),
        "by_operation": dict(counts),
        "by_status": {str(k): v for k, v in sorted(statuses.items())},
        "by_role": dict(roles),
        "5xx": sum(v for k, v in statuses.items() if k >= 500),
        "target": "ldp serve subprocess (gunicorn, 2 workers)",
    }
    assert total >= MIN_REQUESTS, counts
    assert len(counts) == len(operations) + 1
    assert set(roles) == set(ROLES)
