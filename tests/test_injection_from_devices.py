"""Strings chosen by devices reach the analyst: an open-domain campaign discovers whatever
enough devices report, and shows it on the dashboard and in the CSV export. Devices are not
trusted, so neither place may run what they sent.

- HTML: every page escapes it (Jinja's autoescape; this test keeps it so, for discovered
  strings, labels, attribute names, descriptions and query parameters).
- CSV: a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is a
  formula to a spreadsheet (``=HYPERLINK(...)`` sends the sheet's neighbours anywhere). Such a
  cell is written with a leading ``'``; the JSON answer keeps the string as it is. Before, the
  CSV carried it bare.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import secrets
from collections.abc import Iterator

import pytest
from flask import Flask

from client_sdk.mechanisms import from_config
from collector import create_app
from tests.support.garbage import bearer
from tests.support.server import TOKENS

HTML = '<img src=x onerror="alert(1)">'
SCRIPT = "</script><script>alert(2)"
FORMULA = '=HYPERLINK("//x.example","a")'


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    app = create_app({"database": str(tmp_path_factory.mktemp("inj") / "i.db"), **TOKENS})
    client = app.test_client()
    bodies = [
        {"id": "labels", "domain": [HTML, SCRIPT, FORMULA, "-", "plain"], "mechanism": "grr",
         "epsilon": 4.0, "description": HTML},
        {"id": "open", "epsilon": 8.0, "mechanism": "pem", "max_length": 32},
        {"id": "multi", "mechanism": "spl", "epsilon": 4.0,
         "attributes": {HTML: [SCRIPT, "b"], "s": [FORMULA, "y"]}},
    ]  # fmt: skip
    for body in bodies:
        r = client.post("/v1/campaigns", json=body, headers=bearer("admin"))
        assert r.status_code == 201, r.json
    today = dt.date.today().isoformat()
    for cid, values in [
        ("labels", [0, 1, 2, 3, 4] * 200),
        ("open", [SCRIPT] * 1500 + [FORMULA] * 1500 + ["hello"] * 1000),
    ]:
        campaign = client.get(f"/v1/campaigns/{cid}", headers=bearer("analyst")).json
        mech = from_config(campaign["mechanism"])
        if cid == "open":
            payloads = [mech.perturb(v) for v in values]
        else:
            payloads = list(mech.encode_many(mech.perturb_many(values, rng=5)))
        for i in range(0, len(payloads), 1000):
            items = [{"id": secrets.token_hex(16), "day": today, "payload": p}
                     for p in payloads[i : i + 1000]]  # fmt: skip
            r = client.post(
                f"/v1/campaigns/{cid}/reports",
                json={"digest": campaign["digest"], "reports": items},
                headers=bearer("ingest"),
            )
            assert r.json["accepted"] == len(items), r.json
    yield app
    app.extensions["ldp_storage"].close()


def test_the_open_domain_campaign_discovered_the_devices_strings(app: Flask) -> None:
    """The premise: the attack strings are in the answer (else the tests below prove nothing)."""
    body = app.test_client().get("/v1/campaigns/open/estimates", headers=bearer("analyst")).json
    found = {item["value"] for item in body["discovered"]}
    assert {SCRIPT, FORMULA} <= found, found


@pytest.mark.parametrize(
    "path",
    [
        "/dashboard/",
        "/dashboard/campaigns/labels",
        "/dashboard/campaigns/open",
        "/dashboard/campaigns/multi",
        "/dashboard/campaigns/open?candidate=" + HTML,
        "/dashboard/campaigns/labels?level=" + HTML,
        "/dashboard/campaigns/" + HTML,
    ],
)
def test_no_page_carries_a_device_string_as_markup(app: Flask, path: str) -> None:
    client = app.test_client()
    assert client.post("/dashboard/login", data={"token": TOKENS["analyst_token"]}).status_code
    page = client.get(path).get_data(as_text=True)
    for raw in ("<img src=x", "<script>alert", "</script><script>"):
        assert raw not in page, (path, raw)


def test_discovered_strings_are_escaped_on_the_page(app: Flask) -> None:
    client = app.test_client()
    client.post("/dashboard/login", data={"token": TOKENS["analyst_token"]})
    page = client.get("/dashboard/campaigns/open").get_data(as_text=True)
    assert "&lt;/script&gt;&lt;script&gt;alert(2)" in page


def csv_rows(app: Flask, cid: str) -> list[dict[str, str]]:
    headers = {**bearer("analyst"), "Accept": "text/csv"}
    r = app.test_client().get(f"/v1/campaigns/{cid}/estimates", headers=headers)
    assert r.status_code == 200 and r.mimetype == "text/csv", r.data[:200]
    return list(csv.DictReader(io.StringIO(r.get_data(as_text=True))))


@pytest.mark.parametrize("cid", ["labels", "open"])
def test_csv_cells_that_a_spreadsheet_would_run_are_text(app: Flask, cid: str) -> None:
    rows = csv_rows(app, cid)
    values = [row["value"] for row in rows]
    assert "'" + FORMULA in values, values
    if cid == "labels":
        assert "'-" in values and "plain" in values and HTML in values
    for row in rows:
        for cell in row.values():
            assert not cell.startswith(("=", "+", "@", "\t", "\r")), (cid, row)
            assert not cell.startswith("-") or _is_number(cell), (cid, row)
    # The JSON answer is the data, unchanged.
    body = app.test_client().get(f"/v1/campaigns/{cid}/estimates", headers=bearer("analyst")).json
    items = body["values"] if cid == "labels" else body["discovered"]
    assert FORMULA in {item["value"] for item in items}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


BREAKS = ["a\rb", "c\nd", "e\r\nf", "\rg", "h\r"]


def test_a_discovered_string_with_a_line_break_stays_in_its_cell() -> None:
    """Open-domain discovery reports whatever enough devices send, control characters too.

    Before, lines ended with a bare LF and the writer quoted only cells holding an LF: a CR
    inside a discovered string went out unquoted, and every CSV reader stopped at that row
    (CI saw it once, from a PEM run whose noise discovered such a string)."""
    from aggregator.export import to_csv

    common = {"campaign": "c", "n": 9, "mechanism": "pem", "epsilon": 1.0, "level": 0.95}
    item = {"count": 3.0, "std_error": 1.0, "ci_low": 1.0, "ci_high": 5.0, "significant": True}
    body = {**common, "kind": "open_domain", "candidates": []}
    body["discovered"] = [{"value": v, **item} for v in BREAKS]
    text = to_csv(body)
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    # "\r..." is a formula start, so that one carries the leading quote.
    assert [row["value"] for row in rows] == ["a\rb", "c\nd", "e\r\nf", "'\rg", "h\r"]
    assert all(row["rank"] for row in rows)
