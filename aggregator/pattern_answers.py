"""``postprocess=pattern`` in the estimate service: the pattern MLE over a range of windows.

:func:`pattern_postprocessed` is what :func:`aggregator.service.estimate_range` applies when a
query asks for ``pattern``: the windows' pattern histograms (built by the caller, e.g. the
collector from its stored reports) are merged, checked against the tallies and fitted by
:mod:`aggregator.pattern`; the counts come with standard errors from the observed Fisher
information. When some window has no histogram (retention deleted its reports) or its
histogram does not add up to its tally, the answer is the tally ``mle``, and says so:
``method`` ``mle``, ``requested`` ``pattern`` and a ``note`` naming the windows.

Privacy: reads perturbed reports' patterns and public mechanism constants only; the
epsilon-LDP guarantee of the reports is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from aggregator.estimate import Estimate
from aggregator.pattern import (
    PatternHistogram,
    SingularInformation,
    histogram_of_tally,
    merge_histograms,
    pattern_frequencies,
    pattern_ratio,
    pattern_std_errors,
)
from aggregator.postprocess import PATTERN_METHOD, PostProcessed, postprocess
from client_sdk.mechanisms.tally import PatternTally

#: What a ``pattern`` answer's counts and standard errors are (in its ``postprocess.note``).
PATTERN_NOTE = (
    "maximum likelihood of the reports' patterns (exact likelihood of every report, not only "
    "the support counts); std_errors: asymptotic, from the observed Fisher information on the "
    "simplex less the multinomial part (counts of the reporting devices), for counts away from 0"
)
#: At most this many window names are listed in a fallback note.
NOTE_WINDOWS = 5


def _names(windows: list[str]) -> str:
    shown = ", ".join(windows[:NOTE_WINDOWS])
    more = len(windows) - NOTE_WINDOWS
    return shown + (f" and {more} more" if more > 0 else "")


def unavailable_windows(
    tallies: Mapping[str, Any], patterns: Mapping[str, PatternHistogram | None] | None
) -> tuple[list[str], list[str]]:
    """``(missing, mismatched)``: windows with no histogram, and windows whose histogram's
    report count or column sums differ from their tally's ``n`` or support counts."""
    missing, mismatched = [], []
    for window, tally in tallies.items():
        hist = None if patterns is None else patterns.get(window)
        if hist is None:
            missing.append(window)
            continue
        support = (np.asarray(hist.patterns, bool) * hist.counts[:, None]).sum(axis=0)
        if hist.n != tally.n or not np.array_equal(support, np.asarray(tally.support)):
            mismatched.append(window)
    return missing, mismatched


def pattern_postprocessed(
    est: Estimate,
    tallies: Mapping[str, Any],
    patterns: Mapping[str, PatternHistogram | None] | None,
    *,
    alpha: float,
) -> PostProcessed:
    """The ``pattern`` post-processing of ``est`` (the estimate of the sum of ``tallies``).

    Every window of ``tallies`` needs its histogram in ``patterns``, adding up exactly to its
    tally; otherwise the tally ``mle`` with a note saying which windows lacked what. The caller
    has checked the mechanism's capability (:func:`aggregator.pattern.check_pattern_capable`).
    """
    mechanism = est.mechanism
    missing, mismatched = unavailable_windows(tallies, patterns)
    if missing or mismatched:
        reasons = []
        if patterns is None:
            reasons.append("no report patterns were given (estimate_range(..., patterns=...))")
        elif missing:
            reasons.append(
                f"no stored reports for window(s) {_names(missing)} (deleted by retention; "
                "their tallies are kept)"
            )
        if mismatched:
            reasons.append(
                f"the stored reports of window(s) {_names(mismatched)} do not add up to their "
                "tallies (reports being deleted or ingested meanwhile)"
            )
        fallback = postprocess(est, "mle", alpha=alpha)
        return replace(
            fallback,
            requested=PATTERN_METHOD,
            note="; ".join(reasons) + ": the pattern MLE needs every report's pattern, so this "
            "is the tally mle",
        )
    given = [] if patterns is None else [patterns[w] for w in tallies]
    hist = merge_histograms(mechanism.k, [h for h in given if h is not None])
    return fit_patterns_or_mle(est, hist, alpha=alpha)


def fit_patterns_or_mle(est: Estimate, hist: PatternHistogram, *, alpha: float) -> PostProcessed:
    """:func:`fit_patterns`, or the tally ``mle`` with a note saying why where the patterns
    do not identify every frequency (a campaign's first few reports)."""
    try:
        return fit_patterns(est, hist)
    except SingularInformation as exc:
        return replace(
            postprocess(est, "mle", alpha=alpha),
            requested=PATTERN_METHOD,
            note=f"{exc}: this is the tally mle",
        )


def fit_patterns(
    est: Estimate, hist: PatternHistogram, method: str = PATTERN_METHOD
) -> PostProcessed:
    """The pattern MLE of ``hist`` (the reports of ``est``'s tally) with its standard errors,
    labelled ``method`` (``auto`` sets ``chosen`` ``pattern`` itself)."""
    mechanism = est.mechanism
    fit = pattern_frequencies(mechanism, hist)
    n = est.n
    se = pattern_std_errors(pattern_ratio(mechanism), hist, fit.frequencies) * n
    return PostProcessed(
        method,
        fit.frequencies * n,
        iterations=fit.iterations,
        converged=fit.converged,
        gap=float(fit.gap),
        patterns=int(hist.counts.size),
        std_errors=[float(s) for s in se],
        note=PATTERN_NOTE,
    )


def tally_patterns(est: Estimate) -> PatternHistogram | None:
    """The pattern histogram ``est``'s tally keeps (an SS campaign with ``patterns``), or None."""
    tally = est.tally
    return histogram_of_tally(tally) if isinstance(tally, PatternTally) else None
