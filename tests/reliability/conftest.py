"""Fixtures of the reliability suite, and the figures it collects.

Every test records what it proved in the session's ``figures`` (faults survived, requests
fuzzed, reports lost, load-test numbers). The suite prints them at the end of the run; when the
environment variable ``RELIABILITY_FIGURES`` names a file, they are also written there as JSON
(``bench/reliability.py`` reads it). The figures live in one process: under pytest-xdist (the
README's ``-n 2``) each worker keeps its own share and none is printed, so collect them from a
serial run (``bench/reliability.py`` and docs/RELIABILITY.md run the suite without ``-n``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import CollectorProcess, running_collector

#: Read at import: the suite's autouse fixture removes LDP_* variables, not this one.
FIGURES_FILE = os.environ.get("RELIABILITY_FIGURES")
_FIGURES: dict[str, Any] = {}


@pytest.fixture(scope="session")
def figures() -> dict[str, Any]:
    """The session's figures: ``figures[name] = {...}`` from each test."""
    return _FIGURES


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    """One ``ldp serve`` subprocess (two workers) shared by a module's tests."""
    tmp = tmp_path_factory.mktemp("reliability")
    # Sealed reports on, so every documented operation (POST /v1/sealed too) is exercised.
    env = {"LDP_SEALED_KEY_FILE": str(tmp / "sealed.key")}
    with running_collector(tmp, workers=2, env=env) as srv:
        yield srv


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if FIGURES_FILE and _FIGURES:
        Path(FIGURES_FILE).write_text(json.dumps(_FIGURES, indent=2, sort_keys=True))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _FIGURES:
        return
    terminalreporter.section("reliability figures")
    for name in sorted(_FIGURES):
        terminalreporter.write_line(f"{name}: {json.dumps(_FIGURES[name], sort_keys=True)}")
