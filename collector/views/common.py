"""Helpers shared by the views: the storage, settings, JSON bodies, campaign lookup."""

from __future__ import annotations

from typing import Any

from flask import current_app, request

from collector.campaigns import Campaign
from collector.errors import APIError
from collector.ingest import decode_body, too_large
from collector.storage import Storage


def storage() -> Storage:
    return current_app.extensions["ldp_storage"]


def settings() -> dict[str, Any]:
    return current_app.config["LDP"]


def json_body() -> object:
    """The request's JSON body (gzip allowed), with the size limit enforced before and after."""
    limit = settings()["max_body_bytes"]
    if request.content_length is not None and request.content_length > limit:
        raise too_large(f"the body ({request.content_length} bytes)", limit, "LDP_MAX_BODY_BYTES")
    if (
        request.content_length is None
        and "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    ):
        # A chunked body has no announced size: read one byte past the limit to know. (Flask's
        # own limit cut such a body short, which then failed as malformed JSON: a 400.)
        raw = request.environ["wsgi.input"].read(limit + 1)
        if len(raw) > limit:
            raise too_large(f"the chunked body (over {limit} bytes)", limit, "LDP_MAX_BODY_BYTES")
    else:
        raw = request.get_data(cache=False)
    return decode_body(
        raw,
        content_type=request.headers.get("Content-Type"),
        content_encoding=request.headers.get("Content-Encoding"),
        max_bytes=limit,
    )


def campaign_or_404(campaign_id: str) -> Campaign:
    campaign = storage().get_campaign(campaign_id)
    if campaign is None:
        raise APIError(
            404,
            "unknown_campaign",
            f"no campaign {campaign_id!r}; list them with GET /v1/campaigns",
        )
    return campaign


def utf8_query() -> None:
    """Refuse a query string whose percent-decoded bytes are not UTF-8 (400
    ``invalid_parameter``). Werkzeug keeps an undecodable escape as its text, so
    ``?candidate=%FF`` was counted as the three characters ``%FF``: another string's count
    under the one the analyst asked about."""
    from urllib.parse import unquote_to_bytes

    for pair in request.query_string.split(b"&"):
        for part in pair.split(b"=", 1):
            try:
                unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError:
                raise APIError(
                    400,
                    "invalid_parameter",
                    "the query string is not UTF-8 once percent-decoded (a string to count "
                    "is sent as its UTF-8 bytes, percent-encoded)",
                ) from None
