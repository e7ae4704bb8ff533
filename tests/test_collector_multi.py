"""Multi-attribute campaigns end to end through a real ``ldp serve``, on SQLite and PostgreSQL.

Create over HTTP (``attributes`` and ``pairs``) and with ``ldp campaign create --attributes``;
reports validated and tallied per window (SMP's per-window slices included; ``ldp tally
verify`` compares the stored tallies exactly); estimates over HTTP (per-attribute counts and a
mean, the joint table with standard errors; the answer validates against /openapi.json; CSV);
``TelemetryClient.report(campaign, {...})`` charged once; ``ldp estimate`` prints the crosstab;
the dashboard draws it. Tolerances come from the answer's own standard errors.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from click.testing import CliRunner

from client_sdk import TelemetryClient
from client_sdk.errors import InvalidParameter, ValueNotInDomain
from client_sdk.mechanisms import from_config
from client_sdk.mechanisms.multi import MultiMechanism
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

OCCUPATIONS = ["Sales", "Tech", "Craft", "Admin"]
SEXES = ["F", "M"]
ATTRIBUTES: dict[str, Any] = {
    "occupation": OCCUPATIONS,
    "sex": SEXES,
    "age": {"bounds": [17, 90]},
}
PAIRS = [["occupation", "sex"]]
#: Beyond this many standard errors an estimate is wrong (a false alarm has p < 1e-5 per value).
Z = 4.5


@pytest.fixture(scope="module", params=BACKENDS)
def srv(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CollectorProcess]:
    with collector_on(request.param, tmp_path_factory.mktemp("multi"), workers=1) as server:
        yield server


def estimates(srv: CollectorProcess, cid: str, **headers: str) -> requests.Response:
    r = requests.get(
        f"{srv.url}/v1/campaigns/{cid}/estimates",
        headers={**srv.headers("analyst"), **headers},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return r


def population(n: int, seed: int) -> dict[str, np.ndarray]:
    """Occupation, a sex that depends on it, and an age (some outside the bounds)."""
    gen = np.random.default_rng(seed)
    occ = gen.choice(len(OCCUPATIONS), size=n, p=[0.4, 0.3, 0.2, 0.1])
    female = gen.random(n) < np.array([0.6, 0.25, 0.1, 0.7])[occ]
    sex = np.where(female, 0, 1)
    age = np.round(gen.gamma(4.0, 9.0, n) + 12)
    return {"occupation": occ, "sex": sex, "age": age}


@pytest.mark.parametrize("protocol", ["smp", "spl", "rsfd"])
def test_a_batch_slice_tallies_like_its_payloads(protocol: str) -> None:
    """What ingest does per window: slice one decoded batch by rows, tally the slice."""
    attributes = ATTRIBUTES if protocol != "rsfd" else {"occupation": OCCUPATIONS, "sex": SEXES}
    mech = from_config(
        MultiMechanism(protocol, epsilon=1.0, attributes=attributes, pairs=PAIRS).config()
    )
    assert isinstance(mech, MultiMechanism)
    data = population(300, 1)
    payloads = mech.encode_many(mech.perturb_many({k: data[k] for k in attributes}, rng=2))
    decoded = mech.decode_many(payloads)
    rows = np.random.default_rng(3).permutation(300)[:120]
    sliced = mech.tally(decoded[rows])
    assert sliced == mech.tally([payloads[i] for i in rows]) and sliced.n == 120
    assert mech.check_tally(sliced) == sliced
    assert sliced + mech.tally(decoded[np.setdiff1d(np.arange(300), rows)]) == mech.tally(decoded)


def test_create_validates_attributes_with_clear_errors(srv: CollectorProcess) -> None:
    base = {"id": "bad", "epsilon": 1.0, "attributes": ATTRIBUTES}
    bad = [
        ({"attributes": ["a", "b"]}, "'attributes' must be an object"),
        ({"attributes": {"only": ["a", "b"]}}, "at least two"),
        ({"domain": ["a", "b"]}, "takes no 'domain'"),
        ({"attributes": {"a": ["x", "y\n"], "b": ["p", "q"]}}, "control character"),
        ({"pairs": [["occupation", "nope"]]}, "two different declared attributes"),
        ({"pairs": "occupation,sex"}, "'pairs' must be a list"),
        ({"mechanism": "oue"}, "unknown multi-attribute mechanism"),
        ({"mechanism": "rsfd"}, "categorical attributes only"),
        ({"epsilon": None}, "needs 'epsilon'"),
    ]
    for extra, message in bad:
        r = srv.post_campaign({**base, **extra})
        assert r.status_code == 400, (extra, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid_campaign" and message in err["message"], (extra, err)
    r = srv.post_campaign({"id": "bad", "domain": ["a", "b"], "pairs": PAIRS, "epsilon": 1})
    assert r.status_code == 400 and "'pairs' apply only" in r.json()["error"]["message"]


@pytest.mark.parametrize("protocol", ["smp", "spl"])
def test_a_multi_attribute_campaign_end_to_end(srv: CollectorProcess, protocol: str) -> None:
    cid = f"person-{protocol}"
    body = {"id": cid, "epsilon": 4.0, "mechanism": protocol, "attributes": ATTRIBUTES}
    r = srv.post_campaign({**body, "pairs": PAIRS})
    assert r.status_code == 201, r.text
    camp = r.json()
    assert camp["kind"] == "multi" and camp["pairs"] == PAIRS
    assert camp["attributes"]["age"] == {"bounds": [17.0, 90.0]}
    mech = from_config(camp["mechanism"])
    assert isinstance(mech, MultiMechanism) and mech.name == protocol
    assert camp["realised_epsilon"] == pytest.approx(mech.realised_epsilon)
    assert mech.realised_epsilon <= 4.0
    got = requests.get(f"{srv.url}/v1/campaigns/{cid}", headers=srv.headers("ingest"), timeout=10)
    assert got.json()["digest"] == camp["digest"]

    n = 10000
    data = population(n, 7)
    payloads = mech.encode_many(mech.perturb_many(data, rng=11))
    today = dt.datetime.now(dt.UTC).date()
    days = [(today - dt.timedelta(days=1)).isoformat(), today.isoformat()]
    # Two windows, each tallied from its own slice of one decoded batch.
    mixed = payloads[:4000]  # a batch holds at most 5000 reports (LDP_MAX_BATCH_REPORTS)
    body_one = {
        "digest": camp["digest"],
        "reports": [
            {"id": secrets.token_hex(16), "day": days[i % 2], "payload": p}
            for i, p in enumerate(mixed)
        ],
    }
    one = requests.post(
        f"{srv.url}/v1/campaigns/{cid}/reports",
        json=body_one,
        headers=srv.headers("ingest"),
        timeout=60,
    )
    assert one.status_code == 200 and one.json()["accepted"] == 4000, one.text
    for start in (4000, 7000):
        assert srv.upload(camp, payloads[start : start + 3000], days[1])["accepted"] == 3000

    # Bad payloads: each rejected with its index and reason; the good one is kept.
    bad = srv.upload(camp, [payloads[0], "x", [0], [99, 1], None], days[1])
    assert bad["accepted"] == 1 and bad["rejected"] == 4, bad
    assert [e["index"] for e in bad["errors"]] == [1, 2, 3, 4]
    srv.verify_tallies(cid)

    answer = estimates(srv, cid).json()
    assert answer["kind"] == "multi" and answer["n"] == n + 1
    assert answer["windows"] == days and sum(t["n"] for t in answer["trend"]) == n + 1
    doc = requests.get(srv.url + "/openapi.json", timeout=10).json()
    validate(doc, "Estimates", answer)
    assert undeclared_fields(doc, doc["components"]["schemas"]["Estimates"], answer) == []

    first = {k: v[:1] for k, v in data.items()}  # the report accepted twice over
    truth = {k: np.concatenate([v, first[k]]) for k, v in data.items()}
    by_name = {a["name"]: a for a in answer["attributes"]}
    for name, labels in (("occupation", OCCUPATIONS), ("sex", SEXES)):
        attr = by_name[name]
        assert attr["kind"] == "frequency" and [v["value"] for v in attr["values"]] == labels
        true_counts = np.bincount(truth[name], minlength=len(labels))
        for v, t in zip(attr["values"], true_counts, strict=True):
            assert abs(v["count"] - t) <= Z * v["std_error"], (name, v, t)
            assert v["ci_low"] <= v["count"] <= v["ci_high"]
        assert sum(v["count"] for v in attr["values"]) == pytest.approx(n + 1)
    age = by_name["age"]
    true_mean = float(np.clip(truth["age"], 17, 90).mean())
    assert age["kind"] == "mean" and abs(age["mean"] - true_mean) <= Z * age["std_error"]
    assert age["ci"]["low"] < age["mean"] < age["ci"]["high"]

    (joint,) = answer["joints"]
    assert joint["pair"] == ["occupation", "sex"] and joint["rows"] == OCCUPATIONS
    table = np.array(joint["counts"])
    se = np.array(joint["std_errors"])
    true_joint = np.zeros((len(OCCUPATIONS), len(SEXES)))
    np.add.at(true_joint, (truth["occupation"], truth["sex"]), 1)
    assert np.all(np.abs(table - true_joint) <= Z * se), (table, true_joint, se)
    # Consistent: the table's margins are the attributes' counts.
    occ_counts = [v["count"] for v in by_name["occupation"]["values"]]
    np.testing.assert_allclose(table.sum(axis=1), occ_counts, rtol=1e-9)
    assert np.all(np.array(joint["ci_low"]) <= table + 1e-9)

    # The trend: per window, each attribute's and the pair's own estimates with standard
    # errors, and the smoothed ones with theirs.
    on_day = {days[0]: [], days[1]: [0]}  # the record accepted twice: once more on days[1]
    for i in range(n):
        on_day[days[i % 2] if i < 4000 else days[1]].append(i)
    for row in answer["trend"]:
        rows = np.array(on_day[row["window"]])
        assert row["n"] == rows.size
        got = {a["name"]: a for a in row["attributes"]}
        assert list(got) == ["occupation", "sex", "age"]
        for name, labels in (("occupation", OCCUPATIONS), ("sex", SEXES)):
            a = got[name]
            true = np.bincount(data[name][rows], minlength=len(labels)) / rows.size
            for key in ("frequencies", "smoothed_frequencies"):
                se_key = "std_errors" if key == "frequencies" else "smoothed_std_errors"
                f, se = np.array(a[key]), np.array(a[se_key])
                assert np.all(np.abs(f - true) <= Z * se), (name, key, f, true, se)
        age_true = float(np.clip(data["age"][rows], 17, 90).mean())
        a = got["age"]
        assert abs(a["mean"] - age_true) <= Z * a["std_error"]
        assert abs(a["smoothed_mean"] - age_true) <= Z * a["smoothed_std_error"]
        (cells,) = row["joints"]
        true_cells = np.zeros((len(OCCUPATIONS), len(SEXES)))
        np.add.at(true_cells, (data["occupation"][rows], data["sex"][rows]), 1 / rows.size)
        f, se = np.array(cells["frequencies"]), np.array(cells["std_errors"])
        assert np.all(np.abs(f - true_cells) <= Z * se), (f, true_cells, se)
    assert "smoothed" in answer["trend_smoothing"]
    shown = CliRunner().invoke(cli, ["estimate", cid, "--url", srv.url, "--token", ANALYST_TOKEN])
    assert shown.exit_code == 0, shown.output
    assert "per window (raw unbiased / smoothed" in shown.output
    assert days[0] in shown.output and "smoothed mean" in shown.output

    csv = estimates(srv, cid, Accept="text/csv").text.splitlines()
    assert csv[0].startswith("campaign,from,to,n,mechanism")
    assert len(csv) == 1 + len(OCCUPATIONS) + len(SEXES) + 1 + table.size


def test_sdk_reports_every_attribute_in_one_charged_report(
    srv: CollectorProcess, tmp_path: Path
) -> None:
    r = srv.post_campaign(
        {"id": "device", "epsilon": 2.0, "attributes": ATTRIBUTES, "pairs": PAIRS}
    )
    assert r.status_code == 201, r.text
    realised = r.json()["realised_epsilon"]
    with TelemetryClient(
        srv.url, ingest_token=INGEST_TOKEN, state_dir=tmp_path / "device", campaigns=["device"]
    ) as client:
        client.prefetch("device")
        with pytest.raises(ValueNotInDomain) as refused:
            client.report("device", {"occupation": "Secret-Job", "sex": "F", "age": 30})
        assert "Secret-Job" not in str(refused.value) and "occupation" in str(refused.value)
        with pytest.raises(InvalidParameter, match="missing"):
            client.report("device", {"occupation": "Sales", "sex": "F"})
        with pytest.raises(InvalidParameter, match="numeric"):
            client.report("device", {"occupation": "Sales", "sex": "F", "age": "old"})
        with pytest.raises(InvalidParameter, match="mapping"):
            client.report("device", "Sales")
        report = client.report("device", {"occupation": "Sales", "sex": "F", "age": 130})
        assert report, report
        charges = client.privacy_charges("device")
        assert len(charges) == 1 and charges[0]["reports"] == 1
        assert charges[0]["epsilon"] == pytest.approx(realised)
        assert client.flush(30)
        assert client.stats()["accepted"] == 1
    listed = requests.get(srv.url + "/v1/campaigns", headers=srv.headers("analyst"), timeout=10)
    (item,) = [c for c in listed.json()["campaigns"] if c["id"] == "device"]
    assert item["reports"] == 1


def test_cli_creates_a_multi_campaign_and_prints_the_crosstab(
    srv: CollectorProcess, tmp_path: Path
) -> None:
    spec = tmp_path / "attributes.json"
    spec.write_text(json.dumps(ATTRIBUTES))
    runner = CliRunner()
    created = runner.invoke(
        cli,
        [
            "campaign", "create", "cli-multi", "--url", srv.url, "--token", ADMIN_TOKEN,
            "--attributes-file", str(spec), "--pair", "occupation,sex",
            "-m", "spl", "-e", "3", "--format", "json",
        ],
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    item = json.loads(created.output)
    assert item["kind"] == "multi" and item["mechanism"]["params"]["pairs"] == PAIRS
    both = runner.invoke(
        cli,
        [
            "campaign", "create", "x", "--url", srv.url, "--token", ADMIN_TOKEN,
            "--attributes", "{}", "--domain", "a,b",
        ],
    )  # fmt: skip
    assert both.exit_code != 0 and "--attributes" in both.output
    mech = from_config(item["mechanism"])
    data = population(3000, 5)
    day = dt.datetime.now(dt.UTC).date().isoformat()
    srv.upload(item, mech.encode_many(mech.perturb_many(data, rng=5)), day)
    shown = runner.invoke(
        cli, ["estimate", "cli-multi", "--url", srv.url, "--token", ANALYST_TOKEN]
    )
    assert shown.exit_code == 0, shown.output
    text = shown.output
    assert "occupation x sex" in text and "occupation \\ sex" in text
    assert "age (3,000 reports carry it)" in text and "mean " in text
    for label in OCCUPATIONS:
        assert label in text
    listed = runner.invoke(
        cli, ["campaign", "show", "cli-multi", "--url", srv.url, "--token", ANALYST_TOKEN]
    )
    assert listed.exit_code == 0 and "occupation x sex" in listed.output, listed.output

    # The dashboard's crosstab view: cells with intervals, and the numbers table.
    session = requests.Session()
    login = session.post(
        srv.url + "/dashboard/login", data={"token": ANALYST_TOKEN}, allow_redirects=False
    )
    assert login.status_code == 303, login.text
    page = session.get(srv.url + "/dashboard/campaigns/cli-multi", timeout=60)
    assert page.status_code == 200, page.text
    html = page.text
    assert 'id="crosstab-0"' in html and 'id="crosstab-table-0"' in html
    assert html.count('class="cell"') == len(OCCUPATIONS) * len(SEXES)
    assert "occupation × sex" in html and "mean " in html
    # Per attribute a trend chart with bands (one window here: a dot, a band, no line).
    assert html.count('class="chart multi-trend"') == len(ATTRIBUTES)
    assert 'id="trend-0"' in html and 'class="band"' in html
