"""What ``ldp simulate`` prints and writes says what was run.

* A run on the user's own CSV credited the UCI Adult data set (report.md's "Data:" line and
  results.json's ``attribution``).
* The shuffled comparison named an ``auto`` cell by its resolved mechanism only, so ``-m all``
  printed two indistinguishable ``ss`` lines per epsilon (report.md says ``auto (ss)``).
* ``--scenario multi``'s plots labelled their log epsilon axis "2 x 10^0", not the swept
  epsilons as the sweep's plots do.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ldp_cli.main import cli


def test_a_csv_run_is_not_credited_to_adult(tmp_path: Path) -> None:
    data = tmp_path / "mine.csv"
    data.write_text("model\n" + "a\nb\nc\n" * 50)
    out = tmp_path / "csv"
    args = ["--data", str(data), "--column", "model", "-e", "1", "-r", "1", "--no-plots"]
    result = CliRunner().invoke(cli, ["simulate", *args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "Adult" not in (out / "report.md").read_text()
    assert json.loads((out / "results.json").read_text())["dataset"]["attribution"] is None
    # Adult itself is still credited.
    out = tmp_path / "adult"
    args = ["-a", "sex", "-e", "1", "-r", "1", "--no-plots"]
    result = CliRunner().invoke(cli, ["simulate", *args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "Becker, B. & Kohavi, R. (1996)" in (out / "report.md").read_text()


def test_the_shuffle_lines_tell_auto_from_the_mechanism_it_picked(tmp_path: Path) -> None:
    args = ["-a", "sex", "-e", "1", "-m", "grr", "-m", "auto", "-r", "1", "--no-plots"]
    result = CliRunner().invoke(cli, ["simulate", *args, "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = [x.strip() for x in result.output.splitlines() if x.startswith("  sex ")]
    assert [x.split(" epsilon0")[0] for x in lines] == ["sex grr", "sex auto (grr)"]


def test_multi_plots_label_the_swept_epsilons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib.pyplot as plt

    from simulator.multi_plots import joints_plot

    figures: list = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", figures.append)
    joints = [
        {"pair": ["a", "b"], "method": m, "epsilon": e, "tvd": {"mean": 1 / e, "sd": 0.01}}
        for m in ("ours", "other")
        for e in (0.5, 1.0, 4.0)
    ]
    joints_plot({"joints": joints}, tmp_path)
    (fig,) = figures
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels == ["0.5", "1", "4"]
    assert "raw" in ax.get_ylabel()
    real_close(fig)
