"""Sweep 8, analyst-facing texts: what the CLI, the dashboard and the answers say agrees with what
they compute (a red-team review of a real ``ldp serve`` with real SDK clients).

1. A discovery whose last level extended no prefix (a few reports) said "Bonferroni over 0
   strings tested" beside a z that corrects for one: the answer now reports the one.
2. ``ldp campaign show`` printed ``stored_reports 0`` beside ``reports 9`` before any retention
   sweep: the stored figures now say they are the last sweep's, or that none has run since the
   campaign's first report.
3. A mean's "worst case" standard error could be below its standard error (6 alpha-point
   reports: 4,472 beside a "worst case" of 4,083): it is the formula's bound at n, and says so.
4. The dashboard showed campaign descriptions raw (a U+202E reversed the rest of the line); the
   CLI escaped them. Both now show the same escapes.
5. The OpenAPI ``candidate`` parameter now declares ``uniqueItems``, as the server refuses a
   candidate given twice.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import numpy as np
import pytest
import requests
from click.testing import CliRunner
from scipy import stats

from client_sdk import PrivacyBudget
from client_sdk.mechanisms import OpenDomainMechanism, from_config
from ldp_cli.main import cli
from tests.support.server import ANALYST_TOKEN, CollectorProcess, running_collector
from tests.test_sdk_client import client_for

PEM = {"mechanism": "pem", "epsilon": 4.0, "max_length": 8, "params": {"width": 256, "depth": 8}}
_ids = itertools.count()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    # No automatic retention sweep: item 2 runs the one sweep itself, when it means to.
    with running_collector(
        tmp_path_factory.mktemp("polish"), env={"LDP_RETENTION_INTERVAL": "0"}
    ) as server:
        yield server


def create(srv: CollectorProcess, spec: dict[str, Any]) -> dict[str, Any]:
    r = srv.post_campaign({"id": f"polish-{next(_ids)}", **spec})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def ldp(*args: str) -> str:
    shown = CliRunner().invoke(cli, list(args))
    assert shown.exit_code == 0, shown.output
    return shown.output


def dashboard(srv: CollectorProcess) -> requests.Session:
    session = requests.Session()
    signed = session.post(srv.url + "/dashboard/login", data={"token": ANALYST_TOKEN})
    assert signed.status_code == 200, signed.text
    return session


def page(session: requests.Session, srv: CollectorProcess, path: str, status: int = 200) -> str:
    got = session.get(srv.url + path, timeout=60)
    assert got.status_code == status, got.text
    return got.text


def report_from_devices(srv: CollectorProcess, tmp: Path, campaign: str, values: list[Any]) -> None:
    """Each value from its own device: one real SDK client per value."""
    for i, value in enumerate(values):
        with client_for(
            srv, tmp / f"device-{i}", budget=PrivacyBudget.unlimited(), ready=[campaign]
        ) as client:
            client.report(campaign, value)
            assert client.flush(timeout=30)


# -- 1. the strings a discovery's threshold corrects for ---------------------------------------


def test_a_young_discovery_says_how_many_strings_its_z_corrects_for(
    srv: CollectorProcess,
) -> None:
    """Nine reports (a fixed sample, so the walk is the same on every run): the walk's last
    level extends no prefix. The z corrects for one string; the answer said 0 were tested,
    and the CLI and the dashboard printed "Bonferroni over 0 strings tested"."""
    campaign = create(srv, PEM)
    mech = from_config(campaign["mechanism"])
    assert isinstance(mech, OpenDomainMechanism)
    reports = mech.perturb_many(["firefox"] * 9, rng=np.random.default_rng(1))
    assert srv.upload(campaign, mech.encode_many(reports))["accepted"] == 9
    said = "Bonferroni over 1 string tested"
    cli_text = ldp("estimate", campaign["id"], "--url", srv.url, "--token", ANALYST_TOKEN)
    threshold_line = next(line for line in cli_text.splitlines() if "threshold" in line)
    assert said in threshold_line and "over 0 strings" not in cli_text, threshold_line
    html = page(dashboard(srv), srv, f"/dashboard/campaigns/{campaign['id']}")
    assert said in html and "over 0 strings" not in html
    body = srv.estimates(campaign["id"])
    t = body["threshold"]
    # The answer's own numbers agree: z is at least the Bonferroni z over candidates_tested.
    assert t["candidates_tested"] == 1, t  # it was 0: no Bonferroni correction over 0 tests
    assert t["z"] >= stats.norm.isf(t["alpha"] / t["candidates_tested"]) - 1e-12
    assert t["threshold"] is not None  # this sample's last level holds reports: a dashed line


# -- 2. stored reports: the last sweep's measurement -------------------------------------------


def test_campaign_show_says_the_stored_figures_are_the_last_sweeps(
    srv: CollectorProcess, tmp_path: Path
) -> None:
    campaign = create(srv, {"domain": ["a", "b"], "mechanism": "oue", "epsilon": 1.0})
    cid = campaign["id"]
    report_from_devices(srv, tmp_path, cid, ["a"] * 9)
    show = ("campaign", "show", cid, "--url", srv.url, "--token", ANALYST_TOKEN)
    item = json.loads(ldp(*show, "--format", "json"))
    # The JSON contract is unchanged: the figures as the last sweep measured them (none yet).
    assert item["reports"] == 9 and item["stored_reports"] == 0 and item["stored_bytes"] == 0
    before = ldp(*show)
    row = next(line for line in before.splitlines() if line.startswith("stored_reports"))
    # It was "stored_reports  0": nine reports read as lost.
    assert " ".join(row.split()[1:]) == (
        "0 (not measured yet: no retention sweep has run since its first report)"
    ), row
    ldp("retention", "run", "--db", str(srv.db_path))
    after = ldp(*show)
    row = next(line for line in after.splitlines() if line.startswith("stored_reports"))
    assert " ".join(row.split()[1:]) == "9 (as measured by the last retention sweep)", row
    row = next(line for line in after.splitlines() if line.startswith("stored_bytes"))
    assert row.endswith("(as measured by the last retention sweep)"), row


# -- 3. a mean's standard error beside the formula's bound -------------------------------------


def test_the_mean_calls_the_formulas_bound_by_its_name(
    srv: CollectorProcess, tmp_path: Path
) -> None:
    campaign = create(
        srv, {"bounds": [0, 10000], "mechanism": "alpha_point", "epsilon": 1.0, "min_reports": 1}
    )
    cid = campaign["id"]
    report_from_devices(srv, tmp_path, cid, [0.0, 10000.0, 0.0, 10000.0, 5000.0, 2500.0])
    body = srv.estimates(cid)
    assert body["kind"] == "mean" and body["n"] == 6
    bound = f"the mechanism's formula bound at n = 6: {body['worst_case_std_error']:,.4g}"
    html = page(dashboard(srv), srv, f"/dashboard/campaigns/{cid}")
    # It said "the mechanism's worst case", which the estimated error can exceed.
    assert bound in html and "worst case" not in html
    assert f"standard error {body['std_error']:,.4g}, estimated from the reports" in html
    text = ldp("estimate", cid, "--url", srv.url, "--token", ANALYST_TOKEN)
    assert f"std error {body['std_error']:,.4g} (estimated from the reports; {bound})" in text
    assert "worst case" not in text


# -- 4. descriptions as the CLI shows them -----------------------------------------------------


def test_the_dashboard_shows_descriptions_escaped_as_the_cli_does(srv: CollectorProcess) -> None:
    described = "Paint \u202etime\u200b (ms)\x1b[2J"
    escaped = "Paint \\u202etime\\u200b (ms)\\x1b[2J"
    campaign = create(
        srv, {"domain": ["a", "b"], "mechanism": "oue", "epsilon": 1.0, "description": described}
    )
    cid = campaign["id"]
    text = ldp("campaign", "show", cid, "--url", srv.url, "--token", ANALYST_TOKEN)
    assert escaped in text
    session = dashboard(srv)
    # The campaign's page without reports answers 422 ("not enough reports yet"), described.
    for path, status in (("/dashboard/", 200), (f"/dashboard/campaigns/{cid}", 422)):
        html = page(session, srv, path, status)
        assert escaped in html, path
        assert "\u202e" not in html and "\x1b" not in html and "\u200b" not in html, path


# -- 5. the candidate parameter's uniqueness -----------------------------------------------------


def test_the_candidate_parameter_declares_the_uniqueness_the_server_enforces(
    srv: CollectorProcess,
) -> None:
    campaign = create(srv, PEM)
    mech = from_config(campaign["mechanism"])
    assert isinstance(mech, OpenDomainMechanism)
    srv.upload(campaign, mech.encode_many(mech.perturb_many(["a"] * 5, rng=1)))
    url = f"{srv.url}/v1/campaigns/{campaign['id']}/estimates"
    doc = requests.get(srv.url + "/openapi.json", timeout=30).json()
    params = doc["paths"]["/v1/campaigns/{campaign_id}/estimates"]["get"]["parameters"]
    (candidate,) = [p for p in params if p.get("name") == "candidate"]
    valid = jsonschema_rs.validator_for(candidate["schema"])
    for asked in (["a", "b"], ["a", "a"]):
        got = requests.get(
            url, params={"candidate": asked}, headers=srv.headers("analyst"), timeout=60
        )
        # The document and the server agree on every query.
        assert valid.is_valid(asked) == (got.status_code == 200), (asked, got.status_code)
    assert candidate["schema"]["uniqueItems"] is True


# -- 6. the level on the dashboard, as the CLI writes it ---------------------------------------


def test_the_dashboard_never_rounds_the_level_to_100_percent(
    srv: CollectorProcess, tmp_path: Path
) -> None:
    """The captions wrote ``'%g' % (100 * level)``: a page asked for level 0.9999999 said its
    intervals were "100%" (the CLI's fix, ``aggregator.export.percent``, now serves both)."""
    categorical = create(
        srv, {"domain": ["a", "b"], "mechanism": "grr", "epsilon": 2.0, "min_reports": 1}
    )["id"]
    numeric = create(
        srv, {"bounds": [0, 10], "mechanism": "duchi", "epsilon": 1.0, "min_reports": 1}
    )["id"]
    report_from_devices(srv, tmp_path / "c", categorical, ["a", "b", "a"])
    report_from_devices(srv, tmp_path / "n", numeric, [1.0, 9.0, 4.0])
    session = dashboard(srv)
    for cid in (categorical, numeric):
        html = page(session, srv, f"/dashboard/campaigns/{cid}?level=0.9999999")
        assert "99.99999%" in html, cid
        # (A chart's axis may read 100%: that is a frequency, not the level.)
        assert not re.search(r"100% (confidence|interval|band)", html), cid
