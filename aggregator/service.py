"""The one estimate service: a campaign's window tallies and a query in, a typed answer out.

``estimate_range(mechanism, tallies_by_window, query)`` is what ``GET
/v1/campaigns/{id}/estimates``, the dashboard and ``ldp estimate`` all call; they only parse
their inputs and format the answer (:func:`aggregator.schema.to_json` for JSON). The answer's
type follows the mechanism's ``kind`` (``getattr(mechanism, "kind", "frequency")``):

* ``"frequency"``: :class:`~aggregator.results.FrequencyEstimates`: the tallies are summed,
  debiased (:func:`aggregator.estimate`), post-processed, tested for heavy hitters and, per
  window, estimated again for the trend (smoothed by :mod:`aggregator.smooth`);
* ``"mean"``: :class:`~aggregator.results.MeanEstimates` from
  :func:`aggregator.numeric.estimate_numeric` (mean, standard error, normal interval), and per
  window the same with a smoothed mean and its band;
* ``"distribution"``: :class:`~aggregator.results.DistributionEstimates`: EMS histogram,
  bootstrap intervals per bin, quantiles with intervals, the mean; per window mean and median;
* ``"multi"`` (several attributes per device): :class:`~aggregator.results.MultiEstimates`
  from :mod:`aggregator.multi_answers`: per attribute counts or a mean, per declared pair a
  joint table with standard errors and intervals;
* ``"open_domain"`` (strings nobody listed in advance):
  :class:`~aggregator.results.OpenDomainEstimates` from :mod:`aggregator.openended_answers`:
  the discovered heavy hitters with their threshold, and the counts of ``query.candidates``.

Bootstrap replicates are seeded from the tally itself, so the same query on the same data gives
the same answer everywhere (HTTP, dashboard, CLI).

Privacy: everything is computed from tallies of perturbed reports and public mechanism
constants; no query can weaken the epsilon-LDP guarantee of the reports.
"""

from __future__ import annotations

import datetime as dt
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aggregator.estimate import estimate, significance_level, z_value
from aggregator.pattern import PatternHistogram, check_pattern_capable
from aggregator.postprocess import DEFAULT_POSTPROCESS, PATTERN_METHOD, check_method, postprocess
from aggregator.results import (
    Atom,
    DistributionEstimates,
    DistributionTrendWindow,
    EstimateAnswer,
    FrequencyEstimates,
    FrequencyTrendWindow,
    HeavyHitterRow,
    HistogramBin,
    Interval,
    MeanEstimates,
    MeanTrendWindow,
    QuantileRow,
    TopKSummary,
    ValueEstimate,
)
from aggregator.smooth import Smoothed, smooth_series
from aggregator.topk import heavy_hitters
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.tally import PatternTally

#: Confidence level of intervals and of the heavy-hitter test unless the caller says otherwise.
DEFAULT_LEVEL = 0.95
#: Quantiles a distribution answer reports (median, p90, p99).
DEFAULT_QUANTILES = (0.5, 0.9, 0.99)
#: A distribution's histogram is shown in at most this many bins (runs of adjacent grid bins).
DEFAULT_HISTOGRAM_BINS = 32
#: Bootstrap replicates behind a distribution's intervals (whole range; per window: half as many).
DEFAULT_BOOTSTRAP = 20

#: What a categorical trend's ``smoothed_*`` fields are (also in every answer).
SMOOTHING_NOTE = (
    "smoothed_frequencies borrow strength across windows (local-level Kalman smoother, "
    "process noise fitted per value by empirical Bayes, new level at a break): lower error, "
    "not unbiased per window; frequencies are each window's raw unbiased estimates"
)
#: What a numeric trend's ``smoothed_*`` fields are.
NUMERIC_SMOOTHING_NOTE = (
    "smoothed_mean borrows strength across windows (local-level Kalman smoother, process "
    "noise fitted by empirical Bayes, new level at a break): lower error, not unbiased per "
    "window; mean is each window's own unbiased estimate"
)


@dataclass(frozen=True, kw_only=True)
class EstimateQuery:
    """What to estimate over a campaign's windows.

    ``start``/``end``: window keys (ISO dates) kept inclusively, None for unbounded (the
    answer's ``from``/``to`` echo them, or the first and last window kept); ``level``: of every
    interval and of the heavy-hitter test;
    ``postprocess``: categorical consistency method (checked by name, then ignored by every
    other kind: numeric, multi-attribute, open-domain); ``min_reports``:
    fewer reports in the range raise :class:`~aggregator.NotEnoughReports`, and a window below
    it shows no estimate in the trend; ``top_k``: list at most that many heavy hitters (None:
    all); ``trend``/``smoothing``: compute the per-window trend and its smoothed values;
    ``quantiles``: of distribution answers; ``bootstrap``: replicates behind distribution
    intervals; ``histogram_bins``: most bins of a distribution's histogram (quantiles and mean
    use the full grid); ``campaign``: the id echoed in the answer; ``candidates``: strings an
    open-domain answer counts (``top_k`` then caps its discoveries, default
    :data:`aggregator.openended_answers.DEFAULT_TOP`).
    """

    start: str | None = None
    end: str | None = None
    level: float = DEFAULT_LEVEL
    postprocess: str = DEFAULT_POSTPROCESS
    min_reports: int = 1
    top_k: int | None = None
    trend: bool = True
    smoothing: bool = True
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    bootstrap: int = DEFAULT_BOOTSTRAP
    histogram_bins: int = DEFAULT_HISTOGRAM_BINS
    campaign: str | None = None
    #: Open-domain campaigns: strings whose counts to estimate (as well as the discoveries).
    candidates: tuple[str, ...] = ()


#: What a campaign query's ``top``/``candidate`` on a campaign of another kind is told.
OPEN_DOMAIN_ONLY = "'top' and 'candidate' apply only to open-domain campaigns"


def check_level(level: object) -> float:
    """``level`` if it is a number in (0, 1), else the error every surface shows (HTTP
    ``level``, the dashboard's level field, ``ldp estimate --level``)."""
    if (
        isinstance(level, bool)
        or not isinstance(level, (int, float))
        or not 0 < level < 1  # also refuses nan
    ):
        raise InvalidParameter(f"'level' must be a number in (0, 1), got {level!r}")
    return float(level)


def check_range(start: dt.date | str | None, end: dt.date | str | None) -> None:
    """A range whose first day (``from``) is after its last (``to``) is refused: it would
    select no window of a daily campaign (an answer of 0 reports) and, in a weekly one, the
    week both days fall in (an estimate for a range nobody asked for)."""
    if start is not None and end is not None and str(start) > str(end):
        raise InvalidParameter(f"'from' {start} is after 'to' {end}")


def request_options(
    kind: str,
    *,
    start: dt.date | None = None,
    end: dt.date | None = None,
    level: float = DEFAULT_LEVEL,
    postprocess: str = DEFAULT_POSTPROCESS,
    top: int | None = None,
    candidates: Sequence[str] = (),
) -> dict[str, Any]:
    """The checked :class:`EstimateQuery` options of a campaign's estimate query.

    The one set of query checks of ``GET /v1/campaigns/{id}/estimates``, the dashboard and
    ``ldp estimate --db`` (``--url`` asks the collector, which calls this): each parses its
    inputs (days, numbers), calls this with the campaign's ``kind`` and hands the options to
    :func:`collector.answers.campaign_answer`, so all three refuse the same query with the same
    :class:`InvalidParameter` message, in the names of the query parameters: ``from`` after
    ``to`` (:func:`check_range`), a ``level`` outside (0, 1) (:func:`check_level`), an unknown
    ``postprocess``, ``top`` outside [1, 200], and ``top`` or ``candidate`` on a campaign that
    is not open-domain (:data:`OPEN_DOMAIN_ONLY`; the Python API's ``EstimateQuery.top_k``
    still caps a categorical answer's heavy-hitter list).
    """
    check_range(start, end)
    options: dict[str, Any] = {
        "level": check_level(level),
        "postprocess": check_method(postprocess),
    }
    if top is not None or candidates:
        if kind != "open_domain":
            raise InvalidParameter(OPEN_DOMAIN_ONLY)
        from aggregator.openended_answers import MAX_TOP

        if top is not None and (
            isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_TOP
        ):
            raise InvalidParameter(f"'top' must be an integer in [1, {MAX_TOP}], got {top!r}")
        options |= {"top_k": top, "candidates": tuple(candidates)}
    return options


def kind_of(mechanism: Any) -> str:
    """``"frequency"``, ``"mean"``, ``"distribution"``, ``"multi"`` or ``"open_domain"``: what
    it estimates."""
    return str(getattr(mechanism, "kind", "frequency"))


def sum_tallies(mechanism: Any, tallies: Mapping[str, Any]) -> Any:
    """The tally of all reports in ``tallies`` (tallies of one campaign add)."""
    if kind_of(mechanism) != "frequency":
        total = mechanism.empty_tally()
        for window, tally in tallies.items():
            try:
                total = total + mechanism.check_tally(tally)
            except InvalidParameter as exc:
                raise InvalidParameter(f"window {window!r}: {exc}") from None
        return total
    from client_sdk.mechanisms import Tally

    for window, tally in tallies.items():
        if not isinstance(tally, Tally) or tally.k != mechanism.k:
            raise InvalidParameter(
                f"window {window!r}: expected a tally over {mechanism.k} values, got {tally!r}"
            )
    if not tallies:
        return Tally.empty(mechanism.k)
    # One integer sum over the windows: the same counts as adding the tallies one by one,
    # without building (and validating) a Tally per partial sum.
    support = np.stack([tally.support for tally in tallies.values()]).sum(axis=0)
    n = sum(tally.n for tally in tallies.values())
    kept = [t for t in tallies.values() if isinstance(t, PatternTally)]
    if kept and len(kept) == len(tallies) and len({t.d for t in kept}) == 1:
        # Every window kept its report patterns (an SS campaign with ``patterns``): so does
        # the sum, for the pattern MLE.
        patterns = np.stack([t.patterns for t in kept]).sum(axis=0)
        return PatternTally(n, support, patterns, kept[0].d)
    return Tally(n, support)


def estimate_range(
    mechanism: Any,
    tallies_by_window: Mapping[str, Any],
    query: EstimateQuery | None = None,
    *,
    patterns: Mapping[str, PatternHistogram | None] | None = None,
) -> EstimateAnswer:
    """The typed answer for the windows of ``tallies_by_window`` selected by ``query``.

    ``patterns``: per window, the pattern histogram of its reports (None: not available), read
    only by ``postprocess="pattern"`` (:mod:`aggregator.pattern_answers`), which falls back to
    ``mle`` with a note when a selected window's histogram is missing or does not match its
    tally. Raises :class:`~aggregator.NotEnoughReports` when the range holds fewer than
    ``query.min_reports`` reports (and always for none), :class:`InvalidParameter` for a bad
    option (``pattern`` for a mechanism without the capability, saying why) or a tally that does
    not fit the mechanism.
    """
    q = query or EstimateQuery()
    check_level(q.level)  # before any work
    check_range(q.start, q.end)
    kind = kind_of(mechanism)
    # postprocess applies to categorical (frequency) answers only; the others ignore it.
    if check_method(q.postprocess) == PATTERN_METHOD and kind == "frequency":
        check_pattern_capable(mechanism)
    if isinstance(q.min_reports, bool) or not isinstance(q.min_reports, int):
        raise InvalidParameter(f"min_reports must be an integer, got {q.min_reports!r}")
    windows = sorted(
        w
        for w in tallies_by_window
        if (q.start is None or w >= q.start) and (q.end is None or w <= q.end)
    )
    selected = {w: tallies_by_window[w] for w in windows}
    if q.candidates and kind != "open_domain":
        raise InvalidParameter("candidates apply only to open-domain campaigns")
    if kind == "frequency":
        top_k = q.top_k  # open-domain answers check their own (at most MAX_TOP)
        if top_k is not None and (
            isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1
        ):
            raise InvalidParameter(f"top_k must be an integer >= 1 or None (all), got {top_k!r}")
        return _frequency(mechanism, selected, q, patterns)
    from aggregator import numeric_answers

    if kind == "mean":
        return numeric_answers.mean_answer(mechanism, selected, q)
    if kind == "distribution":
        return numeric_answers.distribution_answer(mechanism, selected, q)
    if kind == "multi":
        from aggregator.multi_answers import multi_answer

        return multi_answer(mechanism, selected, q)
    if kind == "open_domain":
        from aggregator.openended_answers import open_domain_answer

        return open_domain_answer(mechanism, selected, q)
    raise InvalidParameter(f"no estimator for mechanism kind {kind!r} ({mechanism!r})")


def header(mechanism: Any, windows: list[str], n: int, q: EstimateQuery) -> dict[str, Any]:
    """The fields every answer starts with."""
    return {
        "campaign": q.campaign,
        "from_": q.start if q.start is not None else _first(windows),
        "to": q.end if q.end is not None else _last(windows),
        "windows": windows,
        "n": n,
        "min_reports": max(1, q.min_reports),
        "mechanism": mechanism.name,
        "params": mechanism.params(),
        "epsilon": mechanism.epsilon,
        "realised_epsilon": mechanism.realised_epsilon,
        "level": q.level,
    }


def _first(windows: list[str]) -> str | None:
    return windows[0] if windows else None


def _last(windows: list[str]) -> str | None:
    return windows[-1] if windows else None


def seed_of(tally: Any) -> int:
    """A bootstrap seed fixed by the tally (same data, same intervals)."""
    values = getattr(tally, "values", None)
    if values is None:
        values = tuple(np.asarray(tally.support).tolist())
    return zlib.crc32(repr((tally.n, tuple(values))).encode())


#: Above this magnitude :func:`smooth_one` smooths a series scaled down by a power of two.
SMOOTH_RESCALE_ABOVE = 1e100


def smooth_one(
    values: list[float | None], std_errors: list[float | None]
) -> tuple[list[float | None], list[float | None]]:
    """Smooth one per-window series (None: no estimate there); all None when nothing to do.

    A zero or missing standard error of an observed window is replaced by the smallest positive
    one of the series (only a degenerate window has none).
    """
    if all(v is None for v in values):
        return [None] * len(values), [None] * len(values)
    y = np.array([math.nan if v is None else v for v in values], dtype=float)
    se = np.array([math.nan if s is None else s for s in std_errors], dtype=float)
    observed = ~np.isnan(y)
    positive = se[observed & np.isfinite(se) & (se > 0)]
    floor = float(positive.min()) if positive.size else 1.0
    se = np.where(observed & ~(np.isfinite(se) & (se > 0)), floor, se)
    # The smoother squares standard errors, which overflows for numbers near +-1e300 (a numeric
    # campaign's wide bounds). Without per-window report counts it is scale-equivariant, and a
    # power of two rescales floats exactly, so huge series are smoothed scaled down.
    largest = float(np.nanmax(np.abs(np.concatenate([y[observed], se[observed]]))))
    scale = 2.0 ** math.frexp(largest)[1] if largest > SMOOTH_RESCALE_ABOVE else 1.0
    sm = smooth_series(y[:, None] / scale, se[:, None] / scale)
    mean = [float(sm.mean[t, 0]) * scale if observed[t] else None for t in range(len(values))]
    err = [float(sm.std_error[t, 0]) * scale if observed[t] else None for t in range(len(values))]
    return mean, err


# -- frequency ---------------------------------------------------------------------------------


def _frequency(
    mechanism: Any,
    selected: dict[str, Any],
    q: EstimateQuery,
    patterns: Mapping[str, PatternHistogram | None] | None = None,
) -> FrequencyEstimates:
    level = q.level
    z = z_value(level)
    # The significance tests (heavy hitters, base-cut, auto's choice) at alpha = 1 - tested,
    # below 1 however small the level (aggregator.estimate.MIN_TEST_LEVEL).
    tested = significance_level(level)
    total = sum_tallies(mechanism, selected)
    est = estimate(mechanism, total, min_reports=q.min_reports)
    n = est.n
    if q.postprocess == PATTERN_METHOD and not isinstance(est.tally, PatternTally):
        # The tally does not keep the patterns: the caller's histograms of the stored reports.
        from aggregator.pattern_answers import pattern_postprocessed

        post = pattern_postprocessed(est, selected, patterns, alpha=1 - tested)
    else:
        post = postprocess(est, q.postprocess, alpha=1 - tested)
    raw = np.asarray(est.counts, dtype=float)
    half = z * est.std_errors
    lo, hi = np.clip(raw - half, 0, n), np.clip(raw + half, 0, n)
    top = heavy_hitters(est, level=tested)
    significant = {h.index for h in top.items}
    listed = top.items if q.top_k is None else top.items[: q.top_k]
    values = [
        ValueEstimate(
            value=label,
            count=float(post.counts[i]),
            frequency=float(post.counts[i] / n),
            raw_count=float(raw[i]),
            raw_frequency=float(raw[i] / n),
            std_error=float(est.std_errors[i]),
            plugin_std_error=float(est.plugin_std_errors[i]),
            ci_low=float(lo[i]),
            ci_high=float(hi[i]),
            significant=i in significant,
        )
        for i, label in enumerate(mechanism.domain)
    ]
    top_k = TopKSummary(
        level=level,
        alpha=top.alpha,
        z=top.z,
        sigma0=top.sigma0,
        threshold=top.threshold,
        values=[HeavyHitterRow(h.value, h.count, h.std_error) for h in listed],
    )
    trend = frequency_trend(mechanism, selected, q.min_reports, smoothing=q.smoothing)
    return FrequencyEstimates(
        **header(mechanism, list(selected), n, q),
        theoretical_std_error=est.theoretical_std_error,
        postprocess=post.describe(),
        values=values,
        top_k=top_k,
        trend=trend if q.trend else [],
        trend_smoothing=SMOOTHING_NOTE,
    )


def raw_frequency_trend(
    mechanism: Any, tallies: Mapping[str, Any], min_reports: int
) -> list[FrequencyTrendWindow]:
    """Per window (in the given order): ``n`` and the raw unbiased frequencies with their
    closed-form standard errors, both None below ``min_reports``; no smoothed values yet."""
    return _raw_trend(mechanism, tallies, min_reports)[0]


def _raw_trend(
    mechanism: Any, tallies: Mapping[str, Any], min_reports: int
) -> tuple[list[FrequencyTrendWindow], np.ndarray, np.ndarray]:
    """:func:`raw_frequency_trend` and the same numbers as (T x k) arrays, NaN rows below
    ``min_reports``.

    All windows at once: ``(C - n q*) / (p* - q*)`` and ``count_variance`` act elementwise, so
    each number is the one the per-window :func:`aggregator.estimate.debias` gives (the same
    operations on the same operands; ``n`` is converted to a float either way).
    """
    items = list(tallies.items())
    shown = [i for i, (_, tally) in enumerate(items) if tally.n >= max(1, min_reports)]
    k = items[shown[0]][1].support.size if shown else int(mechanism.k)
    freqs = np.full((len(items), k), math.nan)
    errs = np.full((len(items), k), math.nan)
    if shown:
        n = np.array([items[i][1].n for i in shown], dtype=np.int64)[:, None]
        support = np.stack([items[i][1].support for i in shown])
        p, q = mechanism.p_star, mechanism.q_star
        counts = (support - n * q) / (p - q)
        var = mechanism.count_variance(n, np.clip(counts, 0, n))
        freqs[shown] = counts / n
        errs[shown] = np.sqrt(np.maximum(var, 0)) / n
    listed = set(shown)
    rows = [
        FrequencyTrendWindow(window, tally.n, freqs[i].tolist(), errs[i].tolist(), None, None)
        if i in listed
        else FrequencyTrendWindow(window, tally.n, None, None, None, None)
        for i, (window, tally) in enumerate(items)
    ]
    return rows, freqs, errs


def smooth_frequency_trend(rows: list[FrequencyTrendWindow]) -> Smoothed | None:
    """The smoother (:mod:`aggregator.smooth`) over raw trend rows; None when no window has an
    estimate. A zero standard error (only a degenerate mechanism gives one) is replaced by the
    smallest positive one of its window."""
    shown = [r for r in rows if r.frequencies is not None]
    if not shown:
        return None
    k = len(shown[0].frequencies or ())
    missing = [math.nan] * k
    y = np.array([r.frequencies or missing for r in rows], dtype=float)
    se = np.array([r.std_errors or missing for r in rows], dtype=float)
    return _smooth(y, se, [r.n for r in rows])


def _smooth(y: np.ndarray, se: np.ndarray, ns: list[int]) -> Smoothed:
    """:func:`smooth_frequency_trend` given the trend's (T x k) arrays (NaN rows: no estimate)."""
    reports = np.array([max(1, n) for n in ns], dtype=float)
    zero = se <= 0
    if zero.any():
        floor = np.where(se > 0, se, np.inf).min(axis=1, keepdims=True)
        floor = np.where(np.isfinite(floor), floor, 1.0 / reports[:, None])
        se = np.where(zero, floor, se)
    return smooth_series(y, se, reports=reports)


def with_smoothed_frequencies(rows: list[FrequencyTrendWindow]) -> list[FrequencyTrendWindow]:
    """``rows`` with ``smoothed_frequencies``/``smoothed_std_errors`` filled in (None where the
    raw ones are None)."""
    return _with_smoothed(rows, smooth_frequency_trend(rows))


def _with_smoothed(
    rows: list[FrequencyTrendWindow], sm: Smoothed | None
) -> list[FrequencyTrendWindow]:
    if sm is None:
        return rows
    means, errors = sm.mean.tolist(), sm.std_error.tolist()
    return [
        FrequencyTrendWindow(r.window, r.n, r.frequencies, r.std_errors, means[t], errors[t])
        if r.frequencies is not None
        else r
        for t, r in enumerate(rows)
    ]


def frequency_trend(
    mechanism: Any, tallies: Mapping[str, Any], min_reports: int, *, smoothing: bool = True
) -> list[FrequencyTrendWindow]:
    """The categorical trend: raw unbiased frequencies per window and, with ``smoothing``, the
    smoothed ones beside them."""
    rows, freqs, errs = _raw_trend(mechanism, tallies, min_reports)
    if not smoothing or all(r.frequencies is None for r in rows):
        return rows
    return _with_smoothed(rows, _smooth(freqs, errs, [r.n for r in rows]))


def interval(level: float, low: float, high: float) -> Interval:
    return Interval(level=level, low=float(low), high=float(high))


def quantile_rows(dist: Any, quantiles: tuple[float, ...], level: float) -> list[QuantileRow]:
    rows = []
    for p in quantiles:
        qe = dist.quantile(p, level)
        rows.append(QuantileRow(q=float(p), value=qe.value, low=qe.low, high=qe.high))
    return rows


__all__ = [
    "Atom",
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_HISTOGRAM_BINS",
    "DEFAULT_LEVEL",
    "DEFAULT_QUANTILES",
    "DistributionEstimates",
    "DistributionTrendWindow",
    "EstimateAnswer",
    "EstimateQuery",
    "FrequencyEstimates",
    "HistogramBin",
    "MeanEstimates",
    "MeanTrendWindow",
    "NUMERIC_SMOOTHING_NOTE",
    "SMOOTHING_NOTE",
    "estimate_range",
    "kind_of",
    "sum_tallies",
]
