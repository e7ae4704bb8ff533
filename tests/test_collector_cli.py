"""`ldp serve` and `ldp tally verify`: help with an Example block, documented in COLLECTOR.md."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ldp_cli.main import cli

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args", [["serve"], ["tally", "verify"], ["retention", "run"]])
def test_help_has_an_example(args: list[str]) -> None:
    result = CliRunner().invoke(cli, [*args, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example:" in result.output
    assert f"ldp {' '.join(args)}" in (REPO / "docs" / "COLLECTOR.md").read_text()


def test_tally_verify_on_a_fresh_database_says_what_to_do(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    result = CliRunner().invoke(cli, ["tally", "verify", "--database", str(empty)])
    assert result.exit_code != 0 and "ldp serve --database" in result.output
