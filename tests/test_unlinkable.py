"""Unlinkable storage: whoever holds the database cannot group one device's reports.

100 devices each send one report to each of 5 campaigns, one POST per report through the real
Flask app, on a real SQLite file and a real PostgreSQL database. As the SDK does, a device
sends its 5 uploads one after another (campaigns in a random order); devices come in a random
order. Then an attacker reads the database (:mod:`tests.support.linkage`): PostgreSQL ``xmin``
and ``ctid`` of every row, and the raw heap pages (dead tuples too) through ``pageinspect``;
SQLite's file and WAL bytes (where each report id lies, which WAL frame first holds it).

Chance level and tolerance (derived in :func:`tests.support.linkage.chance_bound`): when the
stored order says nothing of the devices, each guess is right with probability 1/100, so
the 10 campaign pairs x 100 guesses give a count of mean 10 and variance at most 10 (at most
one per pair, as for the fixed points of a random permutation); the test fails above
10 + 6 sd = 29.0. Before the mix, the staged rows lie as they arrived, as every report did
before unlinkable storage (and still does with ``LDP_MIX_BATCH=0``): the same attacks must
then find far more than chance (the control).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
from click.testing import CliRunner
from flask import Flask

from collector import create_app
from collector.mixing import Mixer
from collector.tallycheck import verify_tallies
from ldp_cli.main import cli
from tests.support import linkage
from tests.support.postgres import BACKENDS, collector_database
from tests.support.reports import batch, campaign_body, reports
from tests.support.server import TOKENS

DEVICES = 100
CAMPAIGNS = [f"c{i}" for i in range(5)]


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role + '_token']}"}


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with collector_database(request.param, tmp_path) as db:
        yield db


def serve(database: str) -> Flask:
    # No mixer thread (ldp serve starts it): the test mixes once, as a timed mix would.
    return create_app({"database": database, **TOKENS, "mix_batch": 10_000, "mix_interval": 0})


def upload_everything(app: Flask) -> dict[str, tuple[str, int]]:
    """Each device POSTs one report to each campaign in turn; report id -> (campaign, device)."""
    client = app.test_client()
    made: dict[str, dict[str, Any]] = {}
    for cid in CAMPAIGNS:
        resp = client.post("/v1/campaigns", json=campaign_body(cid), headers=auth("admin"))
        assert resp.status_code == 201, resp.json
        made[cid] = resp.json
    # One report per device and campaign (random ids, independent random values).
    made_reports = {
        cid: reports(made[cid], DEVICES, seed=secrets.randbits(32)) for cid in CAMPAIGNS
    }
    order = secrets.SystemRandom()
    devices = list(range(DEVICES))
    order.shuffle(devices)
    owner: dict[str, tuple[str, int]] = {}
    for device in devices:
        campaigns = list(CAMPAIGNS)
        order.shuffle(campaigns)
        for cid in campaigns:
            item = made_reports[cid][device]
            resp = client.post(
                f"/v1/campaigns/{cid}/reports",
                json=batch(made[cid], [item]),
                headers=auth("ingest"),
            )
            assert resp.status_code == 200 and resp.json["accepted"] == 1, resp.json
            owner[item["id"]] = (cid, device)
    return owner


def estimate_n(app: Flask, cid: str) -> int:
    resp = app.test_client().get(f"/v1/campaigns/{cid}/estimates", headers=auth("analyst"))
    assert resp.status_code == 200, resp.json
    return int(resp.json["n"])


def test_mixed_storage_links_no_better_than_chance(database: str) -> None:
    app = serve(database)
    store = app.extensions["ldp_storage"]
    bound = linkage.chance_bound(DEVICES, len(CAMPAIGNS))
    backend = "postgresql" if database.startswith("postgresql") else "sqlite"
    try:
        owner = upload_everything(app)
        # Staged reports count at once: estimates and tally verify see all of them.
        assert store.staged_count() == DEVICES * len(CAMPAIGNS)
        assert all(estimate_n(app, cid) == DEVICES for cid in CAMPAIGNS)
        assert all(check.ok for check in verify_tallies(store))
        # The control: staged rows lie as they arrived, as every report did before staging
        # (LDP_MIX_BATCH=0 stores them so): the attacks must find the devices.
        before = linkage.attack(database, owner)
        assert store.mix().moved == DEVICES * len(CAMPAIGNS)
        assert store.staged_count() == 0
        assert all(estimate_n(app, cid) == DEVICES for cid in CAMPAIGNS)
        assert all(check.ok for check in verify_tallies(store))
        after = linkage.attack(database, owner)
    finally:
        store.close()
    print(f"\n{backend} before the mix: correct links per attack {before} (bound {bound:.1f})")
    print(f"{backend} after the mix: correct links per attack {after}")
    assert max(before.values()) > 5 * bound, before
    assert after, "no attack ran"
    assert max(after.values()) <= bound, after


def test_exactly_once_across_staging_and_mixes(database: str) -> None:
    """A retry after its reports were mixed is a duplicate; the service's mixer mixes at
    ``mix_batch`` staged reports (one tick, the lease); ``ldp mix`` flushes what is left."""
    app = create_app({"database": database, **TOKENS, "mix_batch": 30, "mix_interval": 0})
    store = app.extensions["ldp_storage"]
    client = app.test_client()
    try:
        made = client.post("/v1/campaigns", json=campaign_body("x"), headers=auth("admin")).json
        items = reports(made, 40, seed=1)

        def post(chunk: list[dict[str, Any]]) -> tuple[int, int]:
            resp = client.post(
                "/v1/campaigns/x/reports", json=batch(made, chunk), headers=auth("ingest")
            )
            assert resp.status_code == 200, resp.json
            return resp.json["accepted"], resp.json["duplicate"]

        assert post(items[:20]) == (20, 0)
        assert post(items[:20]) == (0, 20)  # staged ids are known
        # The service's mixer at mix_batch = 30, polling without pause (no lease wait).
        mixer = Mixer(store, 30, 0, poll_seconds=0)
        assert mixer.tick() is None  # 20 < mix_batch: nothing mixed
        assert post(items[10:30]) == (10, 10)
        done = mixer.tick()
        assert done is not None and done.moved == 30 and store.staged_count() == 0
        assert post(items[:35]) == (5, 30)  # mixed ids are known too
        assert store.staged_count() == 5 and estimate_n(app, "x") == 35
        assert all(check.ok for check in verify_tallies(store))
    finally:
        store.close()
    result = CliRunner().invoke(cli, ["mix", "--database", database, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"moved": 5, "seconds": ANY, "staged": 0}
    app = create_app({"database": database, **TOKENS})
    try:
        assert estimate_n(app, "x") == 35
        assert (
            app.extensions["ldp_storage"].count_reports(
                app.extensions["ldp_storage"].get_campaign("x")
            )
            == 35
        )
    finally:
        app.extensions["ldp_storage"].close()


def test_reports_staged_under_schema_6_stay_counted_and_are_mixed() -> None:
    """PostgreSQL migration 7 (staging in two slots) keeps what a schema-6 collector staged:
    the reports stay counted, an upload of the same ids is a duplicate, and the next mix moves
    them into ``reports`` and leaves both slots empty."""
    import psycopg

    from collector.campaigns import campaign_from_request
    from collector.storage.postgres_schema import MIGRATIONS, version_table_sql
    from tests.support.postgres import fresh_database

    campaign = campaign_from_request(campaign_body("x"))
    items = reports(campaign.to_record(), 30, seed=3)
    with fresh_database() as url:
        with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
            conn.execute(version_table_sql())
            for number, statements in enumerate(MIGRATIONS[:6], start=1):
                for statement in statements:
                    conn.execute(statement)  # type: ignore[arg-type]
                conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (number,))
            pk = conn.execute(
                "INSERT INTO campaigns (id, record) VALUES ('x', %s) RETURNING pk",
                (json.dumps(campaign.to_record(), sort_keys=True),),
            ).fetchone()[0]  # type: ignore[index]
            for item in items:
                conn.execute(
                    "INSERT INTO staged_reports VALUES (%s, %s, %s::date, %s)",
                    (pk, item["id"], item["day"], json.dumps(item["payload"])),
                )
        app = create_app({"database": url, **TOKENS, "mix_batch": 10_000, "mix_interval": 0})
        store = app.extensions["ldp_storage"]
        try:
            assert store.schema_version() == 7
            assert store.staged_count() == 30
            assert store.count_reports(store.get_campaign("x")) == 30
            client = app.test_client()
            made = client.get("/v1/campaigns/x", headers=auth("analyst")).json
            again = client.post(
                "/v1/campaigns/x/reports", json=batch(made, items[:10]), headers=auth("ingest")
            )
            assert again.status_code == 200 and again.json["duplicate"] == 10, again.json
            assert store.mix().moved == 30 and store.staged_count() == 0
            assert store.count_reports(store.get_campaign("x")) == 30
        finally:
            store.close()
