"""docs/AGGREGATOR.md stays in step with the code: methods, default, constants, CLI options."""

from __future__ import annotations

from pathlib import Path

import aggregator
from aggregator.postprocess import DEFAULT_EM_MAX_ITERATIONS, DEFAULT_EM_TOLERANCE
from ldp_cli.estimate_cmd import estimate_command

DOCS = (Path(__file__).resolve().parents[1] / "docs" / "AGGREGATOR.md").read_text()


def test_every_method_and_the_default_are_documented() -> None:
    for name in aggregator.POSTPROCESS_METHODS:
        assert f"| `{name}`" in DOCS, name
    assert f"`{aggregator.DEFAULT_POSTPROCESS}` (**default**)" in DOCS


def test_em_constants_in_the_docs_match_the_code() -> None:
    tol = f"{DEFAULT_EM_TOLERANCE:.0e}".replace("e-0", "e-")
    assert f"DEFAULT_EM_TOLERANCE = {tol}" in DOCS
    assert f"DEFAULT_EM_MAX_ITERATIONS = {DEFAULT_EM_MAX_ITERATIONS:,}" in DOCS


def test_every_cli_option_is_documented() -> None:
    for param in estimate_command.params:
        for opt in getattr(param, "opts", []):
            if opt.startswith("--") and opt != "--token":
                assert opt in DOCS, opt
    assert "LDP_ANALYST_TOKEN" in DOCS


def test_the_privacy_statement_is_there() -> None:
    assert "never change the epsilon-LDP" in DOCS
