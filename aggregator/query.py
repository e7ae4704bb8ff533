"""``estimate_windows``: the JSON form of :func:`aggregator.service.estimate_range`.

Kept for callers that want a dict (the answer served by ``GET /v1/campaigns/{id}/estimates``);
the typed answer, the options and the per-kind estimators live in :mod:`aggregator.service`.
For a categorical campaign the dict holds, per domain value, the post-processed ``count`` and
``frequency``, the raw unbiased count, its standard error and confidence interval, plus the
report count, epsilon, mechanism, the theoretical standard error, the post-processing applied,
the heavy hitters and a per-window trend; numeric campaigns get a mean or a distribution.

Privacy: everything here is computed from tallies of perturbed reports and public mechanism
constants; no query can weaken the epsilon-LDP guarantee of the reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aggregator.postprocess import DEFAULT_POSTPROCESS
from aggregator.results import FrequencyTrendWindow
from aggregator.schema import to_json
from aggregator.service import (
    DEFAULT_LEVEL,
    SMOOTHING_NOTE,
    EstimateQuery,
    estimate_range,
    raw_frequency_trend,
    smooth_frequency_trend,
    sum_tallies,
    with_smoothed_frequencies,
)
from aggregator.smooth import Smoothed

__all__ = [
    "DEFAULT_LEVEL",
    "SMOOTHING_NOTE",
    "estimate_windows",
    "smooth_trend",
    "sum_tallies",
    "trend_rows",
    "with_smoothed",
]


def estimate_windows(
    mechanism: Any,
    tallies_by_window: Mapping[str, Any],
    *,
    level: float = DEFAULT_LEVEL,
    postprocess: str = DEFAULT_POSTPROCESS,
    min_reports: int = 1,
    campaign: str | None = None,
    start: str | None = None,
    end: str | None = None,
) -> dict[str, Any]:
    """Estimates for the windows of ``tallies_by_window`` with keys in ``[start, end]``, as JSON.

    Keys are window starts as ISO dates (``start``/``end`` filter them inclusively; None means
    unbounded). Raises :class:`~aggregator.NotEnoughReports` when the range holds fewer than
    ``min_reports`` reports (and always for none), and :class:`InvalidParameter` for a bad
    ``level`` or ``postprocess``.

    Fields per value: ``count``/``frequency`` after ``postprocess``; ``raw_count``/
    ``raw_frequency`` unbiased; ``std_error`` (closed form ``n v0 + beta c``) and
    ``plugin_std_error`` of the raw count; ``ci_low``/``ci_high``: the normal interval around
    the raw count at ``level``, intersected with ``[0, n]`` (the true count lies there, so the
    coverage is unchanged); ``significant``: above the heavy-hitter threshold.
    The ``trend`` holds, per window, its report count and raw unbiased frequencies (None below
    ``min_reports``): raw estimates are unbiased in every window, so changes between windows
    are not artefacts of post-processing windows of different sizes. Beside them,
    ``smoothed_frequencies``/``smoothed_std_errors``: estimates that borrow strength across
    the windows of the range (:mod:`aggregator.smooth`), labelled by ``trend_smoothing``.
    """
    query = EstimateQuery(
        start=start,
        end=end,
        level=level,
        postprocess=postprocess,
        min_reports=min_reports,
        campaign=campaign,
    )
    body: dict[str, Any] = to_json(estimate_range(mechanism, tallies_by_window, query))
    return body


def trend_rows(
    mechanism: Any, tallies: Mapping[str, Any], min_reports: int
) -> list[dict[str, Any]]:
    """Per window (in the given order): ``window``, ``n`` and the raw unbiased ``frequencies``
    with their ``std_errors`` (closed form), both None below ``min_reports``."""
    return [
        {"window": r.window, "n": r.n, "frequencies": r.frequencies, "std_errors": r.std_errors}
        for r in raw_frequency_trend(mechanism, tallies, min_reports)
    ]


def _typed(rows: list[dict[str, Any]]) -> list[FrequencyTrendWindow]:
    return [
        FrequencyTrendWindow(r["window"], r["n"], r["frequencies"], r["std_errors"], None, None)
        for r in rows
    ]


def smooth_trend(rows: list[dict[str, Any]]) -> Smoothed | None:
    """The smoother over the rows of :func:`trend_rows`; None when no window has an estimate."""
    return smooth_frequency_trend(_typed(rows))


def with_smoothed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with ``smoothed_frequencies``/``smoothed_std_errors`` beside the raw values
    (None where the raw ones are None)."""
    for r, typed in zip(rows, with_smoothed_frequencies(_typed(rows)), strict=True):
        r["smoothed_frequencies"] = typed.smoothed_frequencies
        r["smoothed_std_errors"] = typed.smoothed_std_errors
    return rows
