"""`ldp serve` as a real process on a free loopback port, driven over HTTP."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from client_sdk.mechanisms import MECHANISMS, PRESETS
from tests.support.postgres import BACKENDS, report_columns, stored_bytes
from tests.support.reports import LABELS, batch, campaign_body, mechanism_of, reports
from tests.support.server import CollectorProcess, collector_on


@pytest.fixture(scope="module", params=BACKENDS)
def srv(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CollectorProcess]:
    with collector_on(request.param, tmp_path_factory.mktemp("http"), workers=2) as server:
        yield server


def create(srv: CollectorProcess, cid: str, mechanism: str = "oue", **extra: Any) -> dict:
    r = requests.post(
        srv.url + "/v1/campaigns",
        json=campaign_body(cid, mechanism, **extra),
        headers=srv.headers("admin"),
        timeout=10,
    )
    assert r.status_code == 201, r.text
    return r.json()


def upload(srv: CollectorProcess, cid: str, body: Any, **kw: Any) -> requests.Response:
    headers = {**srv.headers("ingest"), **kw.pop("headers", {})}
    return requests.post(
        f"{srv.url}/v1/campaigns/{cid}/reports", json=body, headers=headers, timeout=30, **kw
    )


def assert_error(r: requests.Response, status: int, code: str | None = None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    err = r.json()["error"]
    assert err["status"] == status and err["message"]
    if code:
        assert err["code"] == code
    return err


def stored_count(srv: CollectorProcess, cid: str) -> int:
    r = requests.get(srv.url + "/v1/campaigns", headers=srv.headers("analyst"), timeout=10)
    return {c["id"]: c["reports"] for c in r.json()["campaigns"]}[cid]


def test_campaign_life_cycle(srv: CollectorProcess) -> None:
    created = create(srv, "life", "auto", description="who", horizon_days=7, min_reports=5)
    assert created["mechanism"]["mechanism"] in MECHANISMS  # auto resolved
    assert created["horizon_days"] == 7 and created["min_reports"] == 5
    r = requests.get(srv.url + "/v1/campaigns/life", headers=srv.headers("ingest"), timeout=10)
    assert r.status_code == 200 and r.json() == created
    assert r.headers["ETag"] == f'"{created["digest"]}"'
    again = requests.get(
        srv.url + "/v1/campaigns/life",
        headers={**srv.headers("ingest"), "If-None-Match": r.headers["ETag"]},
        timeout=10,
    )
    assert again.status_code == 304
    dup = requests.post(
        srv.url + "/v1/campaigns",
        json=campaign_body("life"),
        headers=srv.headers("admin"),
        timeout=10,
    )
    assert_error(dup, 409, "campaign_exists")
    mech = mechanism_of(created)
    assert mech.config() == created["mechanism"]
    r = upload(srv, "life", batch(created, reports(created, 20)))
    assert r.json()["accepted"] == 20
    assert stored_count(srv, "life") == 20
    est = requests.get(
        srv.url + "/v1/campaigns/life/estimates", headers=srv.headers("analyst"), timeout=10
    )
    assert est.status_code == 200, est.text
    body = est.json()
    assert body["n"] == 20 and body["campaign"] == "life"
    assert [v["value"] for v in body["values"]] == LABELS


@pytest.mark.parametrize("name", sorted([*MECHANISMS, *PRESETS, "auto"]))
def test_ingest_valid_batches_for_every_mechanism(srv: CollectorProcess, name: str) -> None:
    cid = f"mech-{name}"
    extra: dict[str, Any] = {}
    if name in PRESETS:
        extra["epsilon"] = None
    if name in ("rr", "rr-two-coin"):
        extra["domain"] = ["no", "yes"]
    body = campaign_body(cid, name, **extra)
    if body["epsilon"] is None:
        del body["epsilon"]
    r = requests.post(
        srv.url + "/v1/campaigns", json=body, headers=srv.headers("admin"), timeout=10
    )
    assert r.status_code == 201, r.text
    campaign = r.json()
    items = reports(campaign, 300, seed=len(name))
    answer = upload(srv, cid, batch(campaign, items)).json()
    assert answer == {"accepted": 300, "duplicate": 0, "rejected": 0, "errors": []}
    # The running tally is exactly the tally of what was sent.
    mech = mechanism_of(campaign)
    expected = mech.tally([x["payload"] for x in items])
    est = requests.get(
        f"{srv.url}/v1/campaigns/{cid}/estimates?postprocess=none",
        headers=srv.headers("analyst"),
        timeout=10,
    ).json()
    assert est["n"] == 300
    from aggregator import estimate

    want = estimate(mech, expected).to_dict(0.95)
    assert [v["count"] for v in est["values"]] == pytest.approx(
        [v["count"] for v in want["values"]]
    )


def test_duplicates_are_not_counted_again(srv: CollectorProcess) -> None:
    campaign = create(srv, "dups")
    items = reports(campaign, 50)
    first = upload(srv, "dups", batch(campaign, items)).json()
    assert first["accepted"] == 50
    # A retry of the same batch plus 10 new reports, and one id repeated inside the batch.
    fresh = reports(campaign, 10, seed=9)
    retry = upload(srv, "dups", batch(campaign, items + fresh + [fresh[0]])).json()
    assert retry == {"accepted": 10, "duplicate": 51, "rejected": 0, "errors": []}
    assert stored_count(srv, "dups") == 60


def test_gzip_body_is_accepted(srv: CollectorProcess) -> None:
    campaign = create(srv, "gz")
    raw = json.dumps(batch(campaign, reports(campaign, 100))).encode()
    r = requests.post(
        srv.url + "/v1/campaigns/gz/reports",
        data=gzip.compress(raw),
        headers={
            **srv.headers("ingest"),
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        },
        timeout=10,
    )
    assert r.status_code == 200 and r.json()["accepted"] == 100


def test_every_bad_batch_is_refused_and_stores_nothing(srv: CollectorProcess) -> None:
    campaign = create(srv, "bad")
    good = batch(campaign, reports(campaign, 5))
    url = srv.url + "/v1/campaigns/bad/reports"
    ingest = srv.headers("ingest")
    json_ct = {**ingest, "Content-Type": "application/json"}
    cases = [
        (requests.post(url, data=b"{not json", headers=json_ct, timeout=10), 400, "malformed_json"),
        (requests.post(url, data=b"[1, 2]", headers=json_ct, timeout=10), 400, "invalid_batch"),
        (
            requests.post(
                url,
                data=json.dumps(good),
                headers={**ingest, "Content-Type": "text/plain"},
                timeout=10,
            ),
            415,
            "unsupported_media_type",
        ),
        (
            requests.post(
                url,
                data=json.dumps(good),
                headers={**json_ct, "Content-Encoding": "br"},
                timeout=10,
            ),
            415,
            "unsupported_media_type",
        ),
        (
            requests.post(
                url,
                data=b"\x1f\x8b garbage",
                headers={**json_ct, "Content-Encoding": "gzip"},
                timeout=10,
            ),
            400,
            "malformed_body",
        ),
        (upload(srv, "nope", good), 404, "unknown_campaign"),
        (requests.post(url, json=good, timeout=10), 401, "unauthorized"),
        (
            requests.post(
                url, json=good, headers={"Authorization": "Bearer wrong-token-xxxxxxxx"}, timeout=10
            ),
            401,
            "unauthorized",
        ),
        (upload(srv, "bad", {**good, "digest": "0" * 64}), 409, "stale_config"),
        (upload(srv, "bad", {"digest": campaign["digest"], "reports": {}}), 400, "invalid_batch"),
        (upload(srv, "bad", {**good, "extra": 1}), 400, "invalid_batch"),
        (upload(srv, "bad", batch(campaign, reports(campaign, 5001))), 413, "too_large"),
        (
            requests.post(url, data=b"x" * (5 * 1024 * 1024), headers=json_ct, timeout=30),
            413,
            "too_large",
        ),
    ]
    for response, status, code in cases:
        assert_error(response, status, code)
    assert stored_count(srv, "bad") == 0


def test_gzip_bomb_is_refused(srv: CollectorProcess) -> None:
    campaign = create(srv, "bomb")
    bomb = gzip.compress(b" " * (64 * 1024 * 1024))  # 64 MiB of spaces in ~64 KiB
    assert len(bomb) < 200_000
    r = requests.post(
        srv.url + "/v1/campaigns/bomb/reports",
        data=bomb,
        headers={
            **srv.headers("ingest"),
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        },
        timeout=30,
    )
    assert_error(r, 413, "too_large")
    assert campaign["id"] == "bomb" and stored_count(srv, "bomb") == 0


def test_invalid_reports_are_listed_and_valid_ones_kept(srv: CollectorProcess) -> None:
    campaign = create(srv, "partial", "oue")
    other = create(srv, "partial-grr", "grr")
    items = reports(campaign, 12)
    items[1]["payload"] = "AAAAAA=="  # wrong length for k = 6
    items[2]["payload"] = 3  # wrong type for oue
    items[3]["payload"] = reports(other, 1)[0]["payload"]  # a grr payload
    items[4]["day"] = "2001-01-01"  # older than the horizon
    items[5]["day"] = "2999-01-01"  # in the future
    items[6]["day"] = "2026-11-22T10:00:00"  # a time of day
    items[7]["id"] = "short"
    items[8]["ip"] = "10.1.2.3"  # any extra field
    items[9] = "not an object"  # type: ignore[call-overload]
    answer = upload(srv, "partial", batch(campaign, items)).json()
    assert answer["accepted"] == 3 and answer["rejected"] == 9 and answer["duplicate"] == 0
    assert [e["index"] for e in answer["errors"]] == list(range(1, 10))
    for e in answer["errors"]:
        assert e["reason"].startswith(f"report #{e['index']}: ")
    assert "base64" in answer["errors"][1]["reason"]
    assert stored_count(srv, "partial") == 3


def test_grr_payload_out_of_range_is_rejected(srv: CollectorProcess) -> None:
    campaign = create(srv, "range", "grr")
    items = reports(campaign, 3)
    items[0]["payload"] = len(LABELS)
    items[1]["payload"] = True
    answer = upload(srv, "range", batch(campaign, items)).json()
    assert (answer["accepted"], answer["rejected"]) == (1, 2)


AUTH_MATRIX = [
    # (method, path, role -> expected status)
    # No token or an unknown one: 401; a valid token of the wrong role: 403.
    ("GET", "/v1/campaigns", {"admin": 200, "analyst": 200, "ingest": 403, None: 401}),
    ("GET", "/v1/campaigns/auth", {"admin": 200, "analyst": 200, "ingest": 200, None: 401}),
    (
        "GET",
        "/v1/campaigns/auth/estimates",
        {"admin": 200, "analyst": 200, "ingest": 403, None: 401},
    ),
    (
        "POST",
        "/v1/campaigns/auth/reports",
        {"admin": 200, "analyst": 403, "ingest": 200, None: 401},
    ),
    ("POST", "/v1/campaigns", {"admin": 201, "analyst": 403, "ingest": 403, None: 401}),
    ("GET", "/healthz", {None: 200}),
    ("GET", "/readyz", {None: 200}),
    # /metrics lists campaign ids: any role's token unless LDP_METRICS_PUBLIC=true.
    ("GET", "/metrics", {"admin": 200, "analyst": 200, "ingest": 200, None: 401}),
    ("GET", "/openapi.json", {None: 200}),
]


def test_auth_matrix(srv: CollectorProcess) -> None:
    campaign = create(srv, "auth")
    upload(srv, "auth", batch(campaign, reports(campaign, 5)))
    n = 0
    for method, path, expected in AUTH_MATRIX:
        for role, status in expected.items():
            headers = srv.headers(role) if role else {}
            kwargs: dict[str, Any] = {}
            if path.endswith("/reports"):
                kwargs["json"] = batch(campaign, reports(campaign, 2, seed=n))
            elif method == "POST":
                kwargs["json"] = campaign_body(f"auth-{n}")
            n += 1
            r = requests.request(method, srv.url + path, headers=headers, timeout=10, **kwargs)
            assert r.status_code == status, (method, path, role, r.text)
            if status == 401:
                assert r.json()["error"]["code"] == "unauthorized"
                assert r.headers["WWW-Authenticate"].startswith("Bearer")
            if status == 403:
                assert r.json()["error"]["code"] == "forbidden"


def test_database_holds_no_client_address_or_user_agent(srv: CollectorProcess) -> None:
    campaign = create(srv, "privacy")
    marker_ua = "Mozilla/5.0 (UA-MARKER-7f3a9c) LeakyPhone"
    marker_ip = "203.0.113.77"
    upload(
        srv,
        "privacy",
        batch(campaign, reports(campaign, 30)),
        headers={"User-Agent": marker_ua, "X-Forwarded-For": marker_ip, "X-Real-IP": marker_ip},
    )
    blobs = stored_bytes(srv.db_url)
    for needle in (marker_ua, "UA-MARKER-7f3a9c", marker_ip, "127.0.0.1", srv.ingest_token):
        assert needle.encode() not in blobs, needle
    # And the schema itself stores nothing but campaign, window, report id and payload.
    assert report_columns(srv.db_url) == ["campaign", "report_id", "window_start", "payload"]
    assert marker_ip not in srv.stderr() and marker_ua not in srv.stderr()


def test_metrics_count_reports_across_workers(srv: CollectorProcess) -> None:
    campaign = create(srv, "metrics")
    items = reports(campaign, 40)
    for _ in range(3):
        upload(srv, "metrics", batch(campaign, items))
    text = requests.get(srv.url + "/metrics", headers=srv.headers("analyst"), timeout=10).text
    assert 'ldp_reports_total{campaign="metrics",outcome="accepted"} 40' in text
    assert 'ldp_reports_total{campaign="metrics",outcome="duplicate"} 80' in text
    assert "# TYPE ldp_request_duration_seconds histogram" in text
    assert "ldp_batch_size_reports_count" in text
    # Request counts are summed over both workers' files.
    posts = [
        line
        for line in text.splitlines()
        if line.startswith('ldp_http_requests_total{endpoint="/v1/campaigns/<campaign_id>/reports"')
    ]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in posts) >= 3
