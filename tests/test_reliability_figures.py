"""The reliability suite's figures survive pytest-xdist (tests/support/figures.py).

Each worker keeps its own figures; tests/conftest.py hands them to the controlling process.
A real pytest run on two processes records one figure per test and must print and write them
all, from both workers, as a serial run does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

RECORDING_TESTS = """
import os

import pytest

from tests.support.figures import FIGURES


@pytest.mark.parametrize("i", range(6))
def test_records_a_figure(i):
    FIGURES[f"figure_{i}"] = {"i": i, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
"""


def _run(tmp_path: Path, workers: int) -> tuple[dict[str, dict[str, object]], str]:
    test_file = tmp_path / "test_recording.py"
    test_file.write_text(RECORDING_TESTS)
    out = tmp_path / f"figures_{workers}.json"
    # A clean slate: this test may itself run on an xdist worker, whose variables the inner
    # run must not inherit.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["RELIABILITY_FIGURES"] = str(out)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            str(workers),
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            # The installed plugins this run has no use for: schemathesis's alone imports
            # hypothesis and graphql in every process (most of a start-up on a loaded machine).
            "-p",
            "no:schemathesis",
            "-p",
            "no:hypothesispytest",
            "-p",
            "no:anyio",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            str(test_file),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text()), done.stdout


@pytest.mark.parametrize("workers", [0, 2])
def test_every_figure_is_printed_and_written(tmp_path: Path, workers: int) -> None:
    figures, stdout = _run(tmp_path, workers)
    assert sorted(figures) == [f"figure_{i}" for i in range(6)]
    assert "reliability figures" in stdout
    for name in figures:
        assert f"{name}: " in stdout
    seen = {str(f["worker"]) for f in figures.values()}
    # On two processes both workers recorded figures: what the merge exists for.
    assert seen == ({"main"} if workers == 0 else {"gw0", "gw1"})
