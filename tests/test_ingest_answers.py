"""The exact answer to an upload: counts, and for each rejected report its index, id and reason.

A device (or its operator) learns why a report was refused only from this answer, so each
reason is checked word for word at its index; the envelope errors (whole batch refused) are
checked with their status and code. Real Flask app on a real SQLite file.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import secrets
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient

from client_sdk.errors import InvalidReport
from client_sdk.mechanisms import GeneralizedRR, Payload
from collector import create_app
from collector.campaigns import CLOCK_SKEW_DAYS
from collector.errors import APIError
from collector.ingest import BatchResult, _check_payloads, decode_body, gunzip_capped, payload_json
from tests.support.reports import batch, campaign_body, reports
from tests.support.server import TOKENS

INGEST = {"Authorization": f"Bearer {TOKENS['ingest_token']}"}
ADMIN = {"Authorization": f"Bearer {TOKENS['admin_token']}"}
MAX_REPORTS = 12
MAX_BYTES = 6000


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    app = create_app(
        {
            "database": str(tmp_path_factory.mktemp("answers") / "a.db"),
            "max_batch_reports": MAX_REPORTS,
            "max_body_bytes": MAX_BYTES,
            **TOKENS,
        }
    )
    yield app
    app.extensions["ldp_storage"].close()


@pytest.fixture(scope="module")
def grr(app: Flask) -> dict[str, Any]:
    r = app.test_client().post(
        "/v1/campaigns", json=campaign_body("answers-grr", "grr", horizon_days=5), headers=ADMIN
    )
    assert r.status_code == 201, r.json
    return r.json


def _post(client: FlaskClient, campaign: dict[str, Any], items: list, **kw: Any):
    return client.post(
        f"/v1/campaigns/{campaign['id']}/reports", json=batch(campaign, items), headers=INGEST, **kw
    )


def _rid() -> str:
    return secrets.token_hex(12)


def test_each_rejected_report_is_named_with_its_reason(app: Flask, grr: dict[str, Any]) -> None:
    client = app.test_client()
    today = dt.datetime.now(dt.UTC).date()
    good = reports(grr, 3, seed=1)
    future = (today + dt.timedelta(days=CLOCK_SKEW_DAYS + 1)).isoformat()
    edge_future = (today + dt.timedelta(days=CLOCK_SKEW_DAYS)).isoformat()
    old = (today - dt.timedelta(days=6)).isoformat()
    edge_old = (today - dt.timedelta(days=5)).isoformat()
    long_id = "L" * 70
    ids = [_rid() for _ in range(10)]
    items: list[Any] = [
        good[0],  # 0 accepted
        "not an object",  # 1
        {"id": ids[1], "day": today.isoformat()},  # 2 missing payload
        {"id": "short", "day": today.isoformat(), "payload": 0},  # 3 bad id
        {"id": long_id, "day": today.isoformat(), "payload": 0},  # 4 id too long, cut to 64
        {"id": ids[2], "day": 20261122, "payload": 0},  # 5 day not a string
        {"id": ids[3], "day": "2026-11-22T10:00", "payload": 0},  # 6 day with a time
        {"id": ids[4], "day": future, "payload": 0},  # 7 beyond the clock skew
        {"id": ids[5], "day": old, "payload": 0},  # 8 older than the horizon
        {"id": ids[6], "day": today.isoformat(), "payload": 99},  # 9 payload outside domain
        dict(good[1]),  # 10 accepted
        dict(good[1]),  # 11 same id again in the batch: duplicate
        {"id": ids[7], "day": edge_future, "payload": 1},  # 12... (too many: see below)
    ]
    items = items[:MAX_REPORTS]  # 0..11
    answer = _post(client, grr, items)
    assert answer.status_code == 200, answer.json
    body = answer.json
    assert (body["accepted"], body["duplicate"], body["rejected"]) == (2, 1, 9)
    errors = body["errors"]
    assert [e["index"] for e in errors] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert [e["id"] for e in errors] == [
        None,
        ids[1],
        "short",
        long_id[:64],
        ids[2],
        ids[3],
        ids[4],
        ids[5],
        ids[6],
    ]
    for e in errors:
        assert e["reason"].startswith(f"report #{e['index']}: ")
    reasons = {e["index"]: e["reason"].split(": ", 1)[1] for e in errors}
    assert reasons[1] == "a report is an object with id, day and payload, got str"
    assert reasons[2] == "a report has exactly the fields day, id, payload; got ['day', 'id']"
    assert reasons[3] == reasons[4] == "'id' must be 16 to 64 characters of [A-Za-z0-9_-]"
    assert reasons[5] == "'day' must be a date string YYYY-MM-DD, got int"
    assert reasons[6] == "'day' must be a date YYYY-MM-DD (no time), got '2026-11-22T10:00'"
    assert reasons[7].startswith(f"day {future} is in the future")
    assert f"latest accepted {edge_future}" in reasons[7]
    assert reasons[8].startswith(f"day {old} is older than the campaign's horizon of 5 days")
    assert f"earliest {edge_old}" in reasons[8]
    assert "99" in reasons[9] and "grr" in reasons[9]

    # The edges of the accepted range are accepted; sending the same ids again is a duplicate.
    edges = [
        {"id": _rid(), "day": edge_future, "payload": 1},
        {"id": _rid(), "day": edge_old, "payload": 2},
    ]
    again = _post(client, grr, edges + [good[0]]).json
    assert again == {"accepted": 2, "duplicate": 1, "rejected": 0, "errors": []}


def test_a_bad_payload_among_good_ones_is_found_by_index(app: Flask, grr: dict[str, Any]) -> None:
    client = app.test_client()
    items = reports(grr, 6, seed=2)
    items[4]["payload"] = True
    items[1]["payload"] = "3"
    body = _post(client, grr, items).json
    assert (body["accepted"], body["duplicate"], body["rejected"]) == (4, 0, 2)
    assert [(e["index"], e["id"]) for e in body["errors"]] == [
        (1, items[1]["id"]),
        (4, items[4]["id"]),
    ]
    assert all("integer" in e["reason"] for e in body["errors"])


def _error(answer) -> tuple[int, str, str]:
    err = answer.json["error"]
    assert err["status"] == answer.status_code
    return answer.status_code, err["code"], err["message"]


def test_whole_batch_refusals_say_why(app: Flask, grr: dict[str, Any]) -> None:
    client = app.test_client()
    url = f"/v1/campaigns/{grr['id']}/reports"
    ok = reports(grr, 1, seed=3)

    status, code, msg = _error(client.post(url, json=[1, 2], headers=INGEST))
    assert (status, code) == (400, "invalid_batch") and "JSON object, got list" in msg
    body = batch(grr, ok) | {"extra": 1}
    status, code, msg = _error(client.post(url, json=body, headers=INGEST))
    assert (status, code) == (400, "invalid_batch") and "unknown field(s) ['extra']" in msg
    status, code, msg = _error(
        client.post(url, json={"digest": grr["digest"], "reports": {}}, headers=INGEST)
    )
    assert (status, code) == (400, "invalid_batch") and "'reports' must be a list" in msg
    status, code, msg = _error(client.post(url, json={"reports": ok}, headers=INGEST))
    assert (status, code) == (400, "invalid_batch") and "'digest' must be" in msg
    status, code, msg = _error(
        client.post(url, json={"digest": "0" * 64, "reports": ok}, headers=INGEST)
    )
    assert (status, code) == (409, "stale_config") and grr["digest"] in msg

    many = reports(grr, MAX_REPORTS + 1, seed=4)
    status, code, msg = _error(_post(client, grr, many))
    assert (status, code) == (413, "too_large")
    assert f"a batch of {MAX_REPORTS + 1} reports" in msg and "LDP_MAX_BATCH_REPORTS" in msg
    assert _post(client, grr, many[:MAX_REPORTS]).json["accepted"] == MAX_REPORTS


def test_body_encodings(app: Flask, grr: dict[str, Any]) -> None:
    client = app.test_client()
    url = f"/v1/campaigns/{grr['id']}/reports"
    raw = json.dumps(batch(grr, reports(grr, 2, seed=5))).encode()
    json_type = {"Content-Type": "application/json; charset=utf-8"}

    gz = client.post(
        url, data=gzip.compress(raw), headers=INGEST | json_type | {"Content-Encoding": "GZIP"}
    )
    assert gz.status_code == 200 and gz.json["accepted"] == 2

    status, code, msg = _error(
        client.post(url, data=raw, headers=INGEST | {"Content-Type": "text/plain"})
    )
    assert (status, code) == (415, "unsupported_media_type") and "'text/plain'" in msg
    status, code, msg = _error(
        client.post(url, data=raw, headers=INGEST | json_type | {"Content-Encoding": "br"})
    )
    assert (status, code) == (415, "unsupported_media_type") and "'br'" in msg
    status, code, _ = _error(
        client.post(
            url,
            data=gzip.compress(raw)[:-9],
            headers=INGEST | json_type | {"Content-Encoding": "gzip"},
        )
    )
    assert (status, code) == (400, "malformed_body")
    bomb = gzip.compress(b" " * (MAX_BYTES + 1))
    status, code, msg = _error(
        client.post(url, data=bomb, headers=INGEST | json_type | {"Content-Encoding": "gzip"})
    )
    assert (status, code) == (413, "too_large") and "decompressed" in msg
    status, code, msg = _error(
        client.post(url, data="é".encode("latin-1"), headers=INGEST | json_type)
    )
    assert (status, code) == (400, "malformed_json") and "UTF-8" in msg
    status, code, msg = _error(client.post(url, data=b"{", headers=INGEST | json_type))
    assert (status, code) == (400, "malformed_json") and "not valid JSON" in msg
    status, code, msg = _error(
        client.post(url, data=b"[" * 5000 + b"]" * 5000, headers=INGEST | json_type)
    )
    assert (status, code) in {(400, "malformed_json"), (413, "too_large")}
    deep = b"[" * 2500 + b"]" * 2500
    status, code, msg = _error(client.post(url, data=deep, headers=INGEST | json_type))
    assert (status, code) == (400, "malformed_json") and "too deeply" in msg


def test_a_long_bad_day_is_quoted_cut_to_40_characters(app: Flask, grr: dict[str, Any]) -> None:
    day = "2026-11-22" + "x" * 50
    item = {"id": _rid(), "day": day, "payload": 0}
    (error,) = _post(app.test_client(), grr, [item]).json["errors"]
    assert (
        error["reason"] == f"report #0: 'day' must be a date YYYY-MM-DD (no time), got {day[:40]!r}"
    )


def test_gunzip_keeps_the_cap_while_inflating() -> None:
    # A 64 MiB bomb against a 4 KiB cap: refused without ever holding the 64 MiB in memory.
    import tracemalloc
    import zlib

    packer = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    bomb = b"".join(packer.compress(zeros) for _ in range(64)) + packer.flush()
    tracemalloc.start()
    try:
        with pytest.raises(APIError) as info:
            gunzip_capped(bomb, 4096)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.status == 413
    assert peak < 4 << 20, f"inflating held {peak} bytes"


def test_gunzip_takes_any_gzip_window() -> None:
    # Back-references up to 32 KiB apart, the largest gzip window: a smaller inflate window
    # would refuse valid bodies.
    block = secrets.token_bytes(30_000)
    data = block + b"-" + block
    assert gunzip_capped(gzip.compress(data), len(data)) == data
    with pytest.raises(APIError) as info:
        gunzip_capped(gzip.compress(data), len(data) - 1)
    assert info.value.status == 413


def test_decode_body_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        decode_body(b"{}", "application/json", None, 100)  # type: ignore[misc]
    assert (
        decode_body(b"{}", content_type="application/json", content_encoding=None, max_bytes=100)
        == {}
    )


def test_stored_payload_text_is_canonical_json() -> None:
    assert payload_json(3) == "3"
    assert payload_json([1, 0, 2]) == "[1,0,2]"
    assert payload_json("QUJD") == '"QUJD"'
    assert json.loads(payload_json([5, 7])) == [5, 7]


def test_batch_result_starts_empty_and_counts_rejections() -> None:
    result = BatchResult()
    assert result.to_dict() == {"accepted": 0, "duplicate": 0, "rejected": 0, "errors": []}
    assert result.size == 0
    result.reject(3, "x" * 80, "bad")
    result.reject(4, 17, "worse")
    result.accepted, result.duplicate = 2, 1
    assert result.size == 5
    assert result.to_dict()["errors"] == [
        {"index": 3, "id": "x" * 64, "reason": "report #3: bad"},
        {"index": 4, "id": None, "reason": "report #4: worse"},
    ]


class _SlippingGRR(GeneralizedRR):
    """A mechanism whose parser raises a bare TypeError for payload 2 (a parser bug)."""

    def check_payload(self, payload: object) -> Payload:
        if payload == 2:
            raise TypeError("slipped")
        return super().check_payload(payload)

    def decode_many(self, payloads: Sequence[object]) -> np.ndarray:
        if 2 in payloads:
            raise InvalidReport("batch parser refuses", index=None)
        return super().decode_many(payloads)


def test_a_parser_that_slips_rejects_only_its_report() -> None:
    mech = _SlippingGRR(epsilon=1.0, domain=4)
    candidates = [(i, f"id-{i}", "w", p) for i, p in enumerate([0, 2, 1, 9, 3])]
    result = BatchResult()
    good, decoded = _check_payloads(mech, candidates, result)
    assert [c[0] for c in good] == [0, 2, 4]
    assert decoded.tolist() == [0, 1, 3]
    assert [(e["index"], e["reason"]) for e in result.errors] == [
        (1, "report #1: payload rejected by grr: slipped"),
        (3, f"report #3: {_reason(mech, 9)}"),
    ]


def _reason(mech: GeneralizedRR, payload: object) -> str:
    try:
        GeneralizedRR.check_payload(mech, payload)
    except InvalidReport as exc:
        return exc.reason
    raise AssertionError("payload accepted")
