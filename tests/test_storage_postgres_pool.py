"""PostgreSQL-only behaviour: connection loss and recovery, secrets kept out of messages,
tally shards merged at read time, and the pool never crossing a fork."""

from __future__ import annotations

import os
import socket
import threading
import time
import warnings
from collections.abc import Iterator

import psycopg
import pytest

from collector.errors import StorageError, StorageUnavailable
from collector.storage.postgres import PostgresStorage, redact
from collector.tallycheck import recompute, verify_tallies
from tests.support.postgres import end_sessions, fresh_database
from tests.test_storage_backends import campaign, ids, window_batch


@pytest.fixture()
def url() -> Iterator[str]:
    with fresh_database() as u:
        yield u


def test_lost_connections_fail_cleanly_then_recover(url: str) -> None:
    store = PostgresStorage(url)
    store.migrate()
    c = campaign()
    store.create_campaign(c)
    store.ingest(c, {"2026-11-01": window_batch(c, ids("a", 20))})
    assert end_sessions(url) >= 1
    # The pooled connection is dead: at most one call fails (503), nothing partial is stored,
    # and the pool replaces the connection for the next call.
    outcomes = []
    for attempt in range(3):
        try:
            outcomes.append(store.ingest(c, {"2026-11-01": window_batch(c, ids("b", 20))}))
        except StorageUnavailable as exc:
            assert attempt == 0 and "failed" in str(exc)
    assert sum(o.accepted for o in outcomes) == 20
    assert store.count_reports(c) == 40
    assert recompute(store, c) == store.tallies(c)
    store.close()


def test_passwords_never_appear_in_messages_or_repr() -> None:
    # Bound but not listening while used: refused, and no other process can take the port.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        secret_url = f"postgresql://ldp:hunter2-secret@127.0.0.1:{port}/ldp"
        store = PostgresStorage(secret_url, busy_timeout_ms=200)
        assert "hunter2" not in repr(store)
        with pytest.raises(StorageError) as info:
            store.migrate()
    assert "hunter2" not in str(info.value) and "***" in str(info.value)
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"


@pytest.mark.parametrize(
    "bad_url",
    [
        "postgresql://ldp:hunter2-secret@[::1/ldp",  # an IPv6 host never closed
        "postgresql://ldp:hunter2-secret@127.0.0.1:port/ldp",  # a port that is not a number
        "postgresql://[::1",
    ],
)
def test_a_url_libpq_cannot_read_is_a_config_error_without_its_password(
    bad_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``redact`` raised ValueError on such URLs (a traceback from the message meant to explain
    them), and libpq's complaint, logged by the pool on every retry and quoted in the error,
    carried the URL whole, password included."""
    from collector.errors import ConfigError

    assert "hunter2" not in redact(bad_url)
    with caplog.at_level("DEBUG"):
        try:
            store = PostgresStorage(bad_url, busy_timeout_ms=200)
        except ConfigError as exc:
            assert "hunter2" not in str(exc) and "PostgreSQL URL" in str(exc), exc
        else:  # libpq reads it (a bad port): it fails at connect, still without the password
            with pytest.raises(StorageError) as info:
                store.migrate()
            assert "hunter2" not in str(info.value)
            store.close()
    assert "hunter2" not in caplog.text


def test_tally_shards_are_merged_when_read(url: str) -> None:
    store = PostgresStorage(url, tally_shards=4)
    store.migrate()
    c = campaign()
    store.create_campaign(c)
    for n in range(12):
        store.ingest(c, {"2026-11-01": window_batch(c, ids(f"s{n}", 10), seed=n)})
    with psycopg.connect(url) as conn:
        shards = conn.execute("SELECT count(*) FROM tally_shards").fetchone()[0]
    assert 1 < shards <= 4  # 12 ingests over 4 shards: several rows (1 in 4**11 odds of one)
    (tally,) = store.tallies(c).values()
    assert tally.n == 120 and recompute(store, c) == store.tallies(c)
    assert store.report_counters()[0].accepted == 120
    store.close()


def test_a_forked_child_opens_its_own_pool(url: str) -> None:
    store = PostgresStorage(url)
    store.migrate()
    store.create_campaign(campaign())
    with warnings.catch_warnings():
        # Python >= 3.12 warns that forking a threaded process (the pool's workers) is risky:
        # that risk is exactly what the backend guards against, and what this test exercises.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: a gunicorn worker forked after the master touched the pool
        code = 1
        try:
            child = store.get_campaign("c")
            store.ingest(child, {"2026-11-01": window_batch(child, ids("k", 5))})  # type: ignore[arg-type]
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent's pool still works: the child never closed the parent's sessions.
    c = store.get_campaign("c")
    assert c is not None and store.count_reports(c) == 5
    store.close()


def test_an_unreachable_server_fails_under_ci_and_skips_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.support import postgres as support

    # Bound but not listening while used: refused, and no other process can take the port.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        monkeypatch.setattr(support, "ADMIN_URL", url)
        monkeypatch.setattr(support, "_reason", [])
        monkeypatch.setenv("CI", "1")
        with pytest.raises(pytest.fail.Exception, match="PostgreSQL is unreachable"):
            support.require_postgres()
        monkeypatch.delenv("CI")
        with pytest.raises(pytest.skip.Exception, match="pg_ctlcluster"):
            support.require_postgres()


def test_tally_verify_is_clean_while_ingest_continues(url: str) -> None:
    """verify reads the tallies and the reports in one snapshot, so live ingest cannot make a
    window look different (the tally and the reports of one ingest commit together)."""
    store = PostgresStorage(url)
    store.migrate()
    c = campaign()
    store.create_campaign(c)
    stop = threading.Event()
    errors: list[BaseException] = []

    def ingest() -> None:
        writer = PostgresStorage(url)
        n = 0
        try:
            while not stop.is_set():
                writer.ingest(c, {"2026-11-01": window_batch(c, ids(f"live{n}", 50), seed=n)})
                n += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            writer.close()

    thread = threading.Thread(target=ingest)
    thread.start()
    try:
        for _ in range(15):
            checks = verify_tallies(store, "c")
            assert all(check.ok for check in checks), [x.to_dict() for x in checks]
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    store.close()


def test_the_default_tally_shards_are_the_documented_16(url: str) -> None:
    """docs/SCALING.md chose 16 shards per window from measurements; the code keeps to it."""
    from pathlib import Path

    from collector.storage.postgres import DEFAULT_TALLY_SHARDS

    scaling = (Path(__file__).resolve().parents[1] / "docs" / "SCALING.md").read_text()
    assert "**Choice: 16 tally shards per window**" in scaling
    assert DEFAULT_TALLY_SHARDS == 16
    store = PostgresStorage(url)
    try:
        assert store.tally_shards == 16
    finally:
        store.close()


def test_a_mix_that_cannot_take_the_lock_moves_nothing(url: str) -> None:
    """``mix(wait=False)`` while another mix holds the advisory lock: it returns at once with
    0 moved, and the staged reports wait for the holder (or the next tick)."""
    from collector.storage.postgres_schema import MIX_LOCK

    store = PostgresStorage(url, staging=True)
    store.migrate()
    try:
        c = campaign("m")
        store.create_campaign(c)
        store.ingest(c, {"2026-11-01": window_batch(c, ids("m", 12))})
        assert store.staged_count() == 12
        with psycopg.connect(url, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (MIX_LOCK,))
            began = time.perf_counter()
            skipped = store.mix(wait=False)
            assert skipped.moved == 0
            assert 0 <= skipped.seconds <= time.perf_counter() - began
            assert store.staged_count() == 12
            other.execute("SELECT pg_advisory_unlock(%s)", (MIX_LOCK,))
        assert store.mix(wait=False).moved == 12 and store.staged_count() == 0
    finally:
        store.close()
