"""The one estimate query shared by the collector's HTTP view, the dashboard and ``ldp estimate``.

``estimate_windows`` sums the tallies of a range of windows (tallies add), refuses a range with
fewer reports than the campaign's minimum, and returns a JSON-ready answer: per domain value the
post-processed count and frequency, the raw unbiased count, its standard error and confidence
interval, plus the report count, epsilon, mechanism, the theoretical standard error, the
post-processing applied, the heavy hitters and a per-window trend.

Privacy: everything here is computed from tallies of perturbed reports and public mechanism
constants; no query can weaken the epsilon-LDP guarantee of the reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from aggregator.estimate import Estimate, debias, estimate, z_value
from aggregator.postprocess import DEFAULT_POSTPROCESS, PostProcessed, check_method, postprocess
from aggregator.smooth import Smoothed, smooth_series
from aggregator.topk import heavy_hitters
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Mechanism, Tally

#: Confidence level of intervals and of the heavy-hitter test unless the caller says otherwise.
DEFAULT_LEVEL = 0.95


def sum_tallies(mechanism: Mechanism, tallies: Mapping[str, Tally]) -> Tally:
    """The tally of all reports in ``tallies`` (tallies of one campaign add)."""
    total = Tally.empty(mechanism.k)
    for window, tally in tallies.items():
        if not isinstance(tally, Tally) or tally.k != mechanism.k:
            raise InvalidParameter(
                f"window {window!r}: expected a tally over {mechanism.k} values, got {tally!r}"
            )
        total = total + tally
    return total


def estimate_windows(
    mechanism: Mechanism,
    tallies_by_window: Mapping[str, Tally],
    *,
    level: float = DEFAULT_LEVEL,
    postprocess: str = DEFAULT_POSTPROCESS,
    min_reports: int = 1,
    campaign: str | None = None,
    start: str | None = None,
    end: str | None = None,
) -> dict[str, Any]:
    """Estimates for the windows of ``tallies_by_window`` with keys in ``[start, end]``.

    Keys are window starts as ISO dates (``start``/``end`` filter them inclusively; None means
    unbounded). Raises :class:`NotEnoughReports` when the range holds fewer than
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
    z = z_value(level)
    method = check_method(postprocess)
    windows = sorted(
        w for w in tallies_by_window if (start is None or w >= start) and (end is None or w <= end)
    )
    selected = {w: tallies_by_window[w] for w in windows}
    total = sum_tallies(mechanism, selected)
    est = estimate(mechanism, total, min_reports=min_reports)
    n = est.n
    post = postprocess_estimate(est, method, level)
    raw = np.asarray(est.counts, dtype=float)
    half = z * est.std_errors
    lo, hi = np.clip(raw - half, 0, n), np.clip(raw + half, 0, n)
    top = heavy_hitters(est, level=level)
    significant = {h.index for h in top.items}
    values = [
        {
            "value": label,
            "count": float(post.counts[i]),
            "frequency": float(post.counts[i] / n),
            "raw_count": float(raw[i]),
            "raw_frequency": float(raw[i] / n),
            "std_error": float(est.std_errors[i]),
            "plugin_std_error": float(est.plugin_std_errors[i]),
            "ci_low": float(lo[i]),
            "ci_high": float(hi[i]),
            "significant": i in significant,
        }
        for i, label in enumerate(mechanism.domain)
    ]
    return {
        "campaign": campaign,
        "from": start if start is not None else (windows[0] if windows else None),
        "to": end if end is not None else (windows[-1] if windows else None),
        "windows": windows,
        "n": n,
        "min_reports": max(1, min_reports),
        "mechanism": mechanism.name,
        "params": mechanism.params(),
        "epsilon": mechanism.epsilon,
        "realised_epsilon": mechanism.realised_epsilon,
        "level": level,
        "theoretical_std_error": est.theoretical_std_error,
        "postprocess": post.describe(),
        "values": values,
        "top_k": top.to_dict(),
        "trend": with_smoothed(trend_rows(mechanism, selected, min_reports)),
        "trend_smoothing": SMOOTHING_NOTE,
    }


def postprocess_estimate(est: Estimate, method: str, level: float) -> PostProcessed:
    """Apply ``method`` with the significance level ``alpha = 1 - level`` (used by base-cut)."""
    return postprocess(est, method, alpha=1 - level)


#: What the trend's ``smoothed_*`` fields are (also in every answer, as ``trend_smoothing``).
SMOOTHING_NOTE = (
    "smoothed_frequencies borrow strength across windows (local-level Kalman smoother, "
    "process noise fitted per value by empirical Bayes, new level at a break): lower error, "
    "not unbiased per window; frequencies are each window's raw unbiased estimates"
)


def trend_rows(
    mechanism: Mechanism, tallies: Mapping[str, Tally], min_reports: int
) -> list[dict[str, Any]]:
    """Per window (in the given order): ``n`` and the raw unbiased ``frequencies`` with their
    ``std_errors`` (closed form), both None below ``min_reports``."""
    rows: list[dict[str, Any]] = []
    for window, tally in tallies.items():
        n = tally.n
        if n < max(1, min_reports):
            rows.append({"window": window, "n": n, "frequencies": None, "std_errors": None})
            continue
        counts = debias(mechanism, tally)
        var = mechanism.count_variance(n, np.clip(counts, 0, n))
        rows.append(
            {
                "window": window,
                "n": n,
                "frequencies": (counts / n).tolist(),
                "std_errors": (np.sqrt(np.maximum(var, 0)) / n).tolist(),
            }
        )
    return rows


def smooth_trend(rows: list[dict[str, Any]]) -> Smoothed | None:
    """The smoother over the raw rows of :func:`trend_rows`; None when no window has one.

    A window whose raw estimate has a zero standard error (possible only for a degenerate
    mechanism) is given the smallest positive one of its row.
    """
    shown = [r for r in rows if r["frequencies"] is not None]
    if not shown:
        return None
    k = len(shown[0]["frequencies"])
    missing = [math.nan] * k
    y = np.array([r["frequencies"] or missing for r in rows], dtype=float)
    se = np.array([r["std_errors"] or missing for r in rows], dtype=float)
    reports = np.array([max(1, r["n"]) for r in rows], dtype=float)
    # A zero standard error (a degenerate tally) gets the smallest positive one of its window.
    zero = se <= 0
    if zero.any():
        floor = np.where(se > 0, se, np.inf).min(axis=1, keepdims=True)
        floor = np.where(np.isfinite(floor), floor, 1.0 / reports[:, None])
        se = np.where(zero, floor, se)
    return smooth_series(y, se, reports=reports)


def with_smoothed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with ``smoothed_frequencies``/``smoothed_std_errors`` beside the raw values
    (None where the raw ones are None)."""
    sm = smooth_trend(rows)
    for t, r in enumerate(rows):
        shown = sm is not None and r["frequencies"] is not None
        r["smoothed_frequencies"] = sm.mean[t].tolist() if shown and sm else None
        r["smoothed_std_errors"] = sm.std_error[t].tolist() if shown and sm else None
    return rows
