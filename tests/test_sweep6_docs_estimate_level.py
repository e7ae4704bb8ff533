"""``ldp estimate --level`` states the level asked for, for every kind of campaign.

docs/AGGREGATOR.md: ``ldp estimate ... [--level 0.95]`` sets the level of every interval, and
the answer echoes the level asked for. The table's header wrote it with ``{:.0%}``, so
``--level 0.999`` (or 0.995) printed "100% intervals" above 99.9% intervals, and ``--level
0.001`` "0% intervals"; the dashboard writes the same answer's level as 99.9%. Found by the
docs sweep of 2026-11-28, running the documented commands.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from client_sdk import TelemetryClient
from collector import EmbeddedCollector
from ldp_cli.main import cli

N = 600
CAMPAIGNS = {
    "cat": ["--domain", "a,b,c", "-m", "oue", "-e", "2"],
    "open": ["--max-length", "8", "-m", "pem", "-e", "4"],
    "mean": ["--bounds", "0", "100", "-m", "piecewise", "-e", "2"],
    "dist": ["--bounds", "0", "10", "-m", "square_wave", "-e", "2"],
    "multi": [
        "--attributes",
        '{"o": ["a", "b"], "s": ["F", "M"]}',
        "--pair",
        "o,s",
        "-m",
        "smp",
        "-e",
        "2",
    ],
}


def _values(cid: str, rng: np.random.Generator) -> object:
    if cid == "cat":
        return list(rng.choice(["a", "b", "c"], N))
    if cid == "open":
        return list(rng.choice(["alpha", "beta"], N))
    if cid == "mean":
        return [float(x) for x in rng.uniform(0, 100, N)]
    if cid == "dist":
        return [int(x) for x in rng.integers(0, 11, N)]
    return {"o": list(rng.choice(["a", "b"], N)), "s": list(rng.choice(["F", "M"], N))}


@pytest.fixture(scope="module")
def store() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "ldp.db"
        rng = np.random.default_rng(5)
        with EmbeddedCollector(db) as collector:
            for cid, args in CAMPAIGNS.items():
                made = CliRunner().invoke(cli, ["campaign", "create", cid, "--db", str(db), *args])
                assert made.exit_code == 0, made.output
            with TelemetryClient(
                collector.url,
                ingest_token=collector.tokens["ingest"],
                state_dir=Path(tmp) / "device",
            ) as client:
                for cid in CAMPAIGNS:
                    client.report_many(cid, _values(cid, rng), simulate_devices=True)  # type: ignore[arg-type]
                assert client.flush(timeout=60)
        yield db


@pytest.mark.parametrize("cid", list(CAMPAIGNS))
@pytest.mark.parametrize(
    ("level", "shown"),
    [
        ("0.999", "99.9%"),
        ("0.995", "99.5%"),
        # The eighth sweep: "%g" (six digits) printed 0.9999999 as "100% intervals".
        ("0.9999999", "99.99999%"),
        ("0.9999995", "99.99995%"),
        ("1e-7", "1e-05%"),
    ],
)
def test_the_table_states_the_level_asked_for(
    store: Path, cid: str, level: str, shown: str
) -> None:
    result = CliRunner().invoke(
        cli, ["estimate", cid, "--db", str(store), "--level", level], env={"LDP_URL": None}
    )
    assert result.exit_code == 0, result.output
    assert f"{shown} interval" in result.output
    assert "100%" not in result.output and " 0% interval" not in result.output


@pytest.mark.parametrize("cid", ["cat", "mean"])
def test_the_usual_levels_read_as_before(store: Path, cid: str) -> None:
    for level, shown in (("0.95", "95% interval"), ("0.9", "90% interval")):
        result = CliRunner().invoke(
            cli, ["estimate", cid, "--db", str(store), "--level", level], env={"LDP_URL": None}
        )
        assert result.exit_code == 0, result.output
        assert shown in result.output
