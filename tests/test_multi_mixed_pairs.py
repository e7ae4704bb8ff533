"""Mixed pairs (categorical x numeric): the mean of a number per label, under the one epsilon.

The pair is one more component of the report, over ``labels x {0, 1}``: the bit is 1 with
probability the value's position in its bounds (exactly ``i / D`` at its randomly rounded grid
index). Checked here: the whole report's privacy exactly by enumeration (small grid); the
per-label counts and sums are unbiased and their standard errors are the spread of repeated
runs; the mean per label lands within its own standard errors; the estimate service, CSV and
``ldp estimate`` carry it. Tolerances come from the variance (see each test).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from aggregator import estimate
from aggregator.export import to_csv
from aggregator.schema import to_json
from aggregator.service import EstimateQuery, estimate_range
from client_sdk.mechanisms.multi import MultiMechanism
from client_sdk.mechanisms.multi import create as create_multi
from ldp_cli.estimate_cmd import render_table

LABELS = ["a", "b", "c"]
ATTRS = {"group": LABELS, "flag": ["y", "n"], "hours": {"bounds": [0, 100]}}
PAIRS = [("group", "hours")]


def worst_log_ratio(mech: MultiMechanism) -> float:
    """ln of the largest P[y|x]/P[y|x'] over all inputs and outputs, computed exactly."""
    dists = [mech.output_distribution(x) for x in mech.input_space()]
    for d in dists:
        assert sum(d.values()) == 1
    worst = Fraction(1)
    for y in set().union(*dists):
        probs = [d.get(y, Fraction(0)) for d in dists]
        assert min(probs) > 0
        worst = max(worst, max(probs) / min(probs))
    return math.log(worst.numerator) - math.log(worst.denominator)


@pytest.mark.parametrize("protocol", ["spl", "smp"])
def test_mixed_pair_keeps_the_whole_report_exact(protocol: str) -> None:
    attrs = {"colour": ["red", "green"], "x": {"bounds": [0, 1], "grid": 2}}
    mech = create_multi(
        protocol, epsilon=1.0, attributes=attrs, pairs=[("x", "colour")], oracle="grr"
    )
    assert mech.d == 3 and mech.mixed_pair(("x", "colour")) == ("colour", "x")
    assert worst_log_ratio(mech) <= mech.realised_epsilon + 1e-12 <= 1.0 + 1e-12


def population(n: int, seed: int) -> dict[str, np.ndarray]:
    gen = np.random.default_rng(seed)
    group = gen.choice(3, size=n, p=[0.5, 0.3, 0.2])
    hours = np.clip(gen.normal(np.array([30.0, 45.0, 60.0])[group], 12.0), -5, 110)
    flag = (gen.random(n) < 0.4).astype(np.int64)
    return {"group": group, "flag": flag, "hours": hours}


@pytest.mark.parametrize("protocol", ["spl", "smp"])
def test_sums_are_unbiased_and_their_errors_match_the_spread(protocol: str) -> None:
    """R runs on one population. Unbiased: the mean of R estimates is within 4 standard errors
    of the mean (sqrt(mean variance / R)) of the truth. Errors: the sample standard deviation
    of R estimates over the formula's has standard deviation ~ 1/sqrt(2 (R - 1)) (0.13 at
    R = 30), so it must lie within 4 of those of 1."""
    n, runs = 20000, 30
    mech = create_multi(protocol, epsilon=2.0, attributes=ATTRS, pairs=PAIRS)
    data = population(n, 1)
    clipped = np.clip(data["hours"], 0, 100)
    true_counts = np.bincount(data["group"], minlength=3)
    true_sums = np.bincount(data["group"], weights=clipped, minlength=3)
    gen = np.random.default_rng(2)
    sums, sum_se, counts, means, mean_se = [], [], [], [], []
    for _ in range(runs):
        est = estimate(mech, mech.tally(mech.perturb_many(data, rng=gen)))
        m = est.label_means[("group", "hours")]
        sums.append(m.sums)
        sum_se.append(m.sum_std_errors)
        counts.append(m.counts)
        means.append(m.means)
        mean_se.append(m.std_errors)
    sums_a, se_a = np.array(sums), np.array(sum_se)
    rms_se = np.sqrt((se_a**2).mean(axis=0))
    assert np.all(np.abs(sums_a.mean(axis=0) - true_sums) <= 4 * rms_se / math.sqrt(runs))
    ratio = sums_a.std(axis=0, ddof=1) / rms_se
    band = 4 / math.sqrt(2 * (runs - 1))
    assert np.all(np.abs(ratio - 1) <= band), ratio
    assert np.all(np.abs(np.array(counts).mean(axis=0) - true_counts) <= 4 * rms_se)
    # The mean per label: a ratio, unbiased to first order; its delta-method errors hold too.
    means_a, mse_a = np.array(means), np.array(mean_se)
    true_means = true_sums / true_counts
    rms_mean_se = np.sqrt((mse_a**2).mean(axis=0))
    assert np.all(np.abs(means_a.mean(axis=0) - true_means) <= 4 * rms_mean_se / math.sqrt(runs))
    ratio = means_a.std(axis=0, ddof=1) / rms_mean_se
    assert np.all(np.abs(ratio - 1) <= band), ratio


def test_the_service_csv_and_cli_show_the_mean_per_label() -> None:
    mech = create_multi("smp", epsilon=4.0, attributes=ATTRS, pairs=[*PAIRS, ("group", "flag")])
    data = population(30000, 3)
    tallies = {
        "2026-11-01": mech.tally(mech.perturb_many({k: v[:15000] for k, v in data.items()}, rng=4)),
        "2026-11-02": mech.tally(mech.perturb_many({k: v[15000:] for k, v in data.items()}, rng=5)),
    }
    answer = estimate_range(mech, tallies, EstimateQuery(campaign="mixed"))
    body = to_json(answer)
    (table,) = body["label_means"]
    assert table["pair"] == ["group", "hours"] and table["numeric_attribute"] == "hours"
    true = np.bincount(data["group"], weights=np.clip(data["hours"], 0, 100), minlength=3)
    true /= np.bincount(data["group"], minlength=3)
    for row, t in zip(table["rows"], true, strict=True):
        assert row["ci_low"] < row["mean"] < row["ci_high"]
        assert abs(row["mean"] - t) <= 4.5 * row["std_error"], (row, t)
    assert [j["pair"] for j in body["joints"]] == [["group", "flag"]]
    csv = to_csv(body).splitlines()
    assert sum(",mean hours," in line for line in csv) == len(LABELS)
    text = render_table(body)
    assert "mean hours by group" in text and "group x flag" in text
