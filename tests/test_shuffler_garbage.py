"""The shuffler under bad input from both sides: devices that send garbage to ``/v1/submit``,
and a collector (or whatever answers at its address) whose 200 carries no readable counts.

A garbage submission must be a 4xx in the one error shape and stage nothing. A garbage answer
must leave the messages staged, and the background forwarder must outlive it and every other
failure: a shuffler that still answers 202 but has stopped forwarding would hold every report
it takes from then on. The collector side is a fake: the real collector cannot answer garbage.
"""

from __future__ import annotations

import base64
import logging
import os
import sqlite3
import time
from json import dumps, loads
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shuffler import Forwarder, Staging
from shuffler.app import create_app
from tests.support.answers import answer
from tests.support.garbage import json_values


def message() -> str:
    return base64.b64encode(os.urandom(24)).decode()


# -- devices' side: POST /v1/submit -----------------------------------------------------------


def test_deeply_nested_json_is_a_400_and_stages_nothing(tmp_path: Path) -> None:
    """A body of ``[[[[...`` under the size cap made the JSON parser recurse out of its stack:
    it was a 500."""
    staging = Staging(tmp_path / "s.db")
    client = create_app(staging).test_client()
    for body in ("[" * 5000 + "]" * 5000, '{"message": ' + "[" * 5000 + "]" * 5000 + "}"):
        resp = client.post("/v1/submit", data=body, content_type="application/json")
        assert resp.status_code == 400, resp.data
        assert resp.json["error"]["code"] == "invalid_message"
    assert staging.pending() == 0
    staging.close()


@settings(
    max_examples=150,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    body=st.one_of(
        json_values().map(dumps),
        st.dictionaries(
            st.just("message"), json_values(extra=["aGVsbG8=", "AAAA", "AA==A", "a b"]), min_size=1
        ).map(dumps),
        st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    ),
    content_type=st.sampled_from(["application/json", "text/plain", ""]),
)
def test_garbage_submissions_are_4xx_in_the_error_shape(
    tmp_path: Path, body: str, content_type: str
) -> None:
    """Anything but ``{"message": <non-empty base64>}`` is refused, and only that is staged."""
    staging = Staging(tmp_path / f"g{os.urandom(4).hex()}.db")
    client = create_app(staging).test_client()
    resp = client.post("/v1/submit", data=body, content_type=content_type)
    try:
        valid = loads(body)["message"]
        base64.b64decode(valid, validate=True)
        valid_message = isinstance(valid, str) and valid != ""
    except Exception:
        valid_message = False
    if valid_message and content_type == "application/json":
        assert resp.status_code == 202
        assert staging.pending() == 1
    else:
        assert 400 <= resp.status_code < 500, (resp.status_code, resp.data[:200])
        error = resp.json["error"]
        assert set(error) == {"code", "message", "status"} and error["status"] == resp.status_code
        assert staging.pending() == 0
    staging.close()


def test_the_shuffler_answers_errors_as_the_collector_does(tmp_path: Path) -> None:
    """One error shape and one set of codes: the shuffler had its own copy, which named a 413
    ``request_entity_too_large`` (the collector's ``too_large``) and put werkzeug's status line
    into the message."""
    from collector.app import create_app as collector_app

    staging = Staging(tmp_path / "s.db")
    shuffler = create_app(staging).test_client()
    app = collector_app(
        {"database": str(tmp_path / "c.db")}
        | {f"{role}_token": role * 8 for role in ("admin", "analyst", "ingest")}
    )
    collector = app.test_client()
    huge = dumps({"message": "A" * (10 * 1024 * 1024)})
    for path, method, body, status, code in [
        ("/nowhere", "get", None, 404, "not_found"),
        ("/healthz", "post", None, 405, "method_not_allowed"),
        ("/v1/submit", "post", huge, 413, "too_large"),
    ]:
        answer_ = getattr(shuffler, method)(path, data=body, content_type="application/json")
        assert answer_.status_code == status
        assert answer_.json == {
            "error": {"code": code, "message": answer_.json["error"]["message"], "status": status}
        }
        assert not answer_.json["error"]["message"].startswith(str(status))
        theirs = getattr(collector, method)(path if status != 405 else "/healthz")
        if status != 413:
            assert theirs.status_code == status and theirs.json["error"]["code"] == code
        if status == 405:
            assert "GET" in answer_.headers["Allow"]
    assert staging.pending() == 0
    staging.close()
    app.extensions["ldp_storage"].close()


# -- the collector's side: the forwarder ------------------------------------------------------


class Answers:
    """The forwarder's ``requests.Session`` in place of the network: answers 200 with each of
    ``bodies`` in turn (a str is sent as text, anything else as JSON), then the true counts."""

    headers: dict[str, str] = {}

    def __init__(self, bodies: list[Any]) -> None:
        self.bodies = list(bodies)
        self.received: list[list[str]] = []

    def request(self, method: str, url: str, json: Any, **kwargs: Any) -> Any:
        messages = list(json["messages"])
        body = self.bodies.pop(0) if self.bodies else None
        if body is None:
            self.received.append(messages)
            body = {"accepted": len(messages), "duplicate": 0, "rejected": 0}
        return answer(200, text=body if isinstance(body, str) else dumps(body))


#: 200 answers without the counts: a proxy's page, another service, a broken collector.
UNREADABLE = [
    "<html>gateway</html>",
    "",
    [],
    [1, 2, 3],
    "null",
    {"accepted": None, "duplicate": 0, "rejected": 0},
    {"accepted": "20", "duplicate": 0, "rejected": 0},
    {"accepted": 20.0, "duplicate": 0, "rejected": 0},
    {"accepted": True, "duplicate": 0, "rejected": 0},
    {"accepted": -1, "duplicate": 0, "rejected": 0},
    {"accepted": 20, "duplicate": 0},
    '{"accepted": Infinity, "duplicate": 0, "rejected": 0}',
    '{"accepted": 1e400, "duplicate": 0, "rejected": 0}',
    "[" * 5000 + "]" * 5000,
]


@pytest.mark.parametrize("body", UNREADABLE, ids=range(len(UNREADABLE)))
def test_an_unreadable_200_keeps_the_batch_staged(tmp_path: Path, body: Any) -> None:
    """Before, a list, null, a null count or an infinite one raised TypeError or OverflowError,
    which killed the forwarding thread; "20", 20.0, true and -1 were taken as counts. Now each
    is a RuntimeError naming the answer, nothing is forgotten, and the next round sends the
    same batch."""
    staging = Staging(tmp_path / "s.db")
    batch = [message() for _ in range(20)]
    for m in batch:
        staging.add(m)
    fwd = Forwarder(staging, "http://collector", "t" * 20, batch_size=20)
    answers = Answers([body])
    fwd._session = answers  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match="collector answered 200 without the counts"):
        fwd.forward_once()
    assert staging.pending() == 20
    result = fwd.forward_once()
    assert (result.forwarded, result.accepted) == (20, 20)
    assert sorted(answers.received[0]) == sorted(batch)
    assert staging.pending() == 0
    staging.close()


def test_the_forwarding_thread_outlives_every_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Unreadable answers and a staging file that fails once: the thread logs each failure,
    keeps the batch, and forwards it once the collector answers properly."""
    staging = Staging(tmp_path / "s.db")
    batch = [message() for _ in range(10)]
    for m in batch:
        staging.add(m)
    fwd = Forwarder(staging, "http://collector", "t" * 20, batch_size=10)
    answers = Answers([[], {"accepted": None}, '{"accepted": 1e400}'])
    fwd._session = answers  # type: ignore[assignment]
    real_all = staging.all
    failures = [sqlite3.OperationalError("disk I/O error")]

    def flaky_all(*, released: bool | None = None) -> list[tuple[int, str]]:
        if failures:
            raise failures.pop()
        return real_all(released=released)

    staging.all = flaky_all  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="shuffler.forwarder"):
        fwd.start(retry_seconds=0.02)
        deadline = time.monotonic() + 30
        while staging.pending() and time.monotonic() < deadline:
            time.sleep(0.02)
        alive = fwd._thread is not None and fwd._thread.is_alive()
        fwd.stop()
    assert alive
    assert staging.pending() == 0
    assert sorted(answers.received[0]) == sorted(batch)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "unexpectedly" in logged  # the staging failure
    assert logged.count("without the counts") == 3
    staging.close()


def test_an_answer_past_the_cap_is_not_read_and_the_batch_stays(tmp_path: Path) -> None:
    """The shuffler reads the collector's answers through the SDK's ``request_capped``: a body
    past ``MAX_ANSWER_BYTES`` (read whole before, into the shuffler's memory) is refused."""
    from client_sdk.transport import MAX_ANSWER_BYTES

    staging = Staging(tmp_path / "s.db")
    for _ in range(10):
        staging.add(message())
    fwd = Forwarder(staging, "http://collector", "t" * 20, batch_size=10)
    fwd._session = Answers([" " * (MAX_ANSWER_BYTES + 1)])  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match=f"more than {MAX_ANSWER_BYTES} bytes"):
        fwd.forward_once()
    assert staging.pending() == 10
    assert fwd.forward_once().forwarded == 10
    staging.close()
