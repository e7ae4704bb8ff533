"""The one error envelope, built directly (``collector/http_errors.py``): its body, status and
headers, for the collector's own errors and for werkzeug's (the served answers are checked in
``test_collector_app.py`` and ``test_collector_http.py``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from werkzeug.exceptions import (
    HTTPException,
    ImATeapot,
    MethodNotAllowed,
    RequestEntityTooLarge,
    ServiceUnavailable,
    default_exceptions,
)

from collector.errors import APIError
from collector.http_errors import HTTP_CODES, error_response, http_error_response


@pytest.fixture
def context() -> Iterator[None]:
    app = Flask(__name__)
    with app.app_context():
        yield


def test_an_api_error_is_the_envelope_with_its_status_and_headers(context: None) -> None:
    exc = APIError(429, "rate_limited", "slow down", headers={"Retry-After": "7"})
    response = error_response(exc)
    assert response.status_code == 429
    assert response.get_json() == {
        "error": {"code": "rate_limited", "message": "slow down", "status": 429}
    }
    assert response.headers["Retry-After"] == "7"
    assert response.mimetype == "application/json"


def test_werkzeug_errors_get_stable_codes_and_keep_their_headers(context: None) -> None:
    response = http_error_response(MethodNotAllowed(valid_methods=["GET", "HEAD"]))
    assert response.status_code == 405
    body = response.get_json()["error"]
    assert (body["code"], body["status"]) == ("method_not_allowed", 405)
    assert body["message"] == MethodNotAllowed.description
    assert response.headers["Allow"] == "GET, HEAD"
    # werkzeug's HTML content type does not replace the envelope's JSON one
    assert response.mimetype == "application/json"
    assert response.headers["Content-Length"] == str(len(response.get_data()))


def test_the_message_can_replace_werkzeugs_description(context: None) -> None:
    response = http_error_response(RequestEntityTooLarge(), message="at most 6000 bytes")
    body = response.get_json()["error"]
    assert body == {"code": "too_large", "message": "at most 6000 bytes", "status": 413}


def test_a_status_without_a_stable_code_uses_werkzeugs_name(context: None) -> None:
    assert 418 not in HTTP_CODES and 503 not in HTTP_CODES
    assert http_error_response(ImATeapot()).get_json()["error"]["code"] == "i'm_a_teapot"
    assert (
        http_error_response(ServiceUnavailable()).get_json()["error"]["code"]
        == "service_unavailable"
    )


def test_an_error_without_a_status_is_a_500(context: None) -> None:
    exc = HTTPException(description="no status")
    response = http_error_response(exc)
    assert response.status_code == 500
    assert response.get_json()["error"]["status"] == 500
    assert response.get_json()["error"]["message"] == "no status"


def test_an_error_without_a_description_says_its_name(context: None) -> None:
    exc = MethodNotAllowed(valid_methods=["GET"])
    exc.description = None
    assert http_error_response(exc).get_json()["error"]["message"] == "Method Not Allowed"


def _documented() -> dict[int, str]:
    """The stable codes docs/HTTP_API.md lists for the framework's own errors."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "HTTP_API.md").read_text()
    start = text.index("The framework's own errors have stable codes:")
    paragraph = text[start : text.index("HTTP_CODES`)", start)]
    return {int(status): code for status, code in re.findall(r"(\d{3})\s+`([a-z_]+)`", paragraph)}


#: Every other status answers with werkzeug's own name, lower-cased with underscores.
STABLE = _documented()


def test_the_documented_codes_are_the_table() -> None:
    assert len(STABLE) == 9
    assert HTTP_CODES == STABLE


@pytest.mark.parametrize("status", sorted(default_exceptions))
def test_every_werkzeug_error_gets_its_code(context: None, status: int) -> None:
    exc = default_exceptions[status]()
    expected = STABLE.get(status, exc.name.lower().replace(" ", "_"))
    body = http_error_response(exc).get_json()["error"]
    assert (body["code"], body["status"]) == (expected, status)


def test_the_message_is_keyword_only(context: None) -> None:
    with pytest.raises(TypeError):
        http_error_response(RequestEntityTooLarge(), "positional")  # type: ignore[misc]
