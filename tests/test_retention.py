"""Retention (issue 19): aged-out reports and their ids are deleted, tallies are kept.

Real SQLite files and the real PostgreSQL; the end-to-end test runs ``ldp serve`` with the
test clock (``LDP_TODAY_FILE``) and advances the days itself.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest
import requests
from click.testing import CliRunner

from collector.answers import campaign_answer
from collector.campaigns import DEFAULT_RETENTION_DAYS, Campaign, campaign_from_request
from collector.errors import APIError
from collector.ingest import ingest_batch
from collector.retention import keep_days, purge_mark, sweep
from collector.storage import Storage, open_storage
from collector.tallycheck import verify_tallies
from ldp_cli.main import cli
from tests.support.postgres import BACKENDS, collector_database, fresh_database
from tests.support.server import running_collector

DAY0 = dt.date(2026, 1, 1)
DATA = Path(__file__).parent / "data"


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    with collector_database(request.param, tmp_path) as database:
        opened = open_storage(database)
        opened.migrate()
        try:
            yield opened
        finally:
            opened.close()


def _campaign(cid: str = "occ", **extra: object) -> Campaign:
    body = {"id": cid, "domain": ["a", "b", "c", "d"], "mechanism": "oue", "epsilon": 1.0}
    return campaign_from_request({**body, **extra}, today=DAY0)


def _upload(store: Storage, camp: Campaign, day: dt.date, count: int, tag: str) -> int:
    mech = camp.mechanism
    values = np.arange(count) % 4
    payloads = mech.encode_many(mech.perturb_many(values, rng=day.toordinal()))
    reports = [
        {"id": f"{tag}-{day.isoformat()}-{i:08d}", "day": day.isoformat(), "payload": p}
        for i, p in enumerate(payloads)
    ]
    result = ingest_batch(
        store, camp, {"digest": camp.digest, "reports": reports}, max_reports=10_000, today=day
    )
    return result.accepted


def test_campaign_retention_rules() -> None:
    assert _campaign().retention_days == DEFAULT_RETENTION_DAYS
    assert _campaign(horizon_days=200).retention_days == 200  # never below the horizon
    assert _campaign(horizon_days=3, retention_days=5).retention_days == 5
    with pytest.raises(APIError, match="must be >= 'horizon_days'"):
        _campaign(horizon_days=10, retention_days=5)
    with pytest.raises(APIError, match="LDP_MAX_RETENTION_DAYS=30"):
        campaign_from_request(
            {"id": "x", "domain": ["a", "b"], "epsilon": 1, "retention_days": 31},
            max_retention_days=30,
        )
    # Default capped by the ceiling (not below the horizon).
    capped = campaign_from_request(
        {"id": "x", "domain": ["a", "b"], "epsilon": 1}, max_retention_days=40
    )
    assert capped.retention_days == 40
    # retention_days is not part of the digest (devices never need it) but is in the record.
    short = _campaign(horizon_days=3, retention_days=5)
    assert short.digest == _campaign(horizon_days=3, retention_days=6).digest
    again = Campaign.from_record(short.to_record())
    assert again.retention_days == 5
    legacy = {k: v for k, v in _campaign().to_record().items() if k != "retention_days"}
    old = Campaign.from_record(legacy)
    assert old.retention_days is None and keep_days(old) is None
    assert keep_days(old, 45) == 45 and keep_days(_campaign(retention_days=100), 45) == 45
    # A day window ages out when it is more than keep_days old; a week window by its last day.
    assert purge_mark(_campaign(horizon_days=3, retention_days=5), DAY0) == "2025-12-27"
    week = _campaign(window="week", horizon_days=3, retention_days=5)
    assert purge_mark(week, DAY0) == "2025-12-21"


def test_sweep_deletes_old_reports_keeps_tallies(store: Storage) -> None:
    camp = _campaign(horizon_days=3, retention_days=5)
    other = _campaign("keep", horizon_days=3, retention_days=30)
    store.create_campaign(camp)
    store.create_campaign(other)
    days = [DAY0 + dt.timedelta(days=i) for i in range(10)]
    per_day = 23
    for day in days:
        assert _upload(store, camp, day, per_day, "r") == per_day
        assert _upload(store, other, day, 5, "k") == 5
    before = {w: t.to_dict() for w, t in store.tallies(camp).items()}
    today = days[-1]

    done = sweep(store, today=today, chunk=7)
    assert done is not None
    mine = {c.campaign: c for c in done}
    mark = (today - dt.timedelta(days=5)).isoformat()
    assert mine["occ"].purged_before == mark
    old = [d.isoformat() for d in days if d.isoformat() < mark]
    assert len(old) == 4
    assert mine["occ"].deleted == per_day * len(old)
    assert mine["occ"].chunks == -(-per_day * len(old) // 7)  # bounded chunks of 7
    assert mine["keep"].deleted == 0

    assert store.purged_before(camp) == mark and store.purged_before(other) is not None
    assert store.count_reports(camp) == per_day * (len(days) - len(old))
    assert store.count_reports(other) == 5 * len(days)
    assert {w for w, _ in store.iter_reports(camp)} == {d.isoformat() for d in days[4:]}
    # Tallies of every window, deleted or not, are exactly what they were.
    assert {w: t.to_dict() for w, t in store.tallies(camp).items()} == before

    # tally verify: the deleted windows are skipped, not failed; the rest checked and ok.
    checks = [c for c in verify_tallies(store) if c.campaign == "occ"]
    assert [c.window for c in checks if c.skipped] == old
    assert all(c.ok for c in checks)
    assert all(not c.skipped for c in verify_tallies(store, "keep"))

    # Estimates keep working over deleted windows and say which ones lost their reports.
    answer = campaign_answer(store, camp, start=days[0], end=today)
    assert answer.n == per_day * len(days)
    assert answer.reports_deleted == old
    assert campaign_answer(store, camp, start=days[5], end=today).reports_deleted == []

    # Forgotten ids cannot be replayed: their days are beyond the horizon.
    replay = ingest_batch(
        store,
        camp,
        {
            "digest": camp.digest,
            "reports": [
                {
                    "id": f"r-{days[0].isoformat()}-{0:08d}",
                    "day": days[0].isoformat(),
                    "payload": camp.mechanism.encode_many(
                        camp.mechanism.perturb_many(np.zeros(1, dtype=int), rng=1)
                    )[0],
                }
            ],
        },
        max_reports=10,
        today=today,
    )
    assert replay.accepted == 0 and replay.rejected == 1

    # Usage as measured by the sweep; a second sweep deletes nothing more (idempotent).
    usage = {u.campaign: u for u in store.usage()}
    assert usage["keep"].reports == 5 * len(days) and usage["keep"].bytes > 0
    again = sweep(store, today=today, chunk=7)
    assert again is not None
    assert all(c.deleted == 0 for c in again)
    assert {u.campaign: u.reports for u in store.usage()}["occ"] == per_day * 6


def test_claim_run_is_won_exactly_once(store: Storage) -> None:
    # Many callers at once (threads, each with its own connection): one wins the interval.
    wins: list[bool] = []
    barrier = threading.Barrier(8)

    def claim() -> None:
        barrier.wait()
        wins.append(store.claim_run("retention", 3600))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False] * 7 + [True]
    assert store.claim_run("retention", 3600) is False
    assert store.claim_run("other-job", 3600) is True
    assert store.claim_run("retention", 0) is True  # interval elapsed


@pytest.fixture(params=BACKENDS)
def old_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    """A database written by main at c1588c3 (tests/data), opened by this code."""
    if request.param == "sqlite":
        path = tmp_path / "old.sqlite"
        shutil.copy(DATA / "main-c1588c3.sqlite", path)
        opened = open_storage(f"sqlite:///{path}")
        try:
            yield opened
        finally:
            opened.close()
        return
    with fresh_database() as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute((DATA / "main-c1588c3.pg.sql").read_text())  # type: ignore[arg-type]
        opened = open_storage(url)
        try:
            yield opened
        finally:
            opened.close()


def test_retention_on_a_database_of_main_c1588c3(old_store: Storage) -> None:
    old_store.migrate()
    camps = [c for c, _ in old_store.list_campaigns()]
    assert camps and all(c.retention_days is None for c in camps)  # created before retention
    tallies = {c.id: {w: t.to_dict() for w, t in old_store.tallies(c).items()} for c in camps}
    far = dt.date(2030, 1, 1)
    # No ceiling: campaigns created before retention keep their reports.
    done = sweep(old_store, today=far)
    assert done is not None and all(c.deleted == 0 for c in done)
    counts = {c.id: old_store.count_reports(c) for c in camps}
    assert sum(counts.values()) > 0
    # With a server-wide ceiling they age out like any other; tallies stay.
    done = sweep(old_store, today=far, max_retention_days=30)
    assert done is not None
    assert {c.campaign: c.deleted for c in done} == counts
    assert all(old_store.count_reports(c) == 0 for c in camps)
    assert {c.id: {w: t.to_dict() for w, t in old_store.tallies(c).items()} for c in camps} == (
        tallies
    )
    checks = verify_tallies(old_store)
    assert checks and all(c.skipped and c.ok for c in checks)


def test_cli_retention_run_and_campaign_show(tmp_path: Path) -> None:
    db = tmp_path / "ldp.db"
    store = open_storage(str(db))
    store.migrate()
    store.close()
    runner = CliRunner()
    made = runner.invoke(
        cli,
        [
            "campaign",
            "create",
            "occ",
            "--db",
            str(db),
            "--domain",
            "a,b,c,d",
            "-m",
            "oue",
            "-e",
            "1",
            "--horizon-days",
            "3",
            "--retention-days",
            "5",
            "--format",
            "json",
        ],
    )
    assert made.exit_code == 0, made.output
    assert json.loads(made.output)["retention_days"] == 5
    bad = runner.invoke(
        cli,
        [
            "campaign",
            "create",
            "x",
            "--db",
            str(db),
            "--domain",
            "a,b",
            "--horizon-days",
            "9",
            "--retention-days",
            "5",
        ],
    )
    assert bad.exit_code != 0 and "horizon_days" in bad.output
    store = open_storage(str(db))
    camp = store.get_campaign("occ")
    assert camp is not None
    for i in range(8):
        _upload(store, camp, DAY0 + dt.timedelta(days=i), 10, "c")
    store.close()
    env = {"LDP_TODAY": (DAY0 + dt.timedelta(days=7)).isoformat()}
    ran = runner.invoke(cli, ["retention", "run", "--db", str(db), "--format", "json"], env=env)
    assert ran.exit_code == 0, ran.output
    (row,) = json.loads(ran.output)["campaigns"]
    assert row["deleted"] == 20 and row["reports"] == 60 and row["purged_before"] == "2026-01-03"
    shown = runner.invoke(cli, ["campaign", "show", "occ", "--db", str(db), "--format", "json"])
    item = json.loads(shown.output)
    assert item["stored_reports"] == 60 and item["stored_bytes"] > 0
    assert item["reports_deleted_before"] == "2026-01-03"
    text = runner.invoke(cli, ["campaign", "show", "occ", "--db", str(db)]).output
    assert "stored_reports" in text and "2026-01-03" in text
    estimated = runner.invoke(
        cli, ["estimate", "occ", "--db", str(db), "--from", "2026-01-01", "--to", "2026-01-08"]
    )
    assert estimated.exit_code == 0, estimated.output
    assert "reports of 2 window(s) 2026-01-01 .. 2026-01-02 deleted by retention" in (
        estimated.output
    )
    verified = runner.invoke(cli, ["tally", "verify", "--db", str(db)])
    assert verified.exit_code == 0, verified.output
    assert "2 skipped (reports deleted by retention)" in verified.output


def set_day(clock: Path, day: dt.date) -> None:
    """Rewrite the collector's test clock atomically. ``write_text`` truncates first: a worker
    booting meanwhile read an empty file, failed to start, and gunicorn stopped the whole
    server (the connection reset of CI stop 31 and of one Quick start run)."""
    fresh = clock.with_name(clock.name + ".new")
    fresh.write_text(day.isoformat())
    os.replace(fresh, clock)


@pytest.mark.parametrize("backend", BACKENDS)
def test_service_sweeps_on_its_own_as_days_pass(backend: str, tmp_path: Path) -> None:
    clock = tmp_path / "today"
    clock.write_text(DAY0.isoformat())
    env = {"LDP_TODAY_FILE": str(clock), "LDP_RETENTION_INTERVAL": "1"}
    with (
        collector_database(backend, tmp_path) as database,
        running_collector(tmp_path, workers=2, env=env, db_url=database) as srv,
    ):
        made = requests.post(
            srv.url + "/v1/campaigns",
            json={
                "id": "occ",
                "domain": ["a", "b", "c", "d"],
                "mechanism": "oue",
                "epsilon": 1.0,
                "horizon_days": 1,
                "retention_days": 2,
            },
            headers=srv.headers("admin"),
            timeout=10,
        )
        assert made.status_code == 201, made.text
        config = made.json()
        assert config["retention_days"] == 2
        camp = Campaign.from_record({**config, "mechanism": config["mechanism"]})
        mech = camp.mechanism
        for i in range(5):
            day = DAY0 + dt.timedelta(days=i)
            set_day(clock, day)  # the test advances the collector's day
            payloads = mech.encode_many(mech.perturb_many(np.arange(12) % 4, rng=i))
            reports = [
                {"id": f"e2e-{i}-{j:012d}", "day": day.isoformat(), "payload": p}
                for j, p in enumerate(payloads)
            ]
            sent = requests.post(
                srv.url + "/v1/campaigns/occ/reports",
                json={"digest": config["digest"], "reports": reports},
                headers=srv.headers("ingest"),
                timeout=10,
            )
            assert sent.status_code == 200 and sent.json()["accepted"] == 12, sent.text
        # Today is day 4; keep 2 days: windows before day 2 age out at the next sweep.
        mark = (DAY0 + dt.timedelta(days=2)).isoformat()
        deadline = time.monotonic() + 30
        item: dict[str, object] = {}
        while time.monotonic() < deadline:
            listed = requests.get(
                srv.url + "/v1/campaigns", headers=srv.headers("analyst"), timeout=10
            ).json()["campaigns"]
            item = listed[0]
            if item["reports_deleted_before"] == mark and item["stored_reports"] == 36:
                break
            time.sleep(0.2)
        assert item["reports_deleted_before"] == mark, item
        assert item["stored_reports"] == 36 and item["reports"] == 60
        estimate = requests.get(
            srv.url + "/v1/campaigns/occ/estimates",
            params={"from": DAY0.isoformat(), "to": (DAY0 + dt.timedelta(days=4)).isoformat()},
            headers=srv.headers("analyst"),
            timeout=10,
        )
        assert estimate.status_code == 200, estimate.text
        body = estimate.json()
        assert body["n"] == 60
        assert body["reports_deleted"] == [DAY0.isoformat(), (DAY0 + dt.timedelta(1)).isoformat()]
        metrics = requests.get(srv.url + "/metrics", headers=srv.headers("admin"), timeout=10)
        assert 'ldp_stored_reports{campaign="occ"} 36' in metrics.text
        assert 'ldp_stored_bytes{campaign="occ"}' in metrics.text
        verified = CliRunner().invoke(
            cli, ["tally", "verify", "--db", database, "--format", "json"]
        )
        assert verified.exit_code == 0, verified.output
        windows = json.loads(verified.output)["windows"]
        assert [w["window"] for w in windows if w["skipped"]] == body["reports_deleted"]
        assert sum(not w["skipped"] for w in windows) == 3
