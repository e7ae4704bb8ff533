"""Sign-in and sign-out forms posted by another site's page are refused.

The session cookie is SameSite=Strict, so another site's request never carries it; but
sign-out needs no cookie. Seen in headless Chromium against ``ldp serve``: a page on another
origin with ``<form method=post action=".../dashboard/logout">`` submitted by script signed
the analyst out (the response's Set-Cookie deleted the session). Browsers say where a request
comes from in ``Sec-Fetch-Site``; ``cross-site`` and ``same-site`` (a sibling subdomain) are
now refused with 403 on both forms, before the sign-in throttle counts an attempt.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from collector import create_app
from tests.support.server import TOKENS


@pytest.fixture()
def app(tmp_path: Path) -> Iterator[Flask]:
    app = create_app({"database": str(tmp_path / "c.db"), **TOKENS})
    yield app
    app.extensions["ldp_storage"].close()


def signed_in(app: Flask) -> FlaskClient:
    client = app.test_client()
    r = client.post("/dashboard/login", data={"token": TOKENS["analyst_token"]})
    assert r.status_code == 303
    return client


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
def test_another_sites_page_cannot_sign_the_analyst_out(app: Flask, site: str) -> None:
    client = signed_in(app)
    r = client.post("/dashboard/logout", headers={"Sec-Fetch-Site": site})
    assert r.status_code == 403
    assert "Set-Cookie" not in r.headers
    assert client.get("/dashboard/").status_code == 200  # still signed in


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
def test_another_sites_page_cannot_sign_in(app: Flask, site: str) -> None:
    client = app.test_client()
    r = client.post(
        "/dashboard/login",
        data={"token": TOKENS["analyst_token"]},
        headers={"Sec-Fetch-Site": site},
    )
    assert r.status_code == 403
    assert "Set-Cookie" not in r.headers
    assert r.headers["Content-Security-Policy"].startswith("default-src 'none'")


@pytest.mark.parametrize("headers", [{}, {"Sec-Fetch-Site": "same-origin"}])
def test_the_dashboards_own_forms_still_work(app: Flask, headers: dict[str, str]) -> None:
    client = app.test_client()
    r = client.post("/dashboard/login", data={"token": TOKENS["analyst_token"]}, headers=headers)
    assert r.status_code == 303 and "ldp_dashboard=" in r.headers["Set-Cookie"]
    r = client.post("/dashboard/logout", headers=headers)
    assert r.status_code == 303 and "ldp_dashboard=;" in r.headers["Set-Cookie"]
    assert client.get("/dashboard/").status_code == 303
