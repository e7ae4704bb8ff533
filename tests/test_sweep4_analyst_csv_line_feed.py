"""A CSV cell that starts with a line feed is neutralised like one that starts with ``=``.

The CSV export wrote a leading ``'`` before a cell starting with ``=``, ``+``, ``-``, ``@``, a
tab or a carriage return (``aggregator.export.FORMULA_STARTS``, OWASP's CSV Injection list),
but not before one starting with a line feed, the carriage return's twin: a spreadsheet that
drops the leading line break then reads ``=HYPERLINK(...)``. Open-domain discovery reports whatever
enough devices send, so devices chose such a cell (``"\\n=HYPERLINK(...)"`` went out as is).
The rule is one (``aggregator.export.to_csv``) for ``Accept: text/csv``, ``ldp estimate --db
--format csv`` and ``ldp estimate --url --format csv`` (the collector's CSV, as it came).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import secrets
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from flask import Flask

from aggregator.export import to_csv
from client_sdk.mechanisms import from_config
from collector import create_app
from ldp_cli.main import cli
from tests.support.garbage import bearer
from tests.support.server import TOKENS

#: What devices send: a formula behind a line break (LF, CRLF, CR).
LF_FORMULA = '\n=HYPERLINK("//x.example")'
SENT = [LF_FORMULA, "\r\n=1+2", "\r=1+3"]
#: First characters of a cell that OWASP says a spreadsheet may run (CSV Injection).
OWASP_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n")


@pytest.fixture(scope="module")
def app_and_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Flask, Path]]:
    db = tmp_path_factory.mktemp("lf") / "lf.db"
    app = create_app({"database": str(db), **TOKENS})
    client = app.test_client()
    body = {"id": "open", "epsilon": 8.0, "mechanism": "pem", "max_length": 32}
    r = client.post("/v1/campaigns", json=body, headers=bearer("admin"))
    assert r.status_code == 201, r.json
    mech = from_config(r.json["mechanism"])
    rng = np.random.default_rng(2026)
    values = [v for v in SENT for _ in range(1200)] + ["plain"] * 800
    items = [
        {"id": secrets.token_hex(16), "day": dt.date.today().isoformat(), "payload": p}
        for p in (mech.perturb(v, rng=rng) for v in values)
    ]
    for i in range(0, len(items), 1000):
        sent = client.post(
            "/v1/campaigns/open/reports",
            json={"digest": r.json["digest"], "reports": items[i : i + 1000]},
            headers=bearer("ingest"),
        )
        assert sent.json["accepted"] == len(items[i : i + 1000]), sent.json
    yield app, db
    app.extensions["ldp_storage"].close()


def rows_of(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def assert_no_cell_a_spreadsheet_runs(rows: list[dict[str, str]]) -> None:
    for row in rows:
        for cell in row.values():
            if cell.startswith("-"):
                float(cell)  # a negative number is the only cell that may start so
            else:
                assert not cell.startswith(OWASP_STARTS), row


def test_the_devices_strings_were_discovered(app_and_db: tuple[Flask, Path]) -> None:
    """The premise: the strings are in the answer, as sent (else the tests prove nothing)."""
    r = app_and_db[0].test_client().get("/v1/campaigns/open/estimates", headers=bearer("analyst"))
    assert set(SENT) <= {item["value"] for item in r.json["discovered"]}, r.json["discovered"]


def test_every_csv_path_writes_a_leading_line_break_as_text(
    app_and_db: tuple[Flask, Path],
) -> None:
    app, db = app_and_db
    query = [("candidate", "\n@SUM(1)")]
    http = app.test_client().get(
        "/v1/campaigns/open/estimates",
        query_string=query,
        headers={**bearer("analyst"), "Accept": "text/csv"},
    )
    assert http.status_code == 200 and http.mimetype == "text/csv", http.data[:300]
    cli_db = CliRunner().invoke(
        cli,
        ["estimate", "open", "--db", str(db), "--format", "csv", "--candidate", "\n@SUM(1)"],
    )
    assert cli_db.exit_code == 0, cli_db.output
    text = cli_db.stdout_bytes.decode()  # .output would turn the CRLFs into LFs
    assert text == http.get_data(as_text=True)  # one writer, one rule
    rows = rows_of(text)
    values = [row["value"] for row in rows]
    assert {"'" + v for v in SENT} | {"'\n@SUM(1)"} <= set(values), values
    assert "plain" in values
    assert_no_cell_a_spreadsheet_runs(rows)


@pytest.mark.parametrize("start", OWASP_STARTS)
def test_each_start_owasp_lists_gets_the_quote(start: str) -> None:
    common = {"campaign": "c", "n": 9, "mechanism": "pem", "epsilon": 1.0, "level": 0.95}
    item = {"count": 3.0, "std_error": 1.0, "ci_low": 1.0, "ci_high": 5.0, "significant": True}
    body = {**common, "kind": "open_domain", "candidates": []}
    body["discovered"] = [{"value": start + "=1+1", **item}, {"value": "a" + start, **item}]
    values = [row["value"] for row in rows_of(to_csv(body))]
    # The quote where the cell starts so; a line break or sign inside a cell is only text.
    assert values == ["'" + start + "=1+1", "a" + start]
