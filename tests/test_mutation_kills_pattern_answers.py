"""The ``pattern`` post-processing of the estimate service (``aggregator.pattern_answers``,
issue 21): its standard errors are counts, and its fallback note names every window it lacked.

The expected standard errors are :func:`aggregator.pattern.pattern_std_errors` (frequencies)
at the fit, times n; the note names at most the first five windows and says how many more.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from aggregator.estimate import estimate
from aggregator.pattern import (
    merge_histograms,
    pattern_frequencies,
    pattern_histogram,
    pattern_ratio,
    pattern_std_errors,
)
from aggregator.pattern_answers import _names, pattern_postprocessed, unavailable_windows
from client_sdk.mechanisms import create

DAYS = [f"2026-11-{d:02d}" for d in range(1, 10)]


def _campaign(windows: int) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    mech = create("oue", epsilon=2.0, domain=4)
    rng = np.random.default_rng(4)
    batches = {
        w: mech.perturb_many(rng.choice(4, size=300, p=[0.4, 0.3, 0.2, 0.1]), rng=rng)
        for w in DAYS[:windows]
    }
    tallies = {w: mech.tally(b) for w, b in batches.items()}
    hists = {w: pattern_histogram(mech, b) for w, b in batches.items()}
    return mech, tallies, hists


def test_pattern_standard_errors_are_counts() -> None:
    mech, tallies, hists = _campaign(2)
    total = tallies[DAYS[0]] + tallies[DAYS[1]]
    est = estimate(mech, total)
    post = pattern_postprocessed(est, tallies, hists, alpha=0.05)
    hist = merge_histograms(mech.k, list(hists.values()))
    fit = pattern_frequencies(mech, hist)
    expected = pattern_std_errors(pattern_ratio(mech), hist, fit.frequencies) * 600
    assert post.std_errors is not None
    np.testing.assert_allclose(post.std_errors, expected, rtol=1e-12)
    # Counts of 600 reports: errors of a few tens, not fractions and not 600 plus a fraction.
    assert all(5 < s < 100 for s in post.std_errors)
    np.testing.assert_allclose(np.asarray(post.counts), fit.frequencies * 600, rtol=1e-12)


@pytest.mark.parametrize(
    ("count", "note"),
    [
        (1, "2026-11-01"),
        (5, "2026-11-01, 2026-11-02, 2026-11-03, 2026-11-04, 2026-11-05"),
        (6, "2026-11-01, 2026-11-02, 2026-11-03, 2026-11-04, 2026-11-05 and 1 more"),
        (9, "2026-11-01, 2026-11-02, 2026-11-03, 2026-11-04, 2026-11-05 and 4 more"),
    ],
)
def test_a_note_names_the_first_five_windows_and_counts_the_rest(count: int, note: str) -> None:
    assert _names(DAYS[:count]) == note


def test_every_unavailable_window_is_found_after_a_missing_one() -> None:
    mech, tallies, hists = _campaign(4)
    # The first window has no histogram; the third's does not add up to its tally.
    given = {DAYS[1]: hists[DAYS[1]], DAYS[2]: hists[DAYS[3]], DAYS[3]: hists[DAYS[3]]}
    assert unavailable_windows(tallies, given) == ([DAYS[0]], [DAYS[2]])
    assert unavailable_windows(tallies, None) == (DAYS[:4], [])
    assert unavailable_windows(tallies, hists) == ([], [])
    est = estimate(mech, sum(list(tallies.values())[1:], tallies[DAYS[0]]))
    post = pattern_postprocessed(est, tallies, given, alpha=0.05)
    assert post.method == "mle" and post.requested == "pattern"
    assert f"no stored reports for window(s) {DAYS[0]} " in str(post.note)
    assert f"the stored reports of window(s) {DAYS[2]} do not add up" in str(post.note)
