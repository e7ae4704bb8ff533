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
from collector.campaigns import Campaign
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


def upload_everything(
    app: Flask,
    names: list[str] = CAMPAIGNS,
    count: int = DEVICES,
    domain: list[str] | None = None,
) -> dict[str, tuple[str, int]]:
    """Each of ``count`` devices POSTs one report to each campaign in ``names`` in turn (oue over
    ``domain``, the default labels if None); report id -> (campaign, device)."""
    client = app.test_client()
    made: dict[str, dict[str, Any]] = {}
    for cid in names:
        body = campaign_body(cid) if domain is None else campaign_body(cid, domain=domain)
        resp = client.post("/v1/campaigns", json=body, headers=auth("admin"))
        assert resp.status_code == 201, resp.json
        made[cid] = resp.json
    # One report per device and campaign (random ids, independent random values).
    made_reports = {cid: reports(made[cid], count, seed=secrets.randbits(32)) for cid in names}
    order = secrets.SystemRandom()
    devices = list(range(count))
    order.shuffle(devices)
    owner: dict[str, tuple[str, int]] = {}
    for device in devices:
        campaigns = list(names)
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


def at_schema(conn: Any, version: int, campaign: Campaign) -> int:
    """Apply PostgreSQL migrations 1..``version`` (what a collector of that schema left) and
    store ``campaign`` as it did; its primary key."""
    from collector.storage.postgres_schema import MIGRATIONS, version_table_sql

    conn.execute(version_table_sql())
    for number, statements in enumerate(MIGRATIONS[:version], start=1):
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (number,))
    row = conn.execute(
        "INSERT INTO campaigns (id, record) VALUES (%s, %s) RETURNING pk",
        (campaign.id, json.dumps(campaign.to_record(), sort_keys=True)),
    ).fetchone()
    return int(row[0])


def test_reports_staged_under_schema_6_stay_counted_and_are_mixed() -> None:
    """PostgreSQL migration 7 (staging in two slots) keeps what a schema-6 collector staged:
    the reports stay counted, an upload of the same ids is a duplicate, and the next mix moves
    them into ``reports`` and leaves both slots empty."""
    import psycopg

    from collector.campaigns import campaign_from_request
    from collector.storage.postgres_schema import SCHEMA_VERSION
    from tests.support.postgres import fresh_database

    campaign = campaign_from_request(campaign_body("x"))
    items = reports(campaign.to_record(), 30, seed=3)
    with fresh_database() as url:
        with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
            pk = at_schema(conn, 6, campaign)
            for item in items:
                conn.execute(
                    "INSERT INTO staged_reports VALUES (%s, %s, %s::date, %s)",
                    (pk, item["id"], item["day"], json.dumps(item["payload"])),
                )
        app = create_app({"database": url, **TOKENS, "mix_batch": 10_000, "mix_interval": 0})
        store = app.extensions["ldp_storage"]
        try:
            assert store.schema_version() == SCHEMA_VERSION
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


TALLY_DEVICES = 12
TALLY_CAMPAIGNS = [f"t{i}" for i in range(4)]


def test_tally_row_versions_link_no_better_than_chance_after_the_mix() -> None:
    """PostgreSQL keeps every update of a tally row as a row version stamped with the
    upload's transaction id; two versions of one shard row differ by one upload's tally. Each
    upload adds to the tally rows of the staging slot its reports went to, and the mix folds
    them into the settled rows (one per campaign and window) and truncates them with the
    slot's reports. The attacker (:func:`tests.support.linkage.tally_version_signal`: every
    tuple of the tally tables through ``pageinspect``) links each stored report to its
    upload's ``xmin``, and nearby ``xmin``s link a device's reports across campaigns. Before the
    mix it must (the control; few devices, so page pruning has not removed the versions yet);
    after it, no better than chance. Before this change the same attack after the mix found
    the links in the settled rows (measured: 12 devices x 3 campaigns, 25 of 36 uploads tied)."""
    import psycopg

    from tests.support.postgres import fresh_database

    with fresh_database() as url, psycopg.connect(url) as elder:
        # A transaction older than every upload, as an analyst's long query or a backup would
        # be: no dead row version may be pruned while it runs, so the control sees them all,
        # and the mix must not rely on vacuum or pruning to remove them.
        elder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        elder.execute("SELECT 1")
        app = create_app({"database": url, **TOKENS, "mix_batch": 10_000, "mix_interval": 0})
        store = app.extensions["ldp_storage"]
        bound = linkage.chance_bound(TALLY_DEVICES, len(TALLY_CAMPAIGNS))
        try:
            # 32 values: one report's OUE tally is all but unique, so the attacker can tell
            # which upload added it.
            domain = [f"v{i}" for i in range(32)]
            owner = upload_everything(app, TALLY_CAMPAIGNS, TALLY_DEVICES, domain)
            early = linkage.tally_version_signal(url)
            before = linkage.grouped_links(early, owner, len(TALLY_CAMPAIGNS))
            assert store.mix().moved == TALLY_DEVICES * len(TALLY_CAMPAIGNS)
            signal = linkage.tally_version_signal(url)
            after = max(
                linkage.correct_links(signal, owner),
                linkage.grouped_links(signal, owner, len(TALLY_CAMPAIGNS)),
            )
            assert all(estimate_n(app, cid) == TALLY_DEVICES for cid in TALLY_CAMPAIGNS)
            assert all(check.ok for check in verify_tallies(store))
            counters = {c.campaign: c.accepted for c in store.report_counters()}
            assert counters == dict.fromkeys(TALLY_CAMPAIGNS, TALLY_DEVICES)
        finally:
            store.close()
    print(
        f"\ntally versions: correct links before the mix {before}, after {after} "
        f"(bound {bound:.1f}); reports tied to an upload: before {len(early)}, after {len(signal)}"
    )
    assert before > 2 * bound, before
    assert after <= bound, after


def test_tallies_of_a_schema_7_database_stay_counted_through_the_upgrade_and_mixes() -> None:
    """PostgreSQL migration 8 (tallies in the staging slots) keeps what a schema-7 collector
    wrote: reports staged in slot 0 with their tally and counters in the settled rows. After
    the upgrade they stay counted, the mix moves them, new uploads' tallies go to the slot and
    are folded by the next mix, and ``tally verify`` agrees at every step."""
    import psycopg

    from collector.campaigns import campaign_from_request
    from collector.storage.postgres_schema import SCHEMA_VERSION
    from tests.support.postgres import fresh_database

    campaign = campaign_from_request(campaign_body("x"))
    mech = campaign.mechanism
    items = reports(campaign.to_record(), 30, seed=4)
    with fresh_database() as url:
        with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
            pk = at_schema(conn, 7, campaign)
            for item in items:
                conn.execute(
                    "INSERT INTO staged_reports_0 VALUES (0, %s, %s, %s::date, %s)",
                    (pk, item["id"], item["day"], json.dumps(item["payload"])),
                )
            tally = mech.tally([item["payload"] for item in items])
            conn.execute(
                "INSERT INTO tally_shards (campaign, window_start, shard, n, support) "
                "VALUES (%s, %s::date, 3, %s, %s::bigint[])",
                (pk, items[0]["day"], tally.n, [int(v) for v in tally.vector()]),
            )
            conn.execute(
                "INSERT INTO report_counters (campaign, shard, accepted) VALUES (%s, 3, 30)",
                (pk,),
            )
        app = create_app({"database": url, **TOKENS, "mix_batch": 10_000, "mix_interval": 0})
        store = app.extensions["ldp_storage"]
        client = app.test_client()
        try:
            assert store.schema_version() == SCHEMA_VERSION
            assert estimate_n(app, "x") == 30
            assert all(check.ok for check in verify_tallies(store))
            assert store.mix().moved == 30
            made = client.get("/v1/campaigns/x", headers=auth("analyst")).json
            more = reports(made, 10, seed=5)
            resp = client.post(
                "/v1/campaigns/x/reports", json=batch(made, more), headers=auth("ingest")
            )
            assert resp.status_code == 200 and resp.json["accepted"] == 10, resp.json
            assert estimate_n(app, "x") == 40
            assert all(check.ok for check in verify_tallies(store))
            assert store.mix().moved == 10
            assert estimate_n(app, "x") == 40
            assert all(check.ok for check in verify_tallies(store))
            assert [c.accepted for c in store.report_counters()] == [40]
            with psycopg.connect(url, autocommit=True) as conn:
                staged = conn.execute(
                    "SELECT (SELECT count(*) FROM staged_tallies), "
                    "(SELECT count(*) FROM staged_counters)"
                ).fetchone()
                settled = conn.execute(
                    "SELECT shard, n FROM tally_shards ORDER BY shard"
                ).fetchall()
            assert staged == (0, 0)
            assert settled == [(0, 10), (3, 30)]  # the fold's row, and the old one
        finally:
            store.close()
