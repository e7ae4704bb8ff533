"""The analyst dashboard at ``/dashboard``: server-rendered HTML with inline SVG charts.

No JavaScript, no build step, no CDN: the page works offline. Everything shown comes from
:func:`collector.answers.campaign_answer` (the one estimate service), the same query as
``GET /v1/campaigns/{id}/estimates``. Numeric campaigns (mean, distribution) get their own
charts (:mod:`collector.dashboard_numeric`), multi-attribute ones crosstabs
(:mod:`collector.dashboard_multi`), open-domain ones a ranked list of the discovered strings
with intervals and the threshold (:mod:`collector.dashboard_openended`). A page that cannot
show an answer still is the page, with the status the JSON API refuses the same query with
(:func:`collector.http_errors.estimate_refusal`: 422 too few reports, 400 a refused parameter;
404 an unknown campaign); before sign-in every page is a redirect.

Sign-in: the analyst (or admin) token is typed into a login form once. The collector answers
with a cookie that holds no token: ``<expiry>.<HMAC-SHA256(token, "ldp-dashboard:<expiry>")>``,
``HttpOnly`` (scripts cannot read it), ``SameSite=Strict`` (never sent on cross-site requests,
which is the CSRF defence; the sign-in and sign-out forms, which need no cookie, refuse a
browser's ``Sec-Fetch-Site: cross-site``/``same-site``), ``Secure`` when served over HTTPS,
valid for ``SESSION_SECONDS``. Rotating the analyst token ends every session. The server
stores nothing.
Pages send a strict Content-Security-Policy (no scripts at all).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import math
import re
import time
import unicodedata
from typing import Any

from flask import (
    Blueprint,
    Response,
    current_app,
    make_response,
    redirect,
    render_template,
    request,
    url_for,
)
from werkzeug.wrappers import Response as BaseResponse  # what redirect() returns

import aggregator
from aggregator.export import percent
from aggregator.results import (
    DistributionEstimates,
    FrequencyEstimates,
    MeanEstimates,
    MultiEstimates,
    OpenDomainEstimates,
)
from aggregator.service import EstimateAnswer, kind_of, request_options
from client_sdk.errors import InvalidParameter
from collector import ratelimit
from collector.answers import answer_json, campaign_answer
from collector.campaigns import Campaign
from collector.dashboard_numeric import histogram_chart, mean_chart, numeric_trend_chart
from collector.errors import APIError
from collector.http_errors import estimate_refusal
from collector.storage import Storage
from collector.views.common import utf8_query

bp = Blueprint(
    "dashboard",
    __name__,
    url_prefix="/dashboard",
    template_folder="templates",
    static_folder="static",
    static_url_path="/static",
)

COOKIE = "ldp_dashboard"
#: How long a dashboard sign-in lasts.
SESSION_SECONDS = 8 * 3600
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
#: Colour-blind-safe palette (Okabe-Ito) for trend lines; dashes tell repeats apart.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
DASHES = ("", "6 3", "2 3")
#: Larger domains show the values with the largest estimates only (the table lists them all).
MAX_BARS = 60
#: Trend lines drawn: the values with the largest estimates (more lines would not be readable).
MAX_TREND_LINES = 8


# -- sign-in ----------------------------------------------------------------------------------


def _signature(token: str, expires: int) -> str:
    return hmac.new(token.encode(), f"ldp-dashboard:{expires}".encode(), hashlib.sha256).hexdigest()


def _accepted_tokens() -> list[str]:
    tokens = current_app.extensions["ldp_tokens"]
    return [tokens["analyst"], tokens["admin"]]


def _signed_in() -> bool:
    value = request.cookies.get(COOKIE, "")
    expires_text, _, signature = value.partition(".")
    # ASCII digits, at most 12 (year 33658): str.isdigit() also takes "²" and other digits
    # int() refuses, and int() refuses more than 4300 digits; either was a 500 (and an error
    # logged with its traceback) for any client that sent such a cookie.
    if not (expires_text.isascii() and expires_text.isdigit() and len(expires_text) <= 12):
        return False
    if int(expires_text) < time.time():
        return False
    ok = False
    for token in _accepted_tokens():  # no early exit: constant work per request
        ok |= hmac.compare_digest(signature, _signature(token, int(expires_text)))
    return ok


@bp.app_template_filter("shown")
def shown_filter(value: Any) -> str:
    """``{{ label|shown }}``: a label, attribute name or title built from them as the page
    shows it: unprintable characters (bidi overrides and isolates, zero-width characters, C1
    controls) as Python escapes, as open-domain strings already are
    (:func:`collector.dashboard_openended.shown`). Admins name values and attributes, and a
    U+202E inside one reversed the rest of its heading, caption or tooltip on the page, the
    numbers of an interval too. HTML escaping stays Jinja's."""
    from collector.dashboard_openended import shown

    return shown(str(value))


#: Width in em of a character of a chart's text, pessimistic for the sans-serif fonts a
#: browser may pick (DejaVu Sans is the widest common one: lower case 0.58-0.64 em, upper case
#: and digits up to 0.79, ``m``/``W``/``@`` about 1): wide East Asian characters and emoji 1.2,
#: marks that take no room 0.
_WIDEST = frozenset("mwMW@%&")
ELLIPSIS = "\u2026"


def _char_em(c: str) -> float:
    if unicodedata.combining(c) or unicodedata.category(c) in ("Mn", "Me", "Cf"):
        return 0.0
    if unicodedata.east_asian_width(c) in ("W", "F"):
        return 1.2
    if c in _WIDEST or c == ELLIPSIS:
        return 1.0
    if c.isascii() and (c.islower() or not c.isalnum()):
        return 0.66
    return 0.82


def text_width(text: str, size: float = 12.0) -> float:
    """An upper bound (for the fonts a page may use) of ``text``'s width in px at ``size``."""
    return size * sum(_char_em(c) for c in text)


def fit_label(text: str, width: float, size: float = 12.0) -> str:
    """``text`` (as the page shows it: :func:`shown_filter` first) cut in the middle with an
    ellipsis so that it fits ``width`` px at ``size`` (:func:`text_width`). A chart draws a
    label beside its bars or lines; labels are up to 200 characters and discovered strings
    up to the campaign's ``max_length``, and a long one ran out of its SVG, which clips: its
    start (bar labels, anchored at their end) or its end (legends) was cut off unseen, so two
    labels that differ there looked alike. The head and the tail both stay; the full text is
    in the chart's tooltip (``<title>``) and in the table."""
    if text_width(text, size) <= width:
        return text
    head: list[str] = []
    tail: list[str] = []
    used = text_width(ELLIPSIS, size)
    front, back = 0, len(text) - 1
    while front <= back:
        take_front = len(head) <= len(tail)
        c = text[front] if take_front else text[back]
        w = size * _char_em(c)
        if used + w > width:
            break
        used += w
        if take_front:
            head.append(c)
            front += 1
        else:
            tail.append(c)
            back -= 1
    return "".join(head) + ELLIPSIS + "".join(reversed(tail))


@bp.app_template_filter("percent")
def percent_filter(level: Any) -> str:
    """``{{ body.level|percent }}``: the level as a percentage, never rounded to 100% or 0%
    (:func:`aggregator.export.percent`; ``%g`` wrote 0.9999999 as ``100%``)."""
    return percent(float(level))


@bp.app_template_filter("fit")
def fit_filter(value: Any, width: float) -> str:
    """``{{ label|shown|fit(px) }}``: :func:`fit_label` (a chart's label cut to its room)."""
    return fit_label(str(value), float(width))


def _page(html: str, status: int = 200) -> Response:
    response = make_response(html, status)
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.get("/login")
def login_form() -> Response:
    return _page(render_template("dashboard/login.html", error=None))


def _cross_site() -> bool:
    """A POST another site's page made the browser send (``Sec-Fetch-Site``, set by the
    browser itself, not by a proxy). SameSite=Strict keeps the cookie off such requests, but
    sign-out needs no cookie: any page the analyst visited could sign them out with a
    self-submitting form. Clients that send no ``Sec-Fetch-Site`` (not a browser, or an old
    one) are not refused."""
    return request.headers.get("Sec-Fetch-Site", "") in ("cross-site", "same-site")


def _refused_cross_site() -> Response:
    error = "Refused: this form was sent from another site. Sign in from this page."
    return _page(render_template("dashboard/login.html", error=error), 403)


@bp.post("/login")
def login() -> BaseResponse:
    if _cross_site():  # before the throttle: other sites' pages cannot spend its attempts
        return _refused_cross_site()
    wait = ratelimit.login_wait()  # guessing the token is throttled for everyone
    if wait:
        error = f"Too many sign-in attempts; try again in {wait} s."
        refused = _page(render_template("dashboard/login.html", error=error), 429)
        refused.headers["Retry-After"] = str(wait)
        return refused
    token = request.form.get("token", "")
    matched = False
    for candidate in _accepted_tokens():
        # Hash first: equal-length digests, so not even the token's length leaks.
        matched |= hmac.compare_digest(
            hashlib.sha256(token.encode()).digest(), hashlib.sha256(candidate.encode()).digest()
        )
    if not matched:
        error = "That is not the analyst token. Ask the operator for LDP_ANALYST_TOKEN."
        return _page(render_template("dashboard/login.html", error=error), 401)
    expires = int(time.time()) + SESSION_SECONDS
    response = redirect(url_for("dashboard.index"), code=303)
    response.set_cookie(
        COOKIE,
        f"{expires}.{_signature(token, expires)}",
        max_age=SESSION_SECONDS,
        path="/dashboard",
        httponly=True,
        samesite="Strict",
        secure=request.is_secure,
    )
    return response


@bp.post("/logout")
def logout() -> BaseResponse:
    if _cross_site():
        return _refused_cross_site()
    response = redirect(url_for("dashboard.login_form"), code=303)
    response.delete_cookie(COOKIE, path="/dashboard", httponly=True, samesite="Strict")
    return response


# -- pages ------------------------------------------------------------------------------------


def _storage() -> Storage:
    return current_app.extensions["ldp_storage"]


@bp.get("")
@bp.get("/")
def index() -> BaseResponse:
    if not _signed_in():
        return redirect(url_for("dashboard.login_form"), code=303)
    campaigns = [
        {
            "id": c.id,
            "description": c.description,
            "mechanism": c.mechanism_config["mechanism"],
            "epsilon": c.mechanism_config["epsilon"],
            "k": _size(c.mechanism_config),
            "window": c.window,
            "reports": reports,
            "min_reports": c.min_reports,
        }
        for c, reports in _storage().list_campaigns()
    ]
    return _page(render_template("dashboard/index.html", campaigns=campaigns))


def _query(campaign: Campaign) -> tuple[EstimateAnswer | None, APIError | None, dict[str, str]]:
    """The page's answer, or the error the JSON API refuses the same query with (its status
    and, for the service's checks, its message), and the query as the form shows it."""
    form = {
        "from": request.args.get("from", ""),
        "to": request.args.get("to", ""),
        "postprocess": request.args.get("postprocess", aggregator.DEFAULT_POSTPROCESS),
        "level": request.args.get("level", str(aggregator.DEFAULT_LEVEL)),
        # Open-domain campaigns: discoveries listed and candidate strings (one per line).
        "top": request.args.get("top", ""),
        "candidates": request.args.get("candidates", ""),
    }
    try:
        start = dt.date.fromisoformat(form["from"]) if form["from"] else None
        end = dt.date.fromisoformat(form["to"]) if form["to"] else None
        level = float(form["level"])
        top = int(form["top"]) if form["top"] else None
    except ValueError:
        # Name every field parsed here: 'top' (open-domain) too, else "top=1e3" was told
        # about dates and the level only.
        why = "'from'/'to' must be days YYYY-MM-DD, 'level' a number in (0, 1)"
        if kind_of(campaign.mechanism) == "open_domain":
            from aggregator.openended_answers import MAX_TOP

            why += f", 'top' an integer in [1, {MAX_TOP}]"
        return None, estimate_refusal(InvalidParameter(why)), form
    try:
        utf8_query()
    except APIError as exc:
        return None, exc, form
    # One string per line, taken exactly as typed, as the API and ldp estimate take them: a
    # strip() turned " a " into "a" (another string's count) and ate a leading tab or NBSP,
    # and splitlines() also split at U+0085, U+2028 and the other separators a string may hold.
    lines = re.split(r"\r\n|\n|\r", form["candidates"])
    try:
        # The checks of GET /v1/campaigns/{id}/estimates and ldp estimate, with their messages.
        options = request_options(
            campaign.kind,
            start=start,
            end=end,
            level=level,
            postprocess=form["postprocess"],
            top=top,
            candidates=tuple(c for c in lines if c),
        )
        answer = campaign_answer(_storage(), campaign, start=start, end=end, **options)
    except (aggregator.NotEnoughReports, InvalidParameter) as exc:
        return None, estimate_refusal(exc), form
    return answer, None, form


def _size(config: dict[str, Any]) -> str:
    """The index page's "values" column: the domain size, or a numeric campaign's bounds."""
    if "domain" in config:
        return str(len(config["domain"]))
    if "attributes" in config:
        return f"{len(config['attributes'])} attributes"
    if "max_length" in config:  # open-domain: any string of at most max_length bytes
        return f"strings ≤ {config['max_length']} B"
    bounds = config.get("bounds") or ("?", "?")
    return f"[{bounds[0]:g}, {bounds[1]:g}]" if len(bounds) == 2 else "?"


@bp.get("/campaigns/<campaign_id>")
def campaign_page(campaign_id: str) -> BaseResponse:
    if not _signed_in():
        return redirect(url_for("dashboard.login_form"), code=303)
    campaign = _storage().get_campaign(campaign_id)
    if campaign is None:
        return _page(render_template("dashboard/missing.html", campaign_id=campaign_id), 404)
    answer, refusal, form = _query(campaign)
    problem = None if refusal is None else refusal.message
    return _page(
        render_template("dashboard/campaign.html", **page_context(campaign, answer, problem, form)),
        200 if refusal is None else refusal.status,
    )


def page_context(
    campaign: Any, answer: EstimateAnswer | None, problem: str | None, form: dict[str, str]
) -> dict[str, Any]:
    """What the campaign template needs: the answer in its JSON form (``body``), its kind and
    the chart geometry of that kind."""
    kind = kind_of(campaign.mechanism)
    context: dict[str, Any] = {
        "campaign": campaign,
        "kind": kind,
        "mechanism": campaign.mechanism_config["mechanism"],
        "epsilon": campaign.mechanism_config["epsilon"],
        "body": answer_json(campaign, answer) if answer is not None else None,
        "problem": problem,
        "form": form,
        "methods": list(aggregator.POSTPROCESS_METHODS),
    }
    if isinstance(answer, FrequencyEstimates):
        body = context["body"]
        context["bars"] = bar_chart(body)
        context["trend"] = trend_chart(body)
    elif isinstance(answer, MeanEstimates):
        context["mean_chart"] = mean_chart(answer)
        context["numeric_trend"] = numeric_trend_chart(answer)
    elif isinstance(answer, DistributionEstimates):
        context["histogram"] = histogram_chart(answer)
        context["numeric_trend"] = numeric_trend_chart(answer)
    elif isinstance(answer, MultiEstimates):
        from collector.dashboard_multi import multi_charts

        context["multi"] = multi_charts(context["body"], answer)
        # Attributes whose counts are combined with a declared categorical pair's margins.
        context["multi_paired"] = {a for j in context["body"]["joints"] for a in j["pair"]}
    elif isinstance(answer, OpenDomainEstimates):
        from collector.dashboard_openended import open_charts

        context["open"] = open_charts(context["body"])
    return context


# -- chart geometry (pure functions; the templates only place what these compute) -------------


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``top``."""
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 12) for i in range(n + 1)]


def bar_chart(body: dict[str, Any], *, width: int = 760) -> dict[str, Any]:
    """Horizontal bars (one per value: post-processed frequency) with CI whiskers."""
    n = body["n"]
    values = body["values"]
    if len(values) > MAX_BARS:
        values = sorted(values, key=lambda v: -v["count"])[:MAX_BARS]
    label_w, pad_r, row_h, top_pad = 170, 30, 26, 28
    plot_w = width - label_w - pad_r
    highest = max([v["ci_high"] / n for v in values] + [v["frequency"] for v in values] + [0.01])
    ticks = nice_ticks(highest)
    scale = plot_w / ticks[-1]
    height = top_pad + row_h * len(values) + 34
    rows = []
    for i, v in enumerate(values):
        y = top_pad + i * row_h
        lo, hi = v["ci_low"] / n, v["ci_high"] / n
        rows.append(
            {
                "label": v["value"],
                "y": y,
                "mid": y + row_h / 2,
                "bar_w": max(0.0, v["frequency"]) * scale,
                "bar_h": row_h - 8,
                "x_lo": label_w + lo * scale,
                "x_hi": label_w + hi * scale,
                "frequency": v["frequency"],
                "ci": (lo, hi),
                "significant": v["significant"],
            }
        )
    threshold = body["top_k"]["threshold"] / n
    return {
        "shown": len(values),
        "total": len(body["values"]),
        "width": width,
        "height": height,
        "left": label_w,
        "plot_w": plot_w,
        "bottom": top_pad + row_h * len(values),
        "rows": rows,
        "ticks": [
            {"x": label_w + t * scale, "label": f"{t:.0%}" if ticks[-1] >= 0.05 else f"{t:.1%}"}
            for t in ticks
        ],
        "threshold_x": label_w + threshold * scale if threshold <= ticks[-1] else None,
    }


def trend_chart(body: dict[str, Any], *, width: int = 760) -> dict[str, Any]:
    """Per window, for the most frequent values: the raw frequency (dots and a thin line) and
    the smoothed frequency (solid line) with its interval at the answer's level (band); reports
    per window (bars)."""
    from aggregator.estimate import z_value

    trend = body["trend"]
    z = z_value(body.get("level", 0.95))
    ranked = sorted(range(len(body["values"])), key=lambda j: -body["values"][j]["count"])
    chosen = ranked[:MAX_TREND_LINES]
    left, right, top, plot_h, count_h = 56, 190, 16, 200, 50
    plot_w = width - left - right
    shown = [[t["frequencies"][j] for j in chosen] for t in trend if t["frequencies"] is not None]
    shown += [
        [t["smoothed_frequencies"][j] + s * z * t["smoothed_std_errors"][j] for j in chosen]
        for t in trend
        if t.get("smoothed_frequencies") is not None
        for s in (-1, 1)
    ]
    highest = max([max(f) for f in shown] + [0.01])
    lowest = min([min(f) for f in shown] + [0.0])
    ticks = nice_ticks(highest)
    span = ticks[-1] - min(0.0, lowest)
    base = min(0.0, lowest)
    slots = max(1, len(trend))
    step = plot_w / slots

    def x_of(i: int) -> float:
        return left + step * (i + 0.5)

    def y_of(f: float) -> float:
        return top + plot_h * (1 - (f - base) / span)

    def clamp(y: float) -> float:
        return min(max(y, top), top + plot_h)

    series = []
    for slot, j in enumerate(chosen):
        label = body["values"][j]["value"]
        points = [
            (x_of(i), y_of(t["frequencies"][j]))
            for i, t in enumerate(trend)
            if t["frequencies"] is not None
        ]
        smooth = [
            (x_of(i), t["smoothed_frequencies"][j], z * t["smoothed_std_errors"][j])
            for i, t in enumerate(trend)
            if t.get("smoothed_frequencies") is not None
        ]
        upper = [(x, clamp(y_of(f + h))) for x, f, h in smooth]
        lower = [(x, clamp(y_of(f - h))) for x, f, h in reversed(smooth)]
        series.append(
            {
                "label": label,
                "colour": PALETTE[slot % len(PALETTE)],
                "dash": DASHES[(slot // len(PALETTE)) % len(DASHES)],
                "points": " ".join(f"{x:.1f},{y:.1f}" for x, y in points),
                "dots": points,
                "smoothed": " ".join(f"{x:.1f},{clamp(y_of(f)):.1f}" for x, f, _ in smooth),
                "band": " ".join(f"{x:.1f},{y:.1f}" for x, y in upper + lower),
                "smoothed_count": len(smooth),
                "legend_y": top + 14 * slot + 6,
            }
        )
    max_n = max([t["n"] for t in trend] + [1])
    counts_top = top + plot_h + 30
    counts = [
        {
            "x": x_of(i) - step * 0.3,
            "w": step * 0.6,
            "y": counts_top + count_h * (1 - t["n"] / max_n),
            "h": count_h * t["n"] / max_n,
            "n": t["n"],
            "window": t["window"],
            "label_x": x_of(i),
            "refused": t["frequencies"] is None,
        }
        for i, t in enumerate(trend)
    ]
    every = max(1, math.ceil(len(trend) / 8))
    return {
        "lines": len(chosen),
        "total": len(body["values"]),
        "width": width,
        "height": counts_top + count_h + 24,
        "left": left,
        "plot_w": plot_w,
        "top": top,
        "plot_bottom": top + plot_h,
        "zero_y": y_of(0.0),
        "legend_x": left + plot_w + 16,
        "ticks": [
            {"y": y_of(t), "label": f"{t:.0%}" if ticks[-1] >= 0.05 else f"{t:.1%}"} for t in ticks
        ],
        "series": series,
        "counts": counts,
        "counts_top": counts_top,
        "counts_bottom": counts_top + count_h,
        "max_n": max_n,
        "window_labels": [
            {"x": x_of(i), "text": t["window"][5:]} for i, t in enumerate(trend) if i % every == 0
        ],
    }
