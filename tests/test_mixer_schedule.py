"""When the service's mixer mixes (collector/mixing.py), on a real SQLite file and a real
PostgreSQL database with staging on (docs/COLLECTOR.md "When it mixes").

A mix at the batch size or the interval, never a tick that waits behind another worker's mix,
one thread per worker process, and a thread that polls again at once after a full batch. The
thread's pacing is read through a recording stop event in place of ``threading.Event``: its
waits are its whole schedule, and recording them is the only way to see it without timing the
test.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psycopg
import pytest

from collector.campaigns import Campaign, campaign_from_request
from collector.ingest import ingest_batch
from collector.mixing import POLL_SECONDS, Mixer
from collector.storage import MixResult, Storage, open_storage
from collector.storage.postgres_schema import MIX_LOCK
from tests.support.pacing import RecordingStop
from tests.support.postgres import BACKENDS, collector_database

DAY = dt.date(2026, 11, 1)
_ids = itertools.count()


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with collector_database(request.param, tmp_path) as db:
        yield db


@contextmanager
def staging_store(database: str) -> Iterator[tuple[Storage, Campaign]]:
    """A staging store (``LDP_MIX_BATCH`` > 0) holding one campaign."""
    store = open_storage(database, staging=True)
    store.migrate()
    camp = campaign_from_request(
        {"id": "c", "domain": ["a", "b", "c", "d"], "mechanism": "oue", "epsilon": 1.0},
        today=DAY,
    )
    store.create_campaign(camp)
    try:
        yield store, camp
    finally:
        store.close()


@pytest.fixture
def staged(database: str) -> Iterator[tuple[Storage, Campaign]]:
    with staging_store(database) as pair:
        yield pair


def stage(store: Storage, camp: Campaign, count: int) -> None:
    mech = camp.mechanism
    payloads = mech.encode_many(mech.perturb_many(np.arange(count) % 4, rng=count))
    reports = [
        {"id": f"report-{next(_ids):016d}", "day": DAY.isoformat(), "payload": p} for p in payloads
    ]
    body = {"digest": camp.digest, "reports": reports}
    assert ingest_batch(store, camp, body, max_reports=10_000, today=DAY).accepted == count


def test_staging_is_on_for_a_positive_batch_only(staged: tuple[Storage, Campaign]) -> None:
    store, _ = staged
    assert not Mixer(store, batch=0, interval=60).enabled  # LDP_MIX_BATCH=0: linkable storage
    assert Mixer(store, batch=1, interval=60).enabled
    assert POLL_SECONDS == 1.0  # "every second" (docs/COLLECTOR.md)
    assert Mixer(store, batch=1, interval=60).poll_seconds == POLL_SECONDS


def test_a_timed_mix_moves_what_is_staged_below_the_batch(
    staged: tuple[Storage, Campaign],
) -> None:
    """Every interval (here half a second) whatever is staged is mixed, however few."""
    store, camp = staged
    stage(store, camp, 3)
    mixer = Mixer(store, batch=1000, interval=0.5)
    done = mixer.tick()
    assert done is not None and done.moved == 3
    assert store.staged_count() == 0


def test_a_full_batch_is_mixed_at_the_next_poll(staged: tuple[Storage, Campaign]) -> None:
    store, camp = staged
    mixer = Mixer(store, batch=5, interval=0, poll_seconds=0)  # no timed mix
    stage(store, camp, 4)
    assert mixer.tick() is None  # below the batch: stays staged
    assert store.staged_count() == 4
    stage(store, camp, 1)
    done = mixer.tick()
    assert done is not None and done.moved == 5
    assert store.staged_count() == 0


def test_a_tick_never_waits_behind_another_mix(tmp_path: Path) -> None:
    """While another worker mixes (PostgreSQL's mix lock held elsewhere), a tick returns at
    once having moved nothing, rather than hold a pooled connection waiting for the lock.
    (SQLite's mix keeps a lease row instead: tests/test_sweep6_sqlite_mix_chunks.py.)"""
    with collector_database("postgresql", tmp_path) as database:
        with staging_store(database) as (store, camp):
            stage(store, camp, 3)
            mixer = Mixer(store, batch=1000, interval=0.5)
            results: list[MixResult | None] = []
            other = psycopg.connect(database, autocommit=True)
            try:
                other.execute("SELECT pg_advisory_lock(%s)", (MIX_LOCK,))
                tick = threading.Thread(target=lambda: results.append(mixer.tick()))
                tick.start()
                tick.join(timeout=20)
                finished = not tick.is_alive()
            finally:
                other.close()  # releases the lock: a tick stuck behind it ends
            tick.join()
            assert finished, "the tick waited for another worker's mix"
            assert results and results[0] is not None and results[0].moved == 0
            assert store.staged_count() == 3
            assert store.mix().moved == 3


@pytest.mark.parametrize("count", [5, 7])
def test_after_a_full_batch_the_thread_polls_again_at_once(
    staged: tuple[Storage, Campaign], count: int
) -> None:
    """A mix that moved a batch or more (reports kept arriving while it ran) is followed by
    another poll without a pause; a poll that mixes nothing, or less than a batch, waits."""
    store, camp = staged
    stage(store, camp, count)
    mixer = Mixer(store, batch=5, interval=0, poll_seconds=0.25)
    stop = RecordingStop(waits=2)
    mixer._stop = stop  # type: ignore[assignment]
    mixer._run()
    assert stop.waits == [0.25, 0.0, 0.25]
    assert store.staged_count() == 0


def test_a_timed_mix_below_the_batch_is_followed_by_a_pause(
    staged: tuple[Storage, Campaign],
) -> None:
    store, camp = staged
    stage(store, camp, 3)
    mixer = Mixer(store, batch=1000, interval=0.5, poll_seconds=0.25)
    stop = RecordingStop(waits=2)
    mixer._stop = stop  # type: ignore[assignment]
    mixer._run()
    assert stop.waits == [0.25, 0.25, 0.25]
    assert store.staged_count() == 0


def _mixer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ldp-mixer"]


def test_the_mixer_thread_starts_once_per_process_and_never_when_off(
    staged: tuple[Storage, Campaign],
) -> None:
    store, _ = staged
    before = len(_mixer_threads())
    Mixer(store, batch=0, interval=60).ensure_started()
    assert len(_mixer_threads()) == before

    mixer = Mixer(store, batch=1000, interval=3600)
    try:
        mixer.ensure_started()
        mixer.ensure_started()
        assert len(_mixer_threads()) == before + 1
        # A forked worker inherits the parent's pid in the mixer, and pids are not ordered:
        # a parent with a larger pid than the child must not stop the child's start.
        mixer._pid = os.getpid() + 1
        mixer.ensure_started()
        assert len(_mixer_threads()) == before + 2
    finally:
        mixer.stop()
