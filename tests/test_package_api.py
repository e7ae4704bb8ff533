"""Each package's public API is pinned: ``__all__`` is sorted and every name exists."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PACKAGES = ["client_sdk", "client_sdk.mechanisms", "aggregator"]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert exported == sorted(exported)
    for attr in exported:
        assert hasattr(module, attr), attr


def test_mechanisms_api_names() -> None:
    from client_sdk import mechanisms

    assert {"create", "compare", "from_config", "Mechanism", "Tally"} <= set(mechanisms.__all__)


def test_client_sdk_imports_only_what_a_device_has() -> None:
    """The SDK imports the standard library, NumPy and requests: no Flask, no SQL layer."""
    code = (
        "import sys, client_sdk, client_sdk.mechanisms; "
        "bad = [m for m in ('flask', 'sqlite_utils', 'click', 'collector', 'aggregator', "
        "'simulator', 'scipy', 'matplotlib') if m in sys.modules]; print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
