"""A liveness probe is answered by the worker's event loop, never queued behind uploads.

Before (2026-11-28) a ``GET /healthz`` was admitted past the in-flight limit but then waited in
the thread pool behind the requests queued before it: 8.02 s behind one upload waiting for the
write lock, long enough for an orchestrator's liveness check to restart a busy, healthy
collector. Real ``ldp serve`` on loopback; the write lock is held by another connection until
the probe has its answer, so without the event loop's answer the probe never gets one (its
read timeout bounds the test; no duration is asserted).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import requests

from collector.worker import RequestHead
from tests.support.postgres import write_lock_held
from tests.support.reports import batch, reports
from tests.support.server import CollectorProcess, running_collector
from tests.support.waiting import eventually
from tests.test_collector_hardening import create, raw_request, upload

#: One thread and one request in flight: an upload waiting for the lock fills the worker.
BUSY = {"LDP_THREADS": "1", "LDP_MAX_INFLIGHT": "1", "LDP_BUSY_TIMEOUT_MS": "60000"}


def _worker_full(srv: CollectorProcess) -> bool:
    """A request that needs no storage is shed: the worker's one slot is taken."""
    r = requests.get(srv.url + "/openapi.json", timeout=30)
    return r.status_code == 503 and r.json()["error"]["code"] == "overloaded"


def _upload_waiting(srv: CollectorProcess, body: Any) -> tuple[threading.Thread, list[Any]]:
    """An upload admitted and waiting for the write lock, in a thread: its answers list.

    The check itself takes the worker's slot for a moment, so an upload arriving then is shed
    (a 503 with nothing stored): it is sent again."""
    for _ in range(50):
        answers: list[Any] = []
        sender = threading.Thread(target=lambda a=answers: a.append(upload(srv, "probe", body)))
        sender.start()
        admitted = eventually(
            lambda a=answers: bool(a) or _worker_full(srv),
            bool,
            timeout=30,
            interval=0.2,
            what="the upload admitted or shed",
        )
        if admitted and not answers:
            return sender, answers
        sender.join(timeout=30)
        assert answers[0].status_code == 503, answers[0].text
    raise AssertionError("the upload was shed 50 times")


def test_healthz_answers_while_the_only_thread_waits_for_the_write_lock(tmp_path: Path) -> None:
    with running_collector(tmp_path, env=BUSY) as srv:
        campaign = create(srv, "probe")
        body = batch(campaign, reports(campaign, 5))
        with write_lock_held(srv.db_url):
            sender, answers = _upload_waiting(srv, body)
            probe = requests.get(srv.url + "/healthz", timeout=20)
            assert probe.status_code == 200
            assert probe.json() == {"status": "ok"}
            assert probe.headers["Content-Type"] == "application/json"
            assert "Date" in probe.headers
            # The upload is still waiting: the answer came from the event loop.
            assert sender.is_alive() and not answers
        sender.join(timeout=60)
        assert answers and answers[0].status_code == 200, answers
        assert answers[0].json()["accepted"] == 5


def test_a_probe_the_event_loop_does_not_answer_still_reaches_the_app(tmp_path: Path) -> None:
    """With a token (rate-limited) or a pipelined request behind it, ``/healthz`` is the app's:
    the same answer, every request answered."""
    env = {"LDP_RATE_LIMIT": "1", "LDP_RATE_LIMIT_BURST": "1"}
    with running_collector(tmp_path, env=env) as srv:
        with_token = requests.get(srv.url + "/healthz", headers=srv.headers("ingest"), timeout=10)
        assert with_token.status_code == 200 and with_token.json() == {"status": "ok"}
        # The app's rate limiter still counts a probe with a token; one without is never limited.
        statuses = [
            requests.get(srv.url + "/healthz", headers=srv.headers("ingest"), timeout=10)
            for _ in range(5)
        ]
        assert 429 in [r.status_code for r in statuses], [r.text for r in statuses]
        assert requests.get(srv.url + "/healthz", timeout=10).status_code == 200
        status, headers, answer = raw_request(
            srv,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        assert status == 200 and answer.count(b'{"status":"ok"}') == 2, answer
        status, headers, answer = raw_request(
            srv, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        assert status == 200 and json.loads(answer) == {"status": "ok"}
        assert headers["connection"] == "close"


PLAIN = b"GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\n\r\n"


@pytest.mark.parametrize(
    "data",
    [
        PLAIN,
        b"GET /healthz HTTP/1.0\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\n" + b"a:\r\n" * 32 + b"\r\n",
    ],
)
def test_a_plain_probe_is_the_event_loops(data: bytes) -> None:
    assert RequestHead.plain_probe(data)


@pytest.mark.parametrize(
    "data",
    [
        PLAIN + b"GET /healthz HTTP/1.1\r\n\r\n",  # a request pipelined behind it
        PLAIN[:-2],  # not yet whole
        b"GET /healthz HTTP/9.9\r\n\r\n",  # the parser's 400
        b"GET /healthz HTTP/1.1\r\nX-Big: " + b"b" * 2000 + b"\r\n\r\n",  # over the cap
        b"GET /healthz HTTP/1.1\r\nX Y: 1\r\n\r\n",  # a malformed header name
        b"GET /healthz HTTP/1.1\r\nHost: \xff\r\n\r\n",  # a byte outside visible ASCII
        b"GET /healthz HTTP/1.1\r\nAuthorization: Bearer t\r\n\r\n",  # rate-limited
        b"GET /healthz HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
        b"HEAD /healthz HTTP/1.1\r\n\r\n",
        b"GET /healthz?x=1 HTTP/1.1\r\n\r\n",
        b"GET /healthzz HTTP/1.1\r\n\r\n",
        b"GET /readyz HTTP/1.1\r\n\r\n",
        # 240 fields in under 1 KiB: gunicorn refuses more than 100 (the review's case)
        b"GET /healthz HTTP/1.1\r\n" + b"a:\r\n" * 240 + b"\r\n",
        b"GET /healthz HTTP/1.1\r\n" + b"a:\r\n" * 33 + b"\r\n",
    ],
)
def test_anything_else_goes_to_the_parser_and_the_app(data: bytes) -> None:
    assert not RequestHead.plain_probe(data)
