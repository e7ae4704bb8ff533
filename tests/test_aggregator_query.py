"""The shared estimate query, top-k, CSV output and the minimum-reports rule."""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest

from aggregator import NotEnoughReports, estimate
from aggregator.export import CSV_COLUMNS, to_csv
from aggregator.postprocess import DEFAULT_POSTPROCESS
from aggregator.query import estimate_windows, sum_tallies
from aggregator.topk import heavy_hitters
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Tally, create

LABELS = ["a", "b", "c", "d", "e", "f"]


def window_tallies(mech, sizes: dict[str, int], seed: int = 1) -> dict[str, Tally]:
    rng = np.random.default_rng(seed)
    probs = np.array([0.5, 0.3, 0.15, 0.05, 0.0, 0.0])
    out = {}
    for day, n in sizes.items():
        values = rng.choice(len(probs), size=n, p=probs)
        out[day] = mech.tally(mech.perturb_many(values, rng=rng))
    return out


@pytest.fixture
def mech():
    return create("oue", epsilon=2.0, domain=LABELS)


def test_tallies_add_over_a_range_of_windows(mech) -> None:
    tallies = window_tallies(mech, {"2026-11-01": 3000, "2026-11-02": 2000, "2026-11-03": 1000})
    body = estimate_windows(mech, tallies, start="2026-11-02", end="2026-11-03", campaign="c")
    both = tallies["2026-11-02"] + tallies["2026-11-03"]
    assert body["windows"] == ["2026-11-02", "2026-11-03"]
    assert body["n"] == 3000 == both.n
    raw = estimate(mech, both)
    assert np.allclose([v["raw_count"] for v in body["values"]], raw.counts)
    assert np.allclose([v["std_error"] for v in body["values"]], raw.std_errors)
    assert sum_tallies(mech, tallies) == sum(tallies.values(), Tally.empty(6))


def test_answer_fields_are_json_ready_and_consistent(mech) -> None:
    tallies = window_tallies(mech, {"2026-11-01": 4000})  # a single window
    body = estimate_windows(mech, tallies, level=0.9, postprocess="norm-sub", campaign="c")
    json.dumps(body)
    assert body["campaign"] == "c" and body["from"] == body["to"] == "2026-11-01"
    assert body["mechanism"] == "oue" and body["epsilon"] == 2.0 and body["level"] == 0.9
    assert body["postprocess"] == {"method": "norm-sub"}
    assert body["theoretical_std_error"] == pytest.approx(math.sqrt(4000 * mech.v0))
    values = body["values"]
    assert [v["value"] for v in values] == LABELS
    assert math.isclose(sum(v["count"] for v in values), 4000)
    z = 1.6448536269514722
    for v in values:
        assert v["frequency"] == pytest.approx(v["count"] / 4000)
        assert v["ci_low"] == pytest.approx(max(0, v["raw_count"] - z * v["std_error"]))
        assert v["ci_high"] == pytest.approx(min(4000, v["raw_count"] + z * v["std_error"]))
    assert [t["window"] for t in body["trend"]] == ["2026-11-01"]
    assert body["trend"][0]["frequencies"] == pytest.approx([v["raw_frequency"] for v in values])


def test_default_postprocess_is_applied_and_named(mech) -> None:
    body = estimate_windows(mech, window_tallies(mech, {"2026-11-01": 2000}))
    assert body["postprocess"]["method"] == DEFAULT_POSTPROCESS == "auto"
    assert body["postprocess"]["chosen"] in ("pooled", "flat", "mle")
    kept = estimate_windows(mech, window_tallies(mech, {"2026-11-01": 2000}), postprocess="mle")[
        "postprocess"
    ]
    assert kept["method"] == "mle" and kept["converged"] is True
    pooled = estimate_windows(mech, window_tallies(mech, {"2026-11-01": 2000}), postprocess="eb")[
        "postprocess"
    ]
    assert pooled["method"] == "eb" and isinstance(pooled["pooled"], bool)


def test_not_enough_reports_is_refused_with_the_rule(mech) -> None:
    tallies = window_tallies(mech, {"2026-11-01": 40, "2026-11-02": 30})
    with pytest.raises(NotEnoughReports, match=r"not enough reports yet \(70 of 100\)"):
        estimate_windows(mech, tallies, min_reports=100)
    with pytest.raises(NotEnoughReports, match=r"\(0 of 1\)"):
        estimate_windows(mech, tallies, start="2026-12-01")
    body = estimate_windows(mech, tallies, min_reports=50)
    assert [t["frequencies"] is None for t in body["trend"]] == [True, True]
    assert body["n"] == 70


def test_bad_level_and_method_are_rejected(mech) -> None:
    tallies = window_tallies(mech, {"2026-11-01": 100})
    with pytest.raises(InvalidParameter, match="level"):
        estimate_windows(mech, tallies, level=1.5)
    with pytest.raises(InvalidParameter, match="postprocess must be one of"):
        estimate_windows(mech, tallies, postprocess="magic")
    with pytest.raises(InvalidParameter, match="expected a tally over 6 values"):
        estimate_windows(mech, {"2026-11-01": Tally.empty(3)})


def test_csv_parses_back_to_the_json_answer(mech) -> None:
    body = estimate_windows(mech, window_tallies(mech, {"2026-11-01": 3000}), campaign="c")
    rows = list(csv.DictReader(io.StringIO(to_csv(body))))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [r["value"] for r in rows] == LABELS
    for row, value in zip(rows, body["values"], strict=True):
        assert float(row["count"]) == value["count"]
        assert float(row["ci_high"]) == value["ci_high"]
        assert row["significant"] == ("true" if value["significant"] else "false")
        assert (
            int(row["n"]) == 3000
            and row["postprocess"] == DEFAULT_POSTPROCESS
            and row["campaign"] == "c"
        )


def test_heavy_hitters_find_planted_values_in_order() -> None:
    mech = create("oue", epsilon=1.0, domain=50)
    values = np.concatenate([np.full(4000, 7), np.full(2500, 3), np.arange(3500) % 50 + 0])
    values = values[values != 49]
    est = estimate(mech, mech.tally(mech.perturb_many(values, rng=4)))
    top = heavy_hitters(est, level=0.95)
    assert [h.value for h in top.items][:2] == ["7", "3"]
    assert all(h.count > top.threshold for h in top.items)
    p, q = mech.p_star, mech.q_star
    assert top.sigma0 == pytest.approx(math.sqrt(est.n * q * (1 - q)) / (p - q))
    assert top.alpha == pytest.approx(0.05)
    assert heavy_hitters(est, limit=1).items[0].value == "7"
    counts = [h.count for h in top.items]
    assert counts == sorted(counts, reverse=True)


def test_heavy_hitters_control_false_discoveries_at_alpha() -> None:
    # Everyone holds value 0; values 1..19 are truly absent. Bonferroni bounds the chance of
    # any false discovery per run by alpha = 0.05: over 100 runs, P[more than 12] < 1e-3.
    mech = create("oue", epsilon=0.5, domain=20)
    runs_with_false = 0
    for seed in range(100):
        est = estimate(mech, mech.tally(mech.perturb_many(np.zeros(1000, np.int64), rng=seed)))
        found = {h.index for h in heavy_hitters(est, level=0.95).items}
        runs_with_false += bool(found - {0})
    assert runs_with_false <= 12
