"""``ldp campaign create --bounds`` far out: the error names the bounds as numbers people read.

Found by the fifth CLI sweep: ``ldp campaign create x --db ldp.db --bounds -1e308 1e308 -e 1``
answered "bounds (-100000000000000001097906362944045541740492309677311846...336, ...) are too
far apart for a float": the CLI turned each integral bound into a Python integer (so that 17
is sent as ``17``, not ``17.0``), 309 digits here. Integers stay integers only while a float
holds them exactly (|x| <= 2^53); the message is now "bounds (-1e+308, 1e+308) ...".

Real parts: the ``ldp`` CLI (click's runner) on a real SQLite collector database.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.storage import open_storage
from ldp_cli.main import cli


@pytest.fixture
def database(tmp_path: Path) -> str:
    path = str(tmp_path / "ldp.db")
    store = open_storage(path)
    store.migrate()
    store.close()
    return path


def test_huge_bounds_are_named_as_floats(database: str) -> None:
    result = CliRunner().invoke(
        cli,
        ["campaign", "create", "x", "--db", database, "--bounds", "-1e308", "1e308", "-e", "1"],
    )
    assert result.exit_code == 1
    assert "bounds (-1e+308, 1e+308) are too far apart for a float" in result.output
    assert "0000000000" not in result.output


def test_small_integral_bounds_stay_integers() -> None:
    from ldp_cli.campaign_cmd import _number

    assert _number(17.0) == 17 and isinstance(_number(17.0), int)
    assert _number(2.0**53) == 2**53 and isinstance(_number(2.0**53), int)
    assert _number(17.5) == 17.5
    assert isinstance(_number(1e308), float) and isinstance(_number(-(2.0**54)), float)
