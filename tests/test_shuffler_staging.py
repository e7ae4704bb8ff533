"""The shuffler's staging file and forwarder at the edges mutation testing found unchecked.

``Staging.add`` answers how many messages are pending (the forwarder's wake-up test), so that
count must stay exact through failed writes and removals. A write the file refuses must reach
every caller as an error and leave the file usable. The refusals are real SQLite ones: a
trigger that aborts the statement, created from a second connection (no fake).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from shuffler import Forwarder, Staging
from shuffler.forwarder import DEFAULT_BATCH_SIZE, DEFAULT_MAX_REQUEST, ForwardResult


def refuse(path: Path, operation: str) -> None:
    """Make every ``operation`` (INSERT, UPDATE, DELETE) on the staged table fail."""
    with sqlite3.connect(path) as other:
        other.execute(
            f"CREATE TRIGGER refuse_{operation.lower()} BEFORE {operation} ON staged "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )


def allow(path: Path, operation: str) -> None:
    with sqlite3.connect(path) as other:
        other.execute(f"DROP TRIGGER refuse_{operation.lower()}")


def test_add_counts_what_is_pending_through_removals(tmp_path: Path) -> None:
    staging = Staging(tmp_path / "s.db")
    try:
        assert [staging.add(f"m{i}") for i in range(5)] == [1, 2, 3, 4, 5]
        keys = [k for k, _ in staging.all()]
        staging.remove(keys[:2])
        assert staging.add("m5") == 4  # 5 - 2 + 1
        staging.remove([keys[0], 10**9])  # gone already, never there: nothing removed
        assert staging.add("m6") == 5 == staging.pending()
    finally:
        staging.close()
    # Reopened (a restart): the count starts from the file, and removing more messages than
    # this connection ever wrote is counted as such.
    staging = Staging(tmp_path / "s.db")
    try:
        keys = [k for k, _ in staging.all()]
        staging.remove(keys[:1])
        assert staging.add("m7") == 5
        staging.remove([k for k, _ in staging.all()])
        assert staging.add("m8") == 1
    finally:
        staging.close()


def test_a_refused_write_raises_and_stages_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    staging = Staging(path)
    try:
        assert staging.add("first") == 1
        refuse(path, "INSERT")
        with pytest.raises(sqlite3.IntegrityError, match="refused by the test"):
            staging.add("second")
        allow(path, "INSERT")
        assert staging.add("third") == 2  # the refused one was never counted
        assert [m for _, m in staging.all()] == ["first", "third"]
    finally:
        staging.close()


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE"])
def test_a_refused_release_or_removal_rolls_back(tmp_path: Path, operation: str) -> None:
    """The transaction is rolled back: the next one can begin (without the rollback, every
    later write of the shuffler failed with "cannot start a transaction within a
    transaction")."""
    path = tmp_path / "s.db"
    staging = Staging(path)
    try:
        for i in range(3):
            staging.add(f"m{i}")
        keys = [k for k, _ in staging.all()]
        refuse(path, operation)
        act = staging.release if operation == "UPDATE" else staging.remove
        with pytest.raises(sqlite3.IntegrityError, match="refused by the test"):
            act(keys)
        allow(path, operation)
        assert staging.add("m3") == 4
        staging.release(keys)
        assert [k for k, _ in staging.all(released=True)] == keys
        staging.remove(keys)
        assert staging.pending() == 1
    finally:
        staging.close()


def test_the_documented_defaults_and_keyword_options(tmp_path: Path) -> None:
    """docs/SHUFFLE.md: ``--batch-size`` defaults to 100 and ``--max-request`` to 500. The
    options after the token are keyword-only, the first three may be named."""
    assert (DEFAULT_BATCH_SIZE, DEFAULT_MAX_REQUEST) == (100, 500)
    staging = Staging(tmp_path / "s.db")
    try:
        forwarder = Forwarder(staging=staging, collector_url="http://127.0.0.1:9", token="t")
        assert (forwarder.batch_size, forwarder.max_request) == (100, 500)
        with pytest.raises(TypeError):
            Forwarder(staging, "http://127.0.0.1:9", "t", 5)  # type: ignore[misc]
        # Nothing staged: a round forwards nothing and counts nothing.
        assert forwarder.forward_once() == ForwardResult(0, 0, 0, 0)
    finally:
        staging.close()


def test_the_forwarding_thread_does_not_keep_the_process_alive(tmp_path: Path) -> None:
    """A program that starts a forwarder and returns without ``stop()`` must exit: the thread
    is a daemon (the shuffler's own shutdown stops it; an embedding program may not)."""
    code = (
        "import sys; from shuffler import Forwarder, Staging\n"
        "f = Forwarder(Staging(sys.argv[1]), 'http://127.0.0.1:9', 't')\n"
        "f.start(retry_seconds=3600)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "s.db")], timeout=60, capture_output=True
    )
    assert done.returncode == 0, done.stderr
