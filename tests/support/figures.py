"""The reliability suite's figures: what each test proved, kept per process.

Tests record into ``FIGURES`` (through the ``figures`` fixture of tests/reliability). Under
pytest-xdist (the README's ``-n 2``) every worker holds its own share: tests/conftest.py hands
each worker's share to the controlling process when the worker ends, so the run prints all of
them once, and writes them to the file named by ``RELIABILITY_FIGURES`` (``bench/reliability.py``
reads it) from the process that saw them all.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: name -> what one test proved (faults survived, requests fuzzed, reports lost, load figures).
FIGURES: dict[str, Any] = {}

#: Read at import: the suite's autouse fixture removes LDP_* variables, not this one.
FIGURES_FILE = os.environ.get("RELIABILITY_FIGURES")

#: The key of a worker's share in pytest-xdist's ``workeroutput``.
WORKER_KEY = "reliability_figures"


def export() -> str:
    """This process's figures, as a worker hands them on."""
    return json.dumps(FIGURES, sort_keys=True)


def merge(exported: str) -> None:
    """Add a worker's share (``export``'s text) to this process's figures."""
    FIGURES.update(json.loads(exported))


def write_file() -> None:
    """Write the figures where ``RELIABILITY_FIGURES`` says, when it is set and there are any."""
    if FIGURES_FILE and FIGURES:
        Path(FIGURES_FILE).write_text(json.dumps(FIGURES, indent=2, sort_keys=True))


def summary_lines() -> list[str]:
    """One line per figure, sorted by name, for the terminal summary."""
    return [f"{name}: {json.dumps(FIGURES[name], sort_keys=True)}" for name in sorted(FIGURES)]
