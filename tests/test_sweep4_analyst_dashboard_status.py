"""A dashboard page that cannot show an answer says so with the status the JSON API answers.

The campaign page stated its refusal (too few reports, a level out of range, an unknown
post-processing, a day that is no day) in a ``<p class="problem">`` under HTTP 200: a link
checker, a monitoring probe or a proxy's cache took the refusal for a page. Now the page keeps
its HTML and its message but answers what ``GET /v1/campaigns/{id}/estimates`` answers for the
same query (:func:`collector.http_errors.estimate_refusal`): 422 for too few reports, 400 for a
parameter the query refuses, 404 for an unknown campaign. Signing in stays a redirect, before
any of them.
"""

from __future__ import annotations

import datetime as dt
import html
import re
import secrets
from collections.abc import Iterator

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient

from client_sdk.mechanisms import from_config
from collector import create_app
from tests.support.garbage import bearer
from tests.support.server import TOKENS

TODAY = dt.date.today()
DOMAIN = ["north", "south", "east", "west"]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    app = create_app({"database": str(tmp_path_factory.mktemp("status") / "s.db"), **TOKENS})
    client = app.test_client()
    for cid, minimum in (("region", 50), ("young", 10_000)):
        body = {"id": cid, "domain": DOMAIN, "mechanism": "grr", "epsilon": 2.0}
        r = client.post(
            "/v1/campaigns", json=body | {"min_reports": minimum}, headers=bearer("admin")
        )
        assert r.status_code == 201, r.json
        mech = from_config(r.json["mechanism"])
        rng = np.random.default_rng(11)
        payloads = mech.encode_many(mech.perturb_many(rng.integers(0, 4, 300), rng=rng))
        items = [
            {"id": secrets.token_hex(16), "day": TODAY.isoformat(), "payload": p} for p in payloads
        ]
        sent = client.post(
            f"/v1/campaigns/{cid}/reports",
            json={"digest": r.json["digest"], "reports": items},
            headers=bearer("ingest"),
        )
        assert sent.json["accepted"] == 300, sent.json
    yield app
    app.extensions["ldp_storage"].close()


def signed_in(app: Flask) -> FlaskClient:
    client = app.test_client()
    r = client.post("/dashboard/login", data={"token": TOKENS["analyst_token"]})
    assert r.status_code == 303, r.status_code
    return client


def problem(page: str) -> str:
    found = re.search(r'<p class="problem"[^>]*>(.*?)</p>', page, re.S)
    return html.unescape(found.group(1)) if found else ""


YESTERDAY = (TODAY - dt.timedelta(days=1)).isoformat()
#: (campaign, query, status): the same query on the page and on the JSON API. The last
#: element says whether both state the same message (the service's checks and refusals are
#: one code; the page's and the API's own parsing of the query text word theirs apart).
CASES = [
    ("region", {}, 200, True),
    ("young", {}, 422, True),  # 300 of 10,000 reports
    ("region", {"from": TODAY.isoformat(), "to": YESTERDAY}, 400, True),
    ("region", {"level": "2"}, 400, True),
    ("region", {"postprocess": "magic"}, 400, True),
    ("region", {"top": "5"}, 400, True),  # open-domain campaigns only
    ("region", {"from": "someday"}, 400, False),
    ("region", {"level": "high"}, 400, False),
    ("nope", {}, 404, False),
]


@pytest.mark.parametrize(("cid", "query", "status", "same_message"), CASES)
def test_the_page_answers_the_status_of_the_api(
    app: Flask, cid: str, query: dict[str, str], status: int, same_message: bool
) -> None:
    page = signed_in(app).get(f"/dashboard/campaigns/{cid}", query_string=query)
    api = app.test_client().get(
        f"/v1/campaigns/{cid}/estimates", query_string=query, headers=bearer("analyst")
    )
    assert (page.status_code, api.status_code) == (status, status), page.get_data(as_text=True)
    # Still the page, for the browser: HTML with the dashboard's headers and its message.
    assert page.mimetype == "text/html"
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    text = page.get_data(as_text=True)
    if status == 200:
        assert problem(text) == "" and 'id="report-count">300<' in text
    elif status == 404:
        assert "No campaign nope" in text
    else:
        assert problem(text), text[-500:]
        assert 'id="mechanism">grr<' in text  # the campaign's facts and the query form too
        if same_message:
            assert problem(text) == api.json["error"]["message"]


def test_signing_in_stays_a_redirect_before_any_refusal(app: Flask) -> None:
    for path in ("/dashboard/campaigns/young", "/dashboard/campaigns/region?level=2"):
        r = app.test_client().get(path)
        assert r.status_code == 303 and r.headers["Location"].endswith("/dashboard/login")


def test_a_storage_failure_on_a_page_is_503_with_retry_after(tmp_path_factory) -> None:
    """Pinned, not changed: the collector's own handler (the API's) answers it already."""
    folder = tmp_path_factory.mktemp("gone")
    app = create_app({"database": str(folder / "g.db"), **TOKENS})
    client = signed_in(app)
    assert client.get("/dashboard/campaigns/nope").status_code == 404
    for path in folder.glob("g.db*"):
        path.unlink()
    for path in ("/dashboard/", "/dashboard/campaigns/nope"):
        r = client.get(path)
        assert r.status_code == 503 and "Retry-After" in r.headers, (path, r.status_code)
    app.extensions["ldp_storage"].close()
