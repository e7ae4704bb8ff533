"""CORS: open only where a browser SDK needs it.

A browser app that embeds the SDK fetches its campaign configuration
(``GET /v1/campaigns/{id}``) and uploads reports (``POST /v1/campaigns/{id}/reports``). Those two
routes answer cross-origin requests and their preflights for the origins in ``cors_origins``
(``*`` by default: they are authorised by the ingest bearer token, never by cookies, so no
credentials are allowed). Every other route (campaign creation and listing, estimates, the
dashboard, metrics) sends no ``Access-Control-Allow-*`` header, so a browser on another origin
cannot read it. ``cors_origins = none`` turns CORS off everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from flask import Flask, Response, request

#: Flask endpoint names (blueprint.view) open to browsers, with the methods they allow.
BROWSER_ENDPOINTS = {
    "campaigns.get_campaign": "GET",
    "reports.upload_reports": "POST",
}
ALLOW_HEADERS = "Authorization, Content-Type, Content-Encoding, If-None-Match"
EXPOSE_HEADERS = "ETag, Retry-After"
MAX_AGE_SECONDS = 600
#: An origin as browsers send it (RFC 6454): a scheme (RFC 3986), ``://``, host and port.
_ORIGIN = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s]+")


def parse_origins(value: Any) -> tuple[str, ...]:
    """``"*"``, a comma-separated list of ``scheme://host[:port]`` origins, or ``none``."""
    if value is None or str(value).strip().lower() in ("", "none"):
        return ()
    items = [v.strip() for v in str(value).split(",") if v.strip()]
    for item in items:
        # What a browser sends: scheme://host[:port], never a path (an origin with one, or
        # with a scheme not starting with a letter, would silently match no request).
        if item != "*" and not _ORIGIN.fullmatch(item):
            raise ValueError(
                f"each origin must be '*' or like 'https://app.example.com' (no path), got {item!r}"
            )
    if "*" in items and len(items) > 1:
        raise ValueError("'*' cannot be combined with other origins")
    return tuple(items)


def install(app: Flask, settings: Mapping[str, Any]) -> None:
    """Add CORS headers to the browser endpoints' answers (errors and preflights included)."""
    origins = parse_origins(settings["cors_origins"])
    if not origins:
        return

    @app.after_request
    def cors(response: Response) -> Response:
        method = BROWSER_ENDPOINTS.get(request.endpoint or "")
        origin = request.headers.get("Origin")
        if method is None or not origin:
            return response
        if origins != ("*",) and origin not in origins:
            return response
        response.headers["Access-Control-Allow-Origin"] = "*" if origins == ("*",) else origin
        if origins != ("*",):
            response.vary.add("Origin")
        response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
        if request.method == "OPTIONS":
            response.headers["Access-Control-Allow-Methods"] = method
            response.headers["Access-Control-Allow-Headers"] = ALLOW_HEADERS
            response.headers["Access-Control-Max-Age"] = str(MAX_AGE_SECONDS)
        return response
