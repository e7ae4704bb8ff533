"""The dashboard's sign-in cookie and query form against what any client may send.

- A cookie whose expiry is not plain ASCII digits: ``str.isdigit()`` takes "²" (and other
  digits ``int()`` refuses), and ``int()`` refuses more than 4300 digits. Either was a 500
  with an ERROR and its traceback in the log, for any client, signed in or not (seen through
  ``ldp serve``: ``curl -H $'Cookie: ldp_dashboard=\\xb29.x' .../dashboard/``). Now it is just
  not a session: the sign-in page.
- ``top=1e3`` on an open-domain campaign was told "'from'/'to' must be days YYYY-MM-DD, 'level'
  a number in (0, 1)", which names every field but the one at fault.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask

from collector import create_app
from tests.support.garbage import bearer
from tests.support.server import TOKENS


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    app = create_app({"database": str(tmp_path_factory.mktemp("ck") / "c.db"), **TOKENS})
    body = {"id": "open", "epsilon": 4.0, "mechanism": "pem", "max_length": 8}
    r = app.test_client().post("/v1/campaigns", json=body, headers=bearer("admin"))
    assert r.status_code == 201, r.json
    yield app
    app.extensions["ldp_storage"].close()


@pytest.mark.parametrize(
    "expiry", ["²9", "9" * 4400, "٩٩٩٩٩٩٩٩٩٩٩", "9" * 13, "", "-1", "+99999999999"]
)
@pytest.mark.parametrize("path", ["/dashboard/", "/dashboard/campaigns/open"])
@pytest.mark.filterwarnings("ignore:The 'ldp_dashboard' cookie is too large")  # the 4400 digits
def test_a_malformed_session_cookie_is_no_session(app: Flask, expiry: str, path: str) -> None:
    client = app.test_client()
    client.set_cookie("ldp_dashboard", f"{expiry}.abc", path="/dashboard")
    r = client.get(path)
    assert r.status_code == 303, r.status_code
    assert r.headers["Location"].endswith("/dashboard/login")


def test_a_signed_in_session_still_works(app: Flask) -> None:
    client = app.test_client()
    assert client.post("/dashboard/login", data={"token": TOKENS["analyst_token"]}).status_code
    assert client.get("/dashboard/").status_code == 200


@pytest.mark.parametrize("top", ["1e3", "ten", "2.5"])
def test_a_top_that_is_no_integer_is_named_in_the_message(app: Flask, top: str) -> None:
    client = app.test_client()
    client.post("/dashboard/login", data={"token": TOKENS["analyst_token"]})
    page = client.get(f"/dashboard/campaigns/open?top={top}").get_data(as_text=True)
    assert 'id="problem"' in page
    assert "&#39;top&#39; an integer in [1, 200]" in page
