"""Importing the SDK stays small: standard library, NumPy and requests only."""

from __future__ import annotations

import subprocess
import sys

import client_sdk

FORBIDDEN = ("flask", "werkzeug", "sqlite_utils", "click", "collector", "aggregator", "simulator")


def test_import_pulls_in_no_server_side_packages() -> None:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from client_sdk import TelemetryClient"],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in out.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "client_sdk" in imported and "requests" in imported and "numpy" in imported
    assert not imported & set(FORBIDDEN), sorted(imported & set(FORBIDDEN))


def test_public_names() -> None:
    assert client_sdk.__all__ == sorted(client_sdk.__all__)
    assert {"TelemetryClient", "Report", "BudgetSpent", "ClientClosed"} <= set(client_sdk.__all__)
    assert {"PrivacyBudgetExceeded", "UnknownCampaign", "TransportError"} <= set(client_sdk.__all__)
