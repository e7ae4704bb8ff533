"""The one estimate service: typed answers for every kind, their JSON and generated schemas.

Numeric campaigns cannot be created in the collector yet, so the numeric path is fed real
``NumericTally`` objects made by the numeric mechanisms (``perturb_many`` + ``tally``).
Tolerances come from the answers' own standard errors (5 sigma: a false failure 1 in 1.7 M).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pytest

from aggregator import NotEnoughReports, estimate_windows, z_value
from aggregator.results import DistributionEstimates, FrequencyEstimates, MeanEstimates
from aggregator.schema import json_schema, to_json
from aggregator.service import EstimateQuery, estimate_range, kind_of
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Tally, create
from client_sdk.mechanisms.numeric import create as create_numeric
from collector.openapi import openapi_document
from tests.support.openapi_schema import undeclared_fields, validate

DAYS = [f"2026-11-{d:02d}" for d in range(1, 8)]
TRUE_MEAN = [40.0 + d for d in range(len(DAYS))]
PER_DAY = 4000


def numeric_tallies(
    name: str, *, seed: int = 1, **params: Any
) -> tuple[Any, dict[str, Any], np.ndarray]:
    mech = create_numeric(name, epsilon=2.0, bounds=(0, 100), **params)
    rng = np.random.default_rng(seed)
    tallies, values = {}, []
    for d, day in enumerate(DAYS):
        x = np.clip(rng.normal(TRUE_MEAN[d], 12, PER_DAY), 0, 100)
        values.append(x)
        tallies[day] = mech.tally(mech.perturb_many(x, rng=seed * 100 + d))
    return mech, tallies, np.concatenate(values)


def categorical_tallies() -> tuple[Any, dict[str, Tally]]:
    mech = create("oue", epsilon=1.0, domain=("a", "b", "c"))
    rng = np.random.default_rng(5)
    tallies = {}
    for d, day in enumerate(DAYS[:4]):
        values = rng.choice(3, size=2000, p=[0.6, 0.3, 0.1])
        tallies[day] = mech.tally(mech.perturb_many(values, rng=d))
    return mech, tallies


def test_frequency_answer_is_what_estimate_windows_serves() -> None:
    mech, tallies = categorical_tallies()
    answer = estimate_range(mech, tallies, EstimateQuery(level=0.9, campaign="c"))
    assert isinstance(answer, FrequencyEstimates) and kind_of(mech) == "frequency"
    assert to_json(answer) == estimate_windows(mech, tallies, level=0.9, campaign="c")
    body = to_json(answer)
    assert body["kind"] == "frequency" and body["from"] == DAYS[0] and body["to"] == DAYS[3]
    assert [v["value"] for v in body["values"]] == ["a", "b", "c"]
    # top_k limits the listed heavy hitters, not which values are significant.
    one = to_json(estimate_range(mech, tallies, EstimateQuery(top_k=1)))
    assert len(one["top_k"]["values"]) == 1
    assert [v["significant"] for v in one["values"]] == [v["significant"] for v in body["values"]]
    assert to_json(estimate_range(mech, tallies, EstimateQuery(trend=False)))["trend"] == []
    # A slice bound would have listed every value but the last (-1) or raised a TypeError (1.5).
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidParameter, match="top_k must be an integer >= 1"):
            estimate_range(mech, tallies, EstimateQuery(top_k=bad))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["piecewise", "duchi", "hybrid"])
def test_mean_answer_and_trend(name: str) -> None:
    mech, tallies, values = numeric_tallies(name)
    answer = estimate_range(mech, tallies, EstimateQuery(level=0.95, min_reports=10))
    assert isinstance(answer, MeanEstimates) and kind_of(mech) == "mean"
    assert answer.n == PER_DAY * len(DAYS) and answer.windows == DAYS
    assert abs(answer.mean - values.mean()) <= 5 * answer.std_error
    z = z_value(0.95)
    assert answer.ci.low == pytest.approx(answer.mean - z * answer.std_error)
    assert answer.ci.high == pytest.approx(answer.mean + z * answer.std_error)
    assert [t.window for t in answer.trend] == DAYS
    for t, x in zip(answer.trend, np.split(values, len(DAYS)), strict=True):
        assert t.n == PER_DAY and t.mean is not None and t.std_error is not None
        assert abs(t.mean - x.mean()) <= 5 * t.std_error
        assert t.ci_low is not None and t.ci_low < t.mean < (t.ci_high or 0)
        assert t.smoothed_mean is not None and t.smoothed_std_error is not None
        assert 0 < t.smoothed_std_error < 1.5 * t.std_error


def test_windows_below_the_minimum_show_nothing_and_too_few_reports_are_refused() -> None:
    mech, tallies, _ = numeric_tallies("piecewise")
    small = mech.tally(mech.perturb_many(np.full(5, 50.0), rng=9))
    answer = estimate_range(mech, {**tallies, "2026-11-08": small}, EstimateQuery(min_reports=10))
    last = answer.trend[-1]
    assert isinstance(answer, MeanEstimates) and last.n == 5
    assert last.mean is None and last.smoothed_mean is None and last.ci_low is None
    with pytest.raises(NotEnoughReports):
        estimate_range(mech, {"2026-11-08": small}, EstimateQuery(min_reports=10))
    with pytest.raises(InvalidParameter):
        estimate_range(mech, tallies, EstimateQuery(level=1.5))
    with pytest.raises(InvalidParameter, match="window '2026-11-01'"):
        estimate_range(mech, {"2026-11-01": Tally.empty(3)}, EstimateQuery())


def test_distribution_answer_quantiles_histogram_and_trend() -> None:
    mech, tallies, values = numeric_tallies("square_wave")
    answer = estimate_range(mech, tallies, EstimateQuery(bootstrap=20, histogram_bins=16))
    assert isinstance(answer, DistributionEstimates) and kind_of(mech) == "distribution"
    assert len(answer.bins) == 16 and answer.bootstrap == 20
    assert sum(b.frequency for b in answer.bins) == pytest.approx(1.0)
    assert answer.bins[0].low == 0 and answer.bins[-1].high == 100
    for b in answer.bins:
        assert b.ci_low <= b.frequency <= b.ci_high
    assert [q.q for q in answer.quantiles] == [0.5, 0.9, 0.99]
    for q in answer.quantiles:
        assert q.low <= q.value <= q.high
    # EMS smooths, so the tolerance adds one bin width of bias to 5 bootstrap sigmas.
    width = 100 / 256
    for q in answer.quantiles[:2]:
        truth = float(np.quantile(values, q.q))
        sigma = (q.high - q.low) / (2 * z_value(0.95))
        assert abs(q.value - truth) <= 5 * sigma + 2 * width, (q, truth)
    assert answer.mean_ci.low <= answer.mean <= answer.mean_ci.high
    assert [t.window for t in answer.trend] == DAYS
    for t, x in zip(answer.trend, np.split(values, len(DAYS)), strict=True):
        assert t.mean is not None and t.median is not None and t.smoothed_mean is not None
        assert t.mean_low is not None and t.mean_low <= t.mean <= (t.mean_high or 0)
        # Per-window spread: the range's bootstrap spread scaled by sqrt(n / n_window).
        assert t.mean_std_error is not None
        assert abs(t.mean - x.mean()) <= 5 * t.mean_std_error, (t, x.mean())
    # The same data gives the same answer (bootstrap seeded by the tally).
    assert to_json(answer) == to_json(
        estimate_range(mech, tallies, EstimateQuery(bootstrap=20, histogram_bins=16))
    )


def test_an_integer_valued_distribution_answers_with_integer_quantiles_and_a_trend() -> None:
    """``integer=True``: the service's histogram, quantiles and per-window trend come from the
    estimate on the integers (the windows use the same integer channel as the whole range)."""
    mech, tallies, values = numeric_tallies("square_wave", integer=True)
    answer = estimate_range(mech, tallies, EstimateQuery(bootstrap=10, histogram_bins=10))
    assert isinstance(answer, DistributionEstimates)
    assert sum(b.frequency for b in answer.bins) == pytest.approx(1.0)
    for q in answer.quantiles:
        assert q.value == round(q.value) and q.low <= q.value <= q.high
    assert [t.window for t in answer.trend] == DAYS
    for t, x in zip(answer.trend, np.split(values, len(DAYS)), strict=True):
        assert t.median is not None and t.median == round(t.median)
        assert t.mean is not None and t.mean_std_error is not None
        assert abs(t.mean - x.mean()) <= 5 * t.mean_std_error + 0.5, (t, x.mean())


@pytest.mark.parametrize("name", ["piecewise", "square_wave"])
def test_numeric_answers_validate_against_the_published_schema(name: str) -> None:
    mech, tallies, _ = numeric_tallies(name)
    body = to_json(estimate_range(mech, tallies, EstimateQuery(bootstrap=4, campaign="x")))
    doc = openapi_document()
    validate(doc, "Estimates", body)
    assert undeclared_fields(doc, doc["components"]["schemas"]["Estimates"], body) == []


@dataclass(frozen=True)
class _Inner:
    """Inner doc."""

    x: float


@dataclass(frozen=True)
class _Outer:
    a: int | None
    b: list[_Inner]
    c: dict[str, float]
    d: Literal["one", "two"]
    e: tuple[float, float]
    f: _Inner | None


def test_json_schema_of_dataclasses() -> None:
    components: dict[str, Any] = {}
    assert json_schema(_Outer, components) == {"$ref": "#/components/schemas/_Outer"}
    props = components["_Outer"]["properties"]
    assert props["a"] == {"type": "integer", "nullable": True}
    assert props["b"] == {"type": "array", "items": {"$ref": "#/components/schemas/_Inner"}}
    assert props["c"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["d"] == {"type": "string", "enum": ["one", "two"]}
    assert props["e"]["minItems"] == props["e"]["maxItems"] == 2
    assert props["f"] == {"allOf": [{"$ref": "#/components/schemas/_Inner"}], "nullable": True}
    assert components["_Outer"]["required"] == ["a", "b", "c", "d", "e", "f"]
    assert components["_Inner"]["description"] == "Inner doc."
    assert to_json(_Outer(None, [_Inner(1.5)], {"k": 2.0}, "one", (1.0, 2.0), None)) == {
        "a": None,
        "b": [{"x": 1.5}],
        "c": {"k": 2.0},
        "d": "one",
        "e": [1.0, 2.0],
        "f": None,
    }
    with pytest.raises(InvalidParameter):
        json_schema(set[int])


def test_numeric_csv_forms() -> None:
    import csv
    import io

    from aggregator import to_csv
    from aggregator.export import DISTRIBUTION_CSV_COLUMNS, MEAN_CSV_COLUMNS

    mech, tallies, _ = numeric_tallies("piecewise")
    body = to_json(estimate_range(mech, tallies, EstimateQuery(campaign="m")))
    rows = list(csv.DictReader(io.StringIO(to_csv(body))))
    assert list(rows[0]) == list(MEAN_CSV_COLUMNS) and len(rows) == 1
    assert float(rows[0]["mean"]) == body["mean"] and float(rows[0]["ci_low"]) == body["ci"]["low"]
    mech, tallies, _ = numeric_tallies("square_wave")
    body = to_json(estimate_range(mech, tallies, EstimateQuery(bootstrap=4, histogram_bins=8)))
    rows = list(csv.DictReader(io.StringIO(to_csv(body))))
    assert list(rows[0]) == list(DISTRIBUTION_CSV_COLUMNS) and len(rows) == 8
    assert [float(r["frequency"]) for r in rows] == [b["frequency"] for b in body["bins"]]
