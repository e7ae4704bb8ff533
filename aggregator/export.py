"""CSV form of an estimate answer (``Accept: text/csv``, ``ldp estimate --format csv``).

One row per domain value; the range-wide fields (campaign, window range, reports, mechanism,
epsilon, level, post-processing) repeat on every row so that each row stands alone.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

#: Columns of the CSV, in order.
CSV_COLUMNS = (
    "campaign",
    "from",
    "to",
    "n",
    "mechanism",
    "epsilon",
    "level",
    "postprocess",
    "value",
    "count",
    "frequency",
    "raw_count",
    "raw_frequency",
    "std_error",
    "ci_low",
    "ci_high",
    "significant",
)


def to_csv(result: Mapping[str, Any]) -> str:
    """CSV text (header + one row per value) of an ``estimate_windows`` answer."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    common = {
        "campaign": result.get("campaign") or "",
        "from": result.get("from") or "",
        "to": result.get("to") or "",
        "n": result["n"],
        "mechanism": result["mechanism"],
        "epsilon": repr(float(result["epsilon"])),
        "level": repr(float(result["level"])),
        "postprocess": result["postprocess"]["method"],
    }
    for row in result["values"]:
        merged = {**common, **row}
        writer.writerow([_cell(merged[c]) for c in CSV_COLUMNS])
    return out.getvalue()


def _cell(value: object) -> object:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # shortest text that parses back to the same float
    return value
