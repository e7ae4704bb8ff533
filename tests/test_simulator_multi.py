"""``ldp simulate --scenario multi`` (simulator/multi_scenario.py, simulator/multi_plots.py):
the results' structure, statistical sanity at small n, and the CLI writing its report and plots.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from ldp_cli.main import cli
from simulator.errors import InvalidSetting
from simulator.multi_scenario import (
    CATEGORICAL,
    JOINT_METHODS,
    JOINT_PAIRS,
    NUMERIC,
    PROTOCOLS,
    MultiSettings,
    load_columns,
    run_multi,
)

ROWS, REPS, EPSILONS = 3000, 12, (1.0, 4.0)
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    return run_multi(MultiSettings(epsilons=EPSILONS, repetitions=REPS, rows=ROWS, seed=5))


def _row(results: dict[str, Any], campaign: str, eps: float, protocol: str, attribute: str) -> Any:
    rows = [
        r
        for r in results["marginals"]
        if (r["campaign"], r["epsilon"], r["protocol"], r["attribute"])
        == (campaign, eps, protocol, attribute)
    ]
    assert len(rows) == 1, (campaign, eps, protocol, attribute)
    return rows[0]


def test_every_setting_has_its_row(results: dict[str, Any]) -> None:
    assert results["n"] == ROWS and results["repetitions"] == REPS
    for eps in EPSILONS:
        for protocol in PROTOCOLS:
            for a in CATEGORICAL:
                row = _row(results, "categorical", eps, protocol, a)
                assert row["post"]["mean"] >= 0 and row["raw"]["sd"] >= 0
        for protocol in PROTOCOLS[:3]:  # rsfd takes categorical attributes only
            for a in (*CATEGORICAL, *NUMERIC):
                row = _row(results, "mixed", eps, protocol, a)
                assert (row["post"] is None) == (a in NUMERIC)
        for pair in JOINT_PAIRS:
            methods = [
                r["method"]
                for r in results["joints"]
                if r["epsilon"] == eps and tuple(r["pair"]) == pair
            ]
            assert sorted(methods) == sorted(JOINT_METHODS)
    mixed = [r for r in results["marginals"] if r["campaign"] == "mixed"]
    assert not any(r["protocol"] == "rsfd" for r in mixed)
    json.dumps(results, allow_nan=False)  # JSON-safe as written


def test_auto_raw_count_mse_matches_the_exact_formula(results: dict[str, Any]) -> None:
    """Summed over the categorical attributes, auto's measured raw count MSE is the exact
    prediction within 5 sd of the mean of REPS replays. One attribute's MSE (mean of k squared
    errors) has variance at most ``2 p^2`` (Gaussian errors, Cauchy-Schwarz over correlated
    values) for prediction p, so the sum's sd is at most ``sqrt(sum 2 p_a^2 / REPS)``."""
    for campaign in ("categorical", "mixed"):
        for eps in EPSILONS:
            rows = [_row(results, campaign, eps, "auto", a) for a in CATEGORICAL]
            if rows[0]["chosen"] == "rsfd":
                continue
            predicted = np.array([r["predicted"] for r in rows])
            measured = sum(r["raw"]["mean"] for r in rows)
            sd = math.sqrt(float((2 * predicted**2).sum()) / REPS)
            assert abs(measured - predicted.sum()) < 5 * sd, (campaign, eps, measured, predicted)


def test_errors_fall_with_epsilon(results: dict[str, Any]) -> None:
    """From epsilon 1 to 4 the per-report variance of every protocol drops more than 10-fold
    (e.g. GRR at k = 2: 2.4 -> 0.02), far beyond REPS replays' spread."""
    lo, hi = EPSILONS
    for protocol in PROTOCOLS:
        for a in CATEGORICAL:
            assert (
                _row(results, "categorical", hi, protocol, a)["post"]["mean"]
                < _row(results, "categorical", lo, protocol, a)["post"]["mean"]
            )
    for method in JOINT_METHODS:
        for pair in JOINT_PAIRS:
            tvd = {
                r["epsilon"]: r["tvd_clipped"]["mean"]
                for r in results["joints"]
                if r["method"] == method and tuple(r["pair"]) == pair
            }
            assert 0 <= tvd[hi] < tvd[lo] <= 1


def test_label_means_truth_and_interval_coverage(results: dict[str, Any]) -> None:
    """The true means are the data's; the 95% intervals cover them in at least 80% of the
    ~REPS x 16 intervals (the binomial sd at 95% over 150 intervals is ~0.02)."""
    lm = results["label_means"]
    labels, cols = load_columns(ROWS)
    cat, num = lm["pair"]
    assert lm["labels"] == labels[cat] and sum(lm["holders"]) == ROWS
    low, high = NUMERIC[num]
    x = np.clip(cols[num], low, high)
    first = int(np.flatnonzero(cols[cat] == 0).size)
    assert lm["holders"][0] == first
    if first:
        assert lm["true"][0] == pytest.approx(float(x[cols[cat] == 0].mean()))
    assert lm["intervals"] >= REPS * len(labels[cat]) // 2
    assert lm["coverage"] >= 0.8


def test_bad_settings_are_refused() -> None:
    for bad in (
        {"epsilons": ()},
        {"epsilons": (0.0,)},
        {"repetitions": 0},
        {"rows": 10},
        {"label_epsilon": -1.0},
    ):
        with pytest.raises(InvalidSetting):
            MultiSettings(**bad)  # type: ignore[arg-type]


def test_cli_scenario_multi_writes_report_and_plots(tmp_path: Any) -> None:
    out = tmp_path / "sim"
    args = ["simulate", "--scenario", "multi", "-e", "2", "-r", "2", "--rows", "1500"]
    result = CliRunner().invoke(cli, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "multi written" in result.output and "TVD" in result.output
    data = json.loads((out / "multi.json").read_text())
    assert data["n"] == 1500 and data["epsilons"] == [2.0]
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == [
        "multi-joints.png",
        "multi-label-means.png",
        "multi-marginals-categorical.png",
        "multi-marginals-mixed.png",
    ]
    for name in pngs:
        blob = (out / name).read_bytes()
        assert blob.startswith(PNG) and len(blob) > 5000
        assert f"]({name})" in (out / "multi.md").read_text()
    quiet = tmp_path / "quiet"
    result = CliRunner().invoke(cli, [*args, "--no-plots", "-o", str(quiet)])
    assert result.exit_code == 0, result.output
    assert not list(quiet.glob("*.png")) and (quiet / "multi.md").exists()
    # --rows is the scenario's; a sweep refuses it with a usage error
    result = CliRunner().invoke(cli, ["simulate", "--rows", "500", "-o", str(tmp_path / "x")])
    assert result.exit_code == 2 and "--rows" in result.output
