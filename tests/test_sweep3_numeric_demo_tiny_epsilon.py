"""``ldp demo`` and ``ldp simulate`` at epsilons the collector takes, and run after run.

* A second demo into the same output directory at another epsilon found no reports (422): the
  devices' state was kept in the output directory, so the second run's SDK reused the first
  run's cached campaign (another digest), and the new collector refused its uploads as stale.
* At a tiny epsilon (1e-6, valid for every mechanism) the shuffled comparison's amplified
  epsilon is 0, and building a central Laplace baseline at 0 raised: ``ldp simulate`` ended in
  a traceback and ``ldp demo`` in an error.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from click.testing import CliRunner

from ldp_cli.main import cli
from simulator.central import shuffle_comparison
from simulator.demo import run_demo


def quick_demo(out: Path, epsilon: float) -> dict:
    return run_demo(
        attributes=("sex",),
        epsilon=epsilon,
        output=out,
        seed=1,
        echo=lambda _: None,
        numeric=False,
        crosstab=False,
    )


def test_a_second_demo_at_another_epsilon_into_the_same_directory_counts_every_device(
    tmp_path: Path,
) -> None:
    first = quick_demo(tmp_path, 2.0)
    second = quick_demo(tmp_path, 1.0)
    n = first["attributes"]["sex"]["n"]
    assert n == 32561 and second["attributes"]["sex"]["n"] == n
    assert json.loads((tmp_path / "results.json").read_text())["epsilon"] == 1.0


def test_a_shuffled_comparison_at_central_epsilon_zero_has_unbounded_central_noise() -> None:
    s = shuffle_comparison(1e-6, 30000)
    assert s.epsilon == 0.0 and 0 < s.delta < 1
    assert math.isinf(s.laplace.std) and math.isinf(s.gaussian.std)


def test_a_tiny_epsilon_demo_and_simulation_finish(tmp_path: Path) -> None:
    results = quick_demo(tmp_path / "demo", 1e-6)
    shuffle = results["attributes"]["sex"]["shuffle"]
    assert shuffle["central_epsilon"] == 0.0 and shuffle["laplace_errors"] is None
    r = CliRunner().invoke(
        cli,
        ["simulate", "-a", "sex", "-e", "0.000001", "-r", "1", "--no-plots", "-o", str(tmp_path)],
    )
    assert r.exit_code == 0, r.output
    assert "no central release at that budget has finite error" in r.output
