"""The JSON helpers of ``aggregator.query`` that mutation testing found unchecked (issue 21).

``with_smoothed`` (the bench's trend with smoothed values) must put the smoother's posterior
beside every window that has a raw estimate and None beside the others; ``estimate_windows``
takes its options by keyword only, so a positional value cannot be read as another option.
"""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.query import estimate_windows, smooth_trend, trend_rows, with_smoothed
from client_sdk.mechanisms import Tally, create


def _tallies(mech, sizes: list[int], seed: int) -> dict[str, Tally]:
    rng = np.random.default_rng(seed)
    out = {}
    for day, n in enumerate(sizes, start=1):
        values = rng.choice(mech.k, size=n, p=[0.6, 0.3, 0.1])
        out[f"2026-11-{day:02d}"] = mech.tally(mech.perturb_many(values, rng=rng))
    return out


def test_with_smoothed_puts_the_smoothers_posterior_beside_each_estimated_window() -> None:
    mech = create("oue", epsilon=1.0, domain=3)
    # The fourth window has too few reports: no raw estimate, so no smoothed one either.
    rows = trend_rows(mech, _tallies(mech, [500, 400, 600, 5, 500], seed=7), min_reports=20)
    assert [r["frequencies"] is None for r in rows] == [False, False, False, True, False]
    sm = smooth_trend(rows)
    assert sm is not None
    out = with_smoothed(rows)
    assert len(out) == 5
    for t, row in enumerate(out):
        if row["frequencies"] is None:
            assert row["smoothed_frequencies"] is None and row["smoothed_std_errors"] is None
            continue
        assert row["smoothed_frequencies"] == pytest.approx(sm.mean[t].tolist())
        assert row["smoothed_std_errors"] == pytest.approx(sm.std_error[t].tolist())


def test_with_smoothed_without_any_estimate_gives_none_everywhere() -> None:
    mech = create("oue", epsilon=1.0, domain=3)
    rows = trend_rows(mech, _tallies(mech, [3, 4], seed=8), min_reports=20)
    assert smooth_trend(rows) is None
    out = with_smoothed(rows)
    pairs = [(r["smoothed_frequencies"], r["smoothed_std_errors"]) for r in out]
    assert pairs == [(None, None)] * 2


def test_estimate_windows_takes_its_options_by_keyword_only() -> None:
    mech = create("oue", epsilon=1.0, domain=3)
    tallies = _tallies(mech, [300], seed=9)
    by_name = estimate_windows(mechanism=mech, tallies_by_window=tallies, level=0.9)
    assert by_name["level"] == 0.9 and by_name["n"] == 300
    with pytest.raises(TypeError):
        estimate_windows(mech, tallies, 0.9)  # type: ignore[misc]
