"""Red team, sweep 8: one upload must not hold SQLite's write lock for the work of its tally.

Every upload of every campaign takes the one write lock of the SQLite file. Before:

* the tally of an upload was computed under it. An ``olh`` tally costs O(reports x k): on an
  ``olh`` campaign of 65,536 values (the mechanism the docs name for large domains), uploads of
  5,000 reports held the lock 5 to 10 s each, and uploads to another campaign waited past
  their 5 s busy timeout: 6 of 10 answered 503 while two such uploaders ran;
* each window's stored tally was decoded, added and encoded whole under it: a default ``pem``
  campaign keeps 262,400 counters a window, so one upload of 31 reports spread over the 31
  days a campaign accepts held the lock 4 to 5 s, and 4 of 6 uploads to another campaign
  answered 503 while three such uploaders ran.

Now the tally is computed before the lock (with a read of the ids already stored, so a retry is
tallied there too) and only its nonzero entries are added to the stored text. These tests watch
the lock from a second connection to the same file while the real mechanism tallies, and check
that every stored tally still equals its recomputation (``ldp tally verify``).
"""

from __future__ import annotations

import datetime as dt
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from client_sdk.mechanisms import from_config
from collector.campaigns import Campaign, campaign_from_request
from collector.ingest import ingest_batch
from collector.storage import open_storage
from collector.storage.sqlite import SQLiteStorage
from tests.support.server import running_collector


def _lock_held(path: Path) -> bool:
    """True if another connection holds the file's write lock right now."""
    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc), exc
        return True
    finally:
        if probe.in_transaction:
            probe.execute("ROLLBACK")
        probe.close()
    return False


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStorage]:
    storage = open_storage(str(tmp_path / "lock.db"))
    assert isinstance(storage, SQLiteStorage)
    storage.migrate()
    yield storage
    storage.close()


def _campaign(storage: SQLiteStorage, body: dict[str, Any]) -> Campaign:
    storage.create_campaign(campaign_from_request(body))
    campaign = storage.get_campaign(body["id"])
    assert campaign is not None
    return campaign


def _watch_tallies(campaign: Campaign, path: Path) -> list[bool]:
    """Record, each time the campaign's (real) mechanism tallies, whether the lock is held."""
    mech = campaign.mechanism
    seen: list[bool] = []
    real = mech.tally

    def tally(reports: Any) -> Any:
        seen.append(_lock_held(path))
        return real(reports)

    mech.tally = tally  # type: ignore[method-assign]
    return seen


def _reports(payloads: list[Any], days: list[str]) -> list[dict[str, Any]]:
    return [
        {"id": secrets.token_hex(16), "day": day, "payload": p}
        for p, day in zip(payloads, days, strict=True)
    ]


def test_an_upload_is_tallied_while_no_write_lock_is_held(store: SQLiteStorage) -> None:
    """The O(reports x k) olh tally runs before the write lock, for new reports and for a
    retry that holds known ids alike; the stored tallies equal their recomputation."""
    path = Path(store.path)
    campaign = _campaign(
        store,
        {"id": "cities", "domain": [f"c{i}" for i in range(64)], "mechanism": "olh", "epsilon": 1},
    )
    mech: Any = campaign.mechanism
    payloads = mech.encode_many(
        mech.perturb_many(np.arange(200) % 64, rng=np.random.default_rng(8))
    )
    today = dt.datetime.now(dt.UTC).date()
    days = [(today - dt.timedelta(days=i % 3)).isoformat() for i in range(200)]
    first = _reports(payloads[:120], days[:120])
    seen = _watch_tallies(campaign, path)

    answer = ingest_batch(
        store, campaign, {"digest": campaign.digest, "reports": first}, max_reports=5000
    )
    assert answer.accepted == 120
    # A retry of half of them with 80 new reports: only the new ones are tallied and stored.
    retry = first[:60] + _reports(payloads[120:], days[120:])
    answer = ingest_batch(
        store, campaign, {"digest": campaign.digest, "reports": retry}, max_reports=5000
    )
    assert (answer.accepted, answer.duplicate) == (80, 60)

    assert seen and not any(seen), f"tallied under the write lock: {seen}"
    stored = store.tallies(campaign)
    fresh = from_config(campaign.mechanism_config)
    for window, tally in stored.items():
        rows = [
            r
            for r in first + retry[60:]
            if campaign.window_of(dt.date.fromisoformat(r["day"])).isoformat() == window
        ]
        assert tally == fresh.tally([r["payload"] for r in rows])


def test_adding_to_a_stored_window_does_not_rebuild_its_whole_vector(store: SQLiteStorage) -> None:
    """A window's stored sketch tally gets only the upload's nonzero entries added: the
    mechanism never rebuilds the stored 262,400-counter vector under the lock (that took about
    0.1 s per window), and the stored tally still equals the tally of its reports."""
    campaign = _campaign(store, {"id": "words", "max_length": 16, "epsilon": 4})
    mech: Any = campaign.mechanism
    today = dt.datetime.now(dt.UTC).date()
    days = [(today - dt.timedelta(days=i)).isoformat() for i in range(31)]
    sent: list[dict[str, Any]] = []
    for round_ in range(3):
        payloads = mech.encode_many(
            mech.perturb_many(
                ["hello", "word", "x"] * 10 + ["y"], rng=np.random.default_rng(round_)
            )
        )
        batch = _reports(payloads, days)
        sent += batch
        rebuilt: list[int] = []
        real = mech.tally_from

        def tally_from(n: int, vector: Any, _real: Any = real, _log: list[int] = rebuilt) -> Any:
            _log.append(len(vector))
            return _real(n, vector)

        mech.tally_from = tally_from  # type: ignore[method-assign]
        try:
            answer = ingest_batch(
                store, campaign, {"digest": campaign.digest, "reports": batch}, max_reports=5000
            )
        finally:
            del mech.tally_from
        assert answer.accepted == 31
        if round_:  # every window exists: nothing stored is decoded whole
            assert rebuilt == [], f"{len(rebuilt)} stored vectors rebuilt"
    fresh = from_config(campaign.mechanism_config)
    stored = store.tallies(campaign)
    assert len(stored) == 31
    for window, tally in stored.items():
        rows = [r["payload"] for r in sent if r["day"] == window]
        assert tally == fresh.tally(rows)


def test_a_stored_vector_in_another_spacing_still_adds_exactly(store: SQLiteStorage) -> None:
    """A tally row written with JSON's default ", " spacing (older writers) adds the same."""
    campaign = _campaign(
        store, {"id": "colours", "domain": ["r", "g", "b"], "mechanism": "grr", "epsilon": 1}
    )
    day = dt.datetime.now(dt.UTC).date().isoformat()
    first = _reports([0, 1, 2, 2], [day] * 4)
    ingest_batch(store, campaign, {"digest": campaign.digest, "reports": first}, max_reports=50)
    conn = sqlite3.connect(store.path, isolation_level=None)
    conn.execute("UPDATE tallies SET support = '[1, 1, 2]'")
    conn.close()
    second = _reports([2, 0], [day] * 2)
    ingest_batch(store, campaign, {"digest": campaign.digest, "reports": second}, max_reports=50)
    tally = store.tallies(campaign)[day]
    assert (tally.n, tally.vector()) == (6, [2, 1, 3])


def test_uploads_over_many_windows_keep_tallies_exact_on_a_real_server(tmp_path: Path) -> None:
    """Over HTTP, every kind of campaign (categorical, numeric, several attributes, open
    domain), uploads spread over the accepted days, retried in part: tallies stay exact."""
    bodies: list[dict[str, Any]] = [
        {"id": "cat", "domain": ["a", "b", "c", "d"], "mechanism": "oue", "epsilon": 1},
        {"id": "num", "bounds": [0, 10], "mechanism": "square_wave", "epsilon": 1},
        {"id": "mean", "bounds": [0, 10], "epsilon": 1},
        {"id": "multi", "attributes": {"s": ["F", "M"], "age": {"bounds": [17, 90]}}, "epsilon": 2},
        {"id": "open", "max_length": 8, "epsilon": 4},
    ]
    values: dict[str, Any] = {
        "cat": np.arange(40) % 4,
        "num": np.linspace(0, 10, 40),
        "mean": np.linspace(0, 10, 40),
        "multi": None,
        "open": ["ab", "cd"] * 20,
    }
    today = dt.datetime.now(dt.UTC).date()
    days = [(today - dt.timedelta(days=i % 31)).isoformat() for i in range(40)]
    with running_collector(tmp_path) as srv:
        for body in bodies:
            r = srv.post_campaign(body)
            assert r.status_code == 201, r.text
            campaign = r.json()
            mech: Any = from_config(campaign["mechanism"])
            if body["id"] == "multi":
                batch = mech.perturb_many(
                    {"s": np.arange(40) % 2, "age": np.linspace(17, 90, 40)},
                    rng=np.random.default_rng(3),
                )
            else:
                batch = mech.perturb_many(values[body["id"]], rng=np.random.default_rng(3))
            reports = _reports(mech.encode_many(batch), days)
            url = f"{srv.url}/v1/campaigns/{body['id']}/reports"
            for part in (reports[:25], reports[10:]):  # the second repeats 15 of the first
                r = requests.post(
                    url,
                    json={"digest": campaign["digest"], "reports": part},
                    headers=srv.headers("ingest"),
                    timeout=60,
                )
                assert r.status_code == 200, r.text
            assert r.json()["duplicate"] == 15
            srv.verify_tallies(body["id"])


def test_ids_stored_between_the_prediction_and_the_lock_are_counted_once(
    store: SQLiteStorage, tmp_path: Path
) -> None:
    """A retry (5 of its 30 ids stored) is predicted all new, rolled back, read and tallied
    again; another upload of 15 of its ids committing between that read and the lock (here a
    second storage on the same file) makes them duplicates too, and the window's tally adds
    only the 10 reports this upload stored."""
    campaign = _campaign(store, {"id": "race", "max_length": 8, "epsilon": 4})
    mech: Any = campaign.mechanism
    day = dt.datetime.now(dt.UTC).date().isoformat()
    payloads = mech.encode_many(mech.perturb_many(["ab", "cd"] * 20, rng=np.random.default_rng(5)))
    reports = _reports(payloads, [day] * 40)
    first = {"digest": campaign.digest, "reports": reports[:5]}
    assert ingest_batch(store, campaign, first, max_reports=50).accepted == 5
    other = open_storage(store.path)
    raced = other.get_campaign("race")
    assert raced is not None
    real = store._pretally
    calls: list[bool] = []

    def pretally_then_race(*args: Any, read_ids: bool) -> Any:
        ready = real(*args, read_ids=read_ids)
        calls.append(read_ids)
        if read_ids:  # the second prediction, which read the 5 ids stored
            body = {"digest": campaign.digest, "reports": reports[10:25]}
            assert ingest_batch(other, raced, body, max_reports=50).accepted == 15
        return ready

    store._pretally = pretally_then_race  # type: ignore[method-assign, assignment]
    try:
        body = {"digest": campaign.digest, "reports": reports[:30]}
        answer = ingest_batch(store, campaign, body, max_reports=50)
    finally:
        del store._pretally
        other.close()
    assert calls == [False, True]
    assert (answer.accepted, answer.duplicate) == (10, 20)
    tally = store.tallies(campaign)[day]
    fresh = from_config(campaign.mechanism_config)
    assert tally == fresh.tally(payloads[:30])
