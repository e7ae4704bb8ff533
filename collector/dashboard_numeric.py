"""Chart geometry of a numeric campaign's dashboard page (pure functions of the typed answer).

* :func:`mean_chart`: the mean as a dot on the campaign's bounds with its interval (whiskers);
* :func:`histogram_chart`: the estimated histogram (bars) with per-bin bootstrap whiskers and
  the quantiles (median, p90, p99) as marks with their intervals;
* :func:`numeric_trend_chart`: per window, the window's own estimate (dots with whiskers: the
  mean, or the median for a distribution), the smoothed mean (line) with its band at the
  answer's level, and the reports per window (bars).

The templates only place what these compute; every number comes from
:mod:`aggregator.service` (the same answer as ``GET /v1/campaigns/{id}/estimates``).
"""

from __future__ import annotations

import math
from typing import Any

from aggregator.estimate import z_value
from aggregator.results import DistributionEstimates, HistogramBin, MeanEstimates

WIDTH = 760
#: An integer-valued distribution with at most this many atoms is drawn one bar per integer;
#: more are drawn as the answer's regrouped ``bins``.
MAX_ATOM_BARS = 256


def value_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round tick values covering ``[low, high]``: at least two, strictly increasing.

    Ticks are rounded to the step's own decimals (plus three), not to a fixed 12: bounds
    narrower than 1e-12, e.g. ``(1, 1 + 1e-13)``, which the collector takes, collapsed to one
    repeated tick and the charts divided by zero.
    """
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low, low + 1.0]
    raw = (high - low) / count
    if not 0 < raw < math.inf:  # a span that underflows or overflows: the bounds themselves
        return [low, high]
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    digits = max(12, 3 - math.floor(math.log10(step)))
    first = math.floor(low / step + 1e-9) * step
    ticks = []
    t = first
    while t < high + step - 1e-9 * step:
        ticks.append(round(t, digits))
        t += step
    increasing = all(a < b for a, b in zip(ticks[:-1], ticks[1:], strict=True))
    return ticks if len(ticks) >= 2 and increasing else [low, high]


def fmt(x: float) -> str:
    """A number for a chart label: 4 significant digits, thousands separated."""
    return f"{x:,.4g}"


def percent(t: float, ticks: list[float]) -> str:
    """A frequency tick as a percentage, with a decimal when the ticks need one (2.5%)."""
    whole = all(abs(100 * v - round(100 * v)) < 1e-9 for v in ticks)
    return f"{t:.0%}" if whole else f"{t:.1%}"


def mean_chart(answer: MeanEstimates, *, width: int = WIDTH) -> dict[str, Any]:
    """One horizontal axis over the bounds: the interval (whiskers) and the mean (dot)."""
    left, right, height = 40, 40, 70
    low, high = answer.bounds
    lo = min(low, answer.ci.low)
    hi = max(high, answer.ci.high)
    ticks = value_ticks(lo, hi)
    start, end = ticks[0], ticks[-1]
    plot_w = width - left - right

    def x_of(v: float) -> float:
        return left + plot_w * (v - start) / (end - start)

    return {
        "width": width,
        "height": height,
        "left": left,
        "plot_w": plot_w,
        "axis_y": 40,
        "mean_x": x_of(answer.mean),
        "ci_x": (x_of(answer.ci.low), x_of(answer.ci.high)),
        "bounds_x": (x_of(low), x_of(high)),
        "ticks": [{"x": x_of(t), "label": fmt(t)} for t in ticks],
        "mean": answer.mean,
        "ci": (answer.ci.low, answer.ci.high),
        "level": answer.level,
    }


def shown_bins(answer: DistributionEstimates) -> list[HistogramBin]:
    """What the histogram draws: one bar per atom ``[v - 1/2, v + 1/2]`` (clipped to the
    bounds) for an integer-valued answer with at most :data:`MAX_ATOM_BARS` atoms, else the
    answer's ``bins``."""
    if not answer.atoms or len(answer.atoms) > MAX_ATOM_BARS:
        return list(answer.bins)
    low, high = answer.bounds
    out = []
    for a in answer.atoms:
        left, right = max(low, a.value - 0.5), min(high, a.value + 0.5)
        out.append(HistogramBin(left, right, a.value, a.frequency, a.ci_low, a.ci_high))
    return out


def histogram_chart(answer: DistributionEstimates, *, width: int = WIDTH) -> dict[str, Any]:
    """Vertical bars over the value axis (bar height: estimated fraction in the bin, or at the
    integer for an integer-valued answer: :func:`shown_bins`), whiskers at the per-bin
    interval, and a mark per quantile with its interval above the bars."""
    left, right, top, plot_h, quant_h = 56, 24, 20, 220, 18 * len(answer.quantiles) + 12
    plot_w = width - left - right
    low, high = answer.bounds
    drawn = shown_bins(answer)
    highest = max([b.ci_high for b in drawn] + [b.frequency for b in drawn] + [1e-3])
    from collector.dashboard import nice_ticks

    yticks = nice_ticks(highest)
    xticks = value_ticks(low, high)
    x0, x1 = xticks[0], xticks[-1]
    base = top + quant_h

    def x_of(v: float) -> float:
        return left + plot_w * (v - x0) / (x1 - x0)

    def y_of(f: float) -> float:
        return base + plot_h * (1 - f / yticks[-1])

    bars = []
    for b in drawn:
        xa, xb = x_of(b.low), x_of(b.high)
        mid = (xa + xb) / 2
        bars.append(
            {
                "x": xa + 0.5,
                "w": max(0.5, xb - xa - 1.0),
                "y": y_of(max(b.frequency, 0.0)),
                "h": base + plot_h - y_of(max(b.frequency, 0.0)),
                "mid": mid,
                "y_lo": y_of(b.ci_low),
                "y_hi": y_of(b.ci_high),
                "cap": min(4.0, max(1.0, (xb - xa) / 3)),
                "low": b.low,
                "high": b.high,
                "frequency": b.frequency,
                "ci": (b.ci_low, b.ci_high),
            }
        )
    quantiles = [
        {
            "label": f"p{100 * row.q:g}" if row.q != 0.5 else "median",
            "y": top + 18 * i + 9,
            "x": x_of(row.value),
            "x_lo": x_of(row.low),
            "x_hi": x_of(row.high),
            "value": row.value,
            "low": row.low,
            "high": row.high,
        }
        for i, row in enumerate(answer.quantiles)
    ]
    return {
        "width": width,
        "height": base + plot_h + 34,
        "left": left,
        "plot_w": plot_w,
        "top": base,
        "bottom": base + plot_h,
        "bars": bars,
        "atoms": bool(answer.atoms) and len(answer.atoms) <= MAX_ATOM_BARS,
        "quantiles": quantiles,
        "mean_x": x_of(answer.mean),
        "yticks": [{"y": y_of(t), "label": percent(t, yticks)} for t in yticks],
        "xticks": [{"x": x_of(t), "label": fmt(t)} for t in xticks],
    }


def numeric_trend_chart(
    answer: MeanEstimates | DistributionEstimates, *, width: int = WIDTH
) -> dict[str, Any]:
    """Per window: the window's own mean with its interval (dot, whisker), the smoothed mean
    with its band at the answer's level, and the reports per window (grey bars)."""
    z = z_value(answer.level)
    left, right, top, plot_h, count_h = 64, 24, 16, 200, 50
    plot_w = width - left - right
    trend: list[Any] = list(answer.trend)
    points: list[tuple[int, float, float, float]] = []  # (slot, value, low, high)
    smooth: list[tuple[int, float, float]] = []  # (slot, mean, half-width)
    for i, t in enumerate(trend):
        if isinstance(answer, MeanEstimates):
            row: Any = t
            if row.mean is not None:
                points.append((i, row.mean, row.ci_low, row.ci_high))
        else:
            row = t
            if row.mean is not None:
                points.append((i, row.mean, row.mean_low, row.mean_high))
        if t.smoothed_mean is not None and t.smoothed_std_error is not None:
            smooth.append((i, t.smoothed_mean, z * t.smoothed_std_error))
    values = [v for _, v, lo, hi in points for v in (lo, hi)]
    values += [m + s * h for _, m, h in smooth for s in (-1, 1)]
    low, high = answer.bounds
    lo = min(values) if values else low
    hi = max(values) if values else high
    if hi - lo < 1e-9 * max(1.0, abs(hi)):
        lo, hi = lo - 1.0, hi + 1.0
    ticks = value_ticks(lo, hi, 5)
    y0, y1 = ticks[0], ticks[-1]
    slots = max(1, len(trend))
    step = plot_w / slots

    def x_of(i: int) -> float:
        return left + step * (i + 0.5)

    def y_of(v: float) -> float:
        return top + plot_h * (1 - (v - y0) / (y1 - y0))

    upper = [(x_of(i), y_of(m + h)) for i, m, h in smooth]
    lower = [(x_of(i), y_of(m - h)) for i, m, h in reversed(smooth)]
    max_n = max([t.n for t in trend] + [1])
    counts_top = top + plot_h + 30
    every = max(1, math.ceil(slots / 8))
    return {
        "width": width,
        "height": counts_top + count_h + 24,
        "left": left,
        "plot_w": plot_w,
        "top": top,
        "plot_bottom": top + plot_h,
        "ticks": [{"y": y_of(t), "label": fmt(t)} for t in ticks],
        "dots": [
            {
                "x": x_of(i),
                "y": y_of(v),
                "y_lo": y_of(a),
                "y_hi": y_of(b),
                "value": v,
                "low": a,
                "high": b,
                "window": trend[i].window,
            }
            for i, v, a, b in points
        ],
        "smoothed": " ".join(f"{x_of(i):.1f},{y_of(m):.1f}" for i, m, _ in smooth),
        "smoothed_count": len(smooth),
        "band": " ".join(f"{x:.1f},{y:.1f}" for x, y in upper + lower),
        "counts": [
            {
                "x": x_of(i) - step * 0.3,
                "w": step * 0.6,
                "y": counts_top + count_h * (1 - t.n / max_n),
                "h": count_h * t.n / max_n,
                "n": t.n,
                "window": t.window,
                "refused": t.n < max(1, answer.min_reports),
            }
            for i, t in enumerate(trend)
        ],
        "counts_top": counts_top,
        "counts_bottom": counts_top + count_h,
        "max_n": max_n,
        "window_labels": [
            {"x": x_of(i), "text": t.window[5:]} for i, t in enumerate(trend) if i % every == 0
        ],
    }
