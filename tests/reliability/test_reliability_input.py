"""Bad input against the real ``ldp serve``: every item is refused with a clear JSON error
(the envelope, a specific code, a message that names the rule) and stores nothing.

Covered elsewhere and not repeated: malformed JSON, wrong content type or encoding, a bad gzip
stream, a 64 MiB gzip bomb, 5,001 reports, a 5 MiB body, unknown fields, a stale digest
(tests/test_collector_http.py). Here: deeply nested JSON (a 500 before this suite found it),
non-UTF-8 bytes, NaN/Infinity/huge numbers in epsilon, huge integers, domain size and label
length limits, a body just over the byte limit with and without gzip, a gzip stream that
declares a small size, oversized ids and days inside a batch, duplicate JSON keys.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
import requests

from tests.reliability.checks import create_campaign
from tests.reliability.test_fuzz_openapi import check_answer_requests, snapshot
from tests.support.reports import batch, reports
from tests.support.server import CollectorProcess

BODY_LIMIT = 4 * 1024 * 1024


def post(srv: CollectorProcess, path: str, data: bytes, role: str = "admin", **headers: str):
    return requests.post(
        srv.url + path,
        data=data,
        headers={**srv.headers(role), "Content-Type": "application/json", **headers},
        timeout=60,
    )


def refused(r: requests.Response, status: int, code: str, *words: str) -> dict[str, Any]:
    check_answer_requests(r)
    err = r.json()["error"]
    assert (r.status_code, err["code"]) == (status, code), r.text
    for word in words:
        assert word.lower() in err["message"].lower(), (word, err["message"])
    return err


def campaign_json(**overrides: Any) -> bytes:
    body = {"id": "bad-input", "domain": ["a", "b", "c"], "mechanism": "oue", "epsilon": 1.0}
    body.update(overrides)
    return json.dumps(body).encode()


CAMPAIGN_CASES = [
    # (name, raw body, status, code, words the message must contain)
    ("nested arrays", b"[" * 200_000 + b"]" * 200_000, 400, "malformed_json", ["deep"]),
    ("nested objects", b'{"a":' * 100_000 + b"1" + b"}" * 100_000, 400, "malformed_json", ["deep"]),
    ("non-UTF-8", b'{"id": "x\xff\xfe", "domain": ["a", "b"]}', 400, "malformed_json", ["utf"]),
    (
        "latin-1 label",
        '{"id":"lat","domain":["caf\xe9","b"]}'.encode("latin-1"),
        400,
        "malformed_json",
        ["utf"],
    ),
    (
        "NaN epsilon",
        campaign_json().replace(b"1.0", b"NaN"),
        400,
        "invalid_campaign",
        ["epsilon", "finite", "nan"],
    ),
    (
        "Infinity epsilon",
        campaign_json().replace(b"1.0", b"Infinity"),
        400,
        "invalid_campaign",
        ["epsilon", "inf"],
    ),
    (
        "-Infinity epsilon",
        campaign_json().replace(b"1.0", b"-Infinity"),
        400,
        "invalid_campaign",
        ["epsilon"],
    ),
    (
        "1e999 epsilon",
        campaign_json().replace(b"1.0", b"1e999"),
        400,
        "invalid_campaign",
        ["epsilon"],
    ),
    ("huge epsilon", campaign_json(epsilon=1e300), 400, "invalid_campaign", ["epsilon", "16"]),
    ("tiny epsilon", campaign_json(epsilon=5e-324), 400, "invalid_campaign", ["epsilon", "1e-12"]),
    ("negative epsilon", campaign_json(epsilon=-1), 400, "invalid_campaign", ["epsilon"]),
    ("boolean epsilon", campaign_json(epsilon=True), 400, "invalid_campaign", ["epsilon"]),
    (
        "5000-digit integer",
        campaign_json().replace(b"1.0", b"9" * 5000),
        400,
        "malformed_json",
        ["digits"],
    ),
    ("huge horizon", campaign_json(horizon_days=10**30), 400, "invalid_campaign", ["horizon_days"]),
    (
        "huge min_reports",
        campaign_json(min_reports=10**18),
        400,
        "invalid_campaign",
        ["min_reports"],
    ),
    (
        "huge hash range",
        campaign_json(mechanism="olh", params={"g": 10**40}),
        400,
        "invalid_campaign",
        ["g"],
    ),
    (
        "domain too large for oue",
        campaign_json(domain=[f"v{i}" for i in range(5000)]),
        400,
        "invalid_campaign",
        ["4096", "domain"],
    ),
    (
        # Past the largest max_k (2**20) a domain cannot fit in the body limit: 413 first.
        "domain too large for any",
        campaign_json(mechanism="olh", domain=[str(i) for i in range((1 << 20) + 1)]),
        413,
        "too_large",
        ["LDP_MAX_BODY_BYTES"],
    ),
    ("label too long", campaign_json(domain=["a" * 201, "b"]), 400, "invalid_campaign", ["200"]),
    ("empty label", campaign_json(domain=["", "b"]), 400, "invalid_campaign", []),
    ("one-value domain", campaign_json(domain=["a"]), 400, "invalid_campaign", ["domain"]),
    ("duplicate labels", campaign_json(domain=["a", "a"]), 400, "invalid_campaign", ["distinct"]),
    ("non-string labels", campaign_json(domain=[1, 2]), 400, "invalid_campaign", ["domain"]),
    (
        "description too long",
        campaign_json(description="d" * 2001),
        400,
        "invalid_campaign",
        ["2000"],
    ),
    ("id too long", campaign_json(id="a" * 65), 400, "invalid_campaign", ["slug"]),
    ("id with a slash", campaign_json(id="a/b"), 400, "invalid_campaign", ["slug"]),
    ("bad params type", campaign_json(params=[1]), 400, "invalid_campaign", ["params"]),
    ("unknown parameter", campaign_json(params={"evil": 1}), 400, "invalid_campaign", []),
    ("JSON null body", b"null", 400, "invalid_campaign", ["object"]),
    ("empty body", b"", 400, "malformed_json", []),
]


@pytest.mark.parametrize(
    ("data", "status", "code", "words"),
    [c[1:] for c in CAMPAIGN_CASES],
    ids=[c[0] for c in CAMPAIGN_CASES],
)
def test_bad_campaign_bodies_are_refused_clearly(
    collector: CollectorProcess, data: bytes, status: int, code: str, words: list[str]
) -> None:
    before = snapshot(collector.db_path)
    refused(post(collector, "/v1/campaigns", data), status, code, *words)
    assert snapshot(collector.db_path) == before


def test_bad_report_batches_are_refused_and_store_nothing(
    collector: CollectorProcess, figures: dict[str, Any]
) -> None:
    campaign = create_campaign(collector, "oue")
    path = f"/v1/campaigns/{campaign['id']}/reports"
    good = batch(campaign, reports(campaign, 3))
    just_over = json.dumps(good).encode() + b" " * (BODY_LIMIT + 1 - len(json.dumps(good)))
    # A gzip stream whose trailer claims 10 bytes but that inflates past the limit.
    lying = bytearray(gzip.compress(b" " * (BODY_LIMIT + 10)))
    lying[-4:] = (10).to_bytes(4, "little")
    cases = [
        (b"[" * 300_000, {}, 400, "malformed_json"),
        (
            gzip.compress(b"[" * 300_000 + b"]" * 300_000),
            {"Content-Encoding": "gzip"},
            400,
            "malformed_json",
        ),
        (b"\xff\xfe" + json.dumps(good).encode("utf-16-le"), {}, 400, "malformed_json"),
        (b'{"digest": "\xc3\x28", "reports": []}', {}, 400, "malformed_json"),
        (just_over, {}, 413, "too_large"),
        (gzip.compress(just_over), {"Content-Encoding": "gzip"}, 413, "too_large"),
        (bytes(lying), {"Content-Encoding": "gzip"}, 413, "too_large"),
        (
            gzip.compress(json.dumps(good).encode())[:-8],
            {"Content-Encoding": "gzip"},
            400,
            "malformed_body",
        ),
        (
            json.dumps({**good, "digest": campaign["digest"] + "x" * 10_000}).encode(),
            {},
            409,
            "stale_config",
        ),
        (json.dumps({"digest": 1e999, "reports": []}).encode(), {}, 400, "invalid_batch"),
        (b'{"digest": NaN, "reports": []}', {}, 400, "invalid_batch"),
    ]
    before = snapshot(collector.db_path)
    for data, headers, status, code in cases:
        refused(post(collector, path, data, "ingest", **headers), status, code)
    assert snapshot(collector.db_path) == before
    figures["bad_input_http"] = {
        "campaign_bodies": len(CAMPAIGN_CASES),
        "report_batches": len(cases),
        "stored_from_refused": 0,
    }


def test_bad_reports_inside_a_batch_are_listed_and_not_stored(
    collector: CollectorProcess,
) -> None:
    campaign = create_campaign(collector, "olh")
    items = reports(campaign, 10)
    items[0]["id"] = "x" * 65  # id too long
    items[1]["id"] = "a" * 15  # id too short
    items[2]["id"] = "é" * 20  # outside the alphabet
    items[3]["day"] = "2026-11-22" + "0" * 10_000
    items[4]["payload"] = [10**400 % 7, 1]  # a list where olh sends a pair? keep: shape check
    items[5]["payload"] = 1e308
    items[6]["payload"] = "A" * 100_000
    items[7]["payload"] = {"nested": {"deeper": [1, 2, 3]}}
    items[8]["day"] = None
    answer = requests.post(
        f"{collector.url}/v1/campaigns/{campaign['id']}/reports",
        json=batch(campaign, items),
        headers=collector.headers("ingest"),
        timeout=30,
    ).json()
    rejected = {e["index"]: e["reason"] for e in answer["errors"]}
    assert answer["accepted"] == 10 - len(rejected)
    assert {0, 1, 2, 3, 5, 6, 7, 8} <= set(rejected)
    for index, reason in rejected.items():
        assert reason.startswith(f"report #{index}: ") and len(reason) < 600, reason
