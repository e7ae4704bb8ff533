"""The OpenAPI 3 document served at ``GET /openapi.json``, written as data.

It covers every endpoint with its role, parameters, request and response schemas; the limits
(reports per batch) come from the running collector's settings. The answers that do not depend
on the endpoint (401/403 of the token check, 429 of the rate limit, 503 of storage and of
admission control, the HTTP server's own 414/431 and other errors) are added to every operation
in one place, :func:`_add_common_responses`, from the code that answers them.
docs/HTTP_API.md is the prose version of the same contract; a test checks that each documented
path is served.
"""

from __future__ import annotations

from typing import Any

from aggregator.openended_answers import MAX_CANDIDATES, MAX_TOP
from aggregator.schema import json_schema
from aggregator.service import EstimateAnswer
from client_sdk.mechanisms import MAX_EPSILON, MIN_EPSILON
from client_sdk.mechanisms.openended import MAX_LENGTH_LIMIT
from collector.campaigns import (
    DEFAULT_HORIZON_DAYS,
    DEFAULT_MIN_REPORTS,
    DEFAULT_RETENTION_DAYS,
    LABEL_PATTERN,
    MAX_DESCRIPTION,
    MAX_HORIZON_DAYS,
    MAX_MIN_REPORTS,
    MAX_RETENTION_DAYS,
    MAX_SHUFFLER_URL,
)
from collector.errors import ErrorEnvelope
from collector.settings import DEFAULT_MAX_BATCH_REPORTS

LABEL_SCHEMA: dict[str, Any] = {"type": "string", "pattern": LABEL_PATTERN}
#: A numeric campaign's [low, high] (low < high, finite); values are clipped into it.
_BOUNDS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {"type": "number"},
    "minItems": 2,
    "maxItems": 2,
    "description": "Numeric campaigns: [low, high]; devices clip their value into it.",
}

#: A numeric campaign's (or numeric attribute's) declared values, which ``auto`` averages the
#: mean's variance over (``client_sdk.mechanisms.numeric.check_expected_values``).
_EXPECTED_VALUES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["mean", "sd"],
    "additionalProperties": False,
    "properties": {
        "mean": {"type": "number"},
        "sd": {"type": "number", "minimum": 0},
    },
}


def _attributes_schema(*, declared: bool) -> dict[str, Any]:
    """A multi-attribute campaign's attributes: name -> labels or {"bounds": [low, high]}.
    ``declared``: the create request's form, whose numeric attributes may declare
    ``expected`` values; a stored config never holds them (its digest is the chosen
    mechanisms')."""
    numeric: dict[str, Any] = {"bounds": _BOUNDS_SCHEMA, "grid": {"type": "integer"}}
    description = (
        "Multi-attribute campaigns (mechanism spl, smp, rsfd or auto): each attribute's "
        "labels, or {bounds: [low, high]} for a numeric one. One report per device covers "
        "them all under one epsilon."
    )
    if declared:
        numeric["expected"] = {
            **_EXPECTED_VALUES_SCHEMA,
            "description": "Optional: {mean, sd} of the attribute's values (clipped to its "
            "bounds; sd at most sqrt((mean - low)(high - mean))). Its mean mechanism is then "
            "the one of smallest variance averaged over such values instead of the worst "
            "case, and auto weighs the attribute by that. Not stored: the campaign's "
            "mechanism holds the chosen per-attribute mechanisms.",
        }
        description += " A numeric attribute may declare its expected values {mean, sd}."
    return {
        "type": "object",
        "minProperties": 2,
        "additionalProperties": {
            "oneOf": [
                {"type": "array", "items": LABEL_SCHEMA, "minItems": 2, "uniqueItems": True},
                {
                    "type": "object",
                    "required": ["bounds"],
                    "additionalProperties": False,
                    "properties": numeric,
                },
            ]
        },
        "description": description,
    }


#: A multi-attribute campaign's (stored) attributes: name -> labels or {"bounds": [low, high]}.
_ATTRIBUTES_SCHEMA = _attributes_schema(declared=False)
#: The same in a create request: a numeric attribute may add "expected": {mean, sd}.
_ATTRIBUTES_CREATE_SCHEMA = _attributes_schema(declared=True)
#: Declared pairs of categorical attributes that get joint tables.
_PAIRS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
    "description": "Multi-attribute campaigns: pairs of categorical attributes whose joint "
    "table (with standard errors) the estimates include.",
}

#: An open-domain campaign's value length: bytes of UTF-8 after NFC normalisation.
_MAX_LENGTH_SCHEMA: dict[str, Any] = {
    "type": "integer",
    "minimum": 1,
    "maximum": MAX_LENGTH_LIMIT,
    "description": "Open-domain campaigns (mechanism pem, cms or hcms): the longest value "
    "in bytes of UTF-8 after NFC normalisation; devices report any such string.",
}

JSON = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}, **extra}


def _error(description: str, **extra: Any) -> dict[str, Any]:
    return _json(_ref("Error"), description, **extra)


_UNAUTHORIZED = _error(
    "Missing or unknown bearer token (code unauthorized).",
    headers={"WWW-Authenticate": {"schema": {"type": "string"}}},
)
_FORBIDDEN = _error("A valid token of a role this endpoint does not admit (code forbidden).")
_UNKNOWN = _error("No campaign with this id (code unknown_campaign).")
_UNAVAILABLE = _error(
    "Storage busy or unavailable (code storage_unavailable), or this worker at capacity "
    "(code overloaded, LDP_MAX_INFLIGHT); nothing was stored. Retry after the given seconds.",
    headers={"Retry-After": {"schema": {"type": "integer", "minimum": 0}}},
)
_RATE_LIMITED = _error(
    "Too many requests with this token (LDP_RATE_LIMIT); code rate_limited. Every request that "
    "carries an Authorization header counts, on any route (wrong tokens share one bucket); "
    "requests without one are never limited. Retry after the given seconds.",
    headers={"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
)
#: Answered by the HTTP server before any route is matched (collector/worker.py), so on every
#: path: a request line or headers over gunicorn's limits.
_URI_TOO_LONG = _error("The request line is too long (code uri_too_long).")
_HEADERS_TOO_LARGE = _error("The request headers are too large or too many (headers_too_large).")
_OTHER = _error(
    "Any other error, in the same envelope: a malformed HTTP request (400 bad_request), an "
    "unsupported Transfer-Encoding (501 not_implemented) or Expect header (417 "
    "expectation_failed), an unexpected failure (500 internal_error, logged)."
)
#: A campaign's ETag: its digest, quoted (``GET /v1/campaigns/{id}`` with If-None-Match).
_ETAG: dict[str, Any] = {
    "schema": {"type": "string"},
    "description": "The campaign's digest, quoted.",
}
#: Every role's security scheme: an operation that admits them all never answers 403.
_ALL_ROLES = frozenset({"adminToken", "analystToken", "ingestToken"})
#: The request body of every JSON upload may be gzipped (collector.ingest.decode_body).
CONTENT_ENCODING: dict[str, Any] = {
    "name": "Content-Encoding",
    "in": "header",
    "required": False,
    "description": "gzip: the body is gzipped JSON (capped at LDP_MAX_BODY_BYTES unzipped).",
    "schema": {"type": "string", "enum": ["gzip", "identity"]},
}
_CAMPAIGN_ID = {
    "name": "campaign_id",
    "in": "path",
    "required": True,
    "description": "The campaign id (a slug).",
    "schema": {"type": "string"},
}


_CENTRAL_FIELDS: dict[str, Any] = {
    "central_epsilon": {
        "type": "number",
        "description": (
            "Campaigns sent through a shuffler only: the central epsilon of the shuffled "
            "release (amplification by shuffling, summed over windows)."
        ),
    },
    "central_delta": {"type": "number", "description": "With central_epsilon: its delta."},
}


def _schemas(max_batch: int) -> dict[str, Any]:
    schemas: dict[str, Any] = {
        "MechanismConfig": {
            "type": "object",
            "description": "Exactly Mechanism.config(); client_sdk.mechanisms.from_config. "
            "A categorical mechanism has a domain, a numeric one bounds (low, high), an "
            "open-domain one max_length.",
            "required": ["mechanism", "epsilon", "params"],
            "properties": {
                "mechanism": {"type": "string"},
                "epsilon": {"type": "number"},
                "domain": {"type": "array", "items": LABEL_SCHEMA, "minItems": 2},
                "bounds": _BOUNDS_SCHEMA,
                "attributes": _ATTRIBUTES_SCHEMA,
                "max_length": _MAX_LENGTH_SCHEMA,
                "params": {"type": "object"},
            },
        },
        "CampaignCreate": {
            "type": "object",
            "required": ["id"],
            "description": "A categorical campaign gives domain; a numeric one bounds; a "
            "multi-attribute one attributes (and optional pairs); an open-domain one "
            "max_length (and its sketch's width, depth in params).",
            "additionalProperties": False,
            "properties": {
                "id": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$"},
                "bounds": _BOUNDS_SCHEMA,
                "attributes": _ATTRIBUTES_CREATE_SCHEMA,
                "pairs": _PAIRS_SCHEMA,
                "max_length": _MAX_LENGTH_SCHEMA,
                "description": {"type": "string", "maxLength": MAX_DESCRIPTION},
                "domain": {
                    "type": "array",
                    "items": LABEL_SCHEMA,
                    "minItems": 2,
                    "uniqueItems": True,
                    "description": "Ordered, distinct value labels (at least 2), without "
                    "control characters.",
                },
                "mechanism": {
                    "type": "string",
                    "default": "auto",
                    "description": "rr, grr, sue, oue, olh, hr, ss, a preset or auto; with "
                    "attributes: spl, smp, rsfd or auto; with max_length: pem (discovers heavy "
                    "hitters; also auto), cms or hcms (count candidate strings).",
                },
                "epsilon": {
                    "type": "number",
                    "minimum": MIN_EPSILON,
                    "maximum": MAX_EPSILON,
                    "description": "Each report's epsilon (client_sdk.mechanisms.MIN_EPSILON "
                    "to MAX_EPSILON); 'auto' and every mechanism need it.",
                },
                "params": {"type": "object", "description": "Mechanism parameters."},
                "expected": {
                    "oneOf": [
                        {"type": "array", "items": {"type": "number", "minimum": 0}},
                        _EXPECTED_VALUES_SCHEMA,
                    ],
                    "description": (
                        "Optional. A categorical campaign: expected frequencies (one weight "
                        "per domain value) that auto, the subset size and OLH's g average the "
                        "estimator variance over; uniform when absent. A numeric campaign with "
                        "mechanism auto: {mean, sd} of the values (clipped to the bounds) that "
                        "auto averages the mean's variance over instead of taking the worst "
                        "case. The resolved mechanism and parameters are stored, so devices "
                        "rebuild the same mechanism. Not with attributes: a numeric attribute "
                        "declares its own (attributes.NAME.expected)."
                    ),
                },
                "window": {"type": "string", "enum": ["day", "week"], "default": "day"},
                "horizon_days": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_HORIZON_DAYS,
                    "default": DEFAULT_HORIZON_DAYS,
                },
                "min_reports": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_MIN_REPORTS,
                    "default": DEFAULT_MIN_REPORTS,
                },
                "shuffler": {
                    "type": "string",
                    "pattern": "^https?://",
                    "maxLength": MAX_SHUFFLER_URL,
                    "description": "URL of the ldp shuffle devices send reports through.",
                },
                "retention_days": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_RETENTION_DAYS,
                    "description": (
                        "Days reports are kept (tallies are kept for good); at least "
                        "horizon_days, at most the server's LDP_MAX_RETENTION_DAYS. Default: "
                        f"max({DEFAULT_RETENTION_DAYS}, horizon_days). Not part of the digest."
                    ),
                },
            },
        },
        "Campaign": {
            "type": "object",
            "required": [
                "id",
                "description",
                "window",
                "horizon_days",
                "min_reports",
                "created",
                "mechanism",
                "realised_epsilon",
                "digest",
            ],
            "properties": {
                "id": {"type": "string"},
                "description": {"type": "string"},
                "window": {"type": "string", "enum": ["day", "week"]},
                "horizon_days": {"type": "integer"},
                "min_reports": {"type": "integer"},
                "retention_days": {
                    "type": "integer",
                    "nullable": True,
                    "description": "Days reports are kept; null: created before retention "
                    "existed (kept until LDP_MAX_RETENTION_DAYS).",
                },
                "created": {"type": "string", "format": "date"},
                "mechanism": _ref("MechanismConfig"),
                "realised_epsilon": {"type": "number"},
                "digest": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                "kind": {
                    "type": "string",
                    "enum": ["mean", "distribution", "multi", "open_domain"],
                    "description": "Numeric, multi-attribute and open-domain campaigns only: "
                    "what the mechanism estimates.",
                },
                "bounds": _BOUNDS_SCHEMA,
                "max_length": _MAX_LENGTH_SCHEMA,
                "attributes": _ATTRIBUTES_SCHEMA,
                "pairs": _PAIRS_SCHEMA,
                "shuffler": {"type": "string"},
                "archived": {
                    "type": "string",
                    "format": "date",
                    "nullable": True,
                    "description": "The date the campaign was archived (no more ingest), or null.",
                },
            },
        },
        "CampaignList": {
            "type": "object",
            "required": ["campaigns"],
            "properties": {
                "campaigns": {
                    "type": "array",
                    "items": {
                        "allOf": [
                            _ref("Campaign"),
                            {
                                "type": "object",
                                "required": ["reports"],
                                "properties": {
                                    "reports": {"type": "integer", "minimum": 0},
                                    "stored_reports": {
                                        "type": "integer",
                                        "minimum": 0,
                                        "description": "Reports stored, as measured by the last "
                                        "retention sweep (not a live count: 0 until a sweep "
                                        "runs after the campaign's first report).",
                                    },
                                    "stored_bytes": {
                                        "type": "integer",
                                        "minimum": 0,
                                        "description": "Their bytes: report id + payload.",
                                    },
                                    "reports_deleted_before": {
                                        "type": "string",
                                        "format": "date",
                                        "nullable": True,
                                        "description": "Reports of windows starting before "
                                        "this date were deleted by retention (tallies kept).",
                                    },
                                },
                            },
                        ]
                    },
                }
            },
        },
        "Report": {
            "type": "object",
            "description": "One report as a device sends it (the valid form).",
            "required": ["id", "day", "payload"],
            "additionalProperties": False,
            "properties": {
                "id": {"type": "string", "pattern": "^[A-Za-z0-9_-]{16,64}$"},
                "day": {"type": "string", "format": "date"},
                "payload": {
                    "description": "The mechanism's wire form: base64 bits, an int or a list; "
                    "a multi-attribute report is a list of the attributes' forms (smp: "
                    "[attribute index, form]).",
                    "anyOf": [
                        {"type": "string"},
                        {"type": "integer"},
                        {"type": "array", "items": {"type": "integer"}},
                        {
                            "type": "array",
                            "items": {
                                "anyOf": [
                                    {"type": "string"},
                                    {"type": "integer"},
                                    {"type": "array", "items": {"type": "integer"}},
                                ]
                            },
                        },
                    ],
                },
            },
        },
        "ReportBatch": {
            "type": "object",
            "required": ["digest", "reports"],
            "additionalProperties": False,
            "properties": {
                "digest": {"type": "string", "description": "The campaign's digest."},
                "reports": {
                    "type": "array",
                    "maxItems": max_batch,
                    "description": (
                        "Reports of the form Report. Each one is validated on its own: an "
                        "invalid one is listed in the answer's errors (the batch still gets "
                        "200), so items of any shape are accepted by the request."
                    ),
                    "items": {},
                },
            },
        },
        "BatchResult": {
            "type": "object",
            "required": ["accepted", "duplicate", "rejected", "errors"],
            "properties": {
                "accepted": {"type": "integer", "minimum": 0},
                "duplicate": {"type": "integer", "minimum": 0},
                "rejected": {"type": "integer", "minimum": 0},
                "errors": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["index", "id", "reason"],
                        "properties": {
                            "index": {"type": "integer", "minimum": 0},
                            "id": {"type": "string", "nullable": True},
                            "reason": {"type": "string"},
                        },
                    },
                },
            },
        },
    }
    # The estimate answers' schemas come from the dataclasses the service returns.
    generated: dict[str, Any] = {}
    schemas["Error"] = json_schema(ErrorEnvelope, generated)
    estimates = json_schema(EstimateAnswer, generated)
    # Added by the collector, not the service (collector/shuffled.py): shuffled campaigns only.
    for name in (
        "FrequencyEstimates",
        "MeanEstimates",
        "DistributionEstimates",
        "MultiEstimates",
        "OpenDomainEstimates",
    ):
        generated[name]["properties"].update(_CENTRAL_FIELDS)
    schemas.update(generated)
    schemas["Estimates"] = {
        "description": "The answer of the estimate service; its kind follows the campaign's "
        "mechanism: frequency (categorical), mean, distribution or multi (several "
        "attributes per device: per-attribute estimates and joint tables) or open_domain "
        "(discovered heavy hitters and candidate counts).",
        **estimates,
    }
    return schemas


def openapi_document(max_batch_reports: int = DEFAULT_MAX_BATCH_REPORTS) -> dict[str, Any]:
    """The OpenAPI 3.0 description of every collector endpoint."""
    import aggregator

    postprocessors = tuple(getattr(aggregator, "POSTPROCESS_METHODS", ("none",)))
    default_postprocess = getattr(aggregator, "DEFAULT_POSTPROCESS", "none")
    admin: list[dict[str, list[str]]] = [{"adminToken": []}]
    analyst: list[dict[str, list[str]]] = [{"analystToken": []}, {"adminToken": []}]
    ingest: list[dict[str, list[str]]] = [{"ingestToken": []}, {"adminToken": []}]
    ingest_or_analyst: list[dict[str, list[str]]] = [
        {"ingestToken": []},
        {"analystToken": []},
        {"adminToken": []},
    ]
    paths: dict[str, Any] = {
        "/v1/campaigns": {
            "post": {
                "operationId": "createCampaign",
                "summary": "Create a campaign (immutable; same id again is 409).",
                "security": admin,
                "parameters": [CONTENT_ENCODING],
                "requestBody": {
                    "required": True,
                    "content": {JSON: {"schema": _ref("CampaignCreate")}},
                },
                "responses": {
                    "201": _json(
                        _ref("Campaign"),
                        "The resolved campaign.",
                        headers={
                            "Location": {"schema": {"type": "string"}},
                            "ETag": _ETAG,
                        },
                    ),
                    "400": _error("Invalid campaign settings."),
                    "409": _error("A campaign with this id exists (code campaign_exists)."),
                    "413": _error("Body over the size limit."),
                    "415": _error("Not application/json."),
                },
            },
            "get": {
                "operationId": "listCampaigns",
                "summary": "Every campaign with its number of stored reports.",
                "security": analyst,
                "responses": {
                    "200": _json(_ref("CampaignList"), "The campaigns, ordered by id."),
                },
            },
        },
        "/v1/campaigns/{campaign_id}": {
            "get": {
                "operationId": "getCampaign",
                "summary": "What a device needs to perturb, with an ETag (the digest).",
                "security": ingest_or_analyst,
                "parameters": [
                    _CAMPAIGN_ID,
                    {
                        "name": "If-None-Match",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": _json(
                        _ref("Campaign"),
                        "The campaign.",
                        headers={"ETag": _ETAG},
                    ),
                    "304": {
                        "description": "Unchanged since the ETag given in If-None-Match.",
                        "headers": {"ETag": _ETAG},
                    },
                    "404": _UNKNOWN,
                },
            }
        },
        "/v1/campaigns/{campaign_id}/archive": {
            "post": {
                "operationId": "archiveCampaign",
                "summary": "Archive a campaign: ingest stops (410), estimates stay readable.",
                "security": admin,
                "parameters": [_CAMPAIGN_ID],
                "responses": {
                    "200": _json(_ref("Campaign"), "The campaign, with its archive date."),
                    "404": _UNKNOWN,
                },
            }
        },
        "/v1/campaigns/{campaign_id}/reports": {
            "post": {
                "operationId": "uploadReports",
                "summary": "Upload a batch of reports (idempotent by report id; gzip allowed).",
                "security": ingest,
                "parameters": [_CAMPAIGN_ID, CONTENT_ENCODING],
                "requestBody": {
                    "required": True,
                    "content": {JSON: {"schema": _ref("ReportBatch")}},
                },
                "responses": {
                    "200": _json(_ref("BatchResult"), "Counts; invalid reports in errors."),
                    "400": _error("Malformed JSON or gzip, or not a batch object."),
                    "404": _UNKNOWN,
                    "409": _error(
                        "The digest does not match the campaign (stale_config), or the campaign "
                        "is collected through a shuffler (shuffled_campaign)."
                    ),
                    "410": _error(
                        "The campaign is archived (campaign_archived); drop its reports."
                    ),
                    "413": _error("More reports or bytes than the limits."),
                    "415": _error("Not application/json, or an unsupported encoding."),
                },
            }
        },
        "/v1/campaigns/{campaign_id}/estimates": {
            "get": {
                "operationId": "getEstimates",
                "summary": "Estimates over a range of windows: frequencies, a mean, a histogram, "
                "per-attribute estimates and joint tables, or discovered strings.",
                "security": analyst,
                "parameters": [
                    _CAMPAIGN_ID,
                    {
                        "name": "from",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "format": "date"},
                    },
                    {
                        "name": "to",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "format": "date"},
                    },
                    {
                        "name": "level",
                        "in": "query",
                        "required": False,
                        "description": "Confidence level of every interval and of the "
                        "significance tests. Any number in (0, 1); the tests use alpha = 1 - "
                        "max(level, 2^-53) (below 2^-53, 1 - level rounds to 1).",
                        "schema": {
                            "type": "number",
                            "exclusiveMinimum": True,
                            "minimum": 0,
                            "exclusiveMaximum": True,
                            "maximum": 1,
                            "default": 0.95,
                        },
                    },
                    {
                        "name": "postprocess",
                        "in": "query",
                        "required": False,
                        "description": "Categorical campaigns' consistency post-processing "
                        "(docs/AGGREGATOR.md); checked by name, ignored by numeric, "
                        "multi-attribute and open-domain campaigns.",
                        "schema": {
                            "type": "string",
                            "enum": list(postprocessors),
                            "default": default_postprocess,
                        },
                    },
                    {
                        "name": "top",
                        "in": "query",
                        "required": False,
                        "description": "Open-domain campaigns only: most discoveries listed "
                        "(default 10). It also sets how wide the discovery walk searches (it "
                        "keeps max(3 top, 48) prefixes per level), so a larger top tests more "
                        "strings: a higher significance threshold (Bonferroni over the strings "
                        "tested), and counts that can shift a little (prefixes solved jointly "
                        "for their collisions). Any other kind of campaign: 400.",
                        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_TOP},
                    },
                    {
                        "name": "candidate",
                        "in": "query",
                        "required": False,
                        "description": "Open-domain campaigns only (repeat it): a string whose "
                        "estimated count the answer lists under candidates. Distinct after NFC "
                        "normalisation: a string given twice (or two forms of one) is a 400.",
                        "style": "form",
                        "explode": True,
                        "schema": {
                            "type": "array",
                            "items": {"type": "string"},
                            "maxItems": MAX_CANDIDATES,
                            "uniqueItems": True,
                        },
                    },
                ],
                "responses": {
                    "200": {
                        "description": "Estimates with standard errors and CIs (CSV when the "
                        "client sends Accept: text/csv).",
                        "content": {
                            JSON: {"schema": _ref("Estimates")},
                            "text/csv": {"schema": {"type": "string"}},
                        },
                    },
                    "400": _error(
                        "A bad query parameter: unknown, given twice (all but candidate), "
                        "out of range, from after to, or top/candidate on a campaign that is "
                        "not open-domain."
                    ),
                    "404": _UNKNOWN,
                    "414": _error(
                        "The request line is too long (code uri_too_long): ask about fewer or "
                        "shorter candidates per request."
                    ),
                    "422": _error("Fewer reports than min_reports (not_enough_reports)."),
                },
            }
        },
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Liveness: the process answers.",
                "security": [],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["status"],
                            "properties": {"status": {"type": "string"}},
                        },
                        "Alive.",
                    )
                },
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "summary": "Readiness: storage reachable and writable.",
                "security": [],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["status"],
                            "properties": {"status": {"type": "string"}},
                        },
                        "Ready.",
                    ),
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus text format metrics.",
                "description": "Needs a token of any role unless LDP_METRICS_PUBLIC is true.",
                "security": [
                    {"analystToken": []},
                    {"ingestToken": []},
                    {"adminToken": []},
                    {},
                ],
                "responses": {
                    "200": {
                        "description": "Metrics.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document.",
                "security": [],
                "responses": {"200": _json({"type": "object"}, "OpenAPI 3 document.")},
            }
        },
    }
    from collector.views.sealed import openapi_paths

    paths.update(openapi_paths(_error, _json, ingest, content_encoding=CONTENT_ENCODING))
    for path, item in paths.items():
        for operation in item.values():
            _add_common_responses(path, operation)
    bearer = {"type": "http", "scheme": "bearer"}
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "ldp-telemetry collector",
            "version": "1",
            "description": (
                "Collects locally differentially private reports; stores per report only the "
                "campaign, window, report id and payload. Errors: {error: {code, message, "
                "status}}. The admin token is accepted wherever analyst or ingest is."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": _schemas(max_batch_reports),
            "securitySchemes": {
                "adminToken": {**bearer, "description": "LDP_ADMIN_TOKEN"},
                "analystToken": {**bearer, "description": "LDP_ANALYST_TOKEN"},
                "ingestToken": {**bearer, "description": "LDP_INGEST_TOKEN"},
            },
        },
    }


def _add_common_responses(path: str, operation: dict[str, Any]) -> None:
    """The answers one definition gives every operation, from what answers them.

    401 wherever a token is required (``collector.auth.require``), 403 unless every role is
    admitted; 429 everywhere (``collector.ratelimit`` counts any request with a token, public
    routes included); 503 everywhere but the paths the worker never sheds
    (``collector.worker.NEVER_SHED``); 414, 431 and any other error from the HTTP server.
    """
    from collector.worker import NEVER_SHED

    responses = operation["responses"]
    security = operation.get("security", [])
    if any(security):  # a requirement with a scheme (``{}`` alone: no token needed)
        responses["401"] = _UNAUTHORIZED
        admitted = {scheme for requirement in security for scheme in requirement}
        if not _ALL_ROLES <= admitted:
            responses["403"] = _FORBIDDEN
    responses["429"] = _RATE_LIMITED
    if path not in NEVER_SHED:
        responses["503"] = _UNAVAILABLE
    responses.setdefault("414", _URI_TOO_LONG)
    responses["431"] = _HEADERS_TOO_LARGE
    responses["default"] = _OTHER
    operation["responses"] = dict(sorted(responses.items()))
