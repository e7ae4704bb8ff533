"""The storage contract (collector/storage/base.py), run against SQLite and PostgreSQL alike.

Every test takes ``backend``: a factory of fresh ``Storage`` handles on one new database (a
temp SQLite file, or a ``ldp_test_*`` PostgreSQL database dropped afterwards). Two handles on
the same database behave like two collector workers.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
import requests

from client_sdk.mechanisms import Tally, create
from collector.campaigns import Campaign
from collector.errors import CampaignExists, ConfigError, StorageBusy, StorageUnavailable
from collector.ingest import payload_json
from collector.storage import SQLiteStorage, Storage, WindowBatch, open_storage
from collector.storage.postgres import PostgresStorage
from collector.tallycheck import recompute, verify_tallies
from tests.support.postgres import fresh_database
from tests.support.reports import batch as http_batch
from tests.support.reports import campaign_body
from tests.support.reports import reports as http_reports
from tests.support.server import running_collector

LABELS = ["a", "b", "c", "d", "e"]


class Backend:
    """Fresh handles on one database; closes them all at the end."""

    def __init__(self, name: str, url: str) -> None:
        self.name, self.url = name, url
        self.handles: list[Storage] = []

    def open(self, **kw: object) -> Storage:
        s = open_storage(self.url, **kw)  # type: ignore[arg-type]
        self.handles.append(s)
        return s

    def store(self) -> Storage:
        s = self.open()
        s.migrate()
        return s

    def close(self) -> None:
        for s in self.handles:
            s.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        b = Backend("sqlite", f"sqlite:///{tmp_path}/store.db")
        try:
            yield b
        finally:
            b.close()
        return
    with fresh_database() as url:
        b = Backend("postgresql", url)
        try:
            yield b
        finally:
            b.close()


def campaign(cid: str = "c", name: str = "oue") -> Campaign:
    mech = create(name, epsilon=1.0, domain=LABELS)
    return Campaign(
        id=cid,
        description="",
        mechanism_config=mech.config(),
        window="day",
        horizon_days=30,
        min_reports=1,
        created="2026-11-22",
    )


def window_batch(camp: Campaign, ids: list[str], seed: int = 0, fail: bool = False) -> WindowBatch:
    """Real perturbed reports with these ids; ``fail``: the tally raises (mid-transaction)."""
    mech = camp.mechanism
    rng = np.random.default_rng(seed)
    payloads = mech.encode_many(mech.perturb_many(rng.integers(0, mech.k, len(ids)), rng=rng))
    decoded = mech.decode_many(payloads)
    rows = [(rid, payload_json(p)) for rid, p in zip(ids, payloads, strict=True)]

    def tally(positions: list[int] | None) -> Tally:
        if fail:
            raise RuntimeError("the tally failed on purpose")
        sel = decoded if positions is None else decoded[np.asarray(positions, dtype=np.int64)]
        return Tally(len(sel), mech.support_counts(sel))

    return WindowBatch(rows, tally)


def ids(prefix: str, n: int, start: int = 0) -> list[str]:
    return [f"{prefix}-{i:016d}" for i in range(start, start + n)]


def stored(store: Storage, camp: Campaign) -> int:
    return store.count_reports(camp)  # type: ignore[attr-defined]


def assert_consistent(store: Storage, camp: Campaign) -> None:
    checks = verify_tallies(store, camp.id)
    assert checks and all(c.ok for c in checks), [c.to_dict() for c in checks if not c.ok]


# -- schema ------------------------------------------------------------------------------------


def test_migrate_is_idempotent_versioned_and_safe_concurrently(backend: Backend) -> None:
    stores = [backend.open() for _ in range(4)]
    versions: list[int] = []
    threads = [threading.Thread(target=lambda s=s: versions.append(s.migrate())) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(versions)) == 1 and versions[0] >= 1
    assert stores[0].migrate() == versions[0]
    assert stores[0].schema_version() == versions[0]  # type: ignore[attr-defined]


def test_a_newer_schema_is_refused(backend: Backend) -> None:
    store = backend.store()
    store.create_campaign(campaign())
    if backend.name == "sqlite":
        with sqlite3.connect(backend.url.removeprefix("sqlite:///")) as conn:
            conn.execute("INSERT INTO schema_version (version) VALUES (999)")
    else:
        with psycopg.connect(backend.url, autocommit=True) as conn:
            conn.execute("INSERT INTO schema_version (version) VALUES (999)")
    with pytest.raises(StorageUnavailable, match="newer than this collector"):
        backend.open().migrate()


def test_reports_hold_only_campaign_window_id_and_payload(backend: Backend) -> None:
    backend.store()
    if backend.name == "sqlite":
        with sqlite3.connect(backend.url.removeprefix("sqlite:///")) as conn:
            cols = {r[1] for r in conn.execute("PRAGMA table_info(reports)")}
    else:
        with psycopg.connect(backend.url) as conn:
            cols = {
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_name = 'reports'"
                )
            }
    assert cols == {"campaign", "report_id", "window_start", "payload"}


# -- campaigns ---------------------------------------------------------------------------------


def test_campaigns_round_trip_and_are_listed_in_id_order(backend: Backend) -> None:
    store = backend.store()
    for cid in ("b-camp", "a-camp", "B-upper"):
        store.create_campaign(campaign(cid))
    with pytest.raises(CampaignExists, match="already exists"):
        store.create_campaign(campaign("a-camp"))
    fresh = backend.open()
    assert fresh.get_campaign("a-camp") == campaign("a-camp")
    assert fresh.get_campaign("nope") is None
    assert [c.id for c, n in fresh.list_campaigns()] == ["B-upper", "a-camp", "b-camp"]
    assert all(n == 0 for _, n in fresh.list_campaigns())


# -- ingest ------------------------------------------------------------------------------------


def test_ingest_is_idempotent_and_tallies_only_new_reports(backend: Backend) -> None:
    store, other = backend.store(), backend.open()
    c = campaign()
    store.create_campaign(c)
    first = store.ingest(c, {"2026-11-01": window_batch(c, ids("r", 100))})
    assert (first.accepted, first.duplicate) == (100, 0)
    # A retry through another worker, holding 50 known and 50 new ids.
    again = other.ingest(c, {"2026-11-01": window_batch(c, ids("r", 100, start=50))}, rejected=3)
    assert (again.accepted, again.duplicate) == (50, 50)
    assert stored(store, c) == 150
    assert store.tallies(c)["2026-11-01"].n == 150
    assert [n for cc, n in store.list_campaigns() if cc.id == "c"] == [150]
    (counters,) = store.report_counters()
    assert (counters.accepted, counters.duplicate, counters.rejected) == (150, 50, 3)
    assert_consistent(store, c)


def test_one_ingest_spans_windows_and_tallies_by_range(backend: Backend) -> None:
    store = backend.store()
    c = campaign()
    store.create_campaign(c)
    days = ["2026-11-01", "2026-11-02", "2026-11-03"]
    store.ingest(c, {d: window_batch(c, ids(d, 10 + i, 0), seed=i) for i, d in enumerate(days)})
    assert {w: t.n for w, t in store.tallies(c).items()} == dict(
        zip(days, [10, 11, 12], strict=True)
    )
    assert list(store.tallies(c, "2026-11-02")) == days[1:]
    assert list(store.tallies(c, None, "2026-11-02")) == days[:2]
    assert list(store.tallies(c, "2026-11-02", "2026-11-02")) == ["2026-11-02"]
    assert sum(1 for _ in store.iter_reports(c, "2026-11-03")) == 12
    assert sorted({w for w, _ in store.iter_reports(c)}) == days
    assert recompute(store, c) == store.tallies(c)


def test_a_failed_ingest_stores_nothing(backend: Backend) -> None:
    store = backend.store()
    c = campaign()
    store.create_campaign(c)
    windows = {
        "2026-11-01": window_batch(c, ids("x", 30)),
        "2026-11-02": window_batch(c, ids("y", 30), fail=True),
    }
    with pytest.raises(RuntimeError, match="on purpose"):
        store.ingest(c, windows)
    assert stored(store, c) == 0 and store.tallies(c) == {}
    assert store.report_counters()[0].accepted == 0


def test_busy_database_raises_storage_busy_and_stores_nothing(backend: Backend) -> None:
    store = backend.store()
    c = campaign()
    store.create_campaign(c)
    store.ingest(c, {"2026-11-01": window_batch(c, ids("a", 5))})
    impatient = backend.open(busy_timeout_ms=200)
    if backend.name == "sqlite":
        blocker = sqlite3.connect(backend.url.removeprefix("sqlite:///"), isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
    else:
        blocker = psycopg.connect(backend.url)
        blocker.execute("LOCK TABLE tally_shards IN ACCESS EXCLUSIVE MODE")
    try:
        with pytest.raises(StorageBusy):
            impatient.ingest(c, {"2026-11-01": window_batch(c, ids("b", 5))})
    finally:
        blocker.rollback() if backend.name == "postgresql" else blocker.execute("ROLLBACK")
        blocker.close()
    assert stored(store, c) == 5
    assert impatient.ingest(c, {"2026-11-01": window_batch(c, ids("b", 5))}).accepted == 5
    assert_consistent(store, c)


def test_unreachable_database_raises_storage_unavailable(backend: Backend, tmp_path: Path) -> None:
    if backend.name == "sqlite":
        bad = open_storage(str(tmp_path))  # a directory: cannot be opened as a database
    else:
        with socket_closed_port() as port:
            bad = open_storage(f"postgresql://postgres@127.0.0.1:{port}/x", busy_timeout_ms=300)
            with pytest.raises(StorageUnavailable, match="cannot connect"):
                bad.migrate()
            return
    with pytest.raises(StorageUnavailable):
        bad.migrate()
    backend.store().ping()


# -- concurrency -------------------------------------------------------------------------------


def test_eight_workers_with_shared_ids_store_and_count_each_id_once(backend: Backend) -> None:
    """8 handles (one per worker) upload overlapping batches into one campaign at once."""
    _eight_workers_with_shared_ids(backend, mixing=False)


def test_eight_workers_and_a_mixer_store_and_count_each_id_once(backend: Backend) -> None:
    """The same with staging on and a mixer mixing without pause meanwhile: uploads race the
    mixer's slot switches, seals, moves and truncations (PostgreSQL), and its write lock
    (SQLite); twins of one id are staged, or being moved, in either slot or in ``reports``."""
    _eight_workers_with_shared_ids(backend, mixing=True)


def _eight_workers_with_shared_ids(backend: Backend, *, mixing: bool) -> None:
    backend.store().create_campaign(campaign())
    rng = np.random.default_rng(7)
    pool = ids("p", 3000)
    plans = []
    for _ in range(8):
        picks = [sorted(rng.choice(len(pool), 250, replace=False).tolist()) for _b in range(6)]
        plans.append([[pool[i] for i in p] for p in picks])
    sent = {rid for plan in plans for batch in plan for rid in batch}
    errors: list[BaseException] = []
    accepted: list[int] = []
    start = threading.Barrier(9 if mixing else 8)  # the mixer too
    moved: list[int] = []
    done = threading.Event()

    def mixer() -> None:
        s = backend.open(staging=True)
        try:
            start.wait()
            while not done.wait(0.01):  # a breath between mixes for SQLite's write lock
                moved.append(s.mix().moved)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def worker(w: int) -> None:
        try:
            s = backend.open(staging=mixing)
            c = s.get_campaign("c")
            assert c is not None
            start.wait()
            for b, batch in enumerate(plans[w]):
                # The same id always carries the same payload (as a retry would).
                days = {"2026-11-01": [r for r in batch if int(r[-1]) % 2 == 0]}
                days["2026-11-02"] = [r for r in batch if int(r[-1]) % 2 == 1]
                windows = {d: window_batch(c, rs, seed=b) for d, rs in days.items() if rs}
                accepted.append(s.ingest(c, windows).accepted)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    if mixing:
        helper = threading.Thread(target=mixer)
        helper.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    if mixing:
        helper.join()
    assert not errors, errors
    store = backend.open()
    c = store.get_campaign("c")
    assert c is not None
    if mixing:
        assert sum(moved) > 0  # mixes ran while uploads did
        moved.append(store.mix().moved)
        assert store.staged_count() == 0 and sum(moved) == len(sent)
    assert stored(store, c) == len(sent) == sum(accepted)
    tallies = store.tallies(c)
    assert sum(t.n for t in tallies.values()) == len(sent)
    assert recompute(store, c) == tallies
    (counters,) = store.report_counters()
    attempts = sum(len(batch) for plan in plans for batch in plan)
    # Every upload's counters, also those of uploads that staged nothing (all twins) into a
    # slot being mixed: folded by that mix or counted in the slot until the next one.
    assert (counters.accepted, counters.duplicate) == (len(sent), attempts - len(sent))


# -- URLs --------------------------------------------------------------------------------------


def test_open_storage_picks_the_backend_from_the_url(tmp_path: Path) -> None:
    assert isinstance(open_storage(f"sqlite:///{tmp_path}/a.db"), SQLiteStorage)
    assert isinstance(open_storage(str(tmp_path / "b.db")), SQLiteStorage)
    for url in ("postgresql://u@h/db", "postgres://u:secret@h:5433/db"):
        s = open_storage(url)
        assert isinstance(s, PostgresStorage) and "secret" not in repr(s)
    with pytest.raises(ConfigError, match="postgresql://user@host/dbname"):
        open_storage("mysql://h/db")


class socket_closed_port:  # noqa: N801 - used as a context manager like a function
    """A loopback port nothing listens on: bound but not listening until the block ends, so a
    connection is refused and no other process (another xdist worker's server on port 0) can
    take the port meanwhile, as it could once a released port was handed out again."""

    def __enter__(self) -> int:
        import socket

        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        return int(self._socket.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._socket.close()


# -- the same over HTTP: 8 uploaders x 2 gunicorn workers x one campaign ------------------------


def test_eight_uploaders_through_two_workers_count_each_id_once(
    tmp_path: Path, db_url: str
) -> None:
    """Every report id is sent by 2 of the 8 uploaders (often at the same moment)."""
    with running_collector(tmp_path, workers=2, db_url=db_url) as srv:
        r = requests.post(
            srv.url + "/v1/campaigns",
            json=campaign_body("race8"),
            headers=srv.headers("admin"),
            timeout=10,
        )
        assert r.status_code == 201, r.text
        camp = r.json()
        pool = http_reports(camp, 2400, seed=11)
        # Uploader u sends eighths u and u+1 (mod 8): each id goes to two uploaders.
        eighth = len(pool) // 8
        parts = [pool[i * eighth : (i + 1) * eighth] for i in range(8)]
        plans = [parts[u] + parts[(u + 1) % 8] for u in range(8)]
        answers: list[dict] = []
        failures: list[str] = []
        go = threading.Barrier(8)

        shed: list[str] = []

        def send(items: list[dict]) -> None:
            go.wait()
            for start in range(0, len(items), 150):
                body = http_batch(camp, items[start : start + 150])
                for _ in range(20):
                    up = requests.post(
                        f"{srv.url}/v1/campaigns/race8/reports",
                        json=body,
                        headers=srv.headers("ingest"),
                        timeout=60,
                    )
                    # 503 stores nothing and says when to come back: a device resends then.
                    if up.status_code != 503 or "Retry-After" not in up.headers:
                        break
                    shed.append(up.json()["error"]["code"])
                    time.sleep(min(float(up.headers["Retry-After"]), 2.0))
                if up.status_code != 200:
                    failures.append(up.text)
                else:
                    answers.append(up.json())

        threads = [threading.Thread(target=send, args=(p,)) for p in plans]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures[:3]
        assert sum(a["accepted"] for a in answers) == len(pool)
        assert sum(a["duplicate"] for a in answers) == len(pool)
    store = open_storage(db_url)
    try:
        c = store.get_campaign("race8")
        assert c is not None
        assert store.count_reports(c) == len({x["id"] for x in pool})
        tallies = store.tallies(c)
        assert recompute(store, c) == tallies
        mech = c.mechanism
        assert sum(tallies.values(), Tally.empty(mech.k)) == mech.tally(
            [x["payload"] for x in pool]
        )
    finally:
        store.close()


# -- tally verify while another process ingests -----------------------------------------------


def _ingest_until(url: str, stop: Any, started: Any) -> None:
    """A collector worker in another process: ingests small batches until told to stop."""
    store = open_storage(url)
    c = store.get_campaign("c")
    n = 0
    while not stop.is_set():
        store.ingest(c, {"2026-11-01": window_batch(c, ids(f"w{n}", 40), seed=n)})  # type: ignore[arg-type]
        n += 1
        started.set()
        time.sleep(0.005)  # a steady trickle: verify's cost must not grow without bound
    store.close()


def test_tally_verify_is_clean_while_another_process_ingests(backend: Backend) -> None:
    store = backend.store()
    store.create_campaign(campaign())
    if not hasattr(store, "snapshot"):
        pytest.xfail(
            f"{backend.name}: the backend has no snapshot(), so verify reads the tallies and "
            "the reports in two transactions and a concurrent ingest shows as a difference"
        )
    ctx = multiprocessing.get_context("spawn")
    stop, started = ctx.Event(), ctx.Event()
    writer = ctx.Process(target=_ingest_until, args=(backend.url, stop, started))
    writer.start()
    try:
        assert started.wait(30)
        for _ in range(10):
            checks = verify_tallies(store, "c")
            assert all(c.ok for c in checks), [c.to_dict() for c in checks if not c.ok]
    finally:
        stop.set()
        writer.join(30)
    assert writer.exitcode == 0


# -- generic tally state -------------------------------------------------------------------------


def test_numeric_tallies_are_stored_exactly_beyond_int64(backend: Backend) -> None:
    """A numeric campaign's sums (of squares) pass 2**63 at scale; both backends keep them."""
    from client_sdk.mechanisms.numeric import NumericTally

    store = backend.store()
    mech = create("piecewise", epsilon=1.0, bounds=(0, 100))
    camp = Campaign("num", "", mech.config(), "day", 30, 1, "2026-11-22")
    store.create_campaign(camp)
    big = NumericTally(3, (2**70 + 1, 3 * 2**80 + 7))

    def batch(prefix: str) -> WindowBatch:
        rows = [(rid, "1") for rid in ids(prefix, 3)]
        return WindowBatch(rows, lambda positions: big)

    store.ingest(camp, {"2026-11-22": batch("a")})
    store.ingest(camp, {"2026-11-22": batch("b")})
    store.ingest(camp, {"2026-11-22": batch("a")})  # all duplicates: not counted again
    got = store.tallies(camp)["2026-11-22"]
    assert isinstance(got, NumericTally)
    assert got == big + big
    assert got.vector() == [2 * (2**70 + 1), 2 * (3 * 2**80 + 7)]


def test_a_distribution_campaigns_tally_round_trips(backend: Backend) -> None:
    """Square Wave's tally (counts over its output grid, a generic numeric state, not a
    frequency support) is stored and summed exactly by both backends."""
    store = backend.store()
    mech = create("square_wave", epsilon=1.0, bounds=(0, 100))
    camp = Campaign("sw", "", mech.config(), "day", 30, 1, "2026-11-22")
    store.create_campaign(camp)
    rng = np.random.default_rng(11)
    tally = mech.tally(mech.perturb_many(rng.uniform(0, 100, 40), rng=rng))

    def batch(prefix: str) -> WindowBatch:
        return WindowBatch([(rid, "1") for rid in ids(prefix, 40)], lambda positions: tally)

    store.ingest(camp, {"2026-11-22": batch("a")})
    store.ingest(camp, {"2026-11-22": batch("b")})
    got = store.tallies(camp)["2026-11-22"]
    assert got == tally + tally and got.n == 80
