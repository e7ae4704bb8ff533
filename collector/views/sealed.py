"""Sealed reports through a shuffler: ``POST /v1/sealed`` (ingest) and ``GET /v1/sealed/key``.

The shuffler forwards a permuted batch of messages, each one report sealed by a device to the
collector's public key (``collector.sealed``). This view opens them, groups them by campaign
and digest and hands each group to the ordinary ingest path (``collector.ingest.ingest_batch``,
unchanged): the same validation, the same idempotent report ids, one transaction per group. A
message that does not open, names an unknown campaign or a stale digest, or belongs to an archived
campaign, is rejected on its own: one campaign's refusal never refuses the others' messages (the
shuffler would resend the whole batch for ever).

The answer holds counts and, per refused message, its index and a reason that quotes nothing
from inside it: the shuffler must learn no payload. A storage failure answers 503 and the
shuffler resends the batch; reports stored before it count as duplicates, so nothing is counted
twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify

from collector.auth import require
from collector.errors import APIError, CampaignArchived
from collector.ingest import ingest_batch
from collector.sealed import SealedError, SealedKey, SealedReport
from collector.views.common import json_body, settings, storage

bp = Blueprint("sealed", __name__)


def install(app: Flask, config: Mapping[str, Any]) -> None:
    """Load the key named by ``sealed_key_file`` (if any) and register the endpoints."""
    path = config.get("sealed_key_file")
    app.extensions["ldp_sealed_key"] = SealedKey.load(path) if path else None
    app.register_blueprint(bp)


def takes_sealed_reports() -> bool:
    """Whether this collector has a sealed key (``LDP_SEALED_KEY_FILE``): a campaign may name a
    shuffler only then (``collector.campaigns.campaign_from_request``)."""
    return current_app.extensions.get("ldp_sealed_key") is not None


def _key() -> SealedKey:
    key: SealedKey | None = current_app.extensions.get("ldp_sealed_key")
    if key is None:
        raise APIError(
            404,
            "sealed_not_configured",
            "this collector takes no sealed reports: start it with LDP_SEALED_KEY_FILE set",
        )
    return key


@bp.get("/v1/sealed/key")
def public_key() -> Response:
    key = _key()
    from collector.sealed import ALGORITHM

    return jsonify({"algorithm": ALGORITHM, "public_key": key.public_b64})


@bp.post("/v1/sealed")
@require("ingest")
def upload_sealed() -> Response:
    key = _key()
    body = json_body()
    if type(body) is not dict or body.keys() != {"messages"} or type(body["messages"]) is not list:
        raise APIError(400, "invalid_batch", 'the body must be {"messages": [base64, ...]}')
    messages: list[object] = body["messages"]
    limit = settings()["max_batch_reports"]
    if len(messages) > limit:
        raise APIError(
            413,
            "too_large",
            f"a batch of {len(messages)} messages exceeds the limit of {limit}; split the batch "
            "(limit set by LDP_MAX_BATCH_REPORTS)",
        )
    answer: dict[str, Any] = {"accepted": 0, "duplicate": 0, "rejected": 0, "errors": []}

    def refuse(index: int, reason: str) -> None:
        answer["rejected"] += 1
        answer["errors"].append({"index": index, "reason": f"message #{index}: {reason}"})

    groups: dict[tuple[str, str], list[tuple[int, SealedReport]]] = {}
    for i, message in enumerate(messages):
        try:
            opened = key.open(message)
        except SealedError as exc:
            refuse(i, str(exc))
            continue
        groups.setdefault((opened.campaign, opened.digest), []).append((i, opened))
    for (campaign_id, digest), members in groups.items():
        campaign = storage().get_campaign(campaign_id)
        if campaign is None:
            for i, _ in members:
                refuse(i, "it names no campaign of this collector")
            continue
        try:
            result = ingest_batch(
                storage(),
                campaign,
                {"digest": digest, "reports": [m.report for _, m in members]},
                max_reports=limit,
            )
        except (APIError, CampaignArchived) as exc:
            # The whole group, and only it: a stale digest (409), an archived campaign (the
            # storage's CampaignArchived, a 410 on the direct path). Only the code is answered:
            # the error's message names the campaign, which the shuffler must not learn.
            for i, _ in members:
                refuse(i, f"refused for its campaign ({exc.code})")
            continue
        answer["accepted"] += result.accepted
        answer["duplicate"] += result.duplicate
        for error in result.errors:
            refuse(members[error["index"]][0], "the report failed validation")
    answer["errors"].sort(key=lambda e: e["index"])
    current_app.extensions["ldp_metrics"].observe_batch(len(messages))
    return jsonify(answer)


def openapi_paths(
    error: Any,
    json: Any,
    ingest: list[dict[str, list[str]]],
    *,
    content_encoding: dict[str, Any],
) -> dict[str, Any]:
    """The OpenAPI entries of these two endpoints (collector/openapi.py adds them, and the
    answers every operation shares: 401, 429, 503, ...)."""
    counts = {
        "type": "object",
        "required": ["accepted", "duplicate", "rejected", "errors"],
        "properties": {
            "accepted": {"type": "integer"},
            "duplicate": {"type": "integer"},
            "rejected": {"type": "integer"},
            "errors": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["index", "reason"],
                    "properties": {"index": {"type": "integer"}, "reason": {"type": "string"}},
                },
            },
        },
    }
    return {
        "/v1/sealed": {
            "post": {
                "operationId": "uploadSealed",
                "summary": "A shuffled batch of sealed reports (one report per message).",
                "security": ingest,
                "parameters": [content_encoding],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["messages"],
                                "additionalProperties": False,
                                "properties": {
                                    "messages": {"type": "array", "items": {"type": "string"}}
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "200": json(counts, "Counts; refused messages by index."),
                    "400": error("Malformed JSON or not a batch of messages."),
                    "404": error("This collector takes no sealed reports."),
                    "413": error("More messages or bytes than the limits."),
                    "415": error("Not application/json, or an unsupported encoding."),
                },
            }
        },
        "/v1/sealed/key": {
            "get": {
                "operationId": "sealedKey",
                "summary": "The collector's public key for sealed reports.",
                "security": [],
                "responses": {
                    "200": json(
                        {
                            "type": "object",
                            "required": ["algorithm", "public_key"],
                            "properties": {
                                "algorithm": {"type": "string"},
                                "public_key": {"type": "string"},
                            },
                        },
                        "The X25519 public key, base64.",
                    ),
                    "404": error("This collector takes no sealed reports."),
                },
            }
        },
    }
