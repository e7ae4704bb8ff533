"""``postprocess=pattern`` through the one estimate service, a live ``ldp serve`` and ``ldp
estimate``, on SQLite and PostgreSQL.

The collector builds each window's pattern histogram from its stored reports; the answer must be
exactly the library's pattern MLE of the very reports uploaded (same histogram, same fit), must
refuse mechanisms without the capability with a clear 400, and must fall back to ``mle``, saying
so, for windows whose reports retention deleted.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from click.testing import CliRunner

from aggregator.pattern import histogram_of_payloads, pattern_frequencies
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import from_config
from ldp_cli.main import cli
from tests.support.reports import campaign_body
from tests.support.server import CollectorProcess, running_collector

FREQUENCIES = np.array([0.35, 0.25, 0.15, 0.12, 0.08, 0.05])


def _upload(
    srv: CollectorProcess, campaign: dict[str, Any], n: int, seed: int, day: str
) -> list[Any]:
    mech = from_config(campaign["mechanism"])
    rng = np.random.default_rng(seed)
    values = rng.choice(mech.k, size=n, p=FREQUENCIES)
    payloads = mech.encode_many(mech.perturb_many(values, rng=rng))
    srv.upload(campaign, payloads, day=day)
    return payloads


def _estimates(srv: CollectorProcess, cid: str, **params: str) -> requests.Response:
    return requests.get(
        f"{srv.url}/v1/campaigns/{cid}/estimates",
        params=params,
        headers=srv.headers("analyst"),
        timeout=60,
    )


def _check_campaign(srv: CollectorProcess, mechanism: str, days: list[str]) -> None:
    params = {"params": {"d": 2}} if mechanism == "ss" else {}
    r = srv.post_campaign(
        campaign_body(mechanism, mechanism, epsilon=2.0, min_reports=10, **params)
    )
    assert r.status_code == 201, r.text
    campaign = r.json()
    mech = from_config(campaign["mechanism"])
    assert getattr(mech, "d", 2) == 2
    sent = {day: _upload(srv, campaign, 1_500, seed, day) for seed, day in enumerate(days)}

    answer = _estimates(srv, mechanism, postprocess="pattern")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    post = body["postprocess"]
    assert post["method"] == "pattern" and post["converged"] is True
    assert "requested" not in post and body["reports_deleted"] == []
    # Exactly the library's fit of the uploaded reports: the same histogram, the same EM.
    hist = histogram_of_payloads(mech, [p for day in days for p in sent[day]])
    expected = pattern_frequencies(mech, hist).frequencies * hist.n
    got = np.array([v["count"] for v in body["values"]])
    assert post["patterns"] == hist.counts.size
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-6)
    se = np.array(post["std_errors"])
    assert se.shape == (mech.k,) and np.all(se > 0)
    # Against the raw estimate's closed-form error on the same reports: OUE's pattern fit is
    # tighter (its support counts drop information); SS's is close to it (its tally loses
    # little; 1-2% in standard error at d = 2), never far off.
    raw_se = np.array([v["std_error"] for v in body["values"]])
    if mechanism == "oue":
        assert np.all(se < 0.99 * raw_se)
    else:
        assert np.all((se > 0.8 * raw_se) & (se < 1.1 * raw_se))

    # One window: its own reports only.
    one = _estimates(srv, mechanism, postprocess="pattern", **{"from": days[1]}).json()
    assert one["n"] == 1_500 and one["postprocess"]["method"] == "pattern"

    # ldp estimate reads the same store and gives the same answer.
    result = CliRunner().invoke(
        cli,
        ["estimate", mechanism, "--db", srv.db_url, "--postprocess", "pattern", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    cli_body = json.loads(result.output)
    assert cli_body["postprocess"]["method"] == "pattern"
    np.testing.assert_allclose([v["count"] for v in cli_body["values"]], got, rtol=1e-12)

    srv.verify_tallies(mechanism)  # the store is untouched: tallies still recompute exactly

    # Retention deleted the first window's reports: the answer says so and is the mle.
    from collector.storage import open_storage

    store = open_storage(srv.db_url)
    try:
        stored = store.get_campaign(mechanism)
        assert stored is not None
        store.purge_reports(stored, days[1])
    finally:
        store.close()
    fallback = _estimates(srv, mechanism, postprocess="pattern").json()
    post = fallback["postprocess"]
    assert post["method"] == "mle" and post["requested"] == "pattern"
    assert days[0] in post["note"] and "retention" in post["note"]
    assert fallback["reports_deleted"] == [days[0]]
    table = CliRunner().invoke(
        cli, ["estimate", mechanism, "--db", srv.db_url, "--postprocess", "pattern"]
    )
    assert table.exit_code == 0 and "postprocess mle;" in table.output, table.output
    assert f"postprocess note: no stored reports for window(s) {days[0]}" in table.output
    mle = _estimates(srv, mechanism, postprocess="mle").json()
    assert [v["count"] for v in fallback["values"]] == [v["count"] for v in mle["values"]]
    # The window that kept its reports still gets the pattern MLE.
    kept = _estimates(srv, mechanism, postprocess="pattern", **{"from": days[1]}).json()
    assert kept["postprocess"]["method"] == "pattern"


def _check_refusals(srv: CollectorProcess) -> None:
    for cid, mechanism, extra in (
        ("g", "grr", {}),
        ("big", "oue", {"domain": [f"v{i}" for i in range(17)]}),
    ):
        r = srv.post_campaign(campaign_body(cid, mechanism, min_reports=1, **extra))
        assert r.status_code == 201, r.text
        campaign = r.json()
        mech = from_config(campaign["mechanism"])
        srv.upload(campaign, mech.encode_many(mech.perturb_many(np.zeros(20, int), rng=1)))
        refused = _estimates(srv, cid, postprocess="pattern")
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "invalid_parameter"
        assert "pattern" in error["message"] and "use postprocess 'mle'" in error["message"]
        assert ("'grr'" if mechanism == "grr" else "k <= 16") in error["message"]
    doc = requests.get(srv.url + "/openapi.json", timeout=10).json()
    params = doc["paths"]["/v1/campaigns/{campaign_id}/estimates"]["get"]["parameters"]
    (post,) = [p for p in params if p["name"] == "postprocess"]
    assert "pattern" in post["schema"]["enum"] and "mle" in post["schema"]["enum"]


@pytest.mark.slow
def test_pattern_estimates_end_to_end(tmp_path: Path, db_url: str) -> None:
    today = dt.datetime.now(dt.UTC).date()
    days = [(today - dt.timedelta(days=2)).isoformat(), (today - dt.timedelta(days=1)).isoformat()]
    with running_collector(tmp_path, db_url=db_url) as srv:
        for mechanism in ("oue", "ss"):
            _check_campaign(srv, mechanism, days)
        _check_refusals(srv)


def test_pattern_reads_at_most_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import collector.answers
    from collector.campaigns import campaign_from_request
    from collector.ingest import ingest_batch
    from collector.storage import open_storage

    day = dt.date(2026, 1, 1)
    store = open_storage(str(tmp_path / "cap.db"))
    try:
        store.migrate()
        camp = campaign_from_request(
            {"id": "cap", "domain": ["a", "b", "c"], "mechanism": "oue", "epsilon": 2.0},
            today=day,
        )
        store.create_campaign(camp)
        mech = camp.mechanism
        payloads = mech.encode_many(mech.perturb_many(np.arange(300) % 3, rng=2))
        reports = [
            {"id": f"report-{i:012d}", "day": day.isoformat(), "payload": p}
            for i, p in enumerate(payloads)
        ]
        body = {"digest": camp.digest, "reports": reports}
        assert ingest_batch(store, camp, body, max_reports=300, today=day).accepted == 300
        answer = collector.answers.campaign_answer(store, camp, postprocess="pattern")
        assert answer.postprocess["method"] == "pattern"  # type: ignore[union-attr]
        monkeypatch.setattr(collector.answers, "MAX_PATTERN_REPORTS", 299)
        with pytest.raises(InvalidParameter, match="300 reports is more than 299; narrow"):
            collector.answers.campaign_answer(store, camp, postprocess="pattern")
    finally:
        store.close()


@pytest.mark.slow
def test_pattern_reads_reports_and_tallies_of_one_moment(tmp_path: Path) -> None:
    # Ingest keeps committing while pattern queries run: every answer must still be the pattern
    # MLE (its reports and tallies read in one snapshot), never a fallback to mle.
    import threading

    from collector.answers import campaign_answer
    from collector.campaigns import campaign_from_request
    from collector.ingest import ingest_batch
    from collector.storage import open_storage

    day = dt.date(2026, 1, 1)
    path = str(tmp_path / "live.db")
    reader, writer = open_storage(path), open_storage(path)
    try:
        reader.migrate()
        camp = campaign_from_request(
            {"id": "live", "domain": ["a", "b", "c", "d"], "mechanism": "oue", "epsilon": 2.0},
            today=day,
        )
        reader.create_campaign(camp)
        mech = camp.mechanism
        payloads = mech.encode_many(mech.perturb_many(np.arange(4_000) % 4, rng=3))
        stop = threading.Event()
        sent: list[int] = []

        def ingest() -> None:
            for start in range(0, len(payloads), 50):
                if stop.is_set():
                    return
                reports = [
                    {"id": f"live-{start + i:012d}", "day": day.isoformat(), "payload": p}
                    for i, p in enumerate(payloads[start : start + 50])
                ]
                body = {"digest": camp.digest, "reports": reports}
                sent.append(ingest_batch(writer, camp, body, max_reports=50, today=day).accepted)

        worker = threading.Thread(target=ingest)
        worker.start()
        try:
            methods = []
            while worker.is_alive() and len(methods) < 20:
                if sum(sent) >= 50:
                    answer = campaign_answer(reader, camp, postprocess="pattern")
                    methods.append(answer.postprocess["method"])  # type: ignore[union-attr]
        finally:
            stop.set()
            worker.join()
        assert len(methods) >= 3 and set(methods) == {"pattern"}, methods
    finally:
        reader.close()
        writer.close()
