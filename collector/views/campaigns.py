"""``/v1/campaigns``: create (admin), list (analyst), get the device configuration (ingest)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from collector.auth import require
from collector.campaigns import campaign_from_request
from collector.errors import APIError, CampaignExists
from collector.views.common import campaign_or_404, json_body, storage

bp = Blueprint("campaigns", __name__)


@bp.post("/v1/campaigns")
@require("admin")
def create_campaign() -> tuple[Response, int]:
    campaign = campaign_from_request(json_body())
    try:
        storage().create_campaign(campaign)
    except CampaignExists:
        raise APIError(
            409,
            "campaign_exists",
            f"campaign {campaign.id!r} already exists and campaigns are immutable; "
            "create a new campaign with another id",
        ) from None
    response = jsonify(campaign.resource())
    response.headers["Location"] = f"/v1/campaigns/{campaign.id}"
    response.set_etag(campaign.digest)
    return response, 201


@bp.get("/v1/campaigns")
@require("analyst")
def list_campaigns() -> Response:
    rows = storage().list_campaigns()
    return jsonify({"campaigns": [{**c.resource(), "reports": n} for c, n in rows]})


@bp.get("/v1/campaigns/<campaign_id>")
@require("ingest", "analyst")
def get_campaign(campaign_id: str) -> Response:
    campaign = campaign_or_404(campaign_id)
    if campaign.digest in request.if_none_match:
        response = Response(status=304)
    else:
        response = jsonify(campaign.resource())
    response.set_etag(campaign.digest)
    response.headers["Cache-Control"] = "no-cache"
    return response
