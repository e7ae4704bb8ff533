"""The multi-attribute answer's intervals and refusals (``aggregator.multi_answers``, issue 21).

Every interval of the answer is its estimate -/+ z standard errors, clipped to ``[0, n]`` for
counts and unclipped for a label's mean; the estimates and standard errors are taken from
:func:`aggregator.estimate.estimate` on the summed tally (``aggregator.multi``), ``z`` from the
normal quantile. The campaign has a joint cell whose consistent count is far enough below zero
that its upper end is clipped too.
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from aggregator import NotEnoughReports
from aggregator.estimate import estimate
from aggregator.results import MultiEstimates
from aggregator.service import EstimateQuery, estimate_range
from client_sdk.mechanisms.multi import create as create_multi

ATTRS: dict[str, Any] = {
    "group": ["a", "b", "c", "d", "e"],
    "flag": ["y", "n", "m", "o"],
    "hours": {"bounds": [0, 100]},
}
PAIRS = [("group", "flag"), ("group", "hours")]
DAYS = ["2026-11-01", "2026-11-02"]
LEVEL = 0.9


def _campaign(seed: int) -> tuple[Any, dict[str, Any]]:
    mech = create_multi("spl", epsilon=1.0, attributes=ATTRS, pairs=PAIRS, oracle="grr")
    gen = np.random.default_rng(seed)
    tallies = {}
    for day in DAYS:
        n = 600
        # Most of the 20 (group, flag) cells are empty: their estimates scatter around zero.
        group = gen.choice(5, size=n, p=[0.7, 0.3, 0.0, 0.0, 0.0])
        flag = np.where(gen.random(n) < 0.8, 0, 1)
        hours = np.clip(gen.normal(40 + 10 * group, 10.0), 0, 100)
        data = {"group": group, "flag": flag, "hours": hours}
        tallies[day] = mech.tally(mech.perturb_many(data, rng=gen))
    return mech, tallies


def _negative_campaign() -> tuple[Any, dict[str, Any]]:
    """The first seed whose joint table has a cell below -z se (its whole interval clipped)."""
    z = NormalDist().inv_cdf(0.5 + LEVEL / 2)
    for seed in range(40):
        mech, tallies = _campaign(seed)
        total = tallies[DAYS[0]] + tallies[DAYS[1]]
        joint = estimate(mech, total).joints[("group", "flag")]
        if (joint.table + z * joint.std_errors < 0).any():
            return mech, tallies
    raise AssertionError("no campaign with a clipped joint cell among 40 seeds")


def test_every_interval_is_the_estimate_plus_minus_z_standard_errors() -> None:
    mech, tallies = _negative_campaign()
    answer = estimate_range(mech, tallies, EstimateQuery(level=LEVEL))
    assert isinstance(answer, MultiEstimates)
    est = estimate(mech, tallies[DAYS[0]] + tallies[DAYS[1]])
    n = est.n
    z = NormalDist().inv_cdf(0.5 + LEVEL / 2)

    for attr in answer.attributes:
        if attr.kind != "frequency":
            continue
        counts = est.consistent_counts(attr.name)
        errors = est.count_std_errors(attr.name)
        for i, v in enumerate(attr.values):
            assert v.count == pytest.approx(counts[i])
            assert v.ci_low == pytest.approx(np.clip(counts[i] - z * errors[i], 0, n), abs=1e-9)
            assert v.ci_high == pytest.approx(np.clip(counts[i] + z * errors[i], 0, n), abs=1e-9)
    # At least one attribute value's interval is not clipped below: its low end is not 0.
    assert any(v.ci_low > 0 for a in answer.attributes for v in a.values)

    (table,) = answer.joints
    joint = est.joints[("group", "flag")]
    low = np.clip(joint.table - z * joint.std_errors, 0, n)
    high = np.clip(joint.table + z * joint.std_errors, 0, n)
    np.testing.assert_allclose(table.ci_low, low, atol=1e-9)
    np.testing.assert_allclose(table.ci_high, high, atol=1e-9)
    assert (high == 0).any()  # a cell whose upper end was below zero

    (means,) = answer.label_means
    label_means = est.label_means[("group", "hours")]
    for i, row in enumerate(means.rows):
        mean, se = float(label_means.means[i]), float(label_means.std_errors[i])
        if not (np.isfinite(mean) and np.isfinite(se)):
            assert row.mean is None and row.ci_low is None and row.ci_high is None
            continue
        assert row.ci_low == pytest.approx(mean - z * se)
        assert row.ci_high == pytest.approx(mean + z * se)
    assert any(r.ci_low is not None for r in means.rows)


def test_fewer_reports_than_the_minimum_are_refused() -> None:
    mech, tallies = _campaign(0)
    total = sum(t.n for t in tallies.values())
    assert estimate_range(mech, tallies, EstimateQuery(min_reports=total)).n == total
    with pytest.raises(NotEnoughReports) as info:
        estimate_range(mech, tallies, EstimateQuery(min_reports=total + 1))
    assert (info.value.n, info.value.minimum) == (total, total + 1)
    with pytest.raises(NotEnoughReports) as info:
        estimate_range(mech, {}, EstimateQuery(min_reports=0))
    assert (info.value.n, info.value.minimum) == (0, 1)
