"""``GET /metrics`` in process, read with prometheus_client's own parser (docs/COLLECTOR.md,
"Metrics"): report outcomes and storage from the database, request counts by route template,
both histograms with the documented buckets. The multiprocess merge over two real workers is
tested in ``tests/test_collector_hardening.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from collector.metrics import BATCH_BUCKETS, LATENCY_BUCKETS, _esc
from tests.support.reports import batch, campaign_body, reports
from tests.support.server import ADMIN_TOKEN, ANALYST_TOKEN, INGEST_TOKEN, TOKENS

REPO = Path(__file__).resolve().parents[1]
UPLOAD_ROUTE = "/v1/campaigns/<campaign_id>/reports"


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[FlaskClient]:
    from collector.app import create_app

    app = create_app({"database": str(tmp_path / "metrics.db"), **TOKENS})
    yield app.test_client()
    app.extensions["ldp_storage"].close()


def _samples(client: FlaskClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, keyed by name and sorted labels (the parser raises on an
    invalid exposition)."""
    r = client.get("/metrics", headers=_headers(ANALYST_TOKEN))
    assert r.status_code == 200
    assert r.content_type.startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.get_data(as_text=True))
        for s in family.samples
    }


def _campaign(client: FlaskClient, cid: str) -> dict[str, Any]:
    r = client.post("/v1/campaigns", json=campaign_body(cid), headers=_headers(ADMIN_TOKEN))
    assert r.status_code == 201, r.json
    campaign: dict[str, Any] = r.json
    return campaign


def _upload(client: FlaskClient, cid: str, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post(f"/v1/campaigns/{cid}/reports", json=body, headers=_headers(INGEST_TOKEN))
    assert r.status_code == 200, r.json
    answer: dict[str, Any] = r.json
    return answer


def test_report_outcomes_and_stored_reports_come_from_the_database(client: FlaskClient) -> None:
    """30 accepted, then 10 of them again (duplicate) with 2 payloads no OUE report can be
    (rejected); a second campaign keeps its own counts."""
    first = _campaign(client, "m-one")
    items = reports(first, 30, seed=1)
    assert _upload(client, "m-one", batch(first, items))["accepted"] == 30
    bad = [{**items[0], "id": f"bad-{i:02d}-0123456789abcdef", "payload": "zz"} for i in range(2)]
    answer = _upload(client, "m-one", batch(first, items[:10] + bad))
    assert (answer["accepted"], answer["duplicate"], answer["rejected"]) == (0, 10, 2)
    second = _campaign(client, "m-two")
    _upload(client, "m-two", batch(second, reports(second, 7, seed=2)))

    samples = _samples(client)
    expected = {
        ("m-one", "accepted"): 30,
        ("m-one", "duplicate"): 10,
        ("m-one", "rejected"): 2,
        ("m-two", "accepted"): 7,
        ("m-two", "duplicate"): 0,
        ("m-two", "rejected"): 0,
    }
    for (cid, outcome), count in expected.items():
        key = ("ldp_reports_total", (("campaign", cid), ("outcome", outcome)))
        assert samples[key] == count, (cid, outcome)
    # The storage gauges are as of the last retention sweep: present for each campaign.
    for cid in ("m-one", "m-two"):
        assert ("ldp_stored_reports", (("campaign", cid),)) in samples
        assert ("ldp_stored_bytes", (("campaign", cid),)) in samples


def test_requests_are_counted_by_route_template_method_and_status(client: FlaskClient) -> None:
    campaign = _campaign(client, "m-routes")
    for seed in range(3):
        _upload(client, "m-routes", batch(campaign, reports(campaign, 4, seed=seed)))
    assert client.get("/v1/campaigns/absent", headers=_headers(INGEST_TOKEN)).status_code == 404
    samples = _samples(client)
    route = (("endpoint", UPLOAD_ROUTE), ("method", "POST"), ("status", "200"))
    assert samples[("ldp_http_requests_total", route)] == 3
    missing = (("endpoint", "/v1/campaigns/<campaign_id>"), ("method", "GET"), ("status", "404"))
    assert samples[("ldp_http_requests_total", missing)] == 1
    # No label holds a campaign id, a client address or a token: only templates.
    for name, labels in samples:
        for _, value in labels:
            assert "m-routes" not in value or name.startswith("ldp_reports") or "stored" in name
            assert ANALYST_TOKEN not in value and INGEST_TOKEN not in value


def _documented_buckets(metric: str) -> tuple[float, ...]:
    doc = (REPO / "docs" / "COLLECTOR.md").read_text()
    found = re.search(
        rf"`{metric}` buckets \(upper bounds\): ([0-9.,\s]+?)\s(?:seconds|reports)\.", doc
    )
    assert found is not None, f"docs/COLLECTOR.md lists no buckets for {metric}"
    return tuple(float(x) for x in re.split(r",\s*", found.group(1)))


def test_both_histograms_have_the_documented_buckets(client: FlaskClient) -> None:
    """A dashboard's quantiles are read off these bounds: they are documented, and one upload
    of 300 reports lands in the batch histogram's first bucket at or above 300."""
    assert _documented_buckets("ldp_request_duration_seconds") == LATENCY_BUCKETS
    assert _documented_buckets("ldp_batch_size_reports") == BATCH_BUCKETS
    campaign = _campaign(client, "m-hist")
    _upload(client, "m-hist", batch(campaign, reports(campaign, 300, seed=3)))
    samples = _samples(client)
    for bound in BATCH_BUCKETS:
        count = samples[("ldp_batch_size_reports_bucket", (("le", str(float(bound))),))]
        assert count == (1 if bound >= 300 else 0), bound
    assert samples[("ldp_batch_size_reports_sum", ())] == 300
    upload_latency = [
        float(dict(labels)["le"])
        for name, labels in samples
        if name == "ldp_request_duration_seconds_bucket"
        and dict(labels)["endpoint"] == UPLOAD_ROUTE
    ]
    assert sorted(b for b in upload_latency if b != float("inf")) == list(LATENCY_BUCKETS)


def test_label_values_are_escaped_for_the_text_format() -> None:
    """Campaign ids are validated long before, but the exposition escapes what the format
    needs escaped anyway: backslash, double quote, newline."""
    assert _esc('a"b') == 'a\\"b'
    assert _esc("a\\b") == "a\\\\b"
    assert _esc("a\nb") == "a\\nb"
    assert _esc('\\"') == '\\\\\\"'
    assert _esc("plain-id") == "plain-id"
