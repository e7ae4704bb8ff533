"""PostgreSQL reports partitioned by day (issue 19): partitions ahead, aged days dropped whole,
replays still refused, and the in-place migration of a pre-partition database (schema 4).

Real PostgreSQL (a fresh database per test); the upgrade starts from the dump written by main
at c1588c3 (tests/data), brought to schema 4 by the released migrations 3 and 4 exactly as a
collector of that version did, then opened with this code.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest

import aggregator
from collector.answers import campaign_answer
from collector.campaigns import Campaign, campaign_from_request
from collector.errors import StorageBusy
from collector.ingest import ingest_batch
from collector.retention import sweep
from collector.storage import postgres_schema as pg_schema
from collector.storage.postgres import PostgresStorage
from collector.tallycheck import verify_tallies
from tests.support.postgres import fresh_database

DAY0 = dt.date(2026, 1, 1)
DATA = Path(__file__).parent / "data"
EXPECTED = json.loads((DATA / "main-c1588c3.expected.json").read_text())


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[PostgresStorage]:
    monkeypatch.setenv("LDP_TODAY", DAY0.isoformat())
    with fresh_database() as url:
        opened = PostgresStorage(url, partitions_ahead=3)
        opened.migrate()
        try:
            yield opened
        finally:
            opened.close()


def _campaign(cid: str, **extra: object) -> Campaign:
    body = {"id": cid, "domain": ["a", "b", "c", "d"], "mechanism": "oue", "epsilon": 1.0}
    return campaign_from_request({**body, **extra}, today=DAY0)


def _upload(store: PostgresStorage, camp: Campaign, day: dt.date, count: int, tag: str) -> int:
    mech = camp.mechanism
    payloads = mech.encode_many(mech.perturb_many(np.arange(count) % mech.k, rng=day.toordinal()))
    reports = [
        {"id": f"{tag}-{day.isoformat()}-{i:08d}", "day": day.isoformat(), "payload": p}
        for i, p in enumerate(payloads)
    ]
    result = ingest_batch(
        store, camp, {"digest": camp.digest, "reports": reports}, max_reports=10_000, today=day
    )
    assert result.rejected == 0, result.errors[:3]
    return result.accepted


def _days(store: PostgresStorage) -> list[str]:
    return [lo for _, lo, _ in store.partitions()]


def test_partitions_exist_ahead_and_are_made_on_demand(store: PostgresStorage) -> None:
    ahead = [(DAY0 + dt.timedelta(days=i)).isoformat() for i in range(-1, 4)]
    assert _days(store) == ahead  # yesterday .. today + partitions_ahead, made by migrate
    assert store.migrate() == pg_schema.SCHEMA_VERSION == 8 and _days(store) == ahead
    # The sweep makes the next days' partitions.
    later = DAY0 + dt.timedelta(days=10)
    assert sweep(store, today=later) == []
    assert _days(store)[-1] == (later + dt.timedelta(days=3)).isoformat()
    # A day without a partition (a long horizon reaching back) gets one at ingest.
    camp = _campaign("long", horizon_days=400)
    store.create_campaign(camp)
    old = DAY0 - dt.timedelta(days=100)
    assert _upload(store, camp, old, 10, "x") == 10
    assert old.isoformat() in _days(store)
    assert store.count_reports(camp) == 10


def test_aged_partitions_are_dropped_whole(store: PostgresStorage) -> None:
    short = _campaign("short", horizon_days=3, retention_days=5)
    longer = _campaign("longer", horizon_days=3, retention_days=7)
    store.create_campaign(short)
    store.create_campaign(longer)
    days = [DAY0 + dt.timedelta(days=i) for i in range(10)]
    for day in days:
        assert _upload(store, short, day, 30, "s") == 30
        assert _upload(store, longer, day, 11, "l") == 11
    before = {c.id: {w: t.to_dict() for w, t in store.tallies(c).items()} for c in (short, longer)}
    today = days[-1]

    done = sweep(store, today=today, chunk=8)
    assert done is not None
    got = {c.campaign: c for c in done}
    # longer keeps 7 days: days before today - 7 (days 0, 1) are dropped whole, as partitions;
    # short keeps 5: its days 2, 3 go by chunked delete (longer still keeps those days).
    assert got["longer"].purged_before == days[2].isoformat()
    assert got["short"].purged_before == days[4].isoformat()
    assert got["longer"].deleted == got["longer"].dropped == 2 * 11 and got["longer"].chunks == 0
    assert got["short"].dropped == 2 * 30 and got["short"].deleted == 4 * 30
    assert got["short"].chunks == -(-2 * 30 // 8)
    assert days[0].isoformat() not in _days(store) and days[1].isoformat() not in _days(store)
    assert days[2].isoformat() in _days(store)
    assert store.count_reports(short) == 30 * 6 and store.count_reports(longer) == 11 * 8

    # Tallies kept exactly; estimates and tally verify still work over the dropped days.
    for camp in (short, longer):
        assert {w: t.to_dict() for w, t in store.tallies(camp).items()} == before[camp.id]
        checks = verify_tallies(store, camp.id)
        assert all(c.ok for c in checks)
    checks = verify_tallies(store, "short")
    assert [c.window for c in checks if c.skipped] == [d.isoformat() for d in days[:4]]
    answer = campaign_answer(store, short, start=days[0], end=today)
    assert answer.n == 30 * len(days)
    assert answer.reports_deleted == [d.isoformat() for d in days[:4]]

    # Again: nothing more to drop or delete; a campaign keeping reports forever blocks drops.
    again = sweep(store, today=today)
    assert again is not None and all(c.deleted == 0 for c in again)
    forever = store.drop_aged_partitions([(short, days[9].isoformat()), (longer, None)])
    assert forever.partitions == ()


def test_replays_are_refused_across_partitions(store: PostgresStorage) -> None:
    camp = _campaign("occ", horizon_days=3, retention_days=3)
    store.create_campaign(camp)
    for i in range(6):
        assert _upload(store, camp, DAY0 + dt.timedelta(days=i), 20, "r") == 20
    today = DAY0 + dt.timedelta(days=5)
    # A replay within the horizon (same ids, same days) is a duplicate: stored and counted once.
    for i in range(2, 6):
        assert _upload(store, camp, DAY0 + dt.timedelta(days=i), 20, "r") == 0
    n = sum(t.n for t in store.tallies(camp).values())
    assert n == 120 and store.count_reports(camp) == 120
    done = sweep(store, today=today)
    assert done is not None and done[0].dropped == 2 * 20
    # A replay of a dropped day's ids is beyond the horizon: refused by ingest.
    mech = camp.mechanism
    old = [
        {"id": f"r-{DAY0.isoformat()}-{i:08d}", "day": DAY0.isoformat(), "payload": p}
        for i, p in enumerate(mech.encode_many(mech.perturb_many(np.zeros(3, int), rng=1)))
    ]
    replay = ingest_batch(
        store, camp, {"digest": camp.digest, "reports": old}, max_reports=10, today=today
    )
    assert replay.accepted == 0 and replay.rejected == 3
    gone = DAY0 + dt.timedelta(days=1)
    # Another process whose cache still lists the dropped day, for a campaign created since
    # (no purge mark yet; its horizon reaches that day): its ingest recreates the partition
    # and stores exactly once (the first attempt rolled back whole).
    late = _campaign("late", horizon_days=30, retention_days=30)
    store.create_campaign(late)
    other = PostgresStorage(store.url)
    try:
        other.ensure_partitions([DAY0 + dt.timedelta(days=9)])  # fills its cache
        assert gone.isoformat() not in _days(store)
        # As if it had cached the day before another process dropped it.
        other._ranges.append((gone, gone + dt.timedelta(days=1)))  # noqa: SLF001
        assert _upload(other, other.get_campaign("late"), gone, 5, "z") == 5  # type: ignore[arg-type]
        assert gone.isoformat() in _days(store)
        assert _upload(other, other.get_campaign("late"), gone, 5, "z") == 0  # type: ignore[arg-type]
    finally:
        other.close()
    # An upload of "occ" checked before the sweep (its day still in the horizon) that reaches
    # storage after it: refused whole, its window being below the campaign's purge mark.
    with pytest.raises(StorageBusy):
        _upload(store, camp, gone, 5, "z")
    assert sum(t.n for t in store.tallies(camp).values()) == 120
    assert sum(t.n for t in store.tallies(late).values()) == 5


def _at_schema_4(url: str) -> None:
    """The c1588c3 dump (schema 2) brought to schema 4 by the released migrations, plus a
    report written at schema 4 and a retention row, as a collector of that version left it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute((DATA / "main-c1588c3.pg.sql").read_text())  # type: ignore[arg-type]
    with psycopg.connect(url, autocommit=True) as conn:  # the dump empties search_path
        with conn.transaction():
            for number in (3, 4):
                for statement in pg_schema.MIGRATIONS[number - 1]:
                    conn.execute(statement)  # type: ignore[arg-type]
                conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (number,))
            conn.execute("INSERT INTO leases (name, last_run) VALUES ('retention', now())")


def _report_digest(url: str) -> tuple[int, str]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*), md5(string_agg(campaign || '/' || window_start || '/' || report_id "
            "|| '/' || payload, ',' ORDER BY campaign, window_start, report_id)) FROM reports"
        ).fetchone()
    assert row is not None
    return int(row[0]), str(row[1])


def test_schema_4_database_upgrades_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    today = dt.date(2026, 11, 21)
    monkeypatch.setenv("LDP_TODAY", today.isoformat())
    with fresh_database() as url:
        _at_schema_4(url)
        before = _report_digest(url)
        assert before[0] == 3 * (300 + 350)
        store = PostgresStorage(url, partitions_ahead=2)
        try:
            assert store.schema_version() == 4
            assert store.migrate() == 8 and store.migrate() == 8
            assert _report_digest(url) == before  # every report kept, byte for byte
            parts = store.partitions()
            assert parts[0] == ("reports_legacy", "0001-01-01", "2026-11-22")
            assert [p[1] for p in parts[1:]] == ["2026-11-22", "2026-11-23"]
            for cid, want in EXPECTED["campaigns"].items():
                camp = store.get_campaign(cid)
                assert camp is not None
                tallies = store.tallies(camp)
                assert {w: t.to_dict() for w, t in tallies.items()} == want["tallies"]
                total = sum(tallies.values(), start=camp.mechanism.empty_tally())
                est = aggregator.estimate(camp.mechanism, total)
                np.testing.assert_allclose(est.counts, want["counts"], rtol=1e-12)
            assert store.archived() == EXPECTED["archived"]
            assert all(c.ok for c in verify_tallies(store))
            occ = store.get_campaign("occ")
            assert occ is not None
            # A replay of an old report (same id and day, now in reports_legacy) is refused.
            with psycopg.connect(url) as conn:
                rid, payload = conn.execute(
                    "SELECT report_id, payload FROM reports r JOIN campaigns c ON c.pk = "
                    "r.campaign WHERE c.id = 'occ' AND window_start = '2026-11-21' LIMIT 1"
                ).fetchone()  # type: ignore[misc]
            body = {
                "digest": occ.digest,
                "reports": [{"id": rid, "day": "2026-11-21", "payload": json.loads(payload)}],
            }
            replay = ingest_batch(store, occ, body, max_reports=10, today=today)
            assert replay.accepted == 0 and replay.duplicate == 1
            # Ingest keeps working: into the legacy days and into the new partitions.
            n = sum(t.n for t in store.tallies(occ).values())
            assert _upload(store, occ, today, 40, "new") == 40  # type: ignore[arg-type]
            assert _upload(store, occ, today + dt.timedelta(days=1), 7, "next") == 7  # type: ignore[arg-type]
            assert sum(t.n for t in store.tallies(occ).values()) == n + 47
            assert all(c.ok for c in verify_tallies(store, "occ"))
            # Once every campaign's reports of those days aged out, the old table goes whole.
            later = today + dt.timedelta(days=60)
            done = sweep(store, today=later, max_retention_days=31)
            assert done is not None
            assert "reports_legacy" not in [p[0] for p in store.partitions()]
            assert {c.campaign: c.dropped for c in done}["occ"] == 350 + 40 + 300 + 7
            for cid, want in EXPECTED["campaigns"].items():
                camp = store.get_campaign(cid)
                assert camp is not None and store.count_reports(camp) == 0
                if cid != "occ":
                    got = {w: t.to_dict() for w, t in store.tallies(camp).items()}
                    assert got == want["tallies"]
        finally:
            store.close()


def test_a_day_at_a_partitions_upper_bound_is_not_in_it(store: PostgresStorage) -> None:
    """Partitions are ``[lo, hi)``: the day after the last one made needs a partition of its
    own (a staged report of that day would otherwise find none when it is mixed in)."""
    last = DAY0 + dt.timedelta(days=3)  # today + partitions_ahead
    assert _days(store)[-1] == last.isoformat()
    assert store._covered(last) and store._covered(DAY0 - dt.timedelta(days=1))
    assert not store._covered(last + dt.timedelta(days=1))
    assert not store._covered(DAY0 - dt.timedelta(days=2))


def test_a_dropped_partition_counts_the_reports_an_earlier_purge_left(
    store: PostgresStorage,
) -> None:
    """Drop after a chunked purge: the windows before the earlier mark held no reports any more
    and count 0; every window at or after it counts its tally's n."""
    camp = _campaign("c", horizon_days=3, retention_days=30)
    store.create_campaign(camp)
    for i in range(3):
        assert _upload(store, camp, DAY0 + dt.timedelta(days=i), 10, "c") == 10
    first = store.purge_reports(camp, (DAY0 + dt.timedelta(days=1)).isoformat())
    assert first.deleted == 10  # day 0
    dropped = store.drop_aged_partitions([(camp, (DAY0 + dt.timedelta(days=3)).isoformat())])
    assert dropped.partitions == (
        "reports_p20251231",
        "reports_p20260101",
        "reports_p20260102",
        "reports_p20260103",
    )
    assert dropped.deleted == {"c": 20}  # days 1 and 2, not day 0 again
    assert store.count_reports(camp) == 0
