"""Open-domain strings that differ only in spaces are shown apart (fifth sweep, values).

Whitespace is part of a device's string (docs/MECHANISMS.md §24: nothing but NFC is changed),
so ``" a "``, ``"a "`` and ``"a"`` are three strings with three counts. The dashboard showed
all three as ``a`` (HTML trims and collapses spaces) and ``ldp estimate``'s table as ``a``
padded to its column, so an analyst who asked for the string seen got another's count. Both
now show spaces at either end or in a run as ``\\x20``; JSON and CSV keep the strings as they
are. A real ``ldp serve`` answers the dashboard page and ``ldp estimate --url``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
import requests
from click.testing import CliRunner

from ldp_cli.main import cli
from tests.support.server import CollectorProcess, seeded_collector

STRINGS = {" a ": 1500, "a ": 1200, "a": 900, "a  b": 600}
SHOWN = {" a ": r"\x20a\x20", "a ": r"a\x20", "a": "a", "a  b": r"a\x20\x20b"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    body = {"id": "typed", "epsilon": 8.0, "mechanism": "pem", "max_length": 4}
    with seeded_collector(tmp_path_factory.mktemp("spaces"), body, STRINGS, rng=20261128) as s:
        yield s


def _discovered(srv: CollectorProcess) -> list[str]:
    body = srv.estimates("typed", top="4")
    return [d["value"] for d in body["discovered"] if d["significant"]]


def test_the_api_discovers_the_strings_as_sent(srv: CollectorProcess) -> None:
    assert sorted(_discovered(srv)) == sorted(STRINGS)


def test_the_dashboard_shows_strings_that_differ_in_spaces_apart(srv: CollectorProcess) -> None:
    session = requests.Session()
    r = session.post(
        srv.url + "/dashboard/login", data={"token": srv.analyst_token}, allow_redirects=False
    )
    assert r.status_code == 303, r.text
    page = session.get(srv.url + "/dashboard/campaigns/typed", params={"top": "4"}, timeout=30)
    assert page.status_code == 200, page.text
    table = page.text.split('id="discovered-table"', 1)[1].split("</table>", 1)[0]
    cells = [
        html.unescape(c) for c in re.findall(r"<tr><td class=\"num\">\d+</td><td>(.*?)</td>", table)
    ]
    assert cells == [SHOWN[v] for v in _discovered(srv)]
    assert len(set(cells)) == len(cells)
    chart = page.text.split('id="discovered"', 1)[1].split("</svg>", 1)[0]
    labels = [html.unescape(t) for t in re.findall(r'<text class="label"[^>]*>(.*?)</text>', chart)]
    assert labels == cells


def test_the_cli_table_shows_them_apart_and_csv_keeps_them(srv: CollectorProcess) -> None:
    env = {"LDP_ANALYST_TOKEN": srv.analyst_token}
    args = ["estimate", "typed", "--url", srv.url, "--top", "4"]
    out = CliRunner().invoke(cli, args, env=env)
    assert out.exit_code == 0, out.output
    ranked = [
        line.split(None, 1)[1].rsplit(None, 5)[0]
        for line in out.output.splitlines()
        if re.match(r"\s+\d+\s", line)
    ]
    assert ranked == [SHOWN[v] for v in _discovered(srv)]
    csv_out = CliRunner().invoke(cli, [*args, "--format", "csv"], env=env)
    assert csv_out.exit_code == 0, csv_out.output
    for value in STRINGS:
        assert f",{value}," in csv_out.output  # the string itself, spaces and all
