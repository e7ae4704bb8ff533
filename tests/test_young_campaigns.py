"""Every kind of campaign answers on its first reports, on every surface, in standard JSON.

A campaign's first day holds a handful of reports: too few for some windows, levels,
attributes or patterns. A sweep of a live ``ldp serve`` over every mechanism at 1, 2 and 5
reports found three 500s there (open-domain discovery with no prefix left to extend; the
dashboard on such a campaign; the pattern MLE with a singular information) and bare
``Infinity`` in JSON. This is that sweep, kept: each campaign kind, after each upload, through
the estimates endpoint (JSON and CSV, several queries), the dashboard and ``ldp estimate``
(``--url`` and ``--db``). A query is either answered (200, standard JSON) or refused with a
clear 4xx (422: too few reports); never a 500, never a non-finite number.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import requests
from click.testing import CliRunner

from client_sdk.mechanisms import from_config
from ldp_cli.main import cli
from tests.support.server import ANALYST_TOKEN, CollectorProcess, running_collector

CATEGORICAL = ["grr", "hr", "olh", "oue", "rappor", "rr", "ss", "sue", "auto"]
NUMERIC = ["1bitmean", "alpha_point", "duchi", "hybrid", "piecewise", "square_wave", "auto"]
MULTI = ["smp", "spl", "rsfd", "auto"]
OPEN = ["pem", "cms", "hcms"]
POSTPROCESS = ["none", "clip", "norm-sub", "base-cut", "mle", "eb", "eb-joint", "auto", "pattern"]


def specs() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in CATEGORICAL:
        out.append(
            {
                "mechanism": m,
                "epsilon": 1.0,
                "domain": ["a", "b", "c", "d"][: 2 if m == "rr" else 4],
            }
        )
    for m in NUMERIC:
        out.append({"mechanism": m, "epsilon": 1.0, "bounds": [0, 100]})
    out.append(
        {
            "mechanism": "square_wave",
            "epsilon": 1.0,
            "bounds": [0, 100],
            "params": {"integer": True},
        }
    )
    for m in MULTI:
        attributes: dict[str, Any] = {"o": ["a", "b", "c"], "s": ["F", "M"]}
        pairs = [["o", "s"]]
        if m != "rsfd":  # rsfd takes categorical attributes only
            attributes["age"] = {"bounds": [17, 90]}
            pairs.append(["o", "age"])
        out.append({"mechanism": m, "epsilon": 2.0, "attributes": attributes, "pairs": pairs})
    for m in OPEN:
        out.append({"mechanism": m, "epsilon": 4.0, "max_length": 8})
    return out  # fmt: skip


def values(spec: dict[str, Any], n: int, rng: np.random.Generator) -> Any:
    if "domain" in spec:
        return rng.integers(0, len(spec["domain"]), n)
    if "bounds" in spec:
        return rng.uniform(0, 100, n).round()
    if "attributes" in spec:
        cols = {"o": rng.integers(0, 3, n), "s": rng.integers(0, 2, n)}
        if "age" in spec["attributes"]:
            cols["age"] = rng.uniform(17, 90, n)
        return cols
    return ["abc"] * n


def strict(text: str) -> Any:
    """JSON as RFC 8259 and browsers read it: a bare NaN or Infinity is an error."""

    def refuse(word: str) -> Any:
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("young")) as server:
        yield server


def check_answers(srv: CollectorProcess, cid: str, spec: dict[str, Any], seen: str) -> None:
    today = dt.datetime.now(dt.UTC).date().isoformat()
    queries: list[dict[str, Any]] = [
        {"level": "0.999"},
        {"level": "0.01"},
        {"from": today, "to": today},
        {"to": "2000-01-01"},  # no window in the range: 422
    ]
    if "domain" in spec:
        queries += [{"postprocess": p} for p in POSTPROCESS]
    if "max_length" in spec:
        queries.append({"candidate": ["abc", "x"]})
    for query in queries:
        for accept in ("application/json", "text/csv"):
            r = requests.get(
                f"{srv.url}/v1/campaigns/{cid}/estimates",
                params=query,
                headers={**srv.headers("analyst"), "Accept": accept},
                timeout=60,
            )
            where = f"{cid} after {seen}, {query}, {accept}"
            assert r.status_code in (200, 422) or (
                r.status_code == 400 and query.get("postprocess") == "pattern"  # not capable
            ), f"{where}: {r.status_code} {r.text[:300]}"
            if r.status_code != 200:
                strict(r.text)  # the error envelope
            elif accept == "application/json":
                strict(r.text)
            else:
                assert "inf" not in r.text.lower() and "nan" not in r.text.lower(), where
    runner = CliRunner()
    for where in (["--url", srv.url, "--token", ANALYST_TOKEN], ["--db", srv.db_url]):
        shown = runner.invoke(cli, ["estimate", cid, *where])
        assert shown.exit_code in (0, 1), (cid, seen, shown.output)
        assert shown.exception is None or isinstance(shown.exception, SystemExit), shown.output
        assert " inf" not in shown.output and "nan" not in shown.output, shown.output


SPECS = specs()
UPLOADS = (1, 1, 3)  # 1, 2 and 5 reports in all


@pytest.fixture(scope="module")
def planned(srv: CollectorProcess) -> list[tuple[dict[str, Any], list[list[Any]]]]:
    """Every campaign kind, created, with the payloads of its three uploads: drawn from one
    generator in the sweep's order (campaign by campaign, upload by upload), so each campaign
    gets the same reports whichever worker runs its test and whatever runs before it."""
    rng = np.random.default_rng(20261127)
    out = []
    for i, spec in enumerate(SPECS):
        cid = f"young-{i}-{spec['mechanism'].replace('_', '-')}"
        made = srv.post_campaign({"id": cid, **spec})
        assert made.status_code == 201, made.text
        campaign = made.json()
        mech = from_config(campaign["mechanism"])
        payloads = [
            mech.encode_many(mech.perturb_many(values(spec, n, rng), rng=rng)) for n in UPLOADS
        ]
        out.append((campaign, payloads))
    return out


@pytest.fixture(scope="module")
def session(srv: CollectorProcess) -> Iterator[requests.Session]:
    """One dashboard sign-in for the module, as the single sweep had: one per kind tripped
    the sign-in rate limit (429 "Too many sign-in attempts") on a fast machine."""
    with requests.Session() as session:
        login = session.post(
            srv.url + "/dashboard/login", data={"token": ANALYST_TOKEN}, timeout=30
        )
        assert login.status_code == 200, login.text
        yield session


@pytest.mark.parametrize("i", range(len(SPECS)), ids=lambda i: f"{i}-{SPECS[i]['mechanism']}")
def test_every_kind_of_campaign_answers_its_first_reports(
    srv: CollectorProcess,
    planned: list[tuple[dict[str, Any], list[list[Any]]]],
    session: requests.Session,
    i: int,
) -> None:
    spec = SPECS[i]
    campaign, payloads = planned[i]
    cid = campaign["id"]
    sent = 0
    for n, payload in zip(UPLOADS, payloads, strict=True):
        srv.upload(campaign, payload)
        sent += n
        check_answers(srv, cid, spec, f"{sent} report(s)")
        page = session.get(
            f"{srv.url}/dashboard/campaigns/{cid}",
            params={"candidates": "abc\nx"} if "max_length" in spec else None,
            timeout=60,
        )
        assert page.status_code in (200, 422), (cid, sent, page.text[-500:])
        text = page.text.lower()
        assert "infinity" not in text and ">inf<" not in text and ">nan<" not in text
