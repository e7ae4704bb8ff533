"""The shuffler's HTTP side: ``POST /v1/submit`` (one sealed message) and ``GET /healthz``.

Nothing about a request is kept or logged: no address, no user agent, no time; the message is
checked only for shape (base64, size), since the shuffler cannot and must not read it.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from collector.errors import APIError
from collector.http_errors import error_response, http_error_response
from collector.sealed import MAX_MESSAGE_BYTES
from shuffler.forwarder import Forwarder
from shuffler.staging import Staging

#: The collector's own limit on one sealed message (base64 characters): what the collector would
#: reject after forwarding is refused here at once, before it takes a place in a batch.
MAX_MESSAGE_CHARS = MAX_MESSAGE_BYTES


def create_app(staging: Staging, forwarder: Forwarder | None = None) -> Flask:
    """A WSGI app that stages each submitted message durably before answering 202."""
    app = Flask("shuffler")
    app.config["MAX_CONTENT_LENGTH"] = MAX_MESSAGE_CHARS + 1024

    def error(status: int, code: str, message: str) -> Response:
        return error_response(APIError(status, code, message))

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        return http_error_response(exc)

    @app.post("/v1/submit")
    def submit() -> Response:
        try:
            body: Any = request.get_json(silent=True)
        except RecursionError:  # "[[[[...": silent=True covers only what json calls invalid
            body = None
        message = body.get("message") if isinstance(body, dict) else None
        if isinstance(message, str) and len(message) > MAX_MESSAGE_CHARS:
            return error(
                400,
                "invalid_message",
                f"the message is {len(message):,} characters, over the limit of "
                f"{MAX_MESSAGE_CHARS:,} characters of base64 (the collector's limit on one sealed "
                'message); send {"message": "<base64 sealed box>"} with one report sealed to '
                "the collector's key",
            )
        if not isinstance(message, str) or not message:
            return error(
                400,
                "invalid_message",
                'send {"message": "<base64 sealed box>"} with one report sealed to the '
                "collector's key (GET /v1/sealed/key on the collector)",
            )
        try:
            base64.b64decode(message, validate=True)
        except (binascii.Error, ValueError):
            return error(400, "invalid_message", "the message must be standard base64")
        pending = staging.add(message)
        if forwarder is not None:
            forwarder.notify(pending)
        response = jsonify({"queued": True})
        response.status_code = 202
        return response

    @app.get("/healthz")
    def healthz() -> Response:
        return jsonify({"status": "ok"})

    return app
