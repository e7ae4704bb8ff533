"""``ldp simulate`` prints the honest comparison (issue 18): each cell's local error beside
central Laplace and Gaussian at the amplified central (epsilon, delta) of its n shuffled
reports, the same figures ``ldp demo`` gives (``simulator.central.shuffle_comparison``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from click.testing import CliRunner

from ldp_cli.main import cli
from simulator.central import shuffle_comparison
from simulator.shuffled_sweep import shuffle_lines, shuffled_cells


def test_simulate_prints_local_against_central_at_the_amplified_budget(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    result = CliRunner().invoke(
        cli,
        ["simulate", "-a", "sex", "-e", "1", "-e", "4", "-r", "3", "--no-plots", "-o", str(out)],
    )
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    # Every line of the comparison is printed, one per cell of the sweep.
    lines = shuffle_lines(results)
    assert len(lines) == 1 + len(results["runs"]) == 3
    for line in lines:
        assert line in result.output
    for run, cell in zip(results["runs"], shuffled_cells(results), strict=True):
        s = cell.comparison
        assert s == shuffle_comparison(run["realised_epsilon"], run["n"])  # the demo's figures
        assert cell.n == results["attributes"]["sex"]["n"] == run["n"]
        # Amplification: far below the local epsilon0 at n ~ 32,000; delta the default.
        assert s.epsilon < run["realised_epsilon"] / 5 and s.delta == 1e-8
        # Against replacement of one value: Laplace b = 2 / epsilon (Delta_1 = 2).
        assert math.isclose(s.laplace.std, math.sqrt(2) * 2 / s.epsilon, rel_tol=1e-12)
        assert s.gaussian.delta == s.delta and s.gaussian.epsilon == s.epsilon
        assert cell.local_rmse == run["metrics"]["rmse"]["mean"]
        assert math.isclose(cell.over_laplace, cell.local_rmse / s.laplace.std)
        assert f"({cell.over_laplace:,.1f}x)" in result.output
