"""The audit path: recomputed tallies equal the mechanism's and the stored running tallies."""

from __future__ import annotations

import base64
import datetime as dt

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.audit import audit_windows, recompute_tally
from client_sdk.errors import InvalidReport
from client_sdk.mechanisms import Tally, create


@pytest.mark.parametrize(
    ("name", "k"), [("oue", 14), ("oue", 8), ("oue", 9), ("sue", 30), ("ss", 14), ("oue", 2)]
)
def test_fast_path_equals_the_mechanism_tally(name: str, k: int) -> None:
    mech = create(name, epsilon=1.0, domain=k)
    payloads = mech.encode_many(mech.perturb_many(np.arange(5000) % k, rng=k))
    assert recompute_tally(mech, payloads) == mech.tally(payloads)


@pytest.mark.parametrize("name", ["grr", "hr", "olh", "rr"])
def test_other_mechanisms_use_the_mechanism_tally(name: str) -> None:
    k = 2 if name == "rr" else 7
    mech = create(name, epsilon=1.0, domain=k)
    payloads = mech.encode_many(mech.perturb_many(np.arange(700) % k, rng=1))
    assert recompute_tally(mech, payloads) == mech.tally(payloads)


def test_empty_batch() -> None:
    mech = create("oue", epsilon=1.0, domain=5)
    assert recompute_tally(mech, []) == Tally.empty(5)


@settings(max_examples=150, deadline=None)
@given(st.binary(min_size=2, max_size=2), st.sampled_from(["", "=", "x"]))
def test_fast_path_accepts_and_rejects_exactly_what_the_parser_does(
    raw: bytes, mutation: str
) -> None:
    mech = create("oue", epsilon=1.0, domain=14)
    good = mech.encode_many(mech.perturb_many(np.arange(20) % 14, rng=2))
    text = base64.b64encode(raw).decode()
    if mutation == "x":
        text = text[:-1] + "x"  # a data character where '=' padding belongs
    odd = text + mutation if mutation == "=" else text
    batch = [*good, odd]
    try:
        expected = mech.tally(batch)
    except InvalidReport as exc:
        with pytest.raises(InvalidReport) as caught:
            recompute_tally(mech, batch)
        assert str(caught.value) == str(exc)
    else:
        assert recompute_tally(mech, batch) == expected


def test_subset_size_is_checked_like_the_parser() -> None:
    mech = create("ss", epsilon=1.0, domain=14)
    good = mech.encode_many(mech.perturb_many(np.arange(20) % 14, rng=2))
    wrong = base64.b64encode(bytes([255, 0])).decode()  # 8 values, not d
    with pytest.raises(InvalidReport, match="exactly"):
        recompute_tally(mech, [*good, wrong])


def test_audit_matches_the_running_tallies_of_a_real_store(tmp_path) -> None:
    from collector.app import create_app

    tokens = {"admin_token": "a" * 32, "analyst_token": "b" * 32, "ingest_token": "c" * 32}
    app = create_app({"database": str(tmp_path / "ldp.db"), **tokens})
    client = app.test_client()
    admin = {"Authorization": "Bearer " + "a" * 32}
    created = client.post(
        "/v1/campaigns",
        json={
            "id": "colours",
            "domain": ["red", "green", "blue"],
            "mechanism": "oue",
            "epsilon": 1.0,
        },
        headers=admin,
    )
    assert created.status_code == 201, created.get_json()
    digest = created.get_json()["digest"]
    store = app.extensions["ldp_storage"]
    campaign = store.get_campaign("colours")
    mech = campaign.mechanism
    rng = np.random.default_rng(9)
    today = dt.datetime.now(dt.UTC).date()
    days = [(today - dt.timedelta(days=2)).isoformat(), (today - dt.timedelta(days=1)).isoformat()]
    for day, n in zip(days, (300, 200), strict=True):
        payloads = mech.encode_many(mech.perturb_many(rng.integers(0, 3, n), rng=rng))
        reports = [
            {"id": f"{day}-report-{i:06d}", "day": day, "payload": p}
            for i, p in enumerate(payloads)
        ]
        answer = client.post(
            "/v1/campaigns/colours/reports",
            json={"digest": digest, "reports": reports},
            headers={"Authorization": "Bearer " + "c" * 32},
        )
        assert answer.get_json()["accepted"] == n
    stored = store.tallies(campaign)

    def payloads_of(window: str):
        return [p for _, p in store.iter_reports(campaign, window)]

    checks = audit_windows(mech, stored, payloads_of)
    assert [c.window for c in checks] == days
    assert all(c.ok for c in checks) and checks[0].stored.n == 300
    tampered = dict(stored)
    tampered[days[1]] = Tally(200, stored[days[1]].support + np.array([1, 0, 0]))
    bad = audit_windows(mech, tampered, payloads_of)
    assert [c.ok for c in bad] == [True, False]
    assert bad[1].to_dict()["ok"] is False
