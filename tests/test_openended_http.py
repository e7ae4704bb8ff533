"""Open-domain campaigns end to end through a real ``ldp serve``, on SQLite and PostgreSQL.

Create over HTTP (``max_length``, mechanism ``pem``/``cms`` with its public sketch parameters,
no domain); devices (``TelemetryClient``) report strings of a skewed population and only the
perturbed reports reach the collector; bad payloads are rejected with their index and reason
while the good ones are kept; ``ldp tally verify`` recomputes the stored sketches exactly; the
estimate endpoint lists the discovered heavy hitters with their threshold and the counts of the
candidates asked about (validated against /openapi.json, and as CSV); ``ldp estimate`` prints
them; the dashboard ranks them. Tolerances come from the answer's own standard errors.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from click.testing import CliRunner

from client_sdk import TelemetryClient
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import OpenDomainMechanism, from_config
from client_sdk.mechanisms.openended import ValueTooLong
from collector.storage import open_storage
from ldp_cli.main import cli
from tests.support.openapi_schema import undeclared_fields, validate
from tests.support.postgres import BACKENDS
from tests.support.server import (
    ADMIN_TOKEN,
    ANALYST_TOKEN,
    INGEST_TOKEN,
    CollectorProcess,
    collector_on,
)

#: The heavy hitters of the population and their shares; the rest is a long tail of strings
#: held by one device each.
HEAVY = {"firefox": 0.34, "chrome": 0.24, "safari": 0.14, "édge": 0.08, "opera": 0.05}
#: Strings of the tail: never more than one device each.
TAIL_SHARE = 1 - sum(HEAVY.values())
N = 4000
#: Beyond this many standard errors an estimate is wrong (a false alarm has p < 1e-5 per value).
Z = 4.5
PEM = {"mechanism": "pem", "epsilon": 4.0, "max_length": 8, "params": {"width": 256, "depth": 8}}
CMS = {"mechanism": "cms", "epsilon": 4.0, "max_length": 12, "params": {"width": 256, "depth": 8}}


@pytest.fixture(scope="module", params=BACKENDS)
def srv(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CollectorProcess]:
    with collector_on(request.param, tmp_path_factory.mktemp("openended"), workers=1) as server:
        yield server


def population(n: int, seed: int) -> list[str]:
    """``n`` devices' strings: the heavy hitters at their shares, else a unique tail string."""
    gen = np.random.default_rng(seed)
    names = list(HEAVY)
    which = gen.choice(len(names) + 1, size=n, p=[*HEAVY.values(), TAIL_SHARE])
    tail = iter(f"t{i:06d}" for i in gen.permutation(10**6)[:n].tolist())
    return [names[w] if w < len(names) else next(tail) for w in which.tolist()]


def create_spec_config(spec: dict[str, Any]) -> dict[str, Any]:
    """The mechanism config a campaign of ``spec`` resolves to (what devices rebuild)."""
    mech = from_config(
        {"mechanism": spec["mechanism"], "epsilon": spec["epsilon"],
         "max_length": spec["max_length"], "params": spec["params"]}
    )  # fmt: skip
    return mech.config()


def create(srv: CollectorProcess, cid: str, spec: dict[str, Any]) -> dict[str, Any]:
    r = srv.post_campaign({"id": cid, **spec})
    assert r.status_code == 201, r.text
    return r.json()


def estimates(srv: CollectorProcess, cid: str, params: Any = None, **headers: str) -> Any:
    return requests.get(
        f"{srv.url}/v1/campaigns/{cid}/estimates",
        params=params,
        headers={**srv.headers("analyst"), **headers},
        timeout=120,
    )


def report_population(srv: CollectorProcess, tmp: Path, cid: str, values: list[str]) -> None:
    """Every value is a simulated device of one SDK client: half yesterday, half today."""
    today = dt.datetime.now(dt.UTC).date()
    with TelemetryClient(
        srv.url, ingest_token=INGEST_TOKEN, state_dir=tmp / f"sim-{cid}", campaigns=[cid]
    ) as client:
        half = len(values) // 2
        yesterday = today - dt.timedelta(days=1)
        for day, part, seed in ((yesterday, values[:half], 5), (today, values[half:], 6)):
            client.report_many(cid, part, simulate_devices=True, rng=seed, day=day)
        assert client.flush(120)
        assert client.stats()["accepted"] == len(values)


def test_create_validates_open_domain_campaigns_with_clear_errors(srv: CollectorProcess) -> None:
    bad = [
        ({"mechanism": "oue"}, "unknown open-domain mechanism"),
        ({"domain": ["a", "b"]}, "takes no 'domain'"),
        ({"bounds": [0, 1]}, "takes no 'bounds'"),
        ({"epsilon": None}, "needs 'epsilon'"),
        ({"max_length": 0}, "max_length must be an integer"),
        ({"max_length": 65}, "max_length must be an integer"),
        ({"max_length": "8"}, "max_length must be an integer"),
        ({"params": {"width": 100}}, "power of two"),
        ({"params": {"colour": "red"}}, "bad parameters"),
        ({"params": {"width": 4096, "depth": 1024}}, "choose a smaller width or depth"),
    ]
    for extra, message in bad:
        r = srv.post_campaign({"id": "bad-open", **PEM, **extra})
        assert r.status_code == 400, (extra, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid_campaign" and message in err["message"], (extra, err)
    listed = requests.get(srv.url + "/v1/campaigns", headers=srv.headers("analyst"), timeout=10)
    assert "bad-open" not in [c["id"] for c in listed.json()["campaigns"]]
    # 'auto' with max_length is the discovery mechanism.
    auto = create(srv, "auto-open", {"epsilon": 2.0, "max_length": 6})
    assert auto["mechanism"]["mechanism"] == "pem" and auto["kind"] == "open_domain"


def test_an_open_domain_campaign_end_to_end(srv: CollectorProcess, tmp_path: Path) -> None:
    cid = "homepage"
    camp = create(srv, cid, PEM)
    assert camp["kind"] == "open_domain" and camp["max_length"] == 8
    assert "domain" not in camp["mechanism"] and camp["mechanism"]["params"]["width"] == 256
    mech = from_config(camp["mechanism"])
    assert isinstance(mech, OpenDomainMechanism) and mech.name == "pem"
    assert camp["realised_epsilon"] == pytest.approx(mech.realised_epsilon)
    assert mech.realised_epsilon <= 4.0

    values = population(N, 11)
    report_population(srv, tmp_path, cid, values)
    # Bad payloads: each rejected with its index and reason; the good one is kept.
    today = dt.datetime.now(dt.UTC).date().isoformat()
    good = mech.perturb("firefox")
    bad = srv.upload(camp, [good, "x", [0], [99, 0, "AA=="], None, [0, 1, "!!"]], today)
    assert bad["accepted"] == 1 and bad["rejected"] == 5, bad
    assert [e["index"] for e in bad["errors"]] == [1, 2, 3, 4, 5]
    assert all(e["reason"].startswith(f"report #{e['index']}: ") for e in bad["errors"])
    srv.verify_tallies(cid)
    truth = Counter([*values, "firefox"])
    n = N + 1

    asked = ["firefox", "opera", "nobody"]
    r = estimates(srv, cid, [("candidate", c) for c in asked] + [("top", "8")])
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["kind"] == "open_domain" and answer["n"] == n and answer["discovers"]
    assert len(answer["windows"]) == 2 and sum(t["n"] for t in answer["trend"]) == n
    doc = requests.get(srv.url + "/openapi.json", timeout=10).json()
    validate(doc, "Estimates", answer)
    assert undeclared_fields(doc, doc["components"]["schemas"]["Estimates"], answer) == []
    validate(doc, "Campaign", camp)
    assert undeclared_fields(doc, doc["components"]["schemas"]["Campaign"], camp) == []

    found = answer["discovered"]
    assert 0 < len(found) <= 8
    counts = [d["count"] for d in found]
    assert counts == sorted(counts, reverse=True)
    threshold = answer["threshold"]
    assert threshold["threshold"] == pytest.approx(threshold["z"] * threshold["sigma0"])
    # The three heaviest strings (holding 1,000+ devices, 10+ null std errors) are discovered.
    significant = {d["value"]: d for d in found if d["significant"]}
    assert {"firefox", "chrome", "safari"} <= set(significant), found
    for d in found:
        assert d["ci_low"] < d["count"] < d["ci_high"]
        if d["value"] in HEAVY:
            assert abs(d["count"] - truth[d["value"]]) <= Z * d["std_error"], d
    # Candidates: in the order asked, unbiased, including a string nobody holds.
    assert [c["value"] for c in answer["candidates"]] == asked
    for c in answer["candidates"]:
        assert abs(c["count"] - truth[c["value"]]) <= Z * c["std_error"], (c, truth[c["value"]])
    assert answer["candidates"][0]["significant"] and answer["candidate_z"] > 0

    text = estimates(srv, cid, [("candidate", "opera")], Accept="text/csv").text
    rows = list(csv.reader(io.StringIO(text)))  # discovered noise may hold line breaks
    assert rows[0][7:] == [
        "list", "rank", "value", "count", "std_error", "ci_low", "ci_high", "significant"
    ]  # fmt: skip
    listed = [row[7] for row in rows[1:]]
    assert listed.count("discovered") >= 3 and listed[-1] == "candidate"
    assert rows[1][7:9] == ["discovered", "1"]
    assert rows[-1][7:10] == ["candidate", "", "opera"]

    # Query errors: the existing error shape, nothing estimated.
    for params, message in (
        ([("top", "0")], "'top' must be an integer"),
        ([("top", "²")], "'top' must be an integer"),
        ([("top", "201")], "'top' must be an integer"),
        ([("candidate", "x" * 9)], "max_length=8"),
        ([("candidate", "")], "must not be empty"),
        ([("candidate", "a"), ("candidate", "a")], "distinct"),
    ):
        r = estimates(srv, cid, params)
        assert r.status_code == 400, (params, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid_parameter" and message in err["message"], (params, err)


@pytest.mark.parametrize("name", ["cms", "hcms"])
def test_a_frequency_oracle_counts_candidates_only(
    srv: CollectorProcess, tmp_path: Path, name: str
) -> None:
    cid = f"module-{name}"
    spec = {**CMS, "mechanism": name}
    if name == "hcms":  # its reports are 2 bytes, so a wide sketch costs devices nothing
        spec["params"] = {"width": 4096, "depth": 8}
    camp = create(srv, cid, spec)
    assert camp["mechanism"] == create_spec_config(spec)
    values = population(N, 12)
    report_population(srv, tmp_path, cid, values)
    srv.verify_tallies(cid)
    truth = Counter(values)
    plain = estimates(srv, cid)
    assert plain.status_code == 200, plain.text
    body = plain.json()
    assert body["discovers"] is False and body["discovered"] == [] and body["threshold"] is None
    assert body["candidates"] == [] and "frequency oracle" in body["note"]
    asked = [*HEAVY, "t999999x"]
    answer = estimates(srv, cid, [("candidate", c) for c in asked]).json()
    assert [c["value"] for c in answer["candidates"]] == asked
    for c in answer["candidates"]:
        assert abs(c["count"] - truth[c["value"]]) <= Z * c["std_error"], (c, truth[c["value"]])
    assert answer["candidates"][0]["significant"]
    if name == "cms":
        assert camp["mechanism"]["params"] == {"width": 256, "depth": 8, "flips": "symmetric"}
        return
    # A categorical campaign takes no candidates.
    r = srv.post_campaign({"id": "plain-cat", "domain": ["a", "b"], "epsilon": 1.0})
    assert r.status_code == 201, r.text
    r = estimates(srv, "plain-cat", [("candidate", "a")])
    assert r.status_code == 400 and "open-domain" in r.json()["error"]["message"]


def test_sdk_reports_a_string_and_never_sends_it(srv: CollectorProcess, tmp_path: Path) -> None:
    cid = "device-word"
    camp = create(srv, cid, PEM)
    secret = "Zqx-9"
    with TelemetryClient(
        srv.url, ingest_token=INGEST_TOKEN, state_dir=tmp_path / "device", campaigns=[cid]
    ) as client:
        client.prefetch(cid)
        with pytest.raises(ValueTooLong) as too_long:
            client.report(cid, "much-too-long-for-eight")
        assert "much-too" not in str(too_long.value) and "max_length=8" in str(too_long.value)
        with pytest.raises(InvalidParameter, match="report a str"):
            client.report(cid, 42)  # type: ignore[arg-type]
        report = client.report(cid, secret)
        assert report, report
        assert secret not in json.dumps(report.payload)
        charges = client.privacy_charges(cid)
        assert len(charges) == 1 and charges[0]["reports"] == 1
        assert charges[0]["epsilon"] == pytest.approx(camp["realised_epsilon"])
        assert client.flush(30)
        assert client.stats()["accepted"] == 1
    # Nothing the device stored or sent holds the string.
    for path in (tmp_path / "device").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    listed = requests.get(srv.url + "/v1/campaigns", headers=srv.headers("analyst"), timeout=10)
    (item,) = [c for c in listed.json()["campaigns"] if c["id"] == cid]
    assert item["reports"] == 1
    # ... nor anything the collector stored: only the perturbed report, as the device sent it.
    store = open_storage(srv.db_url)
    try:
        campaign = store.get_campaign(cid)
        assert campaign is not None
        stored = [payload for _, payload in store.iter_reports(campaign)]
    finally:
        store.close()
    assert stored == [report.payload]
    assert secret not in json.dumps(stored) and secret not in json.dumps(campaign.resource())
    doc = requests.get(srv.url + "/openapi.json", timeout=10).json()
    validate(doc, "Report", {"id": report.id, "day": report.day, "payload": report.payload})


def test_cli_and_dashboard_list_the_discoveries(srv: CollectorProcess, tmp_path: Path) -> None:
    cid = "cli-open"
    runner = CliRunner()
    made = runner.invoke(
        cli,
        [
            "campaign", "create", cid, "--url", srv.url, "--token", ADMIN_TOKEN,
            "--max-length", "8", "-m", "pem", "-e", "4",
            "--param", "width=256", "--param", "depth=8", "--format", "json",
        ],
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    item = json.loads(made.output)
    assert item["kind"] == "open_domain" and item["mechanism"] == create_spec_config(PEM)
    both = runner.invoke(
        cli,
        [
            "campaign", "create", "x", "--url", srv.url, "--token", ADMIN_TOKEN,
            "--max-length", "8", "--domain", "a,b",
        ],
    )  # fmt: skip
    assert both.exit_code != 0 and "--max-length" in both.output
    values = population(N, 13)
    report_population(srv, tmp_path, cid, values)
    shown = runner.invoke(
        cli,
        [
            "estimate", cid, "--url", srv.url, "--token", ANALYST_TOKEN,
            "--top", "5", "--candidate", "opera", "--candidate", "nobody",
        ],
    )  # fmt: skip
    assert shown.exit_code == 0, shown.output
    text = shown.output
    assert "discovered" in text and "threshold" in text
    assert "firefox" in text and "chrome" in text
    assert "candidates" in text and "nobody" in text and "opera" in text
    as_json = runner.invoke(
        cli, ["estimate", cid, "--url", srv.url, "--token", ANALYST_TOKEN, "--format", "json"]
    )
    assert as_json.exit_code == 0, as_json.output
    body = json.loads(as_json.output)
    assert body["kind"] == "open_domain" and body["top"] == 10
    refused = runner.invoke(
        cli, ["estimate", cid, "--url", srv.url, "--token", ANALYST_TOKEN, "--top", "0"]
    )
    assert refused.exit_code != 0
    from_store = runner.invoke(cli, ["estimate", cid, "--db", srv.db_url, "--top", "3"])
    assert from_store.exit_code == 0, from_store.output
    assert "discovered (top 3" in from_store.output and "candidates" not in from_store.output
    listed = runner.invoke(
        cli, ["campaign", "show", cid, "--url", srv.url, "--token", ANALYST_TOKEN]
    )
    assert listed.exit_code == 0 and "max_length" in listed.output, listed.output
    every = runner.invoke(cli, ["campaign", "list", "--url", srv.url, "--token", ANALYST_TOKEN])
    assert every.exit_code == 0 and "strings <= 8 B" in every.output, every.output

    session = requests.Session()
    login = session.post(
        srv.url + "/dashboard/login", data={"token": ANALYST_TOKEN}, allow_redirects=False
    )
    assert login.status_code == 303, login.text
    index = session.get(srv.url + "/dashboard/", timeout=60)
    assert index.status_code == 200 and "strings ≤ 8 B" in index.text
    page = session.get(
        srv.url + f"/dashboard/campaigns/{cid}", params={"candidates": "opera\nnobody"}, timeout=60
    )
    assert page.status_code == 200, page.text
    html = page.text
    assert 'id="discovered"' in html and 'id="discovered-table"' in html
    assert 'class="threshold"' in html and "significance threshold" in html
    assert html.count('class="row open"') == len(body["discovered"])
    assert 'id="candidates-table"' in html and "nobody" in html
    # Ranked: the table lists the discoveries in the answer's order.
    first = html.index('id="discovered-table"')
    positions = [html.index(f"<td>{d['value']}</td>", first) for d in body["discovered"][:3]]
    assert positions == sorted(positions)


def strict_json(text: str) -> Any:
    """JSON as RFC 8259 and browsers read it: a bare NaN or Infinity is an error."""

    def refuse(word: str) -> Any:
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def test_a_young_campaign_answers_everywhere(srv: CollectorProcess, tmp_path: Path) -> None:
    """A few reports leave most levels of the walk empty. That answered 500 (an IndexError in
    discovery), then bare ``Infinity`` where no report measured a number. Now every surface
    answers, with null (JSON) or a dash where a number has no report behind it."""
    cid = "young-open"
    campaign = create(srv, cid, PEM)
    # Two real reports, none on the walk's last level (these two made discovery raise).
    mech = from_config(campaign["mechanism"])
    assert isinstance(mech, OpenDomainMechanism)
    payloads = mech.encode_many(mech.perturb_many(["firefox"] * 64, rng=np.random.default_rng(1)))
    early = [p for p in payloads if p[0] < mech.levels - 1][:2]
    today = dt.datetime.now(dt.UTC).date().isoformat()
    up = requests.post(
        f"{srv.url}/v1/campaigns/{cid}/reports",
        json={
            "digest": campaign["digest"],
            "reports": [
                {"id": f"{i:032x}", "day": today, "payload": p} for i, p in enumerate(early)
            ],
        },
        headers=srv.headers("ingest"),
        timeout=30,
    )
    assert up.status_code == 200 and up.json()["accepted"] == 2, up.text
    doc = requests.get(srv.url + "/openapi.json", timeout=10).json()
    for params in (None, {"candidate": ["firefox", "nobody"]}):
        r = estimates(srv, cid, params)
        assert r.status_code == 200, r.text
        body = strict_json(r.text)
        assert body["n"] == 2
        validate(doc, "Estimates", body)
        t = body["threshold"]
        assert t["candidates_tested"] >= 0 and t["sigma0"] is None and t["threshold"] is None
        for row in body["discovered"] + body["candidates"]:
            assert (row["std_error"] is None) == (row["ci_low"] is None) == (row["ci_high"] is None)
    # The last level holds no report: the threshold's sigma0 is null.
    assert t["sigma0"] is None and t["threshold"] is None
    runner = CliRunner()
    shown = runner.invoke(
        cli,
        ["estimate", cid, "--url", srv.url, "--token", ANALYST_TOKEN, "--candidate", "nobody"],
    )
    assert shown.exit_code == 0, shown.output
    assert "inf" not in shown.output and "candidates" in shown.output
    said = "threshold none yet for a 8-byte string: the walk's last level holds no report yet"
    assert said in shown.output
    session = requests.Session()
    session.post(srv.url + "/dashboard/login", data={"token": ANALYST_TOKEN})
    page = session.get(
        srv.url + f"/dashboard/campaigns/{cid}", params={"candidates": "firefox\nnobody"}
    )
    assert page.status_code == 200, page.text
    assert 'id="candidates-table"' in page.text and "inf" not in page.text.lower()
    assert "No significance threshold yet: the walk's last level holds no report" in page.text


def test_the_estimate_service_answers_open_domain_queries_typed() -> None:
    """The one estimate service, without HTTP: typed answer, window sums, clear errors."""
    from aggregator import EstimateQuery, NotEnoughReports, estimate_range
    from aggregator.results import OpenDomainEstimates
    from client_sdk.mechanisms import create as create_mechanism

    mech = create_mechanism("pem", epsilon=4.0, max_length=8, width=256, depth=8)
    values = population(N, 21)
    one = mech.tally(mech.perturb_many(values[:1500], rng=1))
    two = mech.tally(mech.perturb_many(values[1500:], rng=2))
    tallies = {"2026-11-01": one, "2026-11-02": two}
    answer = estimate_range(mech, tallies, EstimateQuery(candidates=("chrome",), top_k=4))
    assert isinstance(answer, OpenDomainEstimates) and answer.n == N
    assert [t.n for t in answer.trend] == [1500, N - 1500] and len(answer.discovered) <= 4
    # The windows' sum is the tally of all reports: the same answer as one window holding both.
    assert (
        estimate_range(mech, {"all": one + two}, EstimateQuery(candidates=("chrome",))).candidates
        == answer.candidates
    )
    (chrome,) = answer.candidates
    assert abs(chrome.count - values.count("chrome")) <= Z * chrome.std_error
    with pytest.raises(InvalidParameter, match="top must be"):
        estimate_range(mech, tallies, EstimateQuery(top_k=0))
    with pytest.raises(InvalidParameter, match="at most 500 candidates"):
        estimate_range(mech, tallies, EstimateQuery(candidates=tuple(f"c{i}" for i in range(501))))
    with pytest.raises(NotEnoughReports):
        estimate_range(mech, tallies, EstimateQuery(min_reports=N + 1))
    categorical = create_mechanism("grr", epsilon=1.0, domain=["a", "b"])
    with pytest.raises(InvalidParameter, match="only to open-domain"):
        estimate_range(
            categorical, {"w": categorical.tally([0, 1])}, EstimateQuery(candidates=("a",))
        )
