"""``ldp simulate`` / ``ldp demo``: arguments a run would ignore or could not use, refused up
front with one line and a non-zero exit code.

* A scenario silently ignored options that do not apply to it (``--scenario book-ch13 -e 3``
  ran the book's fixed epsilons; ``--scenario multi -a sex`` replayed its own attributes), and
  ``--url`` without ``--mode http`` ran in-process.
* ``--scenario book-ch13 --no-plots`` wrote the two PNGs anyway.
* An output directory that cannot be created ended in a traceback (``simulate``: after the
  whole run).
* ``ldp demo -e 17`` started a collector and left an empty output directory before refusing.
* ``-e 1e-300`` ended in an OverflowError traceback (the central baseline was built before the
  mechanism could refuse the epsilon); ``--scenario numeric`` and ``--open-domain`` claimed
  epsilon could be anything in (0, 50) and ran the valid epsilons before refusing one above 16.
* ``-m sue-book`` / ``-m rr-two-coin`` (documented values of ``-m``) failed at every epsilon
  but their own with the library's "give one of them".
* A repeated ``-a`` or ``-e`` replayed and reported the same cell twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ldp_cli.main import cli
from simulator.errors import InvalidSetting
from simulator.numeric_scenario import NumericSettings
from simulator.openended_scenario import OpenDomainSettings
from simulator.sweep import SweepSettings


def simulate(*args: str) -> Result:
    return CliRunner().invoke(cli, ["simulate", *args])


def one_line_error(result: Result, code: int) -> str:
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # not a traceback
    (line,) = [x for x in result.output.splitlines() if x.startswith("Error: ")]
    return line


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--scenario", "book-ch13", "-e", "3"], "--epsilon/-e"),
        (["--scenario", "book-ch13", "-a", "sex"], "--attribute/-a"),
        (["--scenario", "book-ch13", "--mode", "http"], "--mode"),
        (["--scenario", "numeric", "-m", "grr"], "--mechanism/-m"),
        (["--scenario", "numeric", "--data", __file__, "--column", "x"], "--data"),
        (["--scenario", "multi", "-a", "sex"], "--attribute/-a"),
        (["--scenario", "multi", "--missing", "keep"], "--missing"),
        (["--open-domain", "zipf", "-m", "oue"], "--mechanism/-m"),
    ],
)
def test_an_option_a_scenario_ignores_is_a_usage_error(
    tmp_path: Path, args: list[str], flag: str
) -> None:
    out = tmp_path / "out"
    line = one_line_error(simulate(*args, "-o", str(out)), 2)
    assert f"{flag} does not apply to" in line
    assert not out.exists()  # nothing ran


def test_url_without_http_mode_is_a_usage_error(tmp_path: Path) -> None:
    line = one_line_error(
        simulate("--url", "http://127.0.0.1:9", "-a", "sex", "-o", str(tmp_path / "o")), 2
    )
    assert "--url applies to --mode http" in line


def test_book_no_plots_writes_no_png(tmp_path: Path) -> None:
    out = tmp_path / "book"
    result = simulate("--scenario", "book-ch13", "-r", "2", "--no-plots", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["book-ch13.json", "book-ch13.md"]
    assert ".png" not in (out / "book-ch13.md").read_text()


def test_an_output_that_cannot_be_created_is_a_one_line_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    target = blocker / "out"  # a directory inside a regular file
    line = one_line_error(
        simulate("-a", "sex", "-e", "1", "-r", "1", "--no-plots", "-o", str(target)), 1
    )
    assert line.startswith(f"Error: cannot write {target}")
    line = one_line_error(CliRunner().invoke(cli, ["demo", "--seed", "1", "-o", str(target)]), 1)
    assert line.startswith(f"Error: cannot write {target}")


def test_an_epsilon_below_every_mechanisms_range_is_refused_without_a_traceback(
    tmp_path: Path,
) -> None:
    line = one_line_error(
        simulate("-a", "sex", "-e", "1e-300", "-r", "1", "--no-plots", "-o", str(tmp_path)), 1
    )
    assert "epsilon must be >= 1e-12" in line
    out = tmp_path / "demo"
    line = one_line_error(CliRunner().invoke(cli, ["demo", "-e", "17", "-o", str(out)]), 1)
    assert "epsilon must be <= 16" in line
    assert not out.exists()  # refused before the output directory was made


@pytest.mark.parametrize("epsilon", [20.0, 1e-300])
def test_scenarios_check_every_epsilon_before_running(epsilon: float) -> None:
    for make in (
        lambda: SweepSettings(epsilons=(1.0, epsilon)),
        lambda: NumericSettings(epsilons=(1.0, epsilon)),
        lambda: OpenDomainSettings(epsilons=(1.0, epsilon)),
    ):
        with pytest.raises(InvalidSetting, match=r"epsilon must be (<= 16|>= 1e-12)"):
            make()


def test_a_preset_names_the_epsilon_it_runs_at(tmp_path: Path) -> None:
    args = ["-a", "occupation", "-m", "sue-book", "-r", "1", "--no-plots"]
    line = one_line_error(simulate(*args, "-o", str(tmp_path)), 1)
    assert "fixed epsilon, 2.1972245773362196" in line and "use 'sue' at any epsilon" in line
    result = simulate(
        "-a", "sex", "-m", "rr-two-coin", "-e", "1.0986122886681098", "-r", "1", "--no-plots",
        "-o", str(tmp_path),
    )  # fmt: skip
    assert result.exit_code == 0, result.output


def test_a_repeated_attribute_or_epsilon_counts_once(tmp_path: Path) -> None:
    s = SweepSettings(attributes=("sex", "race", "sex"), epsilons=(1, 2.0, 1.0))
    assert s.attributes == ("sex", "race") and s.epsilons == (1.0, 2.0)
    args = ["-a", "sex", "-a", "sex", "-e", "1", "-e", "1.0", "-r", "1", "--no-plots"]
    result = simulate(*args, "-o", str(tmp_path))
    assert result.exit_code == 0, result.output
    runs = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert len(runs) == 1
