"""``ldp demo``: the README's main job, end to end."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ldp_cli.main import cli
from simulator.adult import load_adult

OCCUPATIONS = load_adult("train").column("occupation").labels


def test_demo_prints_every_occupation_with_truth_estimate_and_laplace(tmp_path) -> None:
    out = tmp_path / "demo"
    result = CliRunner().invoke(cli, ["demo", "--output", str(out), "--seed", "5"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert len(OCCUPATIONS) == 14
    for label in OCCUPATIONS:
        assert f"  {label} " in text
    assert "occupation: 30,718 devices" in text and "education: 32,561 devices" in text
    assert "95% CI" in text and "central Laplace" in text and "local/central RMSE" in text
    results = json.loads((out / "results.json").read_text())
    occ = results["attributes"]["occupation"]
    assert occ["truth"][OCCUPATIONS.index("Sales")] == 3650
    # Every interval is estimate +- 1.96 SE; most contain the truth (coverage is tested elsewhere).
    inside = [
        lo <= t <= hi for lo, t, hi in zip(occ["ci_low"], occ["truth"], occ["ci_high"], strict=True)
    ]
    assert sum(inside) >= 10
    # The numeric attribute: the collector's mean of Adult's ages within its own interval
    # (5 SE: a seeded run) and a central Laplace mean far closer.
    age = results["numeric"]["age"]
    assert age["n"] == 32_561 and age["true_mean"] == pytest.approx(38.58, abs=0.01)
    assert abs(age["estimate"] - age["true_mean"]) <= 5 * age["std_error"]
    assert age["ci_low"] < age["estimate"] < age["ci_high"]
    assert abs(age["laplace_mean"] - age["true_mean"]) < 0.1
    assert "age: 32,561 devices, mean mechanism" in text and "central Laplace mean" in text
    # One multi-attribute campaign: sex and income in one report per device, their crosstab.
    cross = results["crosstab"]
    assert cross["n"] == 32_561 and cross["pair"] == ["sex", "income"]
    assert sum(map(sum, cross["truth"])) == 32_561
    assert sum(map(sum, cross["estimate"])) == pytest.approx(32_561)
    assert "sex x income: 32,561 devices, one report each" in text and "sex \\ income" in text
    # The honest comparison through a shuffler: central noise at the amplified (ε, δ).
    shuffle = occ["shuffle"]
    assert 0 < shuffle["central_epsilon"] < shuffle["epsilon0"] <= 1.0
    assert shuffle["n"] == occ["n"] and shuffle["central_delta"] == 1e-8
    assert shuffle["laplace_errors"]["rmse"] > occ["central_errors"]["rmse"]
    assert "through a shuffler: central (epsilon" in text
    for path in results["plots"]:
        assert (out / path.split("/")[-1]).exists()
