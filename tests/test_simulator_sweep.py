"""In-process sweeps end to end: results, theory agreement, baselines and written outputs."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ldp_cli.main import cli
from simulator.adult import load_adult
from simulator.errors import InvalidSetting
from simulator.sweep import SweepSettings, expand_mechanisms, mse_agreement, run_sweep


@pytest.fixture(scope="module")
def adult():
    return load_adult("train")


def test_inprocess_sweep_end_to_end(adult, tmp_path) -> None:
    settings = SweepSettings(
        attributes=("occupation", "race"), epsilons=(1.0, 4.0), mechanisms=("all",), repetitions=8
    )
    results = run_sweep(adult, settings)
    names_occupation = {r["mechanism"] for r in results["runs"] if r["attribute"] == "occupation"}
    assert names_occupation == {"grr", "oue", "olh", "ss", "hr", "sue", "auto"}  # rr needs k = 2
    for run in results["runs"]:
        assert run["n"] == (30_718 if run["attribute"] == "occupation" else 32_561)
        # Local DP is far noisier than central Laplace at the same epsilon.
        assert run["rmse_over_laplace"] > 10
        assert run["realised_epsilon"] <= run["epsilon"]
    # Pooled over cells, the empirical MSE follows the closed form. Each cell's MSE averages
    # 8 repetitions of k values; the pooled ratio's relative SD is ~ sqrt(2/(8 k cells)) < 5%.
    for name, row in mse_agreement(results).items():
        assert 0.75 < row["pooled"] < 1.3, name
    from simulator.report import write_outputs

    written = write_outputs(results, tmp_path)
    assert json.loads(written["results"].read_text())["replays"] == results["replays"]
    assert "occupation" in written["report"].read_text()
    assert all(p.exists() and p.stat().st_size > 1000 for p in written["plots"])


def test_sweep_is_reproducible_from_its_seed(adult) -> None:
    settings = SweepSettings(attributes=("race",), epsilons=(1.0,), repetitions=2, seed=7)
    one, two = run_sweep(adult, settings), run_sweep(adult, settings)
    assert [r["mse"] for r in one["runs"]] == [r["mse"] for r in two["runs"]]
    other = run_sweep(adult, SweepSettings(attributes=("race",), epsilons=(1.0,), repetitions=2))
    assert [r["mse"] for r in other["runs"]] != [r["mse"] for r in one["runs"]]


def test_bad_settings_are_refused_with_the_rule() -> None:
    with pytest.raises(InvalidSetting, match="epsilon must be a finite number > 0"):
        SweepSettings(epsilons=(0.0,))
    with pytest.raises(InvalidSetting, match="repetitions must be an integer >= 1"):
        SweepSettings(repetitions=0)
    with pytest.raises(InvalidSetting, match="needs a binary attribute"):
        expand_mechanisms(["rr"], 14)
    with pytest.raises(InvalidSetting, match="unknown mechanism"):
        expand_mechanisms(["nope"], 14)
    assert "rr" in expand_mechanisms(["all"], 2)


def test_cli_simulate_inprocess_writes_the_outputs(tmp_path) -> None:
    out = tmp_path / "sim"
    result = CliRunner().invoke(
        cli,
        ["simulate", "-a", "sex", "-e", "1", "-m", "rr", "-m", "auto", "-r", "3", "-o", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "empirical MSE / theory" in result.output
    assert (out / "results.json").exists() and (out / "report.md").exists()
    result = CliRunner().invoke(cli, ["simulate", "-a", "nope", "-r", "1", "-o", str(out)])
    assert result.exit_code == 1 and "no attribute 'nope'" in result.output


def test_cli_simulate_reads_any_csv(tmp_path) -> None:
    data = tmp_path / "pets.csv"
    data.write_text("pet,colour\n" + "cat,black\ndog,brown\nfish,?\n" * 200)
    out = tmp_path / "csv-out"
    result = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--data",
            str(data),
            "--column",
            "pet",
            "-e",
            "2",
            "-r",
            "2",
            "-o",
            str(out),
            "--no-plots",
        ],
    )
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    assert results["attributes"]["pet"]["labels"] == ["cat", "dog", "fish"]
