"""``bench/quantile_coverage.py`` and ``bench/numeric.py`` refuse impossible options (usage errors).

Before: ``--shard 1/0`` and ``--shard x`` ended in a traceback, and ``--runs 0`` exited 0
printing coverage shares of -0.00 and widths nan.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "quantile_coverage.py"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shard", "1/0"], "expected I/K with 0 <= I < K, got '1/0'"),
        (["--shard", "x"], "expected I/K, e.g. 0/2, got 'x'"),
        (["--runs", "0"], "argument --runs: must be at least 1, got 0"),
        (["--bootstrap", "1"], "argument --bootstrap: must be at least 2, got 1"),
    ],
)
def test_impossible_options_are_usage_errors(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


NUMERIC = SCRIPT.parent / "numeric.py"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "spedd"], "unknown section(s) 'spedd'; choose from speed, sw, mse"),
        (["--seeds", "x"], "argument --seeds: not an integer: 'x'"),
    ],
)
def test_bench_numeric_refuses_a_misspelt_section(args: list[str], message: str) -> None:
    """``--only spedd`` ran no section and exited 0, as if the bench had passed."""
    done = subprocess.run(
        [sys.executable, str(NUMERIC), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr and done.stdout == ""
