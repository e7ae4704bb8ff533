"""Candidate strings reach the estimator exactly as the analyst gave them (fifth sweep, values).

* The dashboard's candidates box stripped each line and split with ``str.splitlines``: ``" a "``
  was counted as ``"a"`` (another string's count, about 900 devices here instead of about
  1,500), and ``"a\\u2028b"`` became two candidates. The API and ``ldp estimate`` take the
  strings exactly; the box now splits at line breaks only and keeps every other character.
* ``?candidate=%FF`` (an escape that is not UTF-8) answered 200 with the count of the three
  characters ``%FF``: Werkzeug keeps an undecodable escape as its text. It is a 400 now, on the
  API and on the dashboard alike.

A real ``ldp serve`` answers; the device reports through the SDK.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
import requests

from tests.support.server import CollectorProcess, seeded_collector

STRINGS = {" a ": 1500, "a": 900, "a\u2028b": 700}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    body = {"id": "asked", "epsilon": 8.0, "mechanism": "cms", "max_length": 8}
    with seeded_collector(tmp_path_factory.mktemp("candidates"), body, STRINGS, rng=20261128) as s:
        yield s


def _signed_in(srv: CollectorProcess) -> requests.Session:
    session = requests.Session()
    r = session.post(
        srv.url + "/dashboard/login", data={"token": srv.analyst_token}, allow_redirects=False
    )
    assert r.status_code == 303, r.text
    return session


def _api_counts(srv: CollectorProcess, candidates: list[str]) -> list[float]:
    r = requests.get(
        srv.url + "/v1/campaigns/asked/estimates",
        params=[("candidate", c) for c in candidates],
        headers=srv.headers("analyst"),
        timeout=30,
    )
    assert r.status_code == 200, r.text
    got = r.json()["candidates"]
    assert [c["value"] for c in got] == candidates
    return [c["count"] for c in got]


def test_the_dashboard_counts_the_strings_typed_not_stripped_or_split(
    srv: CollectorProcess,
) -> None:
    asked = [" a ", "a\u2028b"]
    page = _signed_in(srv).get(
        srv.url + "/dashboard/campaigns/asked",
        params={"candidates": "\r\n".join(asked)},
        timeout=30,
    )
    assert page.status_code == 200, page.text
    table = page.text.split('id="candidates-table"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>(.*?)</td><td class=\"num\">([-\d,.]+)</td>", table)
    assert len(rows) == 2, rows  # "a\u2028b" is one string, not "a" and "b"
    api = _api_counts(srv, asked)
    shown = [float(count.replace(",", "")) for _, count in rows]
    assert shown == pytest.approx(api, abs=0.051)  # the page prints one decimal
    # The strip made " a " read as "a": the two counts are about 600 devices apart here, some
    # twenty of the counts' standard errors.
    a_alone = _api_counts(srv, ["a"])[0]
    assert abs(shown[0] - a_alone) > 300, (shown, a_alone)
    assert html.unescape(rows[0][0]) == r"\x20a\x20"


@pytest.mark.parametrize("escape", ["%FF", "caf%C3", "%ED%A0%80"])
def test_a_candidate_that_is_not_utf8_is_refused_not_counted_as_its_escape(
    srv: CollectorProcess, escape: str
) -> None:
    r = requests.get(
        srv.url + f"/v1/campaigns/asked/estimates?candidate={escape}",
        headers=srv.headers("analyst"),
        timeout=30,
    )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_parameter" and "UTF-8" in err["message"], err
    page = _signed_in(srv).get(
        srv.url + f"/dashboard/campaigns/asked?candidates={escape}", timeout=30
    )
    assert page.status_code == 400, page.text
    assert "UTF-8" in page.text


def test_a_utf8_candidate_still_counts(srv: CollectorProcess) -> None:
    r = requests.get(
        srv.url + "/v1/campaigns/asked/estimates?candidate=%20a%20&candidate=a%E2%80%A8b",
        headers=srv.headers("analyst"),
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert [c["value"] for c in r.json()["candidates"]] == [" a ", "a\u2028b"]
