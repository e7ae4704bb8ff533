"""``POST /v1/sealed``'s batch checks (collector/views/sealed.py) through the real Flask app on a
real SQLite file: what is not a batch of messages, the batch limit on both sides, and the
OpenAPI document's word for the body."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask.testing import FlaskClient

from collector import create_app
from tests.support.server import TOKENS

LIMIT = 3
INGEST = {"Authorization": f"Bearer {TOKENS['ingest_token']}"}


@pytest.fixture
def client(tmp_path: Path) -> FlaskClient:
    app = create_app(
        {
            "database": str(tmp_path / "collector.db"),
            "sealed_key_file": str(tmp_path / "sealed.key"),
            "max_batch_reports": LIMIT,
            **TOKENS,
        }
    )
    return app.test_client()


@pytest.mark.parametrize(
    "body",
    [{}, {"reports": []}, {"messages": "AAAA"}, {"messages": [], "extra": 1}, ["AAAA"], "AAAA"],
)
def test_a_body_that_is_not_a_batch_of_messages_is_400(client: FlaskClient, body: object) -> None:
    r = client.post("/v1/sealed", json=body, headers=INGEST)
    assert r.status_code == 400, r.get_json()
    assert r.get_json()["error"]["code"] == "invalid_batch"


def test_a_batch_of_the_limit_is_read_and_one_more_is_413(client: FlaskClient) -> None:
    # Messages that do not open: each is refused on its own, the batch is answered.
    r = client.post("/v1/sealed", json={"messages": ["AAAA"] * LIMIT}, headers=INGEST)
    assert r.status_code == 200, r.get_json()
    assert r.get_json()["rejected"] == LIMIT
    r = client.post("/v1/sealed", json={"messages": ["AAAA"] * (LIMIT + 1)}, headers=INGEST)
    assert r.status_code == 413
    assert r.get_json()["error"]["code"] == "too_large"


def test_the_openapi_document_requires_the_body(client: FlaskClient) -> None:
    spec = client.get("/openapi.json").get_json()
    post = spec["paths"]["/v1/sealed"]["post"]
    assert post["requestBody"]["required"] is True
    schema = post["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["messages"] and schema["additionalProperties"] is False
