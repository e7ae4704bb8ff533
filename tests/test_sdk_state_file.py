"""A device's state file that the SDK cannot use: damaged, not a database, changed by another
program, or written by a newer SDK.

The file holds the device's privacy-budget ledger, so the SDK must never replace or rewrite
it on its own (that would forget the budget spent). Each case must be one clear
:class:`StateUnusable` naming the file and the app's choices, leave the file's bytes as they
were, and leave the ``state_dir`` lock free: before, the first attempt raised a bare
``sqlite3.DatabaseError`` and every later one in the process said "another TelemetryClient holds
state_dir"; a newer SDK's file was opened and its schema version rewritten to this SDK's.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from client_sdk import StateUnusable, TelemetryClient
from client_sdk.state import SCHEMA_VERSION, STATE_FILE

OPTIONS = {"ingest_token": "t" * 20, "flush_interval": 3600.0}


def client(state_dir: Path) -> TelemetryClient:
    return TelemetryClient("http://127.0.0.1:9", state_dir=state_dir, **OPTIONS)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def good_file(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A state file as a closed client leaves it."""
    state_dir = tmp_path_factory.mktemp("good")
    client(state_dir).close()
    return (state_dir / STATE_FILE).read_bytes()


def garbage(path: Path, good: bytes) -> None:
    path.write_bytes(b"not a database " * 200)


def truncated(path: Path, good: bytes) -> None:
    path.write_bytes(good[: len(good) // 2])


def zeroed(path: Path, good: bytes) -> None:
    path.write_bytes(bytes(len(good)))


def a_directory(path: Path, good: bytes) -> None:
    path.mkdir()


def a_column_missing(path: Path, good: bytes) -> None:
    """Another program rebuilt ``outbox`` without ``attempts``: every upload would fail."""
    path.write_bytes(good)
    conn = sqlite3.connect(path)
    conn.executescript(
        "DROP TABLE outbox; CREATE TABLE outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
        "campaign TEXT, report_id TEXT, day TEXT, payload TEXT, digest TEXT);"
    )
    conn.close()


def newer_sdk(path: Path, good: bytes) -> None:
    path.write_bytes(good)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()


def snapshot(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (garbage, "file is not a database"),
        (truncated, "malformed"),
        (zeroed, "file is not a database"),
        (a_directory, "unable to open"),
        (a_column_missing, "outbox lacks the columns attempts"),
        (newer_sdk, "newer ldp-telemetry SDK"),
    ],
    ids=["garbage", "truncated", "zeroed", "a_directory", "a_column_missing", "newer_sdk"],
)
def test_an_unusable_state_file_is_named_kept_and_the_lock_freed(
    tmp_path: Path,
    good_file: bytes,
    damage: Callable[[Path, bytes], None],
    words: str,
) -> None:
    path = tmp_path / STATE_FILE
    damage(path, good_file)
    before = snapshot(path)
    for _ in range(2):  # the second attempt meets the same error, not "in use"
        with pytest.raises(StateUnusable) as raised:
            client(tmp_path)
        message = str(raised.value)
        assert str(path) in message and words in message, message
        assert "never replaces it" in message or "upgrade the SDK" in message, message
    assert snapshot(path) == before  # not rewritten, not "repaired"
    # The app's choice, moving it away, works in the same process: the lock is free.
    shutil.move(path, tmp_path / "damaged")
    fresh = client(tmp_path)
    assert fresh.stats()["pending"] == 0
    fresh.close()


def test_a_newer_sdks_file_keeps_its_version(tmp_path: Path, good_file: bytes) -> None:
    path = tmp_path / STATE_FILE
    newer_sdk(path, good_file)
    with pytest.raises(StateUnusable):
        client(tmp_path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    conn.close()


def test_a_lock_file_that_cannot_be_opened_is_named(tmp_path: Path) -> None:
    """A directory where ``ldp-client.lock`` belongs was a bare IsADirectoryError."""
    from client_sdk.state import LOCK_FILE

    (tmp_path / LOCK_FILE).mkdir()
    with pytest.raises(StateUnusable, match="lock file .* cannot be opened"):
        client(tmp_path)


def test_the_state_and_lock_files_are_private(tmp_path: Path) -> None:
    """Readable and writable by the app alone (0600): the state file holds the ledger and the
    reports waiting; the lock file is made with the same mode."""
    import os
    import stat

    from client_sdk.state import LOCK_FILE

    client(tmp_path).close()
    assert stat.S_IMODE(os.stat(tmp_path / LOCK_FILE).st_mode) == 0o600


def test_a_file_where_the_config_cache_belongs_is_named(tmp_path: Path) -> None:
    """A file named ``campaigns`` in state_dir was a bare FileExistsError; the lock is freed."""
    (tmp_path / "campaigns").write_text("not a directory")
    for _ in range(2):
        with pytest.raises(StateUnusable, match="config cache .* cannot be made a directory"):
            client(tmp_path)
