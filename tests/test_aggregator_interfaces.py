"""HTTP and CLI estimates on a real ``ldp serve`` subprocess with real ingested reports."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import requests
from click.testing import CliRunner

from aggregator import estimate_windows
from client_sdk.mechanisms import Tally, from_config
from ldp_cli.main import cli
from tests.support.server import CollectorProcess, running_collector

DOMAIN = ["Adm-clerical", "Craft-repair", "Exec-managerial", "Sales", "Tech-support"]
TRUE_PROBS = [0.35, 0.3, 0.2, 0.15, 0.0]
PER_DAY = (600, 500, 400)
BATCH = 250


def _days() -> list[str]:
    today = dt.datetime.now(dt.UTC).date()
    return [(today - dt.timedelta(days=d)).isoformat() for d in (3, 2, 1)]


def _create(srv: CollectorProcess, body: dict[str, Any]) -> dict[str, Any]:
    answer = requests.post(
        srv.url + "/v1/campaigns", json=body, headers=srv.headers("admin"), timeout=10
    )
    assert answer.status_code == 201, answer.text
    return answer.json()


def _ingest(srv: CollectorProcess, campaign: dict[str, Any], seed: int) -> dict[str, Tally]:
    mech = from_config(campaign["mechanism"])
    rng = np.random.default_rng(seed)
    expected: dict[str, Tally] = {}
    for day, n in zip(_days(), PER_DAY, strict=True):
        values = rng.choice(len(DOMAIN), size=n, p=TRUE_PROBS)
        payloads = mech.encode_many(mech.perturb_many(values, rng=rng))
        expected[day] = mech.tally(payloads)
        for start in range(0, n, BATCH):
            reports = [
                {"id": f"{campaign['id']}-{day}-{start + i:08d}", "day": day, "payload": p}
                for i, p in enumerate(payloads[start : start + BATCH])
            ]
            answer = requests.post(
                f"{srv.url}/v1/campaigns/{campaign['id']}/reports",
                json={"digest": campaign["digest"], "reports": reports},
                headers=srv.headers("ingest"),
                timeout=30,
            )
            assert answer.status_code == 200 and answer.json()["accepted"] == len(reports)
    return expected


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("collector")
    with running_collector(tmp) as srv:
        occ = _create(
            srv,
            {
                "id": "occupation",
                "domain": DOMAIN,
                "mechanism": "oue",
                "epsilon": 2.0,
                "min_reports": 100,
            },
        )
        strict = _create(
            srv,
            {
                "id": "strict",
                "domain": DOMAIN,
                "mechanism": "grr",
                "epsilon": 1.0,
                "min_reports": 100_000,
            },
        )
        tallies = _ingest(srv, occ, seed=1)
        _ingest(srv, strict, seed=2)
        process = srv.process
        yield {"srv": srv, "campaign": occ, "tallies": tallies}
    # running_collector leaves the child's stdout pipe open (ResourceWarning under -W error).
    if process is not None and process.stdout is not None:
        process.stdout.close()


def _get(srv: CollectorProcess, path: str, **kwargs: Any) -> requests.Response:
    headers = {**srv.headers("analyst"), **kwargs.pop("headers", {})}
    return requests.get(srv.url + path, headers=headers, timeout=30, **kwargs)


def test_http_estimates_match_the_library_on_the_ingested_tallies(collector) -> None:
    srv, days, tallies = collector["srv"], _days(), collector["tallies"]
    answer = _get(
        srv,
        "/v1/campaigns/occupation/estimates",
        params={"from": days[1], "to": days[2], "level": "0.9", "postprocess": "norm-sub"},
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    mech = from_config(collector["campaign"]["mechanism"])
    expected = estimate_windows(
        mech,
        {d: tallies[d] for d in days[1:]},
        level=0.9,
        postprocess="norm-sub",
        min_reports=100,
        campaign="occupation",
    )
    assert body["n"] == PER_DAY[1] + PER_DAY[2]
    assert body["windows"] == days[1:] and body["from"] == days[1] and body["to"] == days[2]
    assert body["postprocess"] == {"method": "norm-sub"}
    for got, want in zip(body["values"], expected["values"], strict=True):
        assert got == pytest.approx(want)
    assert body["mechanism"] == "oue" and body["epsilon"] == 2.0 and body["level"] == 0.9
    assert body["top_k"]["threshold"] == pytest.approx(expected["top_k"]["threshold"])
    assert [t["n"] for t in body["trend"]] == list(PER_DAY[1:])


def test_http_default_is_the_lowest_error_method_and_all_windows(collector) -> None:
    body = _get(collector["srv"], "/v1/campaigns/occupation/estimates").json()
    assert body["postprocess"]["method"] == "auto"
    assert body["postprocess"]["chosen"] in ("pooled", "flat", "mle")
    assert body["postprocess"].get("converged") in (None, True)
    assert body["n"] == sum(PER_DAY) and body["windows"] == _days()
    assert sum(v["count"] for v in body["values"]) == pytest.approx(sum(PER_DAY))
    # The biggest true value is found significantly above zero.
    assert body["top_k"]["values"][0]["value"] in {"Adm-clerical", "Craft-repair"}


def test_http_csv_parses_back(collector) -> None:
    answer = _get(
        collector["srv"], "/v1/campaigns/occupation/estimates", headers={"Accept": "text/csv"}
    )
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    body = _get(collector["srv"], "/v1/campaigns/occupation/estimates").json()
    assert [r["value"] for r in rows] == DOMAIN
    for row, value in zip(rows, body["values"], strict=True):
        assert float(row["count"]) == pytest.approx(value["count"])
        assert float(row["ci_low"]) == value["ci_low"]
        assert int(row["n"]) == sum(PER_DAY)


def test_http_refuses_too_few_reports_and_bad_parameters(collector) -> None:
    srv = collector["srv"]
    few = _get(srv, "/v1/campaigns/strict/estimates")
    assert few.status_code == 422
    assert few.json()["error"] == {
        "code": "not_enough_reports",
        "message": f"not enough reports yet ({sum(PER_DAY)} of 100000)",
        "status": 422,
    }
    bad = _get(srv, "/v1/campaigns/occupation/estimates", params={"postprocess": "magic"})
    assert bad.status_code == 400 and "norm-sub" in bad.json()["error"]["message"]
    assert (
        requests.get(srv.url + "/v1/campaigns/occupation/estimates", timeout=10).status_code == 401
    )


def test_cli_reads_the_store_directly(collector) -> None:
    srv, days = collector["srv"], _days()
    result = CliRunner().invoke(
        cli,
        [
            "estimate",
            "occupation",
            "--db",
            str(srv.db_path),
            "--format",
            "json",
            "--from",
            days[0],
            "--to",
            days[0],
            "--postprocess",
            "clip",
        ],
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["n"] == PER_DAY[0] and body["postprocess"] == {"method": "clip"}
    assert min(v["count"] for v in body["values"]) >= 0


def test_cli_table_is_aligned(collector) -> None:
    result = CliRunner().invoke(
        cli, ["estimate", "occupation", "--db", str(collector["srv"].db_path)]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("value"))
    rows = lines[header + 2 : header + 2 + len(DOMAIN)]
    assert [r.split()[0] for r in rows] == DOMAIN
    # Right-aligned numeric columns end at the same offset on every row.
    ends = {len(r.rstrip(" *")) for r in rows}
    assert len(ends) == 1
    assert "1,500 reports in 3 window(s)" in result.output


def test_cli_remote_matches_http_and_csv_parses(collector, monkeypatch) -> None:
    srv = collector["srv"]
    monkeypatch.setenv("LDP_ANALYST_TOKEN", srv.analyst_token)
    runner = CliRunner()
    result = runner.invoke(cli, ["estimate", "occupation", "--url", srv.url, "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.output)))
    assert [r["value"] for r in rows] == DOMAIN and rows[0]["postprocess"] == "auto"
    as_json = runner.invoke(cli, ["estimate", "occupation", "--url", srv.url, "--format", "json"])
    assert json.loads(as_json.output)["n"] == sum(PER_DAY)


def test_cli_errors_name_the_fix(collector, monkeypatch, tmp_path) -> None:
    srv = collector["srv"]
    runner = CliRunner()
    few = runner.invoke(cli, ["estimate", "strict", "--db", str(srv.db_path)])
    assert few.exit_code == 1 and "not enough reports yet (1500 of 100000)" in few.output
    none = runner.invoke(cli, ["estimate", "occupation"])
    assert none.exit_code == 2 and "--db PATH" in none.output
    missing = runner.invoke(cli, ["estimate", "occupation", "--url", srv.url])
    assert missing.exit_code == 1 and "LDP_ANALYST_TOKEN" in missing.output
    nodb = runner.invoke(cli, ["estimate", "occupation", "--db", str(tmp_path / "nope.db")])
    assert nodb.exit_code == 1 and "no database" in nodb.output
    unknown = runner.invoke(cli, ["estimate", "nope", "--db", str(srv.db_path)])
    assert unknown.exit_code == 1 and "campaigns: occupation, strict" in unknown.output
