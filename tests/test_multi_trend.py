"""The per-window trend of a multi-attribute campaign (docs/MECHANISMS.md §22, "Trend").

Per window, per attribute and per declared categorical pair: the window's own unbiased estimate
with its standard error, and the smoothed value with its band. The tests check the standard
errors against the actual errors of the windows (the mean squared z-score is 1 within a
tolerance derived from its own spread), that the raw values add up to the whole range's where
the estimator is linear, that the smoothed values are closer to the truth than the raw ones on
a stationary population, and what a window below the minimum (or a component no report of the
window carries) shows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from aggregator.multi_answers import MULTI_SMOOTHING_NOTE
from aggregator.results import MultiEstimates
from aggregator.schema import to_json
from aggregator.service import EstimateQuery, estimate_range
from client_sdk.mechanisms.multi import MultiMechanism, MultiTally

OCC = ["Sales", "Tech", "Craft", "Admin"]
SEX = ["F", "M"]
ATTRIBUTES: dict[str, Any] = {"occupation": OCC, "sex": SEX, "age": {"bounds": [17, 90]}}
PAIRS = [("occupation", "sex")]
P_OCC = np.array([0.4, 0.3, 0.2, 0.1])
P_FEMALE = np.array([0.6, 0.25, 0.1, 0.7])
WINDOWS = 16
N = 4000


def _population(n: int, gen: np.random.Generator) -> dict[str, np.ndarray]:
    occ = gen.choice(len(OCC), size=n, p=P_OCC)
    sex = np.where(gen.random(n) < P_FEMALE[occ], 0, 1)
    age = np.round(gen.gamma(4.0, 9.0, n) + 12)
    return {"occupation": occ, "sex": sex, "age": age}


def _campaign(
    protocol: str, seed: int
) -> tuple[MultiMechanism, dict[str, MultiTally], dict[str, dict[str, np.ndarray]]]:
    mech = MultiMechanism(protocol, epsilon=4.0, attributes=ATTRIBUTES, pairs=PAIRS)
    gen = np.random.default_rng(seed)
    tallies, truths = {}, {}
    for w in range(WINDOWS):
        day = f"2026-11-{w + 1:02d}"
        data = _population(N, gen)
        tallies[day] = mech.tally(mech.perturb_many(data, rng=gen))
        truths[day] = data
    return mech, tallies, truths


def _answer(mech: MultiMechanism, tallies: dict[str, MultiTally], **query: Any) -> MultiEstimates:
    answer = estimate_range(mech, tallies, EstimateQuery(**query))
    assert isinstance(answer, MultiEstimates)
    return answer


@pytest.mark.parametrize("protocol", ["smp", "spl"])
def test_window_estimates_have_the_errors_their_standard_errors_state(protocol: str) -> None:
    mech, tallies, truths = _campaign(protocol, 5)
    answer = _answer(mech, tallies)
    assert answer.trend_smoothing == MULTI_SMOOTHING_NOTE
    z2: list[float] = []
    raw_sq, smooth_sq = 0.0, 0.0
    for row in answer.trend:
        truth = truths[row.window]
        occ = np.bincount(truth["occupation"], minlength=4) / N
        sex = np.bincount(truth["sex"], minlength=2) / N
        joint = np.zeros((4, 2))
        np.add.at(joint, (truth["occupation"], truth["sex"]), 1 / N)
        age = float(np.clip(truth["age"], 17, 90).mean())
        occupation, sexes, ages = row.attributes
        assert [a.name for a in row.attributes] == ["occupation", "sex", "age"]
        for attr, true in ((occupation, occ), (sexes, sex)):
            assert attr.kind == "frequency" and attr.mean is None
            f, se = np.array(attr.frequencies), np.array(attr.std_errors)
            sm, sm_se = np.array(attr.smoothed_frequencies), np.array(attr.smoothed_std_errors)
            assert math.isclose(f.sum(), 1.0, abs_tol=1e-9) or protocol == "spl"
            z2 += list(((f - true) / se)[:-1] ** 2)  # k - 1 free values per window
            assert np.all(np.abs(sm - true) <= 4.5 * sm_se), (attr.name, sm, true, sm_se)
            raw_sq += float(((f - true) ** 2).sum())
            smooth_sq += float(((sm - true) ** 2).sum())
        assert ages.kind == "mean" and ages.frequencies is None
        assert ages.mean is not None and ages.std_error is not None
        z2.append(((ages.mean - age) / ages.std_error) ** 2)
        assert ages.smoothed_mean is not None and ages.smoothed_std_error is not None
        assert abs(ages.smoothed_mean - age) <= 4.5 * ages.smoothed_std_error
        (cells,) = row.joints
        assert cells.pair == ("occupation", "sex")
        f, se = np.array(cells.frequencies), np.array(cells.std_errors)
        assert f.shape == (4, 2) and se.shape == (4, 2)
        z2 += list((((f - joint) / se) ** 2).ravel()[:-1])
        sm, sm_se = np.array(cells.smoothed_frequencies), np.array(cells.smoothed_std_errors)
        assert np.all(np.abs(sm - joint) <= 4.5 * sm_se)
    # z^2 of a standard normal: mean 1, variance 2; the windows' values are nearly
    # independent (k - 1 per categorical), so 4 standard deviations of the mean bound it.
    tolerance = 4 * math.sqrt(2 / len(z2))
    assert abs(float(np.mean(z2)) - 1) <= tolerance, (np.mean(z2), tolerance)
    # A stationary population: smoothing over 16 windows must lower the error a lot.
    assert smooth_sq < 0.5 * raw_sq, (smooth_sq, raw_sq)


def test_spl_window_counts_add_up_to_the_range() -> None:
    """SPL's estimator is linear in the tally: n_t-weighted window frequencies sum to the
    range's own raw counts, and the joint cells to the range's raw joint table."""
    mech, tallies, _ = _campaign("spl", 5)
    answer = _answer(mech, tallies)
    occ = sum(np.array(r.attributes[0].frequencies) * r.n for r in answer.trend)
    raw = [v.raw_count for v in answer.attributes[0].values]
    np.testing.assert_allclose(occ, raw, rtol=1e-9)
    cells = sum(np.array(r.joints[0].frequencies) * r.n for r in answer.trend)
    np.testing.assert_allclose(cells, answer.joints[0].raw_counts, rtol=1e-9)


def test_small_windows_and_options() -> None:
    """Below the minimum: the report count only; an SMP window where no report carries a
    component: null there; ``smoothing=False``: no smoothed values; ``trend=False``: none."""
    mech, tallies, _ = _campaign("smp", 7)
    one = mech.tally(mech.perturb_many(_population(1, np.random.default_rng(1)), rng=2))
    carried = [j for j, c in enumerate(one.carried) if c]
    tallies["2026-11-30"] = one
    answer = _answer(mech, tallies, min_reports=2)
    last = answer.trend[-1]
    assert last.n == 1 and all(a.frequencies is None and a.mean is None for a in last.attributes)
    assert all(j.frequencies is None for j in last.joints)
    answer = _answer(mech, tallies)
    last = answer.trend[-1]
    for j, attr in enumerate(last.attributes):
        shown = attr.frequencies is not None or attr.mean is not None
        assert shown == (j in carried) and attr.reports == one.carried[j]
    assert (last.joints[0].frequencies is not None) == (3 in carried)
    flat = _answer(mech, tallies, smoothing=False)
    assert all(
        a.smoothed_frequencies is None and a.smoothed_mean is None
        for r in flat.trend
        for a in r.attributes
    )
    assert flat.trend[0].attributes[0].frequencies == answer.trend[0].attributes[0].frequencies
    assert _answer(mech, tallies, trend=False).trend == []
    body = to_json(answer)
    assert body["trend"][0]["joints"][0]["pair"] == ["occupation", "sex"]
    assert body["trend_smoothing"] == MULTI_SMOOTHING_NOTE
