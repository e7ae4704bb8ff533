"""Chart geometry of a multi-attribute campaign's dashboard page (pure functions of its answer).

* :func:`crosstab_chart`: a declared pair's joint table as a grid of cells, rows x columns.
  A cell's shade is its consistent frequency (darkest: the largest cell); inside it, the
  frequency as text and a whisker for its interval on one scale shared by every cell (0 to the
  largest interval end), with a tick at the estimate;
* :func:`attribute_bars`: a categorical attribute's frequencies with interval whiskers;
* :func:`attribute_trend_charts`: per attribute, its trend over the windows: a categorical one
  as the categorical campaigns' chart (raw frequencies as dots, smoothed lines with their
  bands, :func:`collector.dashboard.trend_chart`), a numeric one as the numeric campaigns'
  (each window's mean with its interval, the smoothed mean with its band,
  :func:`collector.dashboard_numeric.numeric_trend_chart`).

The template (``dashboard/_multi.html``) only places what these compute; every number comes
from :mod:`aggregator.multi_answers` (the same answer as ``GET /v1/campaigns/{id}/estimates``).
SVG presentation attributes only: the dashboard's CSP allows no inline style.
"""

from __future__ import annotations

from typing import Any

from aggregator.results import Interval, MeanEstimates, MeanTrendWindow, MultiEstimates

#: Crosstabs larger than this many rows or columns show the largest ones (the table has all).
MAX_CELLS_PER_SIDE = 16


def _largest(labels: list[str], weights: list[float], most: int) -> list[int]:
    order = sorted(range(len(labels)), key=lambda i: -weights[i])[:most]
    return sorted(order)


def crosstab_chart(joint: dict[str, Any], n: int) -> dict[str, Any]:
    """Cell geometry of one joint table (the JSON form of a ``JointTable``)."""
    counts = joint["counts"]
    rows_all, cols_all = joint["rows"], joint["columns"]
    row_tot = [sum(r) for r in counts]
    col_tot = [sum(counts[i][j] for i in range(len(rows_all))) for j in range(len(cols_all))]
    rows = _largest(rows_all, row_tot, MAX_CELLS_PER_SIDE)
    cols = _largest(cols_all, col_tot, MAX_CELLS_PER_SIDE)
    label_w, top, cell_w, cell_h = 170, 46, 92, 40
    width = label_w + cell_w * len(cols) + 10
    height = top + cell_h * len(rows) + 10
    total = max(n, 1)
    peak = max([counts[i][j] for i in rows for j in cols] + [1e-12])
    scale_top = max([joint["ci_high"][i][j] for i in rows for j in cols] + [1e-12])
    cells = []
    for r, i in enumerate(rows):
        for c, j in enumerate(cols):
            x, y = label_w + c * cell_w, top + r * cell_h
            pad = 8
            span = cell_w - 2 * pad

            def at(v: float, x: float = x, pad: int = pad, span: int = span) -> float:
                return x + pad + span * min(max(v / scale_top, 0.0), 1.0)

            count = counts[i][j]
            cells.append(
                {
                    "x": x,
                    "y": y,
                    "w": cell_w - 2,
                    "h": cell_h - 2,
                    "shade": round(0.08 + 0.6 * max(count, 0.0) / peak, 3),
                    "text": f"{100 * count / total:.1f}%",
                    "text_x": x + cell_w / 2,
                    "text_y": y + 17,
                    "whisker_y": y + cell_h - 11,
                    "lo_x": at(joint["ci_low"][i][j]),
                    "hi_x": at(joint["ci_high"][i][j]),
                    "mid_x": at(count),
                    "title": (
                        f"{rows_all[i]} x {cols_all[j]}: {count:,.0f} "
                        f"({100 * count / total:.2f}%), interval {joint['ci_low'][i][j]:,.0f} to "
                        f"{joint['ci_high'][i][j]:,.0f}, std error {joint['std_errors'][i][j]:,.0f}"
                    ),
                }
            )
    return {
        "pair": joint["pair"],
        "width": width,
        "height": height,
        "left": label_w,
        "top": top,
        "cell_w": cell_w,
        "cells": cells,
        "row_labels": [
            {"text": rows_all[i], "y": top + r * cell_h + cell_h / 2 + 4}
            for r, i in enumerate(rows)
        ],
        "column_labels": [
            {"text": cols_all[j], "x": label_w + c * cell_w + cell_w / 2}
            for c, j in enumerate(cols)
        ],
        "shown": (len(rows), len(cols)),
        "total": (len(rows_all), len(cols_all)),
        "scale_top": scale_top,
    }


def attribute_bars(attr: dict[str, Any], n: int, *, width: int = 560) -> dict[str, Any]:
    """Horizontal bars (frequency) with interval whiskers of one categorical attribute."""
    values = attr["values"]
    if len(values) > MAX_CELLS_PER_SIDE * 2:
        values = sorted(values, key=lambda v: -v["count"])[: MAX_CELLS_PER_SIDE * 2]
    total = max(n, 1)
    label_w, row_h, top = 170, 22, 8
    plot_w = width - label_w - 20
    top_value = max([v["ci_high"] / total for v in values] + [0.01])
    scale = plot_w / top_value
    rows = []
    for k, v in enumerate(values):
        y = top + k * row_h
        rows.append(
            {
                "label": v["value"],
                "y": y,
                "mid": y + row_h / 2,
                "bar_w": max(0.0, v["frequency"]) * scale,
                "bar_h": row_h - 6,
                "x_lo": label_w + v["ci_low"] / total * scale,
                "x_hi": label_w + v["ci_high"] / total * scale,
                "title": f"{v['value']}: {100 * v['frequency']:.2f}% (interval "
                f"{100 * v['ci_low'] / total:.2f}% to {100 * v['ci_high'] / total:.2f}%)",
            }
        )
    return {
        "name": attr["name"],
        "width": width,
        "height": top + row_h * len(values) + 8,
        "left": label_w,
        "rows": rows,
    }


def _categorical_trend(body: dict[str, Any], position: int) -> dict[str, Any]:
    """The categorical trend chart of attribute ``position`` (its JSON trend rows laid out as
    a categorical campaign's answer, so the one chart function draws both)."""
    from collector.dashboard import trend_chart

    attr = body["attributes"][position]
    rows = []
    for t in body["trend"]:
        a = t["attributes"][position]
        rows.append(
            {
                "window": t["window"],
                "n": t["n"],
                "frequencies": a["frequencies"],
                "smoothed_frequencies": a["smoothed_frequencies"],
                "smoothed_std_errors": a["smoothed_std_errors"],
            }
        )
    values = [{"value": v["value"], "count": v["count"]} for v in attr["values"]]
    return trend_chart({"trend": rows, "values": values, "level": body["level"]})


def _numeric_trend(answer: MultiEstimates, position: int) -> dict[str, Any]:
    """The numeric trend chart of attribute ``position``: its trend rows as a mean answer's."""
    from aggregator.estimate import z_value
    from collector.dashboard_numeric import numeric_trend_chart

    attr = answer.attributes[position]
    z = z_value(answer.level)
    rows = []
    for t in answer.trend:
        a = t.attributes[position]
        low = high = None
        if a.mean is not None and a.std_error is not None:
            low, high = a.mean - z * a.std_error, a.mean + z * a.std_error
        rows.append(
            MeanTrendWindow(
                window=t.window,
                n=t.n,
                mean=a.mean,
                std_error=a.std_error,
                ci_low=low,
                ci_high=high,
                smoothed_mean=a.smoothed_mean,
                smoothed_std_error=a.smoothed_std_error,
            )
        )
    bounds = attr.bounds or (0.0, 1.0)
    mean = attr.mean if attr.mean is not None else bounds[0]
    as_mean = MeanEstimates(
        campaign=answer.campaign,
        from_=answer.from_,
        to=answer.to,
        windows=answer.windows,
        n=answer.n,
        min_reports=answer.min_reports,
        mechanism=answer.mechanism,
        params={},
        epsilon=answer.epsilon,
        realised_epsilon=answer.realised_epsilon,
        level=answer.level,
        bounds=bounds,
        mean=mean,
        std_error=attr.std_error or 0.0,
        worst_case_std_error=attr.std_error or 0.0,
        ci=attr.ci or Interval(answer.level, mean, mean),
        trend=rows,
        trend_smoothing=answer.trend_smoothing,
    )
    return numeric_trend_chart(as_mean)


def attribute_trend_charts(body: dict[str, Any], answer: MultiEstimates) -> dict[str, Any]:
    """Per attribute name, its trend chart (see the module doc); ``{}`` without a trend."""
    if not answer.trend or not answer.trend[0].attributes:
        return {}
    out = {}
    for position, attr in enumerate(answer.attributes):
        if attr.kind == "frequency":
            out[attr.name] = {"kind": "frequency", **_categorical_trend(body, position)}
        else:
            out[attr.name] = {"kind": "mean", **_numeric_trend(answer, position)}
    return out


def multi_charts(body: dict[str, Any], answer: MultiEstimates | None = None) -> dict[str, Any]:
    """Everything the multi-attribute template draws, from the answer's JSON form (and the
    typed answer, for the trend charts: none without it)."""
    n = body["n"]
    return {
        "crosstabs": [crosstab_chart(j, n) for j in body["joints"]],
        "attribute_bars": {
            a["name"]: attribute_bars(a, n) for a in body["attributes"] if a["kind"] == "frequency"
        },
        "trends": attribute_trend_charts(body, answer) if answer is not None else {},
    }
