"""Chart geometry of an open-domain campaign's dashboard page (pure functions of its answer).

:func:`ranked_chart`: the discovered strings (or the candidates asked about) as horizontal bars
of their estimated counts, largest first, each with its interval whisker, and the discovery's
significance threshold as a dashed line. The template (``dashboard/_openended.html``) only
places what this computes; every number comes from :mod:`aggregator.openended_answers` (the
same answer as ``GET /v1/campaigns/{id}/estimates``). SVG presentation attributes only: the
dashboard's CSP allows no inline style.
"""

from __future__ import annotations

import math
import re
from typing import Any

from aggregator.export import printable

#: Most strings drawn (the table lists every one).
MAX_ROWS = 60


def shown(value: str) -> str:
    """A string as the page shows it: unprintable characters (a discovered string may be any
    bytes the walk found, noise included) as Python escapes; HTML escaping is Jinja's."""
    return printable(value)


#: Spaces a page (HTML collapses and trims them) or an aligned column (padding) hides.
_HIDDEN_SPACES = re.compile(r"^ +| +$| {2,}")


def shown_string(value: str) -> str:
    """An open-domain string as the dashboard and ``ldp estimate``'s table show it:
    :func:`shown`, and the spaces at either end or in a run as ``\\x20``. Whitespace is
    part of a device's string (docs/MECHANISMS.md §24): ``" a "``, ``"a "``
    and ``"a"`` are three strings, which the page showed alike (HTML trims and collapses
    spaces), so an analyst who asked for the one seen got another's count."""
    return _HIDDEN_SPACES.sub(lambda m: "\\x20" * len(m.group()), shown(value))


def ranked_chart(
    items: list[dict[str, Any]], threshold: float | None, *, width: int = 760
) -> dict[str, Any]:
    """Bars of ``items`` (JSON ``OpenValueEstimate``\\ s, in their order) on a count axis from 0
    (or the lowest interval end, if negative) to the highest interval end or threshold."""
    from collector.dashboard import nice_ticks

    items = items[:MAX_ROWS]
    label_w, pad_r, row_h, top_pad = 200, 30, 26, 28
    plot_w = width - label_w - pad_r
    # An interval is null where no report measured the string: the bar alone, no whisker.
    lows = [v["ci_low"] for v in items if v["ci_low"] is not None]
    highs = [v["ci_high"] for v in items if v["ci_high"] is not None]
    low = min([0.0] + lows + [v["count"] for v in items])
    high = max(highs + [v["count"] for v in items] + [threshold or 0.0, 1.0])
    span = nice_ticks(high - low)  # one step for both sides of zero
    step = span[1] - span[0]
    ticks = [
        round(i * step, 12)
        for i in range(math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9) + 1)
    ]
    lo_axis, hi_axis = ticks[0], ticks[-1]
    scale = plot_w / (hi_axis - lo_axis)

    def x(v: float) -> float:
        return label_w + (min(max(v, lo_axis), hi_axis) - lo_axis) * scale

    height = top_pad + row_h * len(items) + 34
    rows = []
    for i, v in enumerate(items):
        y = top_pad + i * row_h
        x0, x1 = sorted((x(0.0), x(v["count"])))
        rows.append(
            {
                "label": shown_string(v["value"]),
                "y": y,
                "mid": y + row_h / 2,
                "bar_x": x0,
                "bar_w": x1 - x0,
                "bar_h": row_h - 8,
                "x_lo": None if v["ci_low"] is None else x(v["ci_low"]),
                "x_hi": None if v["ci_high"] is None else x(v["ci_high"]),
                "count": v["count"],
                "ci": (v["ci_low"], v["ci_high"]),
                "significant": v["significant"],
            }
        )
    return {
        "width": width,
        "height": height,
        "left": label_w,
        "zero_x": x(0.0),
        "bottom": top_pad + row_h * len(items) + 4,
        "rows": rows,
        "ticks": [{"x": x(t), "label": f"{t:,.0f}"} for t in ticks],
        "threshold_x": x(threshold) if threshold is not None else None,
    }


def open_charts(body: dict[str, Any]) -> dict[str, Any]:
    """Everything ``_openended.html`` draws: the discoveries and the candidates."""
    threshold = body["threshold"]["threshold"] if body.get("threshold") else None
    return {
        "discovered": ranked_chart(body["discovered"], threshold) if body["discovered"] else None,
        "candidates": ranked_chart(body["candidates"], None) if body["candidates"] else None,
        "shown": {
            v["value"]: shown_string(v["value"]) for v in body["discovered"] + body["candidates"]
        },
    }
