"""Numeric answers of the estimate service: means and distributions over a range of windows.

Called by :func:`aggregator.service.estimate_range` for mechanisms of kind ``"mean"`` and
``"distribution"``; the estimators themselves are :func:`aggregator.numeric.estimate_numeric`
(docs/MECHANISMS.md §19). Per window the same estimator runs on that window's tally; windows
below the campaign's minimum number of reports show no estimate. The smoothed per-window mean
(:func:`aggregator.service.smooth_one`) borrows strength across windows and is labelled as such.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from aggregator.errors import NotEnoughReports
from aggregator.estimate import z_value
from aggregator.numeric import (
    BandChannel,
    DistributionEstimate,
    IntegerChannel,
    MeanEstimate,
    check_bootstrap,
    em_steps,
    ems,
    estimate_numeric,
    square_wave_linear_mean,
    widen_interval,
)
from aggregator.results import (
    Atom,
    DistributionEstimates,
    DistributionTrendWindow,
    HistogramBin,
    MeanEstimates,
    MeanTrendWindow,
)
from aggregator.service import (
    NUMERIC_SMOOTHING_NOTE,
    EstimateQuery,
    header,
    interval,
    quantile_rows,
    seed_of,
    smooth_one,
    sum_tallies,
)
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.numeric import SquareWave


def mean_answer(mechanism: Any, selected: Mapping[str, Any], q: EstimateQuery) -> MeanEstimates:
    """The mean over the selected windows, with its interval and per-window trend."""
    total = sum_tallies(mechanism, selected)
    est = estimate_numeric(mechanism, total, min_reports=max(1, q.min_reports))
    if not isinstance(est, MeanEstimate):
        raise InvalidParameter(f"{mechanism.name} does not estimate a mean")
    low, high = est.ci(q.level)
    trend = _mean_trend(mechanism, selected, q) if q.trend else []
    return MeanEstimates(
        **header(mechanism, list(selected), est.n, q),
        bounds=(float(est.bounds[0]), float(est.bounds[1])),
        mean=est.mean,
        std_error=est.std_error,
        worst_case_std_error=est.worst_case_std_error,
        ci=interval(q.level, low, high),
        trend=trend,
        trend_smoothing=NUMERIC_SMOOTHING_NOTE,
    )


def _mean_trend(
    mechanism: Any, selected: Mapping[str, Any], q: EstimateQuery
) -> list[MeanTrendWindow]:
    z = z_value(q.level)
    per: list[tuple[str, int, MeanEstimate | None]] = []
    for window, tally in selected.items():
        if tally.n < max(1, q.min_reports):
            per.append((window, tally.n, None))
            continue
        est = estimate_numeric(mechanism, tally)
        per.append((window, tally.n, est if isinstance(est, MeanEstimate) else None))
    means = [e.mean if e else None for _, _, e in per]
    errors = [e.std_error if e else None for _, _, e in per]
    if q.smoothing:
        sm, sm_se = smooth_one(means, errors)
    else:
        sm, sm_se = [None] * len(per), [None] * len(per)
    return [
        MeanTrendWindow(
            window=window,
            n=n,
            mean=e.mean if e else None,
            std_error=e.std_error if e else None,
            ci_low=e.mean - z * e.std_error if e else None,
            ci_high=e.mean + z * e.std_error if e else None,
            smoothed_mean=sm[t],
            smoothed_std_error=sm_se[t],
        )
        for t, (window, n, e) in enumerate(per)
    ]


def _distribution(mechanism: Any, tally: Any, bootstrap: int) -> DistributionEstimate:
    est = estimate_numeric(mechanism, tally, bootstrap=bootstrap, rng=seed_of(tally))
    if not isinstance(est, DistributionEstimate):
        raise InvalidParameter(f"{mechanism.name} does not estimate a distribution")
    return est


def mean_interval(
    dist: DistributionEstimate, level: float, linear: MeanEstimate | None = None
) -> tuple[float, float, float | None]:
    """``(low, high, std_error)`` of the distribution's mean.

    From the bootstrap: ``mean -+ z * sd`` with ``sd`` the standard deviation of the replicates'
    means (the mean is linear in the frequencies, so the normal interval needs fewer replicates
    than a percentile one). It carries the reports' randomness, not EMS's smoothing bias, and
    collapses to a point where the bootstrap cannot vary (one report; epsilon near 0). So with
    ``linear`` (:func:`~aggregator.numeric.square_wave_linear_mean`, unbiased) the interval is
    the hull of both, cut to the bounds: it holds the unbiased interval, so it covers at least
    as often, and it holds the estimate. ``std_error`` is the larger of the two (capped at the
    bounds' span, so it stays finite). Without replicates (``bootstrap=0``: no intervals asked
    for) a point and None.
    """
    mean = dist.mean
    if dist.replicates.shape[0] < 2:
        return mean, mean, None
    # Scaled to the largest |center| first: the squares of means near +-1e300 overflow.
    scale = float(np.max(np.abs(dist.centers))) or 1.0
    se = float(np.std(dist.replicates @ (dist.centers / scale), ddof=1)) * scale
    low, high = mean - z_value(level) * se, mean + z_value(level) * se
    if linear is not None:
        lo, hi = (float(b) for b in linear.bounds)
        lin_low, lin_high = linear.ci(level)
        low = min(max(min(low, lin_low), lo), mean)
        high = max(min(max(high, lin_high), hi), mean)
        se = min(max(se, linear.std_error), hi - lo)
    return low, high, se


def histogram_bins(dist: DistributionEstimate, level: float, most: int) -> list[HistogramBin]:
    """The EMS histogram regrouped into at most ``most`` runs of adjacent grid bins, each with
    the bootstrap percentile interval of its summed frequency, widened as the quantiles' are
    when the estimate has a relaxed fit (:func:`~aggregator.numeric.widen_interval`, cut to
    [0, 1]); the point without replicates."""
    if isinstance(most, bool) or not isinstance(most, int) or most < 1:
        raise InvalidParameter(f"histogram_bins must be an integer >= 1, got {most!r}")
    size = dist.frequencies.size
    groups = np.array_split(np.arange(size), min(size, most))
    tail = ((1 - level) / 2, (1 + level) / 2)
    bins = []
    for g in groups:
        freq = float(dist.frequencies[g].sum())
        low = high = freq
        if dist.replicates.shape[0] >= 2:
            lo, hi = np.quantile(dist.replicates[:, g].sum(axis=1), tail)
            low, high = min(float(lo), freq), max(float(hi), freq)
            if dist.relaxed is not None:
                wide = widen_interval(freq, low, high, float(dist.relaxed[g].sum()) - freq)
                low = min(max(float(wide[0]), 0.0), freq)
                high = max(min(float(wide[1]), 1.0), freq)
        left, right = float(dist.edges[g[0]]), float(dist.edges[g[-1] + 1])
        bins.append(
            HistogramBin(
                low=left,
                high=right,
                center=(left + right) / 2,
                frequency=freq,
                ci_low=low,
                ci_high=high,
            )
        )
    return bins


def atom_rows(dist: DistributionEstimate, level: float) -> list[Atom]:
    """The atoms of an integer-valued estimate (every integer in the bounds, ascending) with
    their intervals (:meth:`~aggregator.numeric.DistributionEstimate.frequency_intervals`:
    bootstrap percentile intervals widened for the smoothing bias; points without replicates);
    [] for a grid estimate."""
    if not dist.atoms:
        return []
    low, high = dist.frequency_intervals(level)
    return [
        Atom(
            value=float(v),
            frequency=float(f),
            ci_low=min(float(lo), float(f)),
            ci_high=max(float(hi), float(f)),
        )
        for v, f, lo, hi in zip(dist.centers, dist.frequencies, low, high, strict=True)
    ]


def distribution_answer(
    mechanism: Any, selected: Mapping[str, Any], q: EstimateQuery
) -> DistributionEstimates:
    """Histogram with whiskers, quantiles with intervals and the mean over the selected
    windows; per window the mean and median with intervals."""
    bootstrap = check_bootstrap(q.bootstrap)
    total = sum_tallies(mechanism, selected)
    if total.n < max(1, q.min_reports):
        raise NotEnoughReports(total.n, max(1, q.min_reports))
    dist = _distribution(mechanism, total, bootstrap)
    bins = histogram_bins(dist, q.level, q.histogram_bins)
    linear = (
        square_wave_linear_mean(mechanism, total) if isinstance(mechanism, SquareWave) else None
    )
    m_low, m_high, _ = mean_interval(dist, q.level, linear)
    trend = _distribution_trend(mechanism, selected, q, dist, linear) if q.trend else []
    return DistributionEstimates(
        **header(mechanism, list(selected), total.n, q),
        bounds=(float(mechanism.bounds[0]), float(mechanism.bounds[1])),
        bootstrap=bootstrap,
        bins=bins,
        mean=dist.mean,
        mean_ci=interval(q.level, m_low, m_high),
        quantiles=quantile_rows(dist, q.quantiles, q.level),
        trend=trend,
        trend_smoothing=NUMERIC_SMOOTHING_NOTE,
        integer=dist.atoms,
        atoms=atom_rows(dist, q.level),
    )


def _window_distributions(
    mechanism: Any, tallies: list[Any], total: DistributionEstimate
) -> list[DistributionEstimate]:
    """Each window's estimate by the whole range's estimator, without replicates: EMS, then
    the range's refinement steps (a window's EMS alone smooths a spike away, so a one-window
    range's trend would disagree with its own answer). For Square Wave all windows run as one
    batch warm-started from the whole range's estimate (about one estimate's cost for 30
    windows); other distribution mechanisms are estimated window by window."""
    if not isinstance(mechanism, SquareWave):
        return [_distribution(mechanism, t, 0) for t in tallies]
    if not tallies:
        return []
    channel: BandChannel | IntegerChannel = (
        IntegerChannel.of(mechanism) if mechanism.integer else BandChannel.of(mechanism)
    )
    counts = np.array([mechanism.histogram(t) for t in tallies], dtype=float)
    freqs = np.atleast_2d(ems(channel, counts, init=total.frequencies))
    freqs = np.atleast_2d(em_steps(channel, counts, freqs, total.refinement_steps))
    return [
        DistributionEstimate(
            mechanism.name, t.n, total.edges, freqs[w], total.centers, atoms=total.atoms
        )
        for w, t in enumerate(tallies)
    ]


def _distribution_trend(
    mechanism: Any,
    selected: Mapping[str, Any],
    q: EstimateQuery,
    total: DistributionEstimate,
    linear: MeanEstimate | None = None,
) -> list[DistributionTrendWindow]:
    """Per window: its own estimate's mean and median. Their intervals scale the whole range's
    spread (the median's bootstrap interval; for the mean the larger of the bootstrap's and the
    linear estimate's standard errors, :func:`mean_interval`) by ``sqrt(n / n_window)`` (an
    estimator's spread shrinks as one over the root of its reports), cut to the bounds as the
    range's are, so a 30-window trend needs no per-window bootstrap; without replicates the
    windows get points and no smoothing."""
    shown = [t for t in selected.values() if t.n >= max(1, q.min_reports)]
    estimates = iter(_window_distributions(mechanism, shown, total))
    _, _, total_se = mean_interval(total, q.level, linear)
    median = total.quantile(0.5, q.level)
    z = z_value(q.level)
    rows: list[tuple[str, int, DistributionEstimate | None]] = []
    for window, tally in selected.items():
        if tally.n < max(1, q.min_reports):
            rows.append((window, tally.n, None))
        else:
            rows.append((window, tally.n, next(estimates)))
    means = [d.mean if d else None for _, _, d in rows]
    errors = [
        total_se * math.sqrt(total.n / n) if d is not None and total_se else None
        for _, n, d in rows
    ]
    if q.smoothing and any(e is not None for e in errors):
        sm, sm_se = smooth_one(means, errors)
    else:
        sm, sm_se = [None] * len(rows), [None] * len(rows)
    lo, hi = (float(b) for b in mechanism.bounds)

    def cut(value: float, low: float, high: float) -> tuple[float, float]:
        """An interval cut to the bounds (every clipped value lies in them, so their mean and
        median do: the cut keeps the coverage), still holding ``value``. Scaled by
        ``sqrt(n / n_window)``, a small window's interval reached far past the bounds (a
        median of values clipped to [0, 10] with an upper end of 24.15)."""
        return min(max(low, lo), value), max(min(high, hi), value)

    out = []
    for t, (window, n, d) in enumerate(rows):
        if d is None:
            out.append(DistributionTrendWindow(window, n, *([None] * 9)))
            continue
        se = errors[t]
        scale = math.sqrt(total.n / n)
        value = d.quantile(0.5).value
        mean_low, mean_high = cut(
            d.mean,
            d.mean - z * se if se is not None else d.mean,
            d.mean + z * se if se is not None else d.mean,
        )
        median_low, median_high = cut(
            value,
            value - (median.value - median.low) * scale,
            value + (median.high - median.value) * scale,
        )
        out.append(
            DistributionTrendWindow(
                window=window,
                n=n,
                mean=d.mean,
                mean_std_error=se,
                mean_low=mean_low,
                mean_high=mean_high,
                median=value,
                median_low=median_low,
                median_high=median_high,
                smoothed_mean=sm[t],
                smoothed_std_error=sm_se[t],
            )
        )
    return out
