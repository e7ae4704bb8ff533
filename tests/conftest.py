"""Shared fixtures: no test sees the operator's LDP_* settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _clean_ldp_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("LDP_"):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The collector's ``--database``: a SQLite file, then a fresh PostgreSQL database
    (dropped afterwards; tests.support.postgres skips it, or fails under CI, if unreachable)."""
    from tests.support.postgres import collector_database

    with collector_database(request.param, tmp_path) as url:
        yield url
