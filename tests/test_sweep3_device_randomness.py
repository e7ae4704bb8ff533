"""Every draw on the device comes from the OS (docs/SDK.md; third sweep: the uploader's
backoff jitter came from a Mersenne Twister, whose state its outputs reveal, and a collector
sees the retry times it causes by answering 503)."""

from __future__ import annotations

import ast
import random
from pathlib import Path

from client_sdk import TelemetryClient

SDK = Path(__file__).resolve().parents[1] / "client_sdk"


def test_the_upload_backoff_is_drawn_from_the_os(tmp_path: Path) -> None:
    with TelemetryClient("http://127.0.0.1:9", ingest_token="t", state_dir=tmp_path) as client:
        assert isinstance(client._uploader._jitter, random.SystemRandom)


def test_no_device_module_makes_a_seedable_python_generator() -> None:
    """``random.Random()`` or the module-level ``random.*`` draws (one shared Mersenne
    Twister) anywhere under client_sdk/; ``random.SystemRandom`` is the OS."""
    found = []
    for path in sorted(SDK.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "random"
                and node.attr != "SystemRandom"
            ):
                found.append(f"{path.relative_to(SDK.parent)}:{node.lineno} random.{node.attr}")
    assert found == []
