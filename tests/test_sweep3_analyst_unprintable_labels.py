"""Unprintable characters in labels and attribute names reach the analyst only as text.

Admins name values and attributes; the collector refuses C0 controls in them but keeps C1
controls (U+009B is CSI to a terminal), bidi overrides (U+202E reverses what follows) and
zero-width characters; with ``ldp estimate --url`` the answer is whatever the collector sent.
Discovered strings (devices') were already shown with their unprintable characters escaped;
labels and attribute names were not:

- ``ldp estimate`` printed them raw: U+009B went to the terminal as a control, and U+202E
  reversed the rest of the row, the counts and intervals with it.
- the dashboard put them raw into headings, captions and tooltips (``<title>label: 14.00% (CI
  ...)</title>``), where a U+202E reversed the rest of the line, numbers included (seen in
  headless Chromium: "count: over all devices, ... holding dts sti ;rtta .rorre ...").

Now both show such characters as Python escapes (``\\u202e``), as discovered strings are.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from client_sdk.mechanisms import from_config
from collector import create_app
from ldp_cli.estimate_cmd import render_table
from ldp_cli.main import cli
from tests.support.garbage import bearer
from tests.support.server import TOKENS

RLO = "\u202e"  # right-to-left override
CSI = "\u009b"  # C1 control sequence introducer
ZWSP = "\u200b"  # zero-width space
LABELS = [RLO + "reversed", CSI + "31mred", "pla" + ZWSP + "in", "plain"]
ATTRIBUTES = {RLO + "attr": [CSI + "2Jx", "b"], "s": ["y", "n" + ZWSP]}


@pytest.fixture(scope="module")
def app_and_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Flask, Path]]:
    db = tmp_path_factory.mktemp("labels") / "l.db"
    app = create_app({"database": str(db), **TOKENS})
    client = app.test_client()
    bodies: list[dict[str, Any]] = [
        {"id": "labels", "domain": LABELS, "mechanism": "grr", "epsilon": 4.0},
        {"id": "multi", "mechanism": "spl", "epsilon": 4.0, "attributes": ATTRIBUTES,
         "pairs": [list(ATTRIBUTES)]},
    ]  # fmt: skip
    for body in bodies:
        r = client.post("/v1/campaigns", json=body, headers=bearer("admin"))
        assert r.status_code == 201, r.json
    today = dt.date.today().isoformat()
    rng = np.random.default_rng(7)
    for cid in ("labels", "multi"):
        campaign = json_of(client, f"/v1/campaigns/{cid}")
        mech = from_config(campaign["mechanism"])
        values: Any = (
            rng.integers(0, len(LABELS), 2000)
            if cid == "labels"
            else {a: rng.integers(0, 2, 2000) for a in ATTRIBUTES}
        )
        payloads = list(mech.encode_many(mech.perturb_many(values, rng=rng)))  # type: ignore[arg-type]
        for i in range(0, len(payloads), 1000):
            items = [{"id": secrets.token_hex(16), "day": today, "payload": p}
                     for p in payloads[i : i + 1000]]  # fmt: skip
            r = client.post(
                f"/v1/campaigns/{cid}/reports",
                json={"digest": campaign["digest"], "reports": items},
                headers=bearer("ingest"),
            )
            assert r.get_json()["accepted"] == len(items), r.get_data(as_text=True)
    yield app, db
    app.extensions["ldp_storage"].close()


def json_of(client: FlaskClient, path: str) -> dict[str, Any]:
    r = client.get(path, headers=bearer("analyst"))
    assert r.status_code == 200, r.get_data(as_text=True)
    body: dict[str, Any] = r.get_json()
    return body


def unprintable(text: str) -> list[str]:
    """The unprintable characters of ``text`` other than line breaks, as escapes."""
    return [repr(c) for c in text if not c.isprintable() and c not in "\n"]


class _Text(HTMLParser):
    """The page's text as a reader (or a tooltip) shows it: every text node, SVG's too."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def page_text(app: Flask, path: str) -> str:
    client = app.test_client()
    client.post("/dashboard/login", data={"token": TOKENS["analyst_token"]})
    r = client.get(path)
    assert r.status_code == 200, r.status_code
    parser = _Text()
    parser.feed(r.get_data(as_text=True))
    return "".join(parser.parts)


@pytest.mark.parametrize("cid", ["labels", "multi"])
def test_the_dashboard_shows_unprintable_characters_of_labels_as_escapes(
    app_and_db: tuple[Flask, Path], cid: str
) -> None:
    text = page_text(app_and_db[0], f"/dashboard/campaigns/{cid}")
    assert unprintable(text.replace("\t", " ")) == [], cid
    assert "\\u202e" in text and "\\x9b" in text and "\\u200b" in text


def test_a_bidi_override_in_an_attribute_name_does_not_reverse_its_heading(
    app_and_db: tuple[Flask, Path],
) -> None:
    text = page_text(app_and_db[0], "/dashboard/campaigns/multi")
    assert "\\u202eattr × s" in text  # the crosstab's heading, in reading order
    assert "holding \\u202eattr; its std error" in text  # the caption after the name too


@pytest.mark.parametrize("cid", ["labels", "multi"])
def test_ldp_estimate_prints_unprintable_characters_of_labels_as_escapes(
    app_and_db: tuple[Flask, Path], cid: str
) -> None:
    result = CliRunner().invoke(cli, ["estimate", cid, "--db", str(app_and_db[1])])
    assert result.exit_code == 0, result.output
    assert unprintable(result.output) == [], result.output
    assert "\\u202e" in result.output and "\\x9b" in result.output
    assert "\\u200b" in result.output


def test_the_table_stays_aligned_with_escaped_labels(app_and_db: tuple[Flask, Path]) -> None:
    result = CliRunner().invoke(cli, ["estimate", "labels", "--db", str(app_and_db[1])])
    lines = result.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("value "))
    rows = lines[header + 2 : header + 2 + len(LABELS)]
    # Each row's count column ends where the header's does.
    end = lines[header].index("count") + len("count")
    assert all(row[end - 1] != " " and row[end] == " " for row in rows), rows


def test_an_answer_from_a_collector_with_controls_prints_no_control(
    app_and_db: tuple[Flask, Path],
) -> None:
    """With --url the answer is whatever the collector sent: ESC, a carriage return that
    would overwrite the line, OSC 8 links, in labels, attribute names and notes."""
    client = app_and_db[0].test_client()
    evil = "\x1b[2J\x1b]8;;http://x.example/\x07link\x1b]8;;\x07\rOVERWRITTEN"
    for cid in ("labels", "multi"):
        body = json_of(client, f"/v1/campaigns/{cid}/estimates")
        if cid == "labels":
            body["values"][0]["value"] = evil
            body["postprocess"]["note"] = evil
        else:
            body["attributes"][0]["name"] = evil
            body["attributes"][0]["values"][0]["value"] = evil
            body["joints"][0]["pair"] = [evil, "s"]
            body["joints"][0]["rows"][0] = evil
            body["note"] = evil
        text = render_table(body)
        assert unprintable(text) == [], (cid, text)
        assert "\\x1b[2J\\x1b]8;;http://x.example/\\x07link" in text
