"""The one way an HTTP error is answered, by the collector and by the shuffler (``ldp shuffle``):
the JSON envelope ``{"error": {"code", "message", "status"}}`` of :class:`APIError`."""

from __future__ import annotations

from flask import Response, jsonify
from werkzeug.exceptions import HTTPException

from collector.errors import APIError

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
