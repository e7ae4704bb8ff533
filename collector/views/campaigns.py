"""``/v1/campaigns``: create and archive (admin), list (analyst), get the device configuration
(ingest)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from collector import clock
from collector.auth import require
from collector.campaigns import campaign_from_request
from collector.errors import APIError, CampaignExists
from collector.retention import stored_fields
from collector.views.common import campaign_or_404, json_body, settings, storage
from collector.views.sealed import takes_sealed_reports

bp = Blueprint("campaigns", __name__)


@bp.post("/v1/campaigns")
@require("admin")
def create_campaign() -> tuple[Response, int]:
    campaign = campaign_from_request(
        json_body(),
        today=clock.today(),
        max_retention_days=settings()["max_retention_days"],
        sealed_key=takes_sealed_reports(),
    )
    try:
        storage().create_campaign(campaign)
    except CampaignExists:
        raise APIError(
            409,
            "campaign_exists",
            f"campaign {campaign.id!r} already exists and campaigns are immutable; "
            "create a new campaign with another id",
        ) from None
    response = jsonify({**campaign.resource(), "archived": None})
    response.headers["Location"] = f"/v1/campaigns/{campaign.id}"
    response.set_etag(campaign.digest)
    return response, 201


@bp.get("/v1/campaigns")
@require("analyst")
def list_campaigns() -> Response:
    rows = storage().list_campaigns()
    archived = storage().archived()
    stored = stored_fields(storage())
    return jsonify(
        {
            "campaigns": [
                {**c.resource(), "archived": archived.get(c.id), "reports": n, **stored[c.id]}
                for c, n in rows
            ]
        }
    )


@bp.get("/v1/campaigns/<campaign_id>")
@require("ingest", "analyst")
def get_campaign(campaign_id: str) -> Response:
    campaign = campaign_or_404(campaign_id)
    if campaign.digest in request.if_none_match:
        response = Response(status=304)
    else:
        archived = storage().archived().get(campaign.id)
        response = jsonify({**campaign.resource(), "archived": archived})
    response.set_etag(campaign.digest)
    response.headers["Cache-Control"] = "no-cache"
    return response


@bp.post("/v1/campaigns/<campaign_id>/archive")
@require("admin")
def archive_campaign(campaign_id: str) -> Response:
    """Stop the campaign's ingest for good (410 ``campaign_archived`` from then on); its
    estimates stay readable. Archiving again keeps the first date."""
    campaign = campaign_or_404(campaign_id)
    day = storage().archive_campaign(campaign, clock.today().isoformat())
    return jsonify({**campaign.resource(), "archived": day})
