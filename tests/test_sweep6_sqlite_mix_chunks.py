"""SQLite: a mix moves a large staged set in slices, one write transaction each, and uploads
take the write lock between slices (sixth sweep).

Before, the mix moved every staged report in one write transaction: 400,000 staged reports held
the lock for seconds (7 to 19 s measured on a loaded 2-core machine), and uploads waiting for it
ran out of their 5 s busy timeout (503). Now the staged set is fixed when the mix starts,
shuffled with OS randomness, and moved in consecutive slices of that permutation of at most
``MIX_CHUNK`` reports; the lock is free for ``MIX_PAUSE_S`` between two slices.

Real SQLite files and the real ingest throughout. What is injected is where slices end
(``MIX_CHUNK`` made small) and what happens in the pause between two slices: the pause is
``time.sleep(MIX_PAUSE_S)``, and ``time.sleep`` is replaced, for the mixing thread and that
argument only, by a wait for another thread's upload, another mix, an exception or a SIGKILL.
Without slices there is no pause: each test then fails on what it expects between slices.
"""

from __future__ import annotations

import math
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import collector.storage.sqlite as sqlite_module
from collector.storage import IngestCounts, SQLiteStorage
from collector.tallycheck import verify_tallies
from tests.support import linkage
from tests.support.reports import batch, reports
from tests.support.waiting import DEADLINE, eventually
from tests.test_storage_backends import campaign, ids, window_batch
from tests.test_unlinkable import CAMPAIGNS, DEVICES, auth, serve, upload_everything

DAY = "2026-11-21"
#: The pause between slices in these tests: a value nothing else sleeps for.
PAUSE = 0.0137


@pytest.fixture()
def pauses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Callable[[], None]]]:
    """Actions run, in order, at the pauses between slices of a mix in this thread (one per
    pause; a pause without an action is a plain sleep). Slices of 20 reports."""
    monkeypatch.setattr(sqlite_module, "MIX_CHUNK", 20, raising=False)
    monkeypatch.setattr(sqlite_module, "MIX_PAUSE_S", PAUSE, raising=False)
    actions: list[Callable[[], None]] = []
    mixing = threading.current_thread()
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if seconds == PAUSE and threading.current_thread() is mixing and actions:
            actions.pop(0)()
        else:
            real_sleep(seconds)

    monkeypatch.setattr(sqlite_module.time, "sleep", sleep)
    yield actions


#: The campaign of the staged reports.
CAMPAIGN = campaign("m")


def staged_store(path: Path, count: int) -> tuple[SQLiteStorage, list[str]]:
    """A staging store on ``path`` with ``count`` reports staged (one campaign, 3 uploads)."""
    store = SQLiteStorage(path, staging=True)
    store.migrate()
    c = CAMPAIGN
    store.create_campaign(c)
    staged = ids("staged", count)
    third = count // 3
    for part in (staged[:third], staged[third : 2 * third], staged[2 * third :]):
        assert store.ingest(c, {DAY: window_batch(c, part, seed=len(part))}).accepted == len(part)
    return store, staged


def tables(path: Path) -> tuple[list[str], list[str]]:
    """(ids in ``reports``, ids in ``staged_reports``), read in one statement (one snapshot)."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT 'r', report_id FROM reports UNION ALL SELECT 's', report_id FROM staged_reports"
        ).fetchall()
    return [i for t, i in rows if t == "r"], [i for t, i in rows if t == "s"]


def assert_each_once(path: Path, expected: set[str]) -> tuple[list[str], list[str]]:
    """Every expected id in exactly one of the two tables, and nothing else stored."""
    mixed, staged = tables(path)
    assert len(set(mixed)) == len(mixed) and len(set(staged)) == len(staged)
    assert not set(mixed) & set(staged), "an id in both tables"
    assert set(mixed) | set(staged) == expected
    return mixed, staged


def running_mixes(path: Path) -> list[float]:
    """``last_run`` of the lease rows of running mixes."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT last_run FROM leases WHERE name LIKE 'mix-running %'")
        return [float(r[0]) for r in rows]


def assert_tallies_match(store: SQLiteStorage) -> None:
    checks = verify_tallies(store)
    assert checks and all(check.ok for check in checks), [c.to_dict() for c in checks]


def test_an_upload_commits_between_two_slices_and_waits_for_the_next_mix(
    tmp_path: Path, pauses: list[Callable[[], None]]
) -> None:
    """Another worker's upload (its own connection, a real thread) commits as soon as the first
    slice has; the mix then goes on, leaves that upload's reports staged (they came after its
    start) and each report is in exactly one table at every pause."""
    path = tmp_path / "m.db"
    store, staged = staged_store(path, 60)
    worker = SQLiteStorage(path, staging=True)
    late = ids("late", 5)
    uploaded = threading.Event()
    seen: list[tuple[int, int]] = []
    counts: list[IngestCounts] = []

    def upload_once_a_slice_is_in() -> None:
        try:
            mixed, waiting = eventually(
                lambda: tables(path), lambda t: bool(t[0]), what="the first slice's commit"
            )
            seen.append((len(mixed), len(waiting)))
            upload = {DAY: window_batch(CAMPAIGN, late, seed=9)}
            counts.append(worker.ingest(CAMPAIGN, upload))
        finally:
            uploaded.set()

    at_pauses: list[tuple[list[str], list[str]]] = []

    def first_pause() -> None:
        assert uploaded.wait(DEADLINE), "the upload did not finish"
        at_pauses.append(assert_each_once(path, set(staged) | set(late)))

    pauses.append(first_pause)
    pauses.append(lambda: at_pauses.append(assert_each_once(path, set(staged) | set(late))))
    thread = threading.Thread(target=upload_once_a_slice_is_in)
    thread.start()
    try:
        done = store.mix()
    finally:
        thread.join(DEADLINE)
    assert seen == [(20, 40)], "the upload did not commit between the first two slices"
    assert counts == [IngestCounts(accepted=5, duplicate=0)]
    assert [(len(m), len(s)) for m, s in at_pauses] == [(20, 45), (40, 25)]
    assert done.moved == 60
    mixed, left = assert_each_once(path, set(staged) | set(late))
    assert sorted(left) == late and len(mixed) == 60
    assert_tallies_match(store)
    assert store.mix().moved == 5 and store.staged_count() == 0
    assert store.count_reports(CAMPAIGN) == 65
    worker.close()
    store.close()


def test_a_mix_stopped_between_slices_leaves_each_report_once_and_the_next_finishes(
    tmp_path: Path, pauses: list[Callable[[], None]]
) -> None:
    """A fault after the first slice committed (an exception out of the slice loop): the
    committed slice is in ``reports``, the rest still staged, no id in both, the tally equals
    the stored reports; the next mix moves the rest and truncates the WAL."""
    path = tmp_path / "m.db"
    store, staged = staged_store(path, 60)

    def fault() -> None:
        raise RuntimeError("stopped between two slices")

    pauses.append(fault)
    with pytest.raises(RuntimeError, match="stopped between two slices"):
        store.mix()
    mixed, left = assert_each_once(path, set(staged))
    assert (len(mixed), len(left)) == (20, 40)
    assert_tallies_match(store)
    assert store.count_reports(CAMPAIGN) == 60
    assert store.mix().moved == 40
    mixed, left = assert_each_once(path, set(staged))
    assert (len(mixed), len(left)) == (60, 0)
    assert_tallies_match(store)
    assert Path(f"{path}-wal").stat().st_size == 0
    store.close()


KILLED_MIX = """
import os, signal, sys, time
import collector.storage.sqlite as sqlite_module
from collector.storage import SQLiteStorage

sqlite_module.MIX_CHUNK = 20
sqlite_module.MIX_PAUSE_S = {pause!r}
real_sleep = time.sleep


def sleep(seconds):
    if seconds == {pause!r}:
        os.kill(os.getpid(), signal.SIGKILL)
    real_sleep(seconds)


time.sleep = sleep
done = SQLiteStorage(sys.argv[1], staging=True).mix()
print("the mix ran to its end:", done.moved)
"""


def test_a_mix_killed_between_slices_leaves_each_report_once_and_the_next_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with a real crash: a process SIGKILLed in the pause after its first slice.
    Its lease row stays: the service's mixer (``wait=False``) takes it for a running mix
    until it is older than the busy timeout plus ``MIX_STALE_S``, then mixes."""
    path = tmp_path / "k.db"
    store, staged = staged_store(path, 60)
    store.close()
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MIX.format(pause=PAUSE), str(path)],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stdout, killed.stderr)
    again = SQLiteStorage(path, staging=True)
    mixed, left = assert_each_once(path, set(staged))
    assert (len(mixed), len(left)) == (20, 40)
    assert_tallies_match(again)
    assert again.count_reports(CAMPAIGN) == 60
    [renewed] = running_mixes(path)
    monkeypatch.setattr(sqlite_module, "MIX_STALE_S", 3600.0, raising=False)
    assert again.mix(wait=False).moved == 0 and again.staged_count() == 40
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE leases SET last_run = ? WHERE last_run = ?", (renewed - 7200, renewed))
    assert again.mix(wait=False).moved == 40
    mixed, left = assert_each_once(path, set(staged))
    assert (len(mixed), len(left)) == (60, 0)
    assert_tallies_match(again)
    assert running_mixes(path) == []
    again.close()


def test_a_second_mix_between_two_slices_moves_the_rest_and_the_first_skips_it(
    tmp_path: Path, pauses: list[Callable[[], None]]
) -> None:
    """Two mixers at once: in the first one's pause, the service's mixer on another
    connection (``wait=False``) sees it running and moves nothing; ``ldp mix`` (``wait=True``)
    moves the rest, and the first one's later slices find their rows gone and skip them. Each
    report is moved once, and no mix is left marked as running."""
    path = tmp_path / "m.db"
    store, staged = staged_store(path, 60)
    other = SQLiteStorage(path, staging=True)
    beside: list[int] = []

    def two_more_mixes() -> None:
        beside.append(other.mix(wait=False).moved)
        beside.append(other.mix().moved)

    pauses.append(two_more_mixes)
    first = store.mix()
    assert beside == [0, 40] and first.moved == 20
    assert running_mixes(path) == []
    mixed, left = assert_each_once(path, set(staged))
    assert (len(mixed), len(left)) == (60, 0)
    assert_tallies_match(store)
    other.close()
    store.close()


def test_a_mix_in_slices_links_no_better_than_chance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/test_unlinkable.py's attack (the file's bytes, the WAL's frames) after a mix in
    slices of 37 of the 500 reports, with another worker's uploads committed between slices:
    no more links than chance; before the mix (the control) far more."""
    monkeypatch.setattr(sqlite_module, "MIX_CHUNK", 37, raising=False)
    monkeypatch.setattr(sqlite_module, "MIX_PAUSE_S", PAUSE, raising=False)
    database = str(tmp_path / "u.db")
    app, worker = serve(database), serve(database)
    store = app.extensions["ldp_storage"]
    client = worker.test_client()
    bound = linkage.chance_bound(DEVICES, len(CAMPAIGNS))
    interleaved: list[str] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if seconds != PAUSE:
            real_sleep(seconds)
            return
        # Another device's reports to two campaigns, staged while the mix runs.
        for cid in CAMPAIGNS[:2]:
            made: dict[str, Any] = client.get(
                f"/v1/campaigns/{cid}", headers=auth("analyst")
            ).get_json()
            [item] = reports(made, 1, seed=len(interleaved))
            resp = client.post(
                f"/v1/campaigns/{cid}/reports", json=batch(made, [item]), headers=auth("ingest")
            )
            answer = resp.get_json()
            assert resp.status_code == 200 and answer["accepted"] == 1, answer
            interleaved.append(item["id"])

    try:
        owner = upload_everything(app)
        before = linkage.attack(database, owner)
        monkeypatch.setattr(sqlite_module.time, "sleep", sleep)
        done = store.mix()
        monkeypatch.undo()
        after = linkage.attack(database, owner)
        slices = math.ceil(DEVICES * len(CAMPAIGNS) / 37)
        assert len(interleaved) == 2 * (slices - 1), "the mix did not run in slices"
        assert done.moved == DEVICES * len(CAMPAIGNS)
        assert store.staged_count() == len(interleaved)  # staged after its start: left
        assert_tallies_match(store)
    finally:
        worker.extensions["ldp_storage"].close()
        store.close()
    print(f"\nsqlite before a mix in slices: correct links per attack {before} (bound {bound:.1f})")
    print(f"sqlite after it: correct links per attack {after}")
    assert max(before.values()) > 5 * bound, before
    assert after, "no attack ran"
    assert max(after.values()) <= bound, after
