"""The shuffler's ``POST /v1/submit`` in process (docs/SHUFFLE.md, "The shuffler's HTTP side"):
what it takes (202, staged), what it refuses (400 ``invalid_message`` naming the rule, 413 past
the body cap) and that a refusal stages nothing. Real staging file; no collector behind it.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from collector.sealed import MAX_MESSAGE_BYTES
from shuffler import Staging
from shuffler.app import MAX_MESSAGE_CHARS, create_app

#: docs/HTTP_API.md: a sealed message is at most 65,536 characters of base64.
DOCUMENTED_MAX = 65_536
LENGTH_RULE = 'send {"message": "<base64 sealed box>"}'
BASE64_RULE = "the message must be standard base64"


@pytest.fixture()
def staged(tmp_path: Path) -> Iterator[tuple[FlaskClient, Staging]]:
    staging = Staging(tmp_path / "staging.db")
    yield create_app(staging).test_client(), staging
    staging.close()


def _submit(client: FlaskClient, body: Any) -> Any:
    return client.post("/v1/submit", json=body)


def _refused(answer: Any, status: int, code: str, rule: str) -> None:
    assert answer.status_code == status, answer.get_data()[:200]
    error = answer.get_json()["error"]
    assert (error["status"], error["code"]) == (status, code)
    assert rule in error["message"]


def test_a_base64_message_is_staged_and_answered_202(staged: tuple[FlaskClient, Staging]) -> None:
    client, staging = staged
    message = base64.b64encode(os.urandom(48)).decode()
    answer = _submit(client, {"message": message})
    assert answer.status_code == 202
    assert answer.get_json() == {"queued": True}
    assert [m for _, m in staging.all()] == [message]


def test_the_length_limit_is_the_collectors_and_the_documented_one(
    staged: tuple[FlaskClient, Staging],
) -> None:
    """Exactly 65,536 characters are taken; 65,540 (still whole base64 quads, and a body well
    under the cap) are refused by the length rule, not the base64 rule, and not with 413."""
    client, staging = staged
    assert MAX_MESSAGE_CHARS == MAX_MESSAGE_BYTES == DOCUMENTED_MAX
    assert _submit(client, {"message": "A" * DOCUMENTED_MAX}).status_code == 202
    _refused(
        _submit(client, {"message": "A" * (DOCUMENTED_MAX + 4)}),
        400,
        "invalid_message",
        LENGTH_RULE,
    )
    assert staging.pending() == 1


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        ({"message": ""}, LENGTH_RULE),
        ({"message": 12}, LENGTH_RULE),
        ({"other": "QUFBQQ=="}, LENGTH_RULE),
        (["QUFBQQ=="], LENGTH_RULE),
        ({"message": "A"}, BASE64_RULE),
        ({"message": "QUFBQQ"}, BASE64_RULE),
        ({"message": "QUFB QQ=="}, BASE64_RULE),
        ({"message": "QUFBQQ==\n"}, BASE64_RULE),
    ],
    ids=["empty", "number", "no-message", "list", "one-char", "unpadded", "space", "newline"],
)
def test_a_bad_submission_is_400_naming_its_rule_and_stages_nothing(
    staged: tuple[FlaskClient, Staging], body: Any, rule: str
) -> None:
    client, staging = staged
    _refused(_submit(client, body), 400, "invalid_message", rule)
    assert staging.pending() == 0


def _raw(client: FlaskClient, data: bytes, content_type: str = "application/json") -> Any:
    return client.post("/v1/submit", data=data, content_type=content_type)


def test_a_body_past_the_cap_is_413_and_stages_nothing(staged: tuple[FlaskClient, Staging]) -> None:
    """The body may hold the longest message and 1,024 bytes of JSON around it: a body of
    exactly 65,536 + 1,024 bytes is read (and its too long message refused by the length rule);
    one byte more is refused before it is parsed."""
    client, staging = staged
    frame = len(b'{"message": ""}')
    for size, status, code in [
        (DOCUMENTED_MAX + 1024, 400, "invalid_message"),
        (DOCUMENTED_MAX + 1025, 413, "too_large"),
    ]:
        data = b'{"message": "' + b"A" * (size - frame) + b'"}'
        assert len(data) == size
        _refused(_raw(client, data), status, code, LENGTH_RULE if status == 400 else "")
    assert staging.pending() == 0


@pytest.mark.parametrize(
    ("data", "content_type"),
    [
        (b"not json", "application/json"),
        (b'{"message": "QUFBQQ=="}', "text/plain"),
        (b"", "application/json"),
    ],
    ids=["not-json", "not-a-json-type", "empty"],
)
def test_a_body_that_is_not_json_gets_the_message_rule(
    staged: tuple[FlaskClient, Staging], data: bytes, content_type: str
) -> None:
    """Not JSON, or not sent as JSON: the same 400 ``invalid_message`` with the rule, not the
    framework's 400 ``bad_request`` or 415."""
    client, staging = staged
    _refused(_raw(client, data, content_type), 400, "invalid_message", LENGTH_RULE)
    assert staging.pending() == 0


def test_healthz_answers_ok(staged: tuple[FlaskClient, Staging]) -> None:
    client, _ = staged
    answer = client.get("/healthz")
    assert (answer.status_code, answer.get_json()) == (200, {"status": "ok"})
