"""The one error envelope, built directly (``collector/http_errors.py``): its body, status and
headers, for the collector's own errors and for werkzeug's (the served answers are checked in
``test_collector_app.py`` and ``test_collector_http.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from werkzeug.exceptions import (
    HTTPException,
    ImATeapot,
    MethodNotAllowed,
    RequestEntityTooLarge,
    ServiceUnavailable,
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
