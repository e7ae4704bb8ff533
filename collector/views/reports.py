"""``POST /v1/campaigns/{id}/reports``: idempotent batch upload (ingest token)."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

from collector.auth import require
from collector.errors import APIError
from collector.ingest import ingest_batch
from collector.views.common import campaign_or_404, json_body, settings, storage

bp = Blueprint("reports", __name__)


@bp.post("/v1/campaigns/<campaign_id>/reports")
@require("ingest")
def upload_reports(campaign_id: str) -> Response:
    campaign = campaign_or_404(campaign_id)
    if campaign.shuffler:  # its central (ε, δ) holds only if every report was shuffled
        raise APIError(
            409,
            "shuffled_campaign",
            f"campaign {campaign.id!r} is collected through its shuffler {campaign.shuffler}: "
            "send each report sealed to it (client_sdk does), not here",
        )
    body = json_body()
    result = ingest_batch(storage(), campaign, body, max_reports=settings()["max_batch_reports"])
    current_app.extensions["ldp_metrics"].observe_batch(result.size)
    return jsonify(result.to_dict())
