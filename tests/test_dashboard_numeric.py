"""Dashboard pages of numeric campaigns, rendered from the estimate service's numeric answers.

Numeric campaigns cannot be created in the collector until the mechanism core is generalised
(issue 15), so the page is rendered at unit level: the real template and chart geometry, fed
answers the service computed from real numeric tallies (``perturb_many`` + ``tally``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from flask import render_template

from aggregator.results import DistributionEstimates, MeanEstimates
from aggregator.schema import to_json
from aggregator.service import EstimateQuery, estimate_range
from client_sdk.mechanisms.numeric import create
from collector import dashboard, dashboard_numeric
from collector.app import create_app
from ldp_cli.estimate_cmd import render_table

DAYS = [f"2026-11-{d:02d}" for d in range(1, 7)]


@dataclass
class _Campaign:
    """What the campaign template reads of a campaign (a numeric Campaign after the merge)."""

    mechanism: Any
    id: str = "latency"
    description: str = "Time to first paint"
    window: str = "day"
    min_reports: int = 100
    mechanism_config: dict[str, Any] = field(default_factory=dict)


def answer_of(name: str, **params: Any) -> tuple[Any, Any]:
    mech = create(name, epsilon=2.0, bounds=(0, 200), **params)
    rng = np.random.default_rng(3)
    tallies = {}
    for d, day in enumerate(DAYS):
        x = np.clip(rng.gamma(4, 15 + d, 3000), 0, 200)
        tallies[day] = mech.tally(mech.perturb_many(x, rng=d))
    tallies["2026-11-07"] = mech.tally(mech.perturb_many(np.full(20, 50.0), rng=99))
    answer = estimate_range(mech, tallies, EstimateQuery(min_reports=100, bootstrap=8))
    return mech, answer


@pytest.fixture
def app(tmp_path: Any) -> Any:
    return create_app(
        {
            "database": str(tmp_path / "ldp.db"),
            "admin_token": "a" * 24,
            "analyst_token": "b" * 24,
            "ingest_token": "c" * 24,
        }
    )


def render(app: Any, mech: Any, answer: Any) -> str:
    campaign = _Campaign(mechanism=mech, mechanism_config=mech.config())
    form = {"from": "", "to": "", "postprocess": "none", "level": "0.95"}
    with app.test_request_context("/dashboard/campaigns/latency"):
        return render_template(
            "dashboard/campaign.html", **dashboard.page_context(campaign, answer, None, form)
        )


def numbers(pattern: str, html: str) -> list[float]:
    return [float(x) for x in re.findall(pattern, html)]


def test_mean_page_shows_the_mean_its_interval_and_the_trend_band(app: Any) -> None:
    mech, answer = answer_of("piecewise")
    assert isinstance(answer, MeanEstimates)
    html = render(app, mech, answer)
    assert 'id="mean-chart"' in html and 'id="trend"' in html
    assert f"{answer.mean:,.4g}" in html and "±" in html
    assert f"{answer.ci.low:,.4g}" in html and f"{answer.ci.high:,.4g}" in html
    assert "post-processing" not in html  # categorical only
    chart = dashboard_numeric.mean_chart(answer)
    assert chart["ci_x"][0] < chart["mean_x"] < chart["ci_x"][1]
    trend = dashboard_numeric.numeric_trend_chart(answer)
    assert len(trend["dots"]) == len(DAYS)  # the window under the minimum has no dot
    assert trend["smoothed_count"] == len(DAYS)
    assert html.count('class="band"') == 1 and html.count('class="window-mean"') == len(DAYS)
    assert [c["refused"] for c in trend["counts"]] == [False] * len(DAYS) + [True]
    assert html.count('class="count') == len(trend["counts"])  # one bar per window
    # The band brackets the smoothed line at every window (SVG y grows downwards).
    band = [tuple(map(float, p.split(","))) for p in trend["band"].split()]
    line = [tuple(map(float, p.split(","))) for p in trend["smoothed"].split()]
    upper, lower = band[: len(line)], band[len(line) :][::-1]
    for (x, y), (xu, yu), (xl, yl) in zip(line, upper, lower, strict=True):
        assert x == xu == xl and yu <= y <= yl


def test_distribution_page_shows_histogram_whiskers_and_quantiles(app: Any) -> None:
    mech, answer = answer_of("square_wave")
    assert isinstance(answer, DistributionEstimates)
    html = render(app, mech, answer)
    assert 'id="histogram"' in html and 'id="quantiles"' in html and 'id="trend"' in html
    assert html.count('class="bin"') == len(answer.bins)
    for label in ("median", "p90", "p99"):
        assert f"<td>{label}</td>" in html
    for q in answer.quantiles:
        assert f"{q.value:,.4g}" in html and f"{q.low:,.4g}" in html
    chart = dashboard_numeric.histogram_chart(answer)
    for bar, b in zip(chart["bars"], answer.bins, strict=True):
        # Whisker ends bracket the bar top: higher frequency, smaller y.
        assert bar["y_hi"] <= bar["y"] + 1e-9 <= bar["y_lo"] + 2e-9, (bar, b)
    for mark in chart["quantiles"]:
        assert mark["x_lo"] <= mark["x"] <= mark["x_hi"]
    xs = [m["x"] for m in chart["quantiles"]]
    assert xs == sorted(xs)  # median <= p90 <= p99


def test_ldp_estimate_prints_numeric_answers() -> None:
    _, mean = answer_of("piecewise")
    text = render_table(to_json(mean))
    assert f"mean {mean.mean:,.4g} ±" in text and "per window:" in text
    _, dist = answer_of("square_wave")
    text = render_table(to_json(dist))
    for label in ("median", "p90", "p99", "bin", "frequency", "smoothed mean"):
        assert label in text
    assert text.count("..") >= len(dist.bins)


def test_an_integer_valued_distribution_is_drawn_one_bar_per_integer(app: Any) -> None:
    """The atoms of an integer-valued answer are drawn (201 integers in (0, 200): one bar
    each, with its own interval), not the regrouped bins; the caption says so."""
    mech, answer = answer_of("square_wave", integer=True)
    assert isinstance(answer, DistributionEstimates) and answer.integer
    assert len(answer.atoms) == 201 and len(answer.bins) < 201
    html = render(app, mech, answer)
    assert html.count('class="bin"') == 201 and "equal to each integer" in html
    chart = dashboard_numeric.histogram_chart(answer)
    assert chart["atoms"] and len(chart["bars"]) == 201
    for bar, a in zip(chart["bars"], answer.atoms, strict=True):
        assert bar["low"] == max(0.0, a.value - 0.5) and bar["high"] == min(200.0, a.value + 0.5)
        assert bar["frequency"] == a.frequency and bar["ci"] == (a.ci_low, a.ci_high)
        assert bar["y_hi"] <= bar["y"] + 1e-9 <= bar["y_lo"] + 2e-9
    grid_chart = dashboard_numeric.histogram_chart(answer_of("square_wave")[1])
    assert not grid_chart["atoms"]
