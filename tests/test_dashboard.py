"""The dashboard blueprint through Flask's test client: sign-in cookie, pages, chart geometry."""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any

import numpy as np
import pytest

from collector import dashboard
from collector.app import create_app

ADMIN, ANALYST, INGEST = "admin-" + "a" * 20, "analyst-" + "b" * 20, "ingest-" + "c" * 20
DOMAIN = ["north", "south", "east", "west"]


@pytest.fixture
def app(tmp_path) -> Any:
    app = create_app(
        {
            "database": str(tmp_path / "ldp.db"),
            "admin_token": ADMIN,
            "analyst_token": ANALYST,
            "ingest_token": INGEST,
        }
    )
    client = app.test_client()
    for cid, minimum in (("region", 50), ("strict", 10_000)):
        created = client.post(
            "/v1/campaigns",
            json={
                "id": cid,
                "description": "Where <b>are</b> you?",
                "domain": DOMAIN,
                "mechanism": "grr",
                "epsilon": 2.0,
                "min_reports": minimum,
            },
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert created.status_code == 201
        digest = created.get_json()["digest"]
        mech = app.extensions["ldp_storage"].get_campaign(cid).mechanism
        rng = np.random.default_rng(4)
        today = dt.datetime.now(dt.UTC).date()
        for back, n in ((2, 300), (1, 200), (0, 30)):
            day = (today - dt.timedelta(days=back)).isoformat()
            payloads = mech.encode_many(
                mech.perturb_many(rng.choice(4, n, p=[0.5, 0.3, 0.2, 0]), rng=rng)
            )
            reports = [
                {"id": f"{cid}-{day}-{i:06d}", "day": day, "payload": p}
                for i, p in enumerate(payloads)
            ]
            answer = client.post(
                f"/v1/campaigns/{cid}/reports",
                json={"digest": digest, "reports": reports},
                headers={"Authorization": f"Bearer {INGEST}"},
            )
            assert answer.get_json()["accepted"] == n
    return app


def _sign_in(client, token: str = ANALYST) -> Any:
    return client.post("/dashboard/login", data={"token": token})


def test_pages_need_a_sign_in(app) -> None:
    client = app.test_client()
    for path in ("/dashboard", "/dashboard/", "/dashboard/campaigns/region"):
        answer = client.get(path)
        assert answer.status_code == 303 and answer.headers["Location"].endswith("/dashboard/login")
    form = client.get("/dashboard/login")
    assert form.status_code == 200 and b'name="token"' in form.data
    assert "script-src" not in form.headers["Content-Security-Policy"]
    assert "default-src 'none'" in form.headers["Content-Security-Policy"]


def test_wrong_token_is_refused_and_sets_no_cookie(app) -> None:
    client = app.test_client()
    answer = _sign_in(client, INGEST)
    assert answer.status_code == 401 and b"not the analyst token" in answer.data
    assert "Set-Cookie" not in answer.headers


def test_sign_in_sets_a_strict_httponly_cookie_without_the_token(app) -> None:
    client = app.test_client()
    answer = _sign_in(client)
    assert answer.status_code == 303
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/dashboard" in cookie
    assert ANALYST not in cookie
    assert client.get("/dashboard").status_code == 200
    assert _sign_in(app.test_client(), ADMIN).status_code == 303  # admin works too
    client.post("/dashboard/logout")
    assert client.get("/dashboard").status_code == 303


def test_forged_or_expired_cookies_are_rejected(app) -> None:
    client = app.test_client()
    past = int(time.time()) - 10
    client.set_cookie(
        dashboard.COOKIE, f"{past}.{dashboard._signature(ANALYST, past)}", path="/dashboard"
    )
    assert client.get("/dashboard").status_code == 303
    future = int(time.time()) + 100
    client.set_cookie(
        dashboard.COOKIE, f"{future}.{dashboard._signature('guess' * 5, future)}", path="/dashboard"
    )
    assert client.get("/dashboard").status_code == 303
    client.set_cookie(
        dashboard.COOKIE, f"{future}.{dashboard._signature(ANALYST, future)}", path="/dashboard"
    )
    assert client.get("/dashboard").status_code == 200


def test_campaign_list_and_page(app) -> None:
    client = app.test_client()
    _sign_in(client)
    index = client.get("/dashboard").get_data(as_text=True)
    assert "/dashboard/campaigns/region" in index and "530" in index
    page = client.get("/dashboard/campaigns/region").get_data(as_text=True)
    assert len(re.findall(r'<rect class="bar[^"]*" data-value=', page)) == len(DOMAIN)
    assert page.count('class="whisker"') == 3 * len(DOMAIN)
    assert 'id="report-count">530<' in page and 'id="mechanism">grr<' in page
    assert 'id="epsilon">2<' in page
    assert "&lt;b&gt;are&lt;/b&gt;" in page  # descriptions are escaped
    assert page.count('class="count') == 3  # one bar per window in the trend


def test_campaign_page_query_and_refusal(app) -> None:
    client = app.test_client()
    _sign_in(client)
    today = dt.datetime.now(dt.UTC).date().isoformat()
    one = client.get(f"/dashboard/campaigns/region?from={today}&to={today}").get_data(as_text=True)
    assert "not enough reports yet (30 of 50)" in one
    strict = client.get("/dashboard/campaigns/strict").get_data(as_text=True)
    assert "not enough reports yet (530 of 10000)" in strict
    bad = client.get("/dashboard/campaigns/region?postprocess=magic").get_data(as_text=True)
    assert "postprocess must be one of" in bad
    clip = client.get("/dashboard/campaigns/region?postprocess=clip").get_data(as_text=True)
    assert '<option value="clip" selected>' in clip
    assert client.get("/dashboard/campaigns/nope").status_code == 404


def test_static_stylesheet_is_served_locally(app) -> None:
    with app.test_client().get("/dashboard/static/dashboard.css") as answer:
        assert answer.status_code == 200 and b"svg .bar" in answer.data


def test_nice_ticks() -> None:
    assert dashboard.nice_ticks(0.37) == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert dashboard.nice_ticks(0.0) == [0.0, 1.0]
    ticks = dashboard.nice_ticks(0.012)
    assert ticks[0] == 0 and ticks[-1] >= 0.012 and len(ticks) <= 7


def test_large_domains_show_the_largest_values() -> None:
    k = 100
    values = [
        {
            "value": f"v{i}",
            "count": float(i),
            "frequency": i / 5000,
            "ci_low": 0.0,
            "ci_high": 2.0 * i,
            "significant": i > 90,
        }
        for i in range(k)
    ]
    body = {
        "n": 5000,
        "values": values,
        "top_k": {"threshold": 90.0},
        "trend": [
            {"window": "2026-11-20", "n": 5000, "frequencies": [v["frequency"] for v in values]}
        ],
    }
    bars = dashboard.bar_chart(body)
    assert bars["shown"] == dashboard.MAX_BARS and bars["total"] == k
    assert bars["rows"][0]["label"] == "v99"
    trend = dashboard.trend_chart(body)
    assert [s["label"] for s in trend["series"]] == [f"v{i}" for i in range(99, 91, -1)]


def test_trend_shows_raw_and_smoothed_with_a_band(app) -> None:
    client = app.test_client()
    _sign_in(client)
    page = client.get("/dashboard/campaigns/region").get_data(as_text=True)
    lines = page.count('class="smoothed"')
    assert lines >= 1 and page.count('class="raw"') == lines
    assert page.count('class="band"') == lines
    assert "<strong>raw</strong> unbiased frequencies" in page and "smoothed</strong>" in page
    assert "95% interval" in page


def test_trend_band_geometry_brackets_the_smoothed_line() -> None:
    body = {
        "n": 200,
        "level": 0.95,
        "values": [{"value": "a", "count": 120.0}, {"value": "b", "count": 80.0}],
        "trend": [
            {
                "window": f"2026-11-2{i}",
                "n": 100,
                "frequencies": [0.6, 0.4],
                "smoothed_frequencies": [0.6, 0.4],
                "smoothed_std_errors": [0.05, 0.05],
            }
            for i in range(2)
        ],
    }
    series = dashboard.trend_chart(body)["series"][0]
    ys = [float(p.split(",")[1]) for p in series["band"].split()]
    line = [float(p.split(",")[1]) for p in series["smoothed"].split()]
    # SVG y grows downwards: the band's top is above (smaller y) and its bottom below the line.
    assert min(ys) < min(line) and max(ys) > max(line) and len(ys) == 4
