"""The answers of the rate limit and of admission control are documented on every operation.

A real ``ldp serve`` with tiny limits: ``LDP_RATE_LIMIT=1`` counts every request that carries
an Authorization header, public routes included (/healthz, /readyz, /openapi.json,
/v1/sealed/key), so each of them can answer 429; ``LDP_MAX_INFLIGHT=1`` sheds every path but
/healthz with 503 ``overloaded`` while one request is in flight, /openapi.json and
/v1/sealed/key included. Each real answer is checked against the served document by
``tests.test_sweep5_openapi_conformance.Contract`` (status documented for the operation, not
only through ``default``; envelope; documented headers sent).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from tests.support.server import ADMIN_TOKEN, running_collector
from tests.test_sweep5_openapi_conformance import Contract

#: Deadline of the waits below (a refill of the bucket, the admission of the held request).
DEADLINE = 30.0
WRONG_TOKEN = {"Authorization": "Bearer not-a-token-of-this-collector"}


def _operations(contract: Contract) -> Iterator[tuple[str, str]]:
    """Every documented operation, on a campaign that does not exist (no side effects)."""
    for template, ops in contract.doc["paths"].items():
        for method in ops:
            yield method.upper(), template.replace("{campaign_id}", "nope")


def test_every_operation_documents_the_429_a_token_can_meet(tmp_path: Path) -> None:
    env = {"LDP_RATE_LIMIT": "1", "LDP_RATE_LIMIT_BURST": "1"}
    with running_collector(tmp_path, env=env) as srv:
        contract = Contract(requests.get(srv.url + "/openapi.json", timeout=10).json())
        for headers in (srv.headers("analyst"), WRONG_TOKEN):
            for method, path in _operations(contract):
                deadline = time.monotonic() + DEADLINE
                while True:  # the first request of a full bucket passes; the next one is 429
                    r = requests.request(
                        method, srv.url + path, headers=headers, json={}, timeout=30
                    )
                    contract.check(method, path, r, explicit=True)
                    if r.status_code == 429:
                        break
                    assert time.monotonic() < deadline, f"{method} {path}: never limited"
                assert r.json()["error"]["code"] == "rate_limited"
                assert int(r.headers["Retry-After"]) >= 1
        # Requests without a token are never limited (docs/HTTP_API.md).
        for _ in range(5):
            assert requests.get(srv.url + "/openapi.json", timeout=10).status_code == 200


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[str, Contract]]:
    """A one-slot collector whose slot is taken by a chunked upload that never ends."""
    env = {"LDP_MAX_INFLIGHT": "1", "LDP_BODY_TIMEOUT": "600", "LDP_RATE_LIMIT": "0"}
    with running_collector(tmp_path, env=env) as srv:
        contract = Contract(requests.get(srv.url + "/openapi.json", timeout=10).json())
        address = urlsplit(srv.url)
        assert address.hostname is not None and address.port is not None
        with socket.create_connection((address.hostname, address.port), timeout=30) as hold:
            hold.sendall(
                b"POST /v1/campaigns HTTP/1.1\r\nHost: collector\r\n"
                + f"Authorization: Bearer {ADMIN_TOKEN}\r\n".encode()
                + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b'4\r\n{"id\r\n'
            )
            # The held request is admitted at once, but asynchronously: wait until a request
            # is shed (deadline).
            deadline = time.monotonic() + DEADLINE
            while requests.get(srv.url + "/openapi.json", timeout=10).status_code != 503:
                assert time.monotonic() < deadline, "the held request was never admitted"
            yield srv.url, contract


def test_every_shed_operation_documents_its_503(held: tuple[str, Contract]) -> None:
    url, contract = held
    for method, path in _operations(contract):
        r = requests.request(method, url + path, json={}, timeout=30)
        contract.check(method, path, r, explicit=True)
        if path == "/healthz":  # collector.worker.NEVER_SHED
            assert r.status_code == 200
            assert "503" not in contract.operation(method, path)["responses"]
            continue
        assert r.status_code == 503, (method, path, r.text[:200])
        assert r.json()["error"]["code"] == "overloaded"
        assert int(r.headers["Retry-After"]) >= 0
