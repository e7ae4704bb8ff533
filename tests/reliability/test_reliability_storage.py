"""Disk full and database locked: the collector answers 503 with Retry-After, stores nothing
partial, and recovers by itself when the condition clears; a device loses nothing meanwhile.

Disk full is a real full filesystem: a small tmpfs mounted for the test (needs root; skipped
with the reason otherwise). Locked is another connection holding ``BEGIN EXCLUSIVE``.
(tests/test_collector_serve.py covers a ``BEGIN IMMEDIATE`` writer on upload and /readyz.)
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.reliability.checks import (
    Device,
    assert_error_envelope,
    assert_exactly_once,
    create_campaign,
    integrity,
)
from tests.reliability.test_fuzz_openapi import snapshot
from tests.support.reports import batch, reports
from tests.support.server import CollectorProcess, running_collector

RETRY_AFTER = "2"


@contextlib.contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Write a file until the filesystem is full (ENOSPC); returns it."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 512, 1):
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:
                pass  # ENOSPC at this size: try smaller pieces for the last bytes
    finally:
        os.close(fd)
    return filler


def assert_unavailable(r: requests.Response) -> None:
    assert r.status_code == 503, r.text
    assert_error_envelope(r)
    assert r.status_code == 503, r.text
    assert r.headers["Retry-After"] == RETRY_AFTER
    assert r.json()["error"]["code"] == "storage_unavailable"


def upload(srv: CollectorProcess, campaign: dict[str, Any], items: list[dict]) -> requests.Response:
    return requests.post(
        f"{srv.url}/v1/campaigns/{campaign['id']}/reports",
        json=batch(campaign, items),
        headers=srv.headers("ingest"),
        timeout=60,
    )


def test_disk_full_answers_503_stores_nothing_and_recovers(
    tmp_path: Path, figures: dict[str, Any]
) -> None:
    with small_filesystem(tmp_path / "disk", "2m") as disk:
        env = {"LDP_RETRY_AFTER": RETRY_AFTER}
        with running_collector(tmp_path, db_path=disk / "ldp.db", env=env) as srv:
            campaign = create_campaign(srv, "oue")
            first = reports(campaign, 100, seed=1)
            assert upload(srv, campaign, first).json()["accepted"] == 100
            filler = fill(disk)
            before = snapshot(srv.db_path)
            big = reports(campaign, 3000, seed=2)
            refusals = 0
            for _ in range(3):  # stays refused, and every answer is the same clear 503
                assert_unavailable(upload(srv, campaign, big))
                refusals += 1
            # (/readyz and a campaign create are small writes that may still fit in the
            # WAL's free pages; an upload of 3,000 reports cannot.)
            # Reads still work on a full disk.
            r = requests.get(srv.url + "/v1/campaigns", headers=srv.headers("analyst"), timeout=30)
            assert r.status_code == 200
            assert snapshot(srv.db_path) == before  # nothing partial
            filler.unlink()  # the operator frees space: no restart needed
            # Readiness follows within LDP_READY_CACHE_SECONDS (2 s): the failed uploads
            # made it 503, the next probe after the cache period commits again (the deadline is
            # generous for a loaded machine, not a timing claim).
            deadline = time.monotonic() + 60
            while requests.get(srv.url + "/readyz", timeout=30).status_code != 200:
                assert time.monotonic() < deadline, "never ready again after space was freed"
                time.sleep(0.2)
            answer = upload(srv, campaign, big).json()
            assert (answer["accepted"], answer["duplicate"]) == (3000, 0)
            again = upload(srv, campaign, first + big).json()
            assert (again["accepted"], again["duplicate"]) == (0, 3100)
            assert integrity(srv.db_path) == "ok"
    figures["disk_full"] = {"refused_503": refusals, "recovered": True, "integrity": "ok"}


def test_exclusive_lock_answers_503_and_devices_lose_nothing(
    tmp_path: Path, figures: dict[str, Any]
) -> None:
    env = {"LDP_RETRY_AFTER": RETRY_AFTER, "LDP_BUSY_TIMEOUT_MS": "300"}
    (tmp_path / "srv").mkdir()
    with running_collector(tmp_path / "srv", workers=2, env=env) as srv:
        campaign = create_campaign(srv, "olh")
        device = Device(
            srv.url, srv.ingest_token, tmp_path / "device", [campaign["id"]], 60, seed=3
        )
        device.open()
        blocker = sqlite3.connect(srv.db_path, isolation_level=None, timeout=10)
        try:
            blocker.execute("BEGIN EXCLUSIVE")
            before_rows = blocker.execute("SELECT count(*) FROM reports").fetchone()[0]
            assert_unavailable(upload(srv, campaign, reports(campaign, 50)))
            # The device reports while the database is locked; its uploads get 503 and wait.
            device.start_thread()
            device.join()
            assert device.client is not None
            assert not device.client.flush(timeout=1.5)
            assert device.client.stats()["pending"] > 0
            assert blocker.execute("SELECT count(*) FROM reports").fetchone()[0] == before_rows
            blocker.execute("COMMIT")
        finally:
            blocker.close()
        stats = device.drain(timeout=60)  # the lock is gone: everything goes through
        assert stats["pending"] == 0 and stats["rejected"] == 0
        result = assert_exactly_once(srv.db_path, {campaign["id"]: campaign}, [device])
    figures["database_locked"] = {**result, "recovered": True}


def test_collector_starts_while_another_connection_holds_the_lock(tmp_path: Path) -> None:
    """Regression: a worker booting under a held lock used to fail its migration, and gunicorn
    then stopped the whole collector ("Worker failed to boot")."""
    env = {"LDP_RETRY_AFTER": RETRY_AFTER, "LDP_BUSY_TIMEOUT_MS": "200"}
    with running_collector(tmp_path, env=env) as srv:
        campaign = create_campaign(srv, "oue")
        srv.stop()
        blocker = sqlite3.connect(srv.db_path, isolation_level=None, timeout=10)
        try:
            blocker.execute("BEGIN EXCLUSIVE")
            srv.start()  # master and workers boot while the lock is held
            assert_unavailable(upload(srv, campaign, reports(campaign, 5)))
            blocker.execute("COMMIT")
        finally:
            blocker.close()
        assert upload(srv, campaign, reports(campaign, 5)).json()["accepted"] == 5
