"""Shared fixtures: no test sees the operator's LDP_* settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


# The reliability suite's figures (tests/support/figures.py). Here, not in tests/reliability,
# because under pytest-xdist the controlling process collects no tests and loads only this
# conftest: it receives each worker's share, prints the lot and writes the file.


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from tests.support import figures

    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[figures.WORKER_KEY] = figures.export()
        return
    figures.write_file()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist: a worker ended; keep its share of the figures."""
    from tests.support import figures

    exported = getattr(node, "workeroutput", {}).get(figures.WORKER_KEY)
    if exported:
        figures.merge(exported)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.support import figures

    lines = figures.summary_lines()
    if lines:
        terminalreporter.section("reliability figures")
        for line in lines:
            terminalreporter.write_line(line)
