"""``ldp --version`` and ``ldp mechanisms``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from client_sdk import __version__
from ldp_cli.main import cli


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"ldp, version {__version__}"


def test_mechanisms_table_lists_every_candidate_and_the_choice() -> None:
    result = CliRunner().invoke(cli, ["mechanisms", "--epsilon", "1", "--k", "14", "--n", "32561"])
    assert result.exit_code == 0, result.output
    for name in ("grr", "oue", "olh", "ss", "hr", "sue"):
        assert f"\n{name}" in result.output
    assert "auto -> ss: ss has the smallest estimator variance" in result.output
    assert "ss *" in result.output


def test_mechanisms_json_is_machine_readable() -> None:
    result = CliRunner().invoke(
        cli, ["mechanisms", "-e", "1", "--k", "1024", "--max-report-bytes", "8", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["auto"] == "olh"
    excluded = {m["mechanism"] for m in data["mechanisms"] if m["excluded"]}
    assert excluded == {"oue", "ss", "sue"}


def test_mechanisms_refuses_bad_input_with_the_rule() -> None:
    result = CliRunner().invoke(cli, ["mechanisms", "--epsilon", "nan", "--k", "14"])
    assert result.exit_code == 1
    assert "epsilon must be a finite number > 0, got nan" in result.output
    result = CliRunner().invoke(cli, ["mechanisms", "--epsilon", "1", "--k", "1"])
    assert result.exit_code == 1
    assert "at least 2 values" in result.output


def test_help_has_an_example() -> None:
    result = CliRunner().invoke(cli, ["mechanisms", "--help"])
    assert "Example:" in result.output


def test_mechanisms_never_prints_negative_zero_and_shows_the_criterion() -> None:
    # Issue 13: SUE's beta is -1e-17 in floating point and printed as -0.0000.
    result = CliRunner().invoke(cli, ["mechanisms", "-e", "1", "--k", "14"])
    assert result.exit_code == 0, result.output
    assert "-0.0000" not in result.output
    assert "criterion: mean var = count variance per report averaged over the k values" in (
        result.output
    )


def test_mechanisms_expected_distribution_option() -> None:
    weights = ",".join(["10"] + ["1"] * 13)
    result = CliRunner().invoke(
        cli, ["mechanisms", "-e", "2", "--k", "14", "--expected", weights, "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["expected"][0] == pytest.approx(10 / 23)
    assert data["auto"] == "ss" and "expected frequencies" in data["reason"]
    bad = CliRunner().invoke(cli, ["mechanisms", "-e", "2", "--k", "3", "--expected", "1,x,1"])
    assert bad.exit_code == 2 and "comma-separated numbers" in bad.output
    short = CliRunner().invoke(cli, ["mechanisms", "-e", "2", "--k", "3", "--expected", "1,1"])
    assert short.exit_code == 1 and "has 2 weights but the domain has 3" in short.output
