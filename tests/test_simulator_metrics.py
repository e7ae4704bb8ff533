"""Each error metric on hand-made inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.errors import InvalidSetting
from simulator.metrics import (
    METRICS,
    all_metrics,
    l1_distance,
    mae,
    max_abs_error,
    rmse,
    summarise,
    top_indices,
    top_recall,
    top_relative_error,
    tv_distance,
)

TRUTH = np.array([50.0, 30.0, 10.0, 5.0, 3.0, 2.0])
EST = np.array([54.0, 27.0, 10.0, 1.0, 6.0, 2.0])  # errors 4, -3, 0, -4, 3, 0


def test_mae_rmse_max() -> None:
    assert mae(TRUTH, EST) == pytest.approx(14 / 6)
    assert rmse(TRUTH, EST) == pytest.approx(math.sqrt(50 / 6))
    assert max_abs_error(TRUTH, EST) == 4.0


def test_l1_and_total_variation_of_frequencies() -> None:
    assert l1_distance(TRUTH, EST, 100) == pytest.approx(0.14)
    assert tv_distance(TRUTH, EST, 100) == pytest.approx(0.07)
    # two disjoint distributions are at TV distance 1
    assert tv_distance(np.array([10.0, 0.0]), np.array([0.0, 10.0]), 10) == 1.0


def test_top5_relative_error_and_recall() -> None:
    # true top 5: indices 0..4; relative errors 4/50, 3/30, 0, 4/5, 3/3
    assert top_relative_error(TRUTH, EST) == pytest.approx((0.08 + 0.1 + 0 + 0.8 + 1.0) / 5)
    # estimate's top 5: 0, 1, 2, 4, 5 (index 3 fell to 1): recall 4/5
    assert top_indices(EST).tolist() == [0, 1, 2, 4, 5]
    assert top_recall(TRUTH, EST) == 0.8
    assert top_recall(TRUTH, TRUTH) == 1.0


def test_ties_and_small_domains() -> None:
    assert top_indices(np.array([1.0, 3.0, 3.0])).tolist() == [1, 2, 0]
    assert top_recall(np.array([2.0, 1.0]), np.array([1.0, 2.0])) == 1.0  # k < 5: all values
    assert math.isnan(top_relative_error(np.zeros(3), np.ones(3)))


def test_all_metrics_and_summary() -> None:
    row = all_metrics(TRUTH, EST)
    assert tuple(row) == METRICS
    assert row["l1"] == pytest.approx(0.14)  # n defaults to sum(truth) = 100
    summary = summarise([{"mae": 1.0}, {"mae": 3.0}])
    assert summary["mae"] == {"mean": 2.0, "std": math.sqrt(2), "min": 1.0, "max": 3.0}
    assert summarise([{"mae": 1.0}])["mae"]["std"] == 0.0


def test_bad_inputs_say_what_is_wrong() -> None:
    with pytest.raises(InvalidSetting, match="same non-zero length"):
        mae(np.ones(3), np.ones(4))
    for n in (0, -100, float("nan")):  # a negative or NaN n would give a negative or NaN L1
        with pytest.raises(InvalidSetting, match="n must be > 0"):
            l1_distance(np.ones(3), np.ones(3), n)
    with pytest.raises(InvalidSetting, match="at least one run"):
        summarise([])
