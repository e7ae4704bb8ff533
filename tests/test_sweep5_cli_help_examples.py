"""Every leaf command of the operator's and analyst's CLI shows an ``Example:`` in --help.

House style (docs STYLE.md, "CLI"): ``--help`` on each command with an ``Example:`` block.
Found by the fifth CLI sweep: ``ldp campaign show --help`` had none, though its siblings
create, list and archive do.

Real parts: the ``ldp`` CLI (click's runner).
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ldp_cli.main import cli

LEAVES = [
    ["campaign", "create"],
    ["campaign", "list"],
    ["campaign", "show"],
    ["campaign", "archive"],
    ["tally", "verify"],
    ["mix"],
    ["retention", "run"],
    ["audit"],
    ["mechanisms"],
    ["estimate"],
]


@pytest.mark.parametrize("command", LEAVES, ids=["-".join(c) for c in LEAVES])
def test_help_has_an_example(command: list[str]) -> None:
    result = CliRunner().invoke(cli, [*command, "--help"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "  Example:" in lines, result.output
    example = lines[lines.index("  Example:") + 1 :]
    assert any(f"ldp {' '.join(command)} " in line for line in example), result.output
