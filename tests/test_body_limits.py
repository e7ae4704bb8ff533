"""``LDP_MAX_BODY_BYTES`` on both sides of the limit (collector/views/common.py), through a real
``ldp serve``: a body announced over the limit is refused before it is read, a chunked body
(no announced size) is read to one byte past the limit and refused there, and a body of
exactly the limit is taken either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.reports import batch, reports
from tests.support.server import running_collector
from tests.test_collector_hardening import _chunked, create, raw_request

LIMIT = 6000


def padded(body: bytes, size: int) -> bytes:
    """``body`` (a JSON object) with trailing spaces to exactly ``size`` bytes: the same JSON."""
    assert len(body) <= size
    return body + b" " * (size - len(body))


def head(srv_token: str, framing: str) -> bytes:
    return (
        "POST /v1/campaigns/limits/reports HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {srv_token}\r\nContent-Type: application/json\r\n"
        f"{framing}\r\nConnection: close\r\n\r\n"
    ).encode()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_of_the_limit_is_taken_and_one_byte_more_is_413(
    tmp_path: Path, chunked: bool
) -> None:
    with running_collector(tmp_path, env={"LDP_MAX_BODY_BYTES": str(LIMIT)}) as srv:
        campaign = create(srv, "limits")
        for size, count in ((None, 3), (LIMIT, 10), (LIMIT + 1, 11)):
            body = json.dumps(batch(campaign, reports(campaign, count))).encode()
            size = size or len(body)  # a small body as it comes, then the limit's two sides
            body = padded(body, size)
            if chunked:
                data = head(srv.ingest_token, "Transfer-Encoding: chunked") + _chunked(body, 1000)
            else:
                data = head(srv.ingest_token, f"Content-Length: {size}") + body
            status, _, answer = raw_request(srv, data)
            if size <= LIMIT:
                assert status == 200, answer
                assert json.loads(answer)["accepted"] == count
                continue
            assert status == 413, answer
            error = json.loads(answer)["error"]
            assert error["code"] == "too_large"
            # Refused by the size it announced, or for a chunked body where the read stopped.
            what = f"the body ({size} bytes)"
            if chunked:
                what = f"the chunked body (over {LIMIT} bytes)"
            assert error["message"].startswith(f"{what} exceeds the limit of {LIMIT}"), error
