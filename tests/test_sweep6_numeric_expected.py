"""Numeric ``auto`` chooses by the error the analyst gets when the campaign declares its values.

Without a declaration ``auto`` keeps its rule, the smallest worst-case variance over the bounds
(Hybrid at epsilon >= 1, the minimax choice). A campaign may declare ``expected={"mean", "sd"}``
of its values (a pilot, a previous campaign): ``auto`` then takes the smallest per-report
variance averaged over such values, which is exact for any distribution with those two moments
because each mechanism's variance is a quadratic in the value. On Adult that makes ``auto``
Piecewise for ``age`` at epsilon >= 1 (Hybrid's MSE was 1.03-1.65x Piecewise's) and Duchi for
``capital-gain`` (Hybrid's was up to 2.26x): ``bench/numeric.py --only mse``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create
from client_sdk.mechanisms.numeric import (
    MEAN_MECHANISMS,
    ExpectedValues,
    check_expected_values,
    choose_mean,
    expected_variance,
)
from collector.campaigns import campaign_from_request
from collector.errors import APIError
from ldp_cli.main import cli
from tests.support.server import running_collector

AGE = (17.0, 90.0)
#: Mean and sd of Adult's clipped ``age`` (test file), as the bench declares them.
AGE_VALUES = {"mean": 38.77, "sd": 13.85}


@pytest.mark.parametrize("name", ["duchi", "piecewise", "hybrid", "1bitmean"])
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_the_declared_variance_is_the_mean_variance_of_any_values_with_those_moments(
    name: str, epsilon: float
) -> None:
    """Two samples with different shapes and the same mean and sd: each mechanism's exact
    ``mean_variance`` (n times it) equals ``expected_variance`` up to the rounding term, which
    is at most a quarter of a grid step squared."""
    mech = MEAN_MECHANISMS[name](epsilon=epsilon, bounds=AGE)
    rng = np.random.default_rng(5)
    for values in (rng.uniform(20, 80, 4001), np.clip(rng.normal(40, 9, 4001), *AGE)):
        declared = ExpectedValues(float(values.mean()), float(values.std()))
        step = (AGE[1] - AGE[0]) / mech.grid.size
        got = expected_variance(mech, declared)
        exact = mech.mean_variance(values) * values.size
        assert (
            abs(exact - got)
            <= 0.25 * step * step * (1 + abs(mech.variance_coefficients[2])) + 1e-9 * exact
        )


@pytest.mark.parametrize("epsilon", [1.0, 2.0, 4.0])
def test_declared_values_near_the_middle_choose_piecewise(epsilon: float) -> None:
    choice = choose_mean(epsilon=epsilon, bounds=AGE, expected=AGE_VALUES)
    spreads = {c.name: c.expected_variance for c in choice.candidates}
    assert choice.chosen.name == min(spreads, key=lambda n: spreads[n]) == "piecewise"
    assert spreads["piecewise"] < spreads["hybrid"]  # type: ignore[operator]
    # Undeclared, the worst case still decides: Hybrid, as before.
    assert choose_mean(epsilon=epsilon, bounds=AGE).chosen.name == "hybrid"
    assert create("auto", epsilon=epsilon, bounds=AGE).name == "hybrid"
    assert create("auto", epsilon=epsilon, bounds=AGE, expected=AGE_VALUES).name == "piecewise"


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_declared_values_at_a_bound_choose_duchi(epsilon: float) -> None:
    """capital-gain: most values 0 on (0, 100,000)."""
    declared = {"mean": 1077.6, "sd": 7385.3}
    choice = choose_mean(epsilon=epsilon, bounds=(0, 100_000), expected=declared)
    assert choice.chosen.name == "duchi"
    assert choice.expected == ExpectedValues(1077.6, 7385.3)
    assert "declared" in choice.criterion


def test_the_choice_is_a_plain_config_devices_rebuild() -> None:
    """The resolved config names the chosen mechanism only: the declaration is not in it, and
    the campaign's digest is that of the same mechanism created by name."""
    body = {"id": "age", "bounds": [17, 90], "epsilon": 1.0}
    auto = campaign_from_request({**body, "mechanism": "auto", "expected": AGE_VALUES})
    named = campaign_from_request({**body, "mechanism": "piecewise"})
    assert auto.mechanism_config == named.mechanism_config
    assert "expected" not in json.dumps(auto.to_record())
    assert auto.digest == named.digest


@pytest.mark.parametrize(
    ("expected", "words"),
    [
        ({"mean": 38.0}, "must be {'mean': m, 'sd': s}"),
        ([38.0, 13.0], "must be {'mean': m, 'sd': s}"),
        ({"mean": 38.0, "sd": 13.0, "n": 5}, "must be {'mean': m, 'sd': s}"),
        ({"mean": True, "sd": 13.0}, "finite numbers"),
        ({"mean": float("nan"), "sd": 13.0}, "finite numbers"),
        ({"mean": 95.0, "sd": 1.0}, "outside the bounds"),
        ({"mean": 38.0, "sd": -1.0}, "expected sd must be in [0, 33.0454]"),
        ({"mean": 38.0, "sd": 50.0}, "expected sd must be in [0, 33.0454]"),
        ({"mean": 17.0, "sd": 0.5}, "expected sd must be in [0, 0]"),
    ],
)
def test_a_declaration_no_values_in_the_bounds_can_have_is_refused(
    expected: object, words: str
) -> None:
    with pytest.raises(InvalidParameter) as info:
        check_expected_values(expected, AGE)
    assert words in str(info.value)
    with pytest.raises(APIError) as refused:
        campaign_from_request(
            {
                "id": "age",
                "bounds": [17, 90],
                "mechanism": "auto",
                "epsilon": 1,
                "expected": expected,
            }
        )
    assert refused.value.status == 400 and words in refused.value.message


def test_the_extreme_declarations_are_accepted() -> None:
    assert check_expected_values({"mean": 17, "sd": 0}, AGE) == ExpectedValues(17.0, 0.0)
    assert check_expected_values({"mean": 53.5, "sd": 36.5}, AGE).sd == 36.5  # half at each end


def test_a_declaration_for_a_named_mechanism_is_refused() -> None:
    with pytest.raises(InvalidParameter, match="apply only to 'auto'"):
        create("duchi", epsilon=1.0, bounds=AGE, expected=AGE_VALUES)
    with pytest.raises(APIError, match="apply only to 'auto'"):
        campaign_from_request(
            {
                "id": "a",
                "bounds": [17, 90],
                "mechanism": "hybrid",
                "epsilon": 1,
                "expected": AGE_VALUES,
            }
        )


def test_the_cli_compares_and_creates_with_declared_values(tmp_path: Path) -> None:
    runner = CliRunner()
    shown = runner.invoke(
        cli,
        [
            "mechanisms",
            "-e",
            "2",
            "--bounds",
            "17",
            "90",
            "--expected",
            "38.77,13.85",
            "--n",
            "100",
        ],
    )
    assert shown.exit_code == 0, shown.output
    assert "piecewise *" in shown.output and "auto -> piecewise" in shown.output
    assert "declared" in shown.output
    data = json.loads(
        runner.invoke(
            cli, ["mechanisms", "-e", "2", "--bounds", "17", "90", "--format", "json"]
        ).output
    )
    assert data["auto"] == "hybrid" and data["expected"] is None
    assert [m["mechanism"] for m in data["mechanisms"]] == ["duchi", "piecewise", "hybrid"]
    refused = runner.invoke(cli, ["mechanisms", "-e", "2"])
    assert refused.exit_code == 2 and "--k" in refused.output and "--bounds" in refused.output

    with running_collector(tmp_path) as srv:  # a collector's file, made by ldp serve --init
        db = srv.db_path
    create = ["campaign", "create", "--db", str(db), "--bounds", "17", "90", "-e", "2"]
    made = runner.invoke(cli, [*create, "age", "--expected", "38.77,13.85", "--format", "json"])
    assert made.exit_code == 0, made.output
    assert json.loads(made.output)["mechanism"]["mechanism"] == "piecewise"
    one = runner.invoke(cli, [*create, "b", "--expected", "38"])
    assert one.exit_code == 2 and "MEAN,SD" in one.output
