"""Fixtures of the reliability suite.

Every test records what it proved in the session's ``figures`` (faults survived, requests
fuzzed, reports lost, load-test numbers). The suite prints them at the end of the run; when the
environment variable ``RELIABILITY_FIGURES`` names a file, they are also written there as JSON
(``bench/reliability.py`` reads it). The store and its merging across pytest-xdist workers are
in tests/support/figures.py; the hooks that print and write them, in tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.figures import FIGURES
from tests.support.server import CollectorProcess, running_collector


@pytest.fixture(scope="session")
def figures() -> dict[str, Any]:
    """The session's figures: ``figures[name] = {...}`` from each test."""
    return FIGURES


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    """One ``ldp serve`` subprocess (two workers) shared by a module's tests."""
    tmp = tmp_path_factory.mktemp("reliability")
    # Sealed reports on, so every documented operation (POST /v1/sealed too) is exercised.
    env = {"LDP_SEALED_KEY_FILE": str(tmp / "sealed.key")}
    with running_collector(tmp, workers=2, env=env) as srv:
        yield srv
