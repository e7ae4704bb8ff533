"""SS campaigns that keep pattern counts, through a live ``ldp serve`` on SQLite and PostgreSQL.

The tally of an ``auto`` campaign at epsilon 2 over 14 labels (SS, d = 2) counts each reported
subset; the default answer is then the pattern MLE of exactly the reports uploaded, without a
report read, and it survives retention (the tally is kept when the reports go). A campaign
created before pattern tallies existed (an SS config without ``patterns``) keeps its k-number
tallies and its former answer.
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
from aggregator.postprocess import mle_frequencies
from client_sdk.mechanisms import Tally, from_config
from client_sdk.mechanisms.tally import PatternTally
from ldp_cli.main import cli
from tests.support.server import CollectorProcess, running_collector

LABELS = [f"occupation-{i}" for i in range(14)]
FREQUENCIES = np.array([12, 12, 13, 13, 12, 4, 7, 11, 5, 5, 3, 0.5, 2, 3.5]) / 103.0


def _send(srv: CollectorProcess, campaign: dict[str, Any], days: list[str]) -> list[Any]:
    mech = from_config(campaign["mechanism"])
    sent: list[Any] = []
    for seed, day in enumerate(days):
        rng = np.random.default_rng(seed)
        values = rng.choice(mech.k, size=8_000, p=FREQUENCIES / FREQUENCIES.sum())
        payloads = mech.encode_many(mech.perturb_many(values, rng=rng))
        for start in range(0, len(payloads), 500):
            srv.upload(campaign, payloads[start : start + 500], day=day)
        sent += payloads
    return sent


@pytest.mark.slow
def test_pattern_tallies_end_to_end(tmp_path: Path, db_url: str) -> None:
    today = dt.datetime.now(dt.UTC).date()
    days = [(today - dt.timedelta(days=2)).isoformat(), (today - dt.timedelta(days=1)).isoformat()]
    with running_collector(tmp_path, db_url=db_url) as srv:
        body = {"id": "occ", "domain": LABELS, "epsilon": 2.0, "min_reports": 10}
        r = srv.post_campaign(body)
        assert r.status_code == 201, r.text
        campaign = r.json()
        assert campaign["mechanism"]["mechanism"] == "ss"
        assert campaign["mechanism"]["params"] == {"d": 2, "patterns": True}
        mech = from_config(campaign["mechanism"])
        sent = _send(srv, campaign, days)

        # The default answer: auto's pattern MLE of exactly the uploaded reports.
        answer = srv.estimates("occ")
        post = answer["postprocess"]
        assert post["method"] == "auto" and post["chosen"] == "pattern", post
        hist = histogram_of_payloads(mech, sent)
        expected = pattern_frequencies(mech, hist).frequencies * hist.n
        got = np.array([v["count"] for v in answer["values"]])
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-6)
        assert post["patterns"] == hist.counts.size and len(post["std_errors"]) == 14
        explicit = srv.estimates("occ", postprocess="pattern")
        assert explicit["postprocess"]["method"] == "pattern"
        np.testing.assert_allclose([v["count"] for v in explicit["values"]], got, rtol=1e-12)
        mle = srv.estimates("occ", postprocess="mle")
        assert mle["postprocess"]["method"] == "mle"
        support = mech.tally(sent).support
        mle_f, _, _, _ = mle_frequencies(mech, Tally(len(sent), support))
        np.testing.assert_allclose(
            [v["count"] for v in mle["values"]], mle_f * len(sent), rtol=1e-9, atol=1e-6
        )

        # The stored state is the pattern tally, exact; tally verify recomputes the same.
        from collector.storage import open_storage

        store = open_storage(srv.db_url)
        try:
            stored = store.get_campaign("occ")
            assert stored is not None
            tallies = store.tallies(stored, None, None)
            assert sorted(tallies) == days
            total = tallies[days[0]] + tallies[days[1]]
            assert isinstance(total, PatternTally) and total == mech.tally(sent)
        finally:
            store.close()
        srv.verify_tallies("occ")

        # ldp estimate reads the same store and gives the same answer.
        result = CliRunner().invoke(
            cli, ["estimate", "occ", "--db", srv.db_url, "--format", "json"]
        )
        assert result.exit_code == 0, result.output
        cli_body = json.loads(result.output)
        assert cli_body["postprocess"]["chosen"] == "pattern"
        np.testing.assert_allclose([v["count"] for v in cli_body["values"]], got, rtol=1e-12)
        table = CliRunner().invoke(cli, ["estimate", "occ", "--db", srv.db_url])
        assert table.exit_code == 0 and "postprocess auto (chosen pattern);" in table.output

        # Retention deletes the first day's reports: the tally keeps the patterns, so the
        # answer is still the pattern MLE of every report (no fallback to mle).
        store = open_storage(srv.db_url)
        try:
            stored = store.get_campaign("occ")
            assert stored is not None
            store.purge_reports(stored, days[1])
        finally:
            store.close()
        after = srv.estimates("occ", postprocess="pattern")
        assert after["reports_deleted"] == [days[0]]
        assert (
            after["postprocess"]["method"] == "pattern" and "requested" not in after["postprocess"]
        )
        np.testing.assert_allclose([v["count"] for v in after["values"]], got, rtol=1e-12)


@pytest.mark.slow
def test_campaign_from_before_pattern_tallies_keeps_its_layout(tmp_path: Path) -> None:
    # A campaign record written before SS kept patterns: the same config, no "patterns".
    from collector.campaigns import Campaign
    from collector.storage import open_storage

    db = str(tmp_path / "old.db")
    store = open_storage(db)
    try:
        store.migrate()
        old = Campaign(
            id="old",
            description="an SS campaign from before pattern tallies",
            mechanism_config={
                "mechanism": "ss",
                "epsilon": 2.0,
                "domain": LABELS,
                "params": {"d": 2},
            },
            window="day",
            horizon_days=7,
            min_reports=10,
            created="2026-11-01",
        )
        store.create_campaign(old)
    finally:
        store.close()
    with running_collector(tmp_path, db_url=db) as srv:
        campaign = requests.get(
            f"{srv.url}/v1/campaigns/old", headers=srv.headers("ingest"), timeout=10
        ).json()
        assert campaign["mechanism"]["params"] == {"d": 2}
        assert campaign["digest"] == old.digest  # devices' cached configs stay valid
        today = dt.datetime.now(dt.UTC).date().isoformat()
        sent = _send(srv, campaign, [today])
        answer = srv.estimates("old")
        assert answer["postprocess"]["chosen"] == "mle"
        srv.verify_tallies("old")
    store = open_storage(db)
    try:
        stored = store.get_campaign("old")
        assert stored is not None
        (tally,) = store.tallies(stored, None, None).values()
        assert type(tally) is Tally and tally.vector() == mech_support(stored, sent)
    finally:
        store.close()


def mech_support(campaign: Any, sent: list[Any]) -> list[int]:
    return campaign.mechanism.tally(sent).vector()  # type: ignore[no-any-return]


def test_a_campaign_asking_for_patterns_it_cannot_keep_gets_a_clear_400() -> None:
    from collector.campaigns import campaign_from_request
    from collector.errors import APIError

    labels = [f"v{i}" for i in range(16)]
    for params, message in (
        ({"d": 6, "patterns": True}, r"k = 16, d = 6 has C\(k, d\) = 8008"),
        ({"d": 1, "patterns": True}, "pattern counts are kept for 2 <= d"),
        ({"d": 2, "patterns": "yes"}, "patterns must be true or false, got 'yes'"),
    ):
        body = {"id": "p", "domain": labels, "mechanism": "ss", "epsilon": 1.0, "params": params}
        with pytest.raises(APIError, match=message) as caught:
            campaign_from_request(body)
        assert caught.value.status == 400
    # An explicit ss may ask for them where they fit; its config then says so.
    body = {
        "id": "p",
        "domain": labels,
        "mechanism": "ss",
        "epsilon": 1.0,
        "params": {"d": 2, "patterns": True},
    }
    camp = campaign_from_request(body)
    assert camp.mechanism_config["params"] == {"d": 2, "patterns": True}
    assert isinstance(camp.mechanism.empty_tally(), PatternTally)
