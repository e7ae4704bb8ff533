"""Readiness (collector/views/health.py): a committed write probe, its outcome reused for
``LDP_READY_CACHE_SECONDS``, and storage errors met by requests counted as failed probes.

The probe's write is refused by a real SQLite trigger on the probe's table, created and dropped
from a second connection (the disk-full the probe exists to notice, without filling a disk).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

from collector import create_app
from collector.errors import StorageError, StorageUnavailable
from collector.views.health import Readiness
from tests.support.server import TOKENS


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    app = create_app({"database": str(tmp_path / "collector.db"), **TOKENS})
    with app.app_context():
        yield app


def refuse_writes(app: Flask, refused: bool) -> None:
    with sqlite3.connect(app.config["LDP"]["database"]) as conn:
        if refused:
            conn.execute(
                "CREATE TRIGGER full_disk BEFORE INSERT ON schema_version "
                "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
            )
        else:
            conn.execute("DROP TRIGGER full_disk")


def test_the_first_check_probes_and_a_failed_probe_is_kept_for_the_period(app: Flask) -> None:
    refuse_writes(app, True)
    ready = Readiness(seconds=3600)
    with pytest.raises(StorageUnavailable, match="disk is full"):
        ready.check()  # the first check probes at once
    refuse_writes(app, False)
    with pytest.raises(StorageUnavailable, match="disk is full"):
        ready.check()  # within the period: the kept outcome, no new probe
    fresh = Readiness(seconds=0)
    fresh.check()  # a period of 0 probes every time: the store takes writes again


def test_a_good_probe_is_kept_for_the_period_and_redone_after_it(app: Flask) -> None:
    ready = Readiness(seconds=3600)
    ready.check()
    refuse_writes(app, True)
    ready.check()  # kept
    with pytest.raises(StorageUnavailable):
        Readiness(seconds=0).check()  # probes every time


def test_a_storage_error_met_by_a_request_fails_readiness_at_once(app: Flask) -> None:
    ready = Readiness(seconds=3600)
    ready.check()  # a good probe, kept for an hour
    met = StorageUnavailable("the database failed: disk I/O error")
    ready.failed(met)
    with pytest.raises(StorageError) as raised:
        ready.check()
    assert raised.value is met
