"""Import a ``bench/`` script as a module (the scripts import each other by bare name)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent.parent / "bench"


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py``, with ``bench/`` on the path only while it is imported."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))
