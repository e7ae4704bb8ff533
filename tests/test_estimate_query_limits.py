"""The estimate query's limits on both sides: the HTTP parameters
(collector/views/estimates.py) and what ``postprocess=pattern`` may read
(collector/answers.py), through the real Flask app and a real SQLite file.

A parameter at its documented limit is taken (the answer may still be 422, too few reports:
never 400); one past it is a 400 ``invalid_parameter`` naming the rule.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from flask.testing import FlaskClient

import collector.answers
from aggregator.openended_answers import MAX_CANDIDATES, MAX_TOP
from client_sdk.errors import InvalidParameter
from collector import create_app
from collector.answers import campaign_answer
from collector.campaigns import Campaign, campaign_from_request
from collector.ingest import ingest_batch
from collector.retention import sweep
from collector.storage import SQLiteStorage, Storage, open_storage
from collector.views.estimates import QUERY_PARAMETERS
from tests.support.server import TOKENS

ADMIN = {"Authorization": f"Bearer {TOKENS['admin_token']}"}
ANALYST = {"Authorization": f"Bearer {TOKENS['analyst_token']}"}
OPEN = {"mechanism": "pem", "epsilon": 4.0, "max_length": 8, "params": {"width": 256, "depth": 8}}


@pytest.fixture
def client(tmp_path: Path) -> FlaskClient:
    client = create_app({"database": str(tmp_path / "collector.db"), **TOKENS}).test_client()
    for body in (
        {"id": "labels", "domain": ["a", "b", "c"], "mechanism": "oue", "epsilon": 1.0},
        {"id": "strings", **OPEN},
    ):
        r = client.post("/v1/campaigns", json=body, headers=ADMIN)
        assert r.status_code == 201, r.get_json()
    return client


def ask(client: FlaskClient, campaign: str, **params: object) -> tuple[int, str]:
    r = client.get(f"/v1/campaigns/{campaign}/estimates", query_string=params, headers=ANALYST)
    body = r.get_json()
    return r.status_code, body["error"]["message"] if r.status_code >= 400 else ""


def taken(status: int) -> bool:
    return status in (200, 422)  # 422: not enough reports yet; the query itself was valid


@pytest.mark.parametrize("name", ["form", "quantiles", "bootstrap", "format", "Level"])
def test_an_unknown_query_parameter_is_400_naming_it(client: FlaskClient, name: str) -> None:
    # A misspelt 'from' used to answer over every window, silently.
    status, message = ask(client, "labels", **{name: "2026-11-01"})
    assert status == 400 and f"unknown query parameter(s) {name!r}" in message
    assert "from, to, level, postprocess, top, candidate" in message
    assert taken(ask(client, "labels", **{"from": "2026-11-01"})[0])


def test_the_query_parameters_are_the_openapi_ones(client: FlaskClient) -> None:
    spec = client.get("/openapi.json").get_json()
    listed = spec["paths"]["/v1/campaigns/{campaign_id}/estimates"]["get"]["parameters"]
    assert tuple(p["name"] for p in listed if p["in"] == "query") == QUERY_PARAMETERS


@pytest.mark.parametrize("level", ["0", "1", "-0.5", "1.5", "nan"])
def test_a_level_outside_0_1_is_400(client: FlaskClient, level: str) -> None:
    status, message = ask(client, "labels", level=level)
    assert status == 400 and "'level' must be a number in (0, 1)" in message


@pytest.mark.parametrize("level", ["0.5", "0.999", "1e-9"])
def test_a_level_inside_0_1_is_taken(client: FlaskClient, level: str) -> None:
    assert taken(ask(client, "labels", level=level)[0])


def test_top_is_taken_from_1_to_its_maximum(client: FlaskClient) -> None:
    for top in (1, 5, MAX_TOP):
        assert taken(ask(client, "strings", top=top)[0]), top
    for top in ("0", str(MAX_TOP + 1)):
        status, message = ask(client, "strings", top=top)
        assert status == 400 and f"'top' must be an integer in [1, {MAX_TOP}]" in message
    # What was sent is quoted, cut at 40 characters.
    status, message = ask(client, "strings", top="9" * 100)
    assert status == 400 and message.endswith(f"got {'9' * 40!r}")


def test_candidates_are_taken_up_to_their_maximum(client: FlaskClient) -> None:
    names = [f"s{i}" for i in range(MAX_CANDIDATES + 1)]
    assert taken(ask(client, "strings", candidate=names[:MAX_CANDIDATES])[0])
    status, message = ask(client, "strings", candidate=names)
    assert status == 400 and f"at most {MAX_CANDIDATES} 'candidate'" in message


def test_a_range_of_one_day_is_taken_and_a_reversed_one_is_400(client: FlaskClient) -> None:
    assert taken(ask(client, "labels", **{"from": "2026-11-02", "to": "2026-11-02"})[0])
    status, message = ask(client, "labels", **{"from": "2026-11-03", "to": "2026-11-02"})
    assert status == 400 and "is after 'to'" in message


# -- postprocess=pattern reads at most MAX_PATTERN_REPORTS stored reports ----------------------

DAY0 = dt.date(2026, 1, 1)


@pytest.fixture
def aged(tmp_path: Path) -> Iterator[tuple[Storage, Campaign]]:
    """An OUE campaign with 20 reports on DAY0, which retention deleted, and 4 on each of the
    three days after it, which it keeps."""
    store = open_storage(str(tmp_path / "pattern.db"))
    store.migrate()
    body = {"id": "p", "domain": ["a", "b", "c"], "mechanism": "oue", "epsilon": 2.0}
    camp = campaign_from_request({**body, "min_reports": 1, "retention_days": 30}, today=DAY0)
    store.create_campaign(camp)
    mech = camp.mechanism
    for offset, count in ((0, 20), (1, 4), (2, 4), (3, 4)):
        day = DAY0 + dt.timedelta(days=offset)
        payloads = mech.encode_many(mech.perturb_many(np.arange(count) % 3, rng=offset))
        reports = [
            {"id": f"report-{offset}-{i:010d}", "day": day.isoformat(), "payload": p}
            for i, p in enumerate(payloads)
        ]
        body = {"digest": camp.digest, "reports": reports}
        assert ingest_batch(store, camp, body, max_reports=100, today=day).accepted == count
    (done,) = sweep(store, today=DAY0 + dt.timedelta(days=31)) or []
    assert done.purged_before == (DAY0 + dt.timedelta(days=1)).isoformat() and done.deleted == 20
    try:
        yield store, camp
    finally:
        store.close()


def test_the_pattern_cap_counts_the_kept_reports_only(
    aged: tuple[Storage, Campaign], monkeypatch: pytest.MonkeyPatch
) -> None:
    """12 reports kept (the 20 deleted are not read): a cap of 12 is enough, 11 is not."""
    store, camp = aged
    assert collector.answers.MAX_PATTERN_REPORTS == 500_000  # README: "at most 500,000"
    monkeypatch.setattr(collector.answers, "MAX_PATTERN_REPORTS", 12)
    answer = campaign_answer(store, camp, postprocess="pattern")
    assert answer.reports_deleted == [DAY0.isoformat()]
    monkeypatch.setattr(collector.answers, "MAX_PATTERN_REPORTS", 11)
    with pytest.raises(InvalidParameter, match="12 reports is more than 11; narrow"):
        campaign_answer(store, camp, postprocess="pattern")
    # The cap is the pattern MLE's alone: the tally estimators read no report.
    for method in ("mle", "auto", "none", "eb"):
        campaign_answer(store, camp, postprocess=method)


def test_every_window_after_the_purge_mark_gets_its_patterns(
    aged: tuple[Storage, Campaign],
) -> None:
    store, camp = aged
    days = [(DAY0 + dt.timedelta(days=i)).isoformat() for i in range(4)]
    patterns = collector.answers.window_patterns(store, camp, days, purged_before=days[1])
    assert patterns[days[0]] is None
    for day in days[1:]:
        histogram = patterns[day]
        assert histogram is not None and int(histogram.counts.sum()) == 4, day
    later = campaign_answer(store, camp, postprocess="pattern", start=DAY0 + dt.timedelta(days=2))
    assert later.postprocess is not None and later.postprocess["method"] == "pattern"


class RecordingSnapshots(SQLiteStorage):
    """The real SQLite store, counting the snapshots a query opens (no other change)."""

    snapshots = 0

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        self.snapshots += 1
        with super().snapshot():
            yield


def test_a_pattern_query_reads_tallies_and_reports_in_one_snapshot(
    aged: tuple[Storage, Campaign],
) -> None:
    """An ingest committing between the two reads would make the reports disagree with the
    tallies (and the answer fall back to mle): the pattern query reads both in one snapshot."""
    store, camp = aged
    recording = RecordingSnapshots(store.path)  # type: ignore[attr-defined]
    try:
        campaign_answer(recording, camp, postprocess="pattern")
        assert recording.snapshots == 1
    finally:
        recording.close()
