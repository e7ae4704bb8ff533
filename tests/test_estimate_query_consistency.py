"""One estimate query, one set of checks: the HTTP view, the dashboard and ``ldp estimate``
(``--db`` and ``--url``) refuse the same queries with the same messages and answer the same
ones, for every kind of campaign.

Exploratory QA on campaigns with thousands of reports over several days found them apart:
``ldp estimate --db --top 1`` cut a categorical answer's list where HTTP refused ``top``; the
dashboard took ``from`` after ``to``; a tiny ``level`` was an internal error on categorical
campaigns only; ``LDP_DATABASE`` beat an explicit ``--url``; a repeated query parameter took
its first value silently; a multi-attribute answer showed a raw count without its own error.
Everything here runs against a real ``ldp serve`` subprocess on a loopback port and its real
SQLite file (``--db`` reads the same file), plus ``ldp simulate`` for two simulator defects.
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from click.testing import CliRunner, Result

from aggregator.multi_answers import MULTI_NOTE
from client_sdk.mechanisms import from_config
from ldp_cli.estimate_cmd import MULTI_VALUE_HEADERS
from ldp_cli.main import cli
from tests.support.server import ANALYST_TOKEN, CollectorProcess, running_collector

ROOT = Path(__file__).resolve().parents[1]
TODAY = dt.datetime.now(dt.UTC).date()
DAYS = [TODAY - dt.timedelta(days=back) for back in (2, 1, 0)]
#: A past week (Monday .. Sunday, all before today): the weekly campaign's one window.
MONDAY = TODAY - dt.timedelta(days=7 + TODAY.weekday())
#: No LDP_* variable of the test's environment leaks into a command.
CLEAN_ENV: dict[str, str | None] = {
    "LDP_DATABASE": None,
    "LDP_URL": None,
    "LDP_ANALYST_TOKEN": ANALYST_TOKEN,
}

#: What HTTP answered before the fix (aggregator.service.OPEN_DOMAIN_ONLY now, everywhere).
OPEN_DOMAIN_ONLY = "'top' and 'candidate' apply only to open-domain campaigns"
CAT_DOMAIN = [f"v{i}" for i in range(8)]
CAT_P = [0.3, 0.25, 0.2, 0.15, 0.1, 0.0, 0.0, 0.0]  # five values clearly significant
SPECS: dict[str, dict[str, Any]] = {
    "cat": {"mechanism": "oue", "epsilon": 2.0, "domain": CAT_DOMAIN, "min_reports": 50},
    "weekly": {
        "mechanism": "oue",
        "epsilon": 2.0,
        "domain": CAT_DOMAIN,
        "min_reports": 50,
        "window": "week",
    },
    "num": {"mechanism": "piecewise", "epsilon": 2.0, "bounds": [0, 100]},
    "multi": {
        "mechanism": "smp",
        "epsilon": 2.0,
        # o and s: a categorical pair (o's and s's counts are combined with its margins);
        # g: only in a mixed pair with age (its counts are its own).
        "attributes": {
            "o": ["a", "b", "c"], "s": ["F", "M"], "g": ["x", "y"], "age": {"bounds": [17, 90]}
        },
        "pairs": [["o", "s"], ["g", "age"]],
    },
    "open": {"mechanism": "pem", "epsilon": 4.0, "max_length": 8},
}  # fmt: skip
PER_DAY = 1500
WORDS = ["alpha", "beta", "gamma", "delta", "eps"]


def _values(cid: str, n: int, rng: np.random.Generator) -> Any:
    if cid in ("cat", "weekly"):
        return rng.choice(len(CAT_DOMAIN), n, p=CAT_P)
    if cid == "num":
        return rng.uniform(0, 100, n)
    if cid == "multi":
        return {
            "o": rng.choice(3, n, p=[0.5, 0.3, 0.2]),
            "s": rng.integers(0, 2, n),
            "g": rng.choice(2, n, p=[0.7, 0.3]),
            "age": rng.uniform(17, 90, n),
        }
    return list(rng.choice(WORDS, n, p=[0.4, 0.25, 0.15, 0.12, 0.08]))


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("consistency")) as server:
        rng = np.random.default_rng(20261126)
        for cid, spec in SPECS.items():
            made = server.post_campaign({"id": cid, **spec})
            assert made.status_code == 201, made.text
            campaign = made.json()
            mech: Any = from_config(campaign["mechanism"])
            days = [MONDAY + dt.timedelta(days=1)] if cid == "weekly" else DAYS
            for day in days:
                values = _values(cid, PER_DAY, rng)
                payloads = mech.encode_many(mech.perturb_many(values, rng=rng))
                server.upload(campaign, payloads, day=day.isoformat())
        yield server


@pytest.fixture(scope="module")
def dashboard(srv: CollectorProcess) -> requests.Session:
    session = requests.Session()
    login = session.post(srv.url + "/dashboard/login", data={"token": ANALYST_TOKEN}, timeout=30)
    assert login.status_code == 200, login.text
    return session


def http(srv: CollectorProcess, cid: str, params: Any = None, **headers: str) -> Any:
    return requests.get(
        f"{srv.url}/v1/campaigns/{cid}/estimates",
        params=params,
        headers={**srv.headers("analyst"), **headers},
        timeout=120,
    )


def refusal(answer: Any) -> str:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_parameter"
    return str(error["message"])


def page_problem(session: requests.Session, srv: CollectorProcess, cid: str, **params: str) -> str:
    """The problem a dashboard page states ('' when it shows an answer)."""
    page = session.get(f"{srv.url}/dashboard/campaigns/{cid}", params=params, timeout=120)
    found = re.search(r'<p class="problem"[^>]*>(.*?)</p>', page.text, re.S)
    # 200 with an answer; a stated problem answers the JSON API's status for it.
    assert page.status_code == (200 if found is None else 400), page.text[-500:]
    return html.unescape(found.group(1)) if found else ""


def ldp(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env={**CLEAN_ENV, **(env or {})})


def from_db(
    srv: CollectorProcess, cid: str, *args: str, env: dict[str, str | None] | None = None
) -> Result:
    return ldp("estimate", cid, "--db", srv.db_url, *args, env=env)


def from_url(
    srv: CollectorProcess, cid: str, *args: str, env: dict[str, str | None] | None = None
) -> Result:
    return ldp("estimate", cid, "--url", srv.url, *args, env=env)


def refused_by_cli(result: Result, message: str) -> None:
    """The command failed with ``message`` (a ClickException, exit 1), not a traceback."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert message in " ".join(result.output.split()), result.output


# -- 1. top/candidate: open-domain only, on every surface ------------------------------------


def test_top_on_a_categorical_campaign_is_refused_alike_everywhere(
    srv: CollectorProcess, dashboard: requests.Session
) -> None:
    # The campaign has several significant values: --top 1 used to cut that list in --db.
    body = srv.estimates("cat")
    assert sum(v["significant"] for v in body["values"]) >= 3
    assert refusal(http(srv, "cat", {"top": "1"})) == OPEN_DOMAIN_ONLY
    assert refusal(http(srv, "cat", {"candidate": "v0"})) == OPEN_DOMAIN_ONLY
    refused_by_cli(from_db(srv, "cat", "--top", "1", "--format", "json"), OPEN_DOMAIN_ONLY)
    refused_by_cli(from_db(srv, "cat", "--candidate", "v0"), OPEN_DOMAIN_ONLY)
    refused_by_cli(from_url(srv, "cat", "--top", "1"), OPEN_DOMAIN_ONLY)
    assert page_problem(dashboard, srv, "cat", top="1") == OPEN_DOMAIN_ONLY
    for cid in ("num", "multi"):
        assert refusal(http(srv, cid, {"top": "3"})) == OPEN_DOMAIN_ONLY
        refused_by_cli(from_db(srv, cid, "--top", "3"), OPEN_DOMAIN_ONLY)
    # An open-domain campaign takes both, and a top past its maximum is one message too.
    assert from_db(srv, "open", "--top", "3", "--candidate", "beta").exit_code == 0
    for refused in (
        http(srv, "open", {"top": "500"}).json()["error"]["message"],
        from_db(srv, "open", "--top", "500").output,
        page_problem(dashboard, srv, "open", top="500"),
    ):
        assert "'top' must be an integer in [1, 200], got 500" in refused


# -- 2. --url on the command line wins over LDP_DATABASE --------------------------------------


def test_an_explicit_url_wins_over_the_environments_database(srv: CollectorProcess) -> None:
    wanted = srv.estimates("cat")
    # A database that does not exist: answering at all proves the collector was asked.
    missing = str(srv.tmp_path / "no-such.db")
    asked = from_url(srv, "cat", "--format", "json", env={"LDP_DATABASE": missing})
    assert asked.exit_code == 0, asked.output
    assert json.loads(asked.output)["values"] == wanted["values"]
    # The other way round: an explicit --db wins over LDP_URL (nothing listens there).
    read = from_db(srv, "cat", "--format", "json", env={"LDP_URL": "http://127.0.0.1:9"})
    assert read.exit_code == 0, read.output
    assert json.loads(read.output)["n"] == wanted["n"]
    # The environment alone still works, and two flags still conflict.
    alone = ldp("estimate", "cat", "--format", "json", env={"LDP_DATABASE": srv.db_url})
    assert alone.exit_code == 0 and json.loads(alone.output)["n"] == wanted["n"]
    both = ldp("estimate", "cat", "--db", srv.db_url, "--url", srv.url)
    assert both.exit_code == 2 and "not both" in both.output, both.output
    neither = ldp("estimate", "cat")
    assert neither.exit_code == 2 and "--db PATH" in neither.output, neither.output
    two_vars = ldp("estimate", "cat", env={"LDP_DATABASE": srv.db_url, "LDP_URL": srv.url})
    assert two_vars.exit_code == 2 and "both set" in two_vars.output, two_vars.output


# -- 3. from after to: one check, one message --------------------------------------------------


@pytest.mark.parametrize("cid", ["cat", "weekly"])
def test_a_reversed_range_is_refused_alike_everywhere(
    srv: CollectorProcess, dashboard: requests.Session, cid: str
) -> None:
    # Daily: no window between them (it said "not enough reports yet (0 of 50)"); weekly: both
    # days fall in the week that holds the reports (it showed an estimate).
    start, end = MONDAY + dt.timedelta(days=3), MONDAY + dt.timedelta(days=1)
    if cid == "cat":
        start, end = DAYS[2], DAYS[0]
    message = f"'from' {start} is after 'to' {end}"
    params = {"from": start.isoformat(), "to": end.isoformat()}
    assert refusal(http(srv, cid, params)) == message
    assert page_problem(dashboard, srv, cid, **params) == message
    refused_by_cli(from_db(srv, cid, "--from", params["from"], "--to", params["to"]), message)
    refused_by_cli(from_url(srv, cid, "--from", params["from"], "--to", params["to"]), message)
    # The same days in order are answered (the weekly campaign: its one window).
    ordered = {"from": params["to"], "to": params["from"]}
    assert http(srv, cid, ordered).status_code == 200
    assert page_problem(dashboard, srv, cid, **ordered) == ""


# -- 4. tiny levels: the same rule for every kind ----------------------------------------------


@pytest.mark.parametrize("level", ["1e-17", "5e-324", "1e-300", "1.1102230246251565e-16"])
def test_a_tiny_level_is_answered_by_every_kind_of_campaign(
    srv: CollectorProcess, level: str
) -> None:
    for cid in SPECS:
        answer = http(srv, cid, {"level": level})
        assert answer.status_code == 200, (cid, answer.text)
        body = answer.json()
        assert body["level"] == float(level)
        if cid in ("cat", "weekly"):
            # The test's alpha is below 1 (1 - level computed at level >= 2**-53).
            assert body["top_k"]["level"] == float(level)
            assert body["top_k"]["alpha"] == 1 - 2.0**-53
        if cid == "open":
            assert body["threshold"]["alpha"] == 1 - 2.0**-53
    for cid in SPECS:
        shown = from_db(srv, cid, "--level", "1e-300", "--format", "json")
        assert shown.exit_code == 0, (cid, shown.output)
        assert json.loads(shown.output)["level"] == 1e-300


def test_a_level_outside_0_1_is_one_message_everywhere(
    srv: CollectorProcess, dashboard: requests.Session
) -> None:
    for level in ("0", "1", "1.5", "nan"):
        message = f"'level' must be a number in (0, 1), got {float(level)!r}"
        assert refusal(http(srv, "cat", {"level": level})) == message
        assert page_problem(dashboard, srv, "num", level=level) == message
        refused_by_cli(from_db(srv, "multi", "--level", level), message)
        refused_by_cli(from_url(srv, "open", "--level", level), message)


# -- 5. top widens the search: documented where top is ---------------------------------------


def test_tops_effect_on_the_search_is_documented_where_top_is(srv: CollectorProcess) -> None:
    rule = "max(3 top, 48)"

    def flat(text: str) -> str:
        return " ".join(text.split())

    section = (ROOT / "docs/HTTP_API.md").read_text().split("## Open-domain campaigns")[1]
    assert rule in flat(section) and "threshold" in flat(section)
    doc = requests.get(srv.url + "/openapi.json", timeout=30).json()
    params = doc["paths"]["/v1/campaigns/{campaign_id}/estimates"]["get"]["parameters"]
    (top,) = [p for p in params if p["name"] == "top"]
    assert rule in top["description"] and "threshold" in top["description"]
    helped = ldp("estimate", "--help")
    assert rule in flat(helped.output) and "threshold" in flat(helped.output)
    # What the text says: the number of strings tested (the Bonferroni correction) follows
    # top, not only the number of discoveries listed.
    tested = {
        top: srv.estimates("open", top=str(top))["threshold"]["candidates_tested"]
        for top in (1, 200)
    }
    assert tested[1] < tested[200], tested


# -- 6. multi-attribute answers: the raw count's own standard error ---------------------------


def test_a_multi_attribute_raw_count_has_its_own_std_error_on_every_surface(
    srv: CollectorProcess, dashboard: requests.Session
) -> None:
    body = srv.estimates("multi")
    attributes = {a["name"]: a for a in body["attributes"]}
    for name in ("o", "s"):  # in the categorical pair o x s: combined with its margins
        for v in attributes[name]["values"]:
            assert v["raw_std_error"] > 1.05 * v["std_error"], (name, v)
            # The raw count lies within a few of its own standard errors of the combined one.
            assert abs(v["raw_count"] - v["count"]) < 5 * v["raw_std_error"], (name, v)
    for v in attributes["g"]["values"]:  # in a mixed pair only: its own counts, not combined
        assert v["raw_count"] == v["count"]
        assert v["raw_std_error"] == pytest.approx(v["std_error"], rel=1e-12)
    # The mixed pair's per-label counts are the pair's own, not g's: the note says so.
    (means,) = body["label_means"]
    counts = [r["count"] for r in means["rows"]]
    assert counts != [v["count"] for v in attributes["g"]["values"]]
    assert body["note"] == MULTI_NOTE
    assert "declared categorical pair" in MULTI_NOTE and "mixed pair" in MULTI_NOTE
    assert "not combined" in MULTI_NOTE
    # OpenAPI (generated from the model), CSV, the CLI table and the dashboard.
    doc = requests.get(srv.url + "/openapi.json", timeout=30).json()
    assert "raw_std_error" in doc["components"]["schemas"]["AttributeValue"]["properties"]
    text = http(srv, "multi", Accept="text/csv").text
    rows = list(csv.DictReader(io.StringIO(text)))
    o_rows = [r for r in rows if r["table"] == "o"]
    assert [float(r["raw_std_error"]) for r in o_rows] == pytest.approx(
        [v["raw_std_error"] for v in attributes["o"]["values"]]
    )
    shown = from_db(srv, "multi")
    assert shown.exit_code == 0, shown.output
    header = next(line for line in shown.output.splitlines() if "raw count" in line)
    assert tuple(re.split(r"\s{2,}", header.strip())) == MULTI_VALUE_HEADERS
    raw_se = f"{attributes['o']['values'][0]['raw_std_error']:,.1f}"
    first = next(line for line in shown.output.splitlines() if line.strip().startswith("a "))
    assert first.split()[-1] == raw_se
    page = dashboard.get(f"{srv.url}/dashboard/campaigns/multi", timeout=120).text
    assert "raw std error" in page and f">{raw_se}<" in page


# -- 7a. postprocess on kinds it does not apply to: ignored, as documented --------------------


@pytest.mark.parametrize("cid", ["num", "multi", "open"])
def test_postprocess_is_ignored_by_the_kinds_it_does_not_apply_to(
    srv: CollectorProcess, cid: str
) -> None:
    plain = http(srv, cid).json()
    for method in ("pattern", "mle", "none"):
        answer = http(srv, cid, {"postprocess": method})
        assert answer.status_code == 200, (method, answer.text)
        body = answer.json()
        assert body.get("mean") == plain.get("mean") and body["n"] == plain["n"]
    assert from_db(srv, cid, "--postprocess", "pattern").exit_code == 0
    # The name is still checked.
    assert "postprocess must be one of" in refusal(http(srv, cid, {"postprocess": "magic"}))
    docs = " ".join((ROOT / "docs/HTTP_API.md").read_text().split())
    assert "`postprocess` is ignored for this kind" in docs


# -- 7b. a repeated query parameter is a 400 naming it ----------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        [("from", DAYS[0].isoformat()), ("from", DAYS[1].isoformat())],
        [("level", "0.9"), ("level", "0.5")],
        [("postprocess", "mle"), ("postprocess", "mle")],
        [("to", DAYS[2].isoformat()), ("level", "0.9"), ("to", DAYS[2].isoformat())],
    ],
)
def test_a_repeated_query_parameter_is_400_naming_it(
    srv: CollectorProcess, query: list[tuple[str, str]]
) -> None:
    name = query[0][0]
    message = refusal(http(srv, "cat", query))
    assert message.startswith(f"query parameter {name!r} given 2 times; give it once")
    # candidate is the one parameter that repeats.
    assert http(srv, "open", [("candidate", "beta"), ("candidate", "gamma")]).status_code == 200


# -- 7c/7d. ldp simulate: --column needs --data; the mixed-pair chart follows -e ---------------


def test_simulate_column_without_data_is_a_usage_error(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    result = ldp("simulate", "--column", "color", "-r", "1", "-o", str(out))
    assert result.exit_code == 2, result.output
    assert "--column applies to --data" in result.output
    assert not out.exists()  # nothing ran


def test_simulate_multi_label_means_follow_epsilon(tmp_path: Path) -> None:
    from simulator.multi_scenario import MultiSettings

    assert MultiSettings().label_epsilon == 4.0  # the default sweep lists 4
    assert MultiSettings(epsilons=(0.5, 2.0)).label_epsilon == 2.0
    assert MultiSettings(epsilons=(1.0, 4.0, 8.0)).label_epsilon == 4.0
    out = tmp_path / "sim"
    args = ["--scenario", "multi", "-e", "1", "-r", "1", "--rows", "300", "--no-plots"]
    result = ldp("simulate", *args, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "## Mean hours-per-week per education (eps 1, " in result.output
    assert json.loads((out / "multi.json").read_text())["label_means"]["epsilon"] == 1.0
