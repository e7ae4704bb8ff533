"""The one way an HTTP error is answered, by the collector and by the shuffler (``ldp shuffle``):
the JSON envelope ``{"error": {"code", "message", "status"}}`` of :class:`APIError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import Response, jsonify
from werkzeug.exceptions import HTTPException

from client_sdk.errors import InvalidParameter
from collector.errors import APIError

if TYPE_CHECKING:
    from aggregator.errors import NotEnoughReports

#: Stable machine codes for werkzeug's own errors (its names, lower-cased, for the others).
HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "too_large",
    415: "unsupported_media_type",
    422: "unprocessable",
}

#: Errors an HTTP server answers itself, before the app (the collector's worker and the
#: shuffler's server): status -> (code, what the message starts with).
SERVER_ERRORS = {
    400: ("bad_request", "malformed HTTP request"),
    414: ("uri_too_long", "the request line is too long"),
    431: ("headers_too_large", "the request headers are too large or too many"),
    505: ("http_version_not_supported", "unsupported HTTP version"),
}


def error_response(exc: APIError) -> Response:
    """``exc`` as a Flask response: the envelope, its status and its headers."""
    response = jsonify(exc.body())
    response.status_code = exc.status
    for name, value in exc.headers.items():
        response.headers[name] = value
    return response


def http_error_response(exc: HTTPException, *, message: str | None = None) -> Response:
    """A werkzeug error (404, 405, 413, ...) in the envelope, keeping its headers (``Allow``);
    ``message`` replaces werkzeug's description."""
    status = exc.code or 500
    code = HTTP_CODES.get(status, exc.name.lower().replace(" ", "_"))
    response = error_response(APIError(status, code, message or exc.description or exc.name))
    for name, value in exc.get_headers():
        if name.lower() not in ("content-type", "content-length"):
            response.headers[name] = value
    return response


def estimate_refusal(exc: NotEnoughReports | InvalidParameter) -> APIError:
    """The error an estimate query that cannot be answered is refused with: fewer reports than
    the campaign's minimum is 422 ``not_enough_reports``, a query the service refuses is 400
    ``invalid_parameter``; the message is the exception's. What ``GET
    /v1/campaigns/{id}/estimates`` answers for the same refusal, and the status of the
    dashboard's page (``tests/test_sweep4_analyst_dashboard_status.py`` holds the two alike)."""
    # Imported here: the shuffler imports this module and never loads the aggregator.
    from aggregator.errors import NotEnoughReports

    if isinstance(exc, NotEnoughReports):
        return APIError(422, "not_enough_reports", str(exc))
    return APIError(400, "invalid_parameter", str(exc))
