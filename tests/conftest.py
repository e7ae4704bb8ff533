"""Shared fixtures: no test sees the operator's LDP_* settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_ADULT = REPO.parent / "shared" / "data" / "adult" / "adult.data"


@pytest.fixture(autouse=True)
def _clean_ldp_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("LDP_"):
            monkeypatch.delenv(name, raising=False)
