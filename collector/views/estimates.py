"""``GET /v1/campaigns/{id}/estimates`` (analyst): a thin view over the estimate service.

It parses the query, asks :func:`collector.answers.campaign_answer` (the one estimate query,
shared with the dashboard and ``ldp estimate``) and returns the typed answer as JSON
(:func:`aggregator.schema.to_json`; its schema in /openapi.json comes from the same classes),
or CSV when the client sends ``Accept: text/csv``. An open-domain campaign also takes ``top``
(discoveries listed) and ``candidate`` (repeated: strings whose counts to estimate).

This view only parses the query text (days, numbers; an unknown or repeated parameter is a
400): the query's checks (``from`` after ``to``, the ``level`` range, ``top``/``candidate``
on a campaign that is not open-domain) are :func:`aggregator.service.request_options`, the ones
the dashboard and ``ldp estimate --db`` use, with the same messages.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from flask import Blueprint, Response, jsonify, request

import aggregator
from aggregator.openended_answers import MAX_CANDIDATES, MAX_TOP
from aggregator.service import request_options
from client_sdk.errors import InvalidParameter
from collector.answers import answer_json, campaign_answer
from collector.auth import require
from collector.errors import APIError
from collector.http_errors import estimate_refusal
from collector.views.common import campaign_or_404, storage, utf8_query

bp = Blueprint("estimates", __name__)

_TOP = re.compile(r"[0-9]{1,4}")  # ASCII digits only (str.isdigit also takes "²")
DEFAULT_LEVEL = 0.95
#: Every query parameter the endpoint reads (its OpenAPI entry lists the same, tested). Any
#: other is a 400: a misspelt ``form=`` would otherwise answer over every window, silently.
QUERY_PARAMETERS = ("from", "to", "level", "postprocess", "top", "candidate")


#: The one parameter a query may repeat (each one a string to count).
REPEATABLE = ("candidate",)


def _known_parameters() -> None:
    unknown = sorted(set(request.args) - set(QUERY_PARAMETERS))
    if unknown:
        names = ", ".join(repr(name[:40]) for name in unknown[:5])
        raise APIError(
            400,
            "invalid_parameter",
            f"unknown query parameter(s) {names}; this endpoint takes "
            f"{', '.join(QUERY_PARAMETERS)} (docs/HTTP_API.md)",
        )
    # ``?from=A&from=B`` would silently take A: a repeated parameter is refused like a
    # misspelt one (only ``candidate`` repeats).
    for name in QUERY_PARAMETERS:
        given = len(request.args.getlist(name))
        if given > 1 and name not in REPEATABLE:
            raise APIError(
                400,
                "invalid_parameter",
                f"query parameter {name!r} given {given} times; give it once "
                f"(only {', '.join(map(repr, REPEATABLE))} repeats)",
            )


def _day(name: str) -> dt.date | None:
    text = request.args.get(name)
    if text is None:
        return None
    try:
        if len(text) != 10:
            raise ValueError
        return dt.date.fromisoformat(text)
    except ValueError:
        raise APIError(
            400, "invalid_parameter", f"'{name}' must be a day YYYY-MM-DD, got {text[:40]!r}"
        ) from None


def _level() -> float:
    """``level`` as a number; its range is checked by the service (``request_options``)."""
    text = request.args.get("level")
    if text is None:
        return DEFAULT_LEVEL
    try:
        return float(text)
    except ValueError:
        raise APIError(
            400, "invalid_parameter", f"'level' must be a number in (0, 1), got {text[:40]!r}"
        ) from None


def _top() -> int | None:
    """``top``: how many discoveries an open-domain answer lists (None: the default); its
    range is checked by the service (``request_options``)."""
    text = request.args.get("top")
    if text is None:
        return None
    if not _TOP.fullmatch(text):
        raise APIError(
            400,
            "invalid_parameter",
            f"'top' must be an integer in [1, {MAX_TOP}], got {text[:40]!r}",
        )
    return int(text)


def _candidates() -> tuple[str, ...]:
    """``candidate`` (repeated): strings whose counts an open-domain answer estimates."""
    given = request.args.getlist("candidate")
    if len(given) > MAX_CANDIDATES:
        raise APIError(
            400,
            "invalid_parameter",
            f"at most {MAX_CANDIDATES} 'candidate' parameters per query, got {len(given)}",
        )
    return tuple(given)


@bp.get("/v1/campaigns/<campaign_id>/estimates")
@require("analyst")
def estimates(campaign_id: str) -> Response:
    campaign = campaign_or_404(campaign_id)
    utf8_query()
    _known_parameters()
    start, end, level = _day("from"), _day("to"), _level()
    # Cut at 40 characters: a refusal quotes it (every method's name is shorter).
    postprocess = request.args.get("postprocess", aggregator.DEFAULT_POSTPROCESS)[:40]
    # Open-domain campaigns only (docs/MECHANISMS.md §24): the discoveries listed, candidates.
    top, candidates = _top(), _candidates()
    try:
        options: dict[str, Any] = request_options(
            campaign.kind,
            start=start,
            end=end,
            level=level,
            postprocess=postprocess,
            top=top,
            candidates=candidates,
        )
        answer = campaign_answer(storage(), campaign, start=start, end=end, **options)
    except (aggregator.NotEnoughReports, InvalidParameter) as exc:
        raise estimate_refusal(exc) from None
    body = answer_json(campaign, answer)  # with the central (ε, δ) of a shuffled campaign
    if request.accept_mimetypes.best_match(["application/json", "text/csv"]) == "text/csv":
        return Response(aggregator.to_csv(body), mimetype="text/csv")
    return jsonify(body)
