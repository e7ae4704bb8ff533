"""Numeric campaigns end to end through a real ``ldp serve``, on SQLite and PostgreSQL.

Create (HTTP and ``ldp campaign create --bounds``), validate every report's payload, keep exact
tallies (``ldp tally verify`` compares them exactly), and answer the mean or the distribution
over HTTP. Tolerances come from the estimate's own standard error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import requests
from click.testing import CliRunner

from client_sdk.mechanisms import from_config
from ldp_cli.main import cli
from tests.support.openapi_schema import undeclared_fields, validate
from tests.support.postgres import BACKENDS
from tests.support.server import ADMIN_TOKEN, CollectorProcess, collector_on

BOUNDS = [17, 90]


@pytest.fixture(scope="module", params=BACKENDS)
def srv(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CollectorProcess]:
    with collector_on(request.param, tmp_path_factory.mktemp("numeric"), workers=2) as server:
        yield server


def estimates(srv: CollectorProcess, cid: str) -> dict[str, Any]:
    r = requests.get(
        f"{srv.url}/v1/campaigns/{cid}/estimates", headers=srv.headers("analyst"), timeout=60
    )
    assert r.status_code == 200, r.text
    return r.json()


def ages(n: int, seed: int) -> np.ndarray:
    gen = np.random.default_rng(seed)
    return np.round(gen.gamma(4.0, 9.0, n) + 12)  # skewed, some below/above the bounds


def test_create_validates_bounds_with_clear_errors(srv: CollectorProcess) -> None:
    bad = [
        ({"bounds": [1]}, "'bounds' must be a list [low, high]"),
        ({"bounds": "0,1"}, "'bounds' must be a list [low, high]"),
        ({"bounds": [0, True]}, "'bounds' must be a list [low, high]"),
        ({"bounds": [5, 5]}, "invalid mechanism settings"),
        ({"bounds": [0, 1], "domain": ["a", "b"]}, "not both"),
        ({"bounds": [0, 1], "mechanism": "oue"}, "give domain"),
        ({"domain": ["a", "b"], "mechanism": "piecewise"}, "numeric mechanism"),
        ({"bounds": [0, 1], "mechanism": "nope"}, "unknown numeric mechanism"),
        # A numeric campaign declares its values' mean and sd (auto only), not frequencies.
        ({"bounds": [0, 1], "expected": [0.5, 0.5]}, "must be {'mean': m, 'sd': s}"),
        (
            {"bounds": [0, 1], "mechanism": "duchi", "expected": {"mean": 0.5, "sd": 0.1}},
            "apply only to 'auto'",
        ),
    ]
    for extra, message in bad:
        body = {"id": "bad", "epsilon": 1.0, "mechanism": "auto", **extra}
        r = srv.post_campaign(body)
        assert r.status_code == 400, (extra, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid_campaign" and message in err["message"], (extra, err)
    r = srv.post_campaign({"id": "bad", "bounds": [0, 1]})
    assert r.status_code == 400 and "epsilon" in r.json()["error"]["message"]


def test_a_mean_campaign_end_to_end(srv: CollectorProcess) -> None:
    r = srv.post_campaign({"id": "age", "bounds": BOUNDS, "mechanism": "auto", "epsilon": 2.0})
    assert r.status_code == 201, r.text
    camp = r.json()
    assert camp["kind"] == "mean" and camp["bounds"] == [17.0, 90.0]
    mech = from_config(camp["mechanism"])
    assert mech.kind == "mean"
    # Same resource from GET (what devices fetch).
    got = requests.get(srv.url + "/v1/campaigns/age", headers=srv.headers("ingest"), timeout=10)
    assert got.json()["digest"] == camp["digest"]

    x = ages(6000, 1)
    payloads = mech.encode_many(mech.perturb_many(x, rng=1))
    first = srv.upload(camp, payloads[:4000])
    second = srv.upload(camp, payloads[4000:])
    assert first["accepted"] + second["accepted"] == 6000

    # Bad payloads: each rejected with its index and reason; the good ones are kept.
    result = srv.upload(camp, [payloads[0], "12", 1.5, -1, mech.output_size, True, None])
    assert result["accepted"] == 1 and result["rejected"] == 6
    assert [e["index"] for e in result["errors"]] == [1, 2, 3, 4, 5, 6]
    for e in result["errors"]:
        assert e["reason"].startswith(f"report #{e['index']}: ")
        assert "a report is an integer in [0, " in e["reason"]

    body = estimates(srv, "age")
    assert body["kind"] == "mean" and body["n"] == 6001
    truth = float(np.clip(np.concatenate([x, x[:1]]), *BOUNDS).mean())
    assert abs(body["mean"] - truth) <= 5 * body["std_error"], (body["mean"], truth)
    assert body["ci"]["low"] < body["mean"] < body["ci"]["high"]
    assert body["ci"]["level"] == 0.95
    assert body["trend"] and body["trend"][-1]["n"] == 6001
    srv.verify_tallies("age")


def test_a_distribution_campaign_end_to_end(srv: CollectorProcess) -> None:
    r = srv.post_campaign(
        {"id": "age-dist", "bounds": BOUNDS, "mechanism": "square_wave", "epsilon": 2.0}
    )
    assert r.status_code == 201, r.text
    camp = r.json()
    assert camp["kind"] == "distribution"
    mech = from_config(camp["mechanism"])
    x = ages(5000, 2)
    srv.upload(camp, mech.encode_many(mech.perturb_many(x, rng=2)))
    body = estimates(srv, "age-dist")
    assert body["kind"] == "distribution" and body["n"] == 5000
    bins = body["bins"]
    freqs = np.array([b["frequency"] for b in bins])
    assert bins[0]["low"] == 17 and bins[-1]["high"] == 90
    assert all(a["high"] == b["low"] for a, b in zip(bins, bins[1:], strict=False))
    assert freqs.sum() == pytest.approx(1.0)
    assert all(b["ci_low"] <= b["frequency"] + 1e-12 <= b["ci_high"] + 2e-12 for b in bins)
    median = next(q for q in body["quantiles"] if q["q"] == 0.5)
    assert median["low"] <= median["value"] <= median["high"]
    true_median = float(np.median(np.clip(x, *BOUNDS)))
    assert abs(median["value"] - true_median) < 8  # EMS is biased; 8 years is ~3 of its SEs
    srv.verify_tallies("age-dist")


def test_an_integer_valued_distribution_answers_its_atoms(srv: CollectorProcess) -> None:
    """``params.integer``: the answer carries one atom per integer in the bounds, with its
    bootstrap interval; the quantiles and the mean are the atoms' (one model: the result
    dataclass, its JSON and its OpenAPI schema). A grid campaign answers ``atoms: []``."""
    r = srv.post_campaign(
        {
            "id": "age-int",
            "bounds": BOUNDS,
            "mechanism": "square_wave",
            "epsilon": 2.0,
            "params": {"integer": True},
        }
    )
    assert r.status_code == 201, r.text
    camp = r.json()
    mech = from_config(camp["mechanism"])
    assert mech.integer
    x = ages(5000, 3)
    srv.upload(camp, mech.encode_many(mech.perturb_many(x, rng=3)))
    body = estimates(srv, "age-int")
    assert body["integer"] is True
    doc = requests.get(srv.url + "/openapi.json", timeout=10).json()
    validate(doc, "Estimates", body)
    assert undeclared_fields(doc, doc["components"]["schemas"]["Estimates"], body) == []
    atom_schema = doc["components"]["schemas"]["Atom"]
    assert set(atom_schema["required"]) == {"value", "frequency", "ci_low", "ci_high"}
    with pytest.raises(Exception, match="many"):  # the schema is not vacuous for atoms
        validate(doc, "Estimates", {**body, "atoms": [{**body["atoms"][0], "value": "many"}]})
    atoms = body["atoms"]
    values = np.array([a["value"] for a in atoms])
    freqs = np.array([a["frequency"] for a in atoms])
    assert values.tolist() == list(range(BOUNDS[0], BOUNDS[1] + 1))
    assert freqs.min() >= 0 and freqs.sum() == pytest.approx(1.0)
    assert all(a["ci_low"] <= a["frequency"] <= a["ci_high"] for a in atoms)
    assert any(a["ci_low"] < a["ci_high"] for a in atoms)  # bootstrap intervals, not points
    assert body["mean"] == pytest.approx(float(values @ freqs))
    cum = np.cumsum(freqs)
    for row in body["quantiles"]:  # the smallest integer whose cumulative frequency reaches q
        assert row["value"] == values[np.searchsorted(cum, row["q"] * (1 - 1e-12))]
        assert row["value"] == int(row["value"])
    # Accuracy: the median within 4 of its bootstrap standard errors (its 95% interval's
    # width / 3.92) of the truth, plus one integer (the atoms' resolution).
    true_median = float(np.quantile(np.clip(x, *BOUNDS), 0.5, method="inverted_cdf"))
    median = next(q for q in body["quantiles"] if q["q"] == 0.5)
    se = (median["high"] - median["low"]) / 3.92
    assert abs(median["value"] - true_median) <= 4 * se + 1, (median, true_median)
    grid = estimates(srv, "age-dist") if _has(srv, "age-dist") else None
    if grid is not None:
        assert grid["integer"] is False and grid["atoms"] == []
    srv.verify_tallies("age-int")


def _has(srv: CollectorProcess, cid: str) -> bool:
    r = requests.get(f"{srv.url}/v1/campaigns/{cid}", headers=srv.headers("ingest"), timeout=10)
    return r.status_code == 200


def test_ldp_campaign_create_bounds(srv: CollectorProcess) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    args = ["create", "hours", "--url", srv.url, "--bounds", "1", "99", "-m", "piecewise"]
    run = subprocess.run(
        [sys.executable, "-m", "ldp_cli", "campaign", *args, "-e", "1", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "LDP_ADMIN_TOKEN": ADMIN_TOKEN},
    )
    assert run.returncode == 0, run.stderr
    item = json.loads(run.stdout)
    assert item["kind"] == "mean" and item["mechanism"]["bounds"] == [1.0, 99.0]
    both = subprocess.run(
        [
            sys.executable,
            "-m",
            "ldp_cli",
            "campaign",
            "create",
            "x",
            "--url",
            srv.url,
            "--bounds",
            "1",
            "2",
            "--domain",
            "a,b",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "LDP_ADMIN_TOKEN": ADMIN_TOKEN},
    )
    assert both.returncode != 0 and "not both" in both.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "ldp_cli", "campaign", "list", "--url", srv.url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "LDP_ANALYST_TOKEN": srv.analyst_token},
    )
    assert listed.returncode == 0, listed.stderr
    assert "[1.0, 99.0]" in listed.stdout


def test_numeric_answers_in_every_interface(srv: CollectorProcess) -> None:
    """Dashboard page, CSV and ``ldp estimate`` all answer a numeric campaign of a live server."""
    for cid, mechanism in (("io-mean", "piecewise"), ("io-dist", "square_wave")):
        camp = srv.post_campaign(
            {"id": cid, "bounds": BOUNDS, "mechanism": mechanism, "epsilon": 2.0}
        ).json()
        mech = from_config(camp["mechanism"])
        srv.upload(camp, mech.encode_many(mech.perturb_many(ages(3000, 3), rng=3)))
        body = estimates(srv, cid)

        session = requests.Session()
        login = session.post(
            f"{srv.url}/dashboard/login", data={"token": srv.analyst_token}, timeout=30
        )
        assert login.status_code == 200, login.text
        page = session.get(f"{srv.url}/dashboard/campaigns/{cid}", timeout=60)
        assert page.status_code == 200 and "Traceback" not in page.text
        assert f"{body['mean']:.2f}"[:4] in page.text  # the mean is on the page

        csv = requests.get(
            f"{srv.url}/v1/campaigns/{cid}/estimates",
            headers={**srv.headers("analyst"), "Accept": "text/csv"},
            timeout=60,
        )
        assert csv.status_code == 200 and csv.text.count("\n") >= 2, csv.text

        run = CliRunner().invoke(
            cli, ["estimate", cid, "--url", srv.url, "--token", srv.analyst_token]
        )
        assert run.exit_code == 0, run.output
        assert "mean" in run.output.lower()
