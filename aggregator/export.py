"""CSV form of an estimate answer (``Accept: text/csv``, ``ldp estimate --format csv``).

Categorical answers: one row per domain value (:data:`CSV_COLUMNS`). Mean answers: one row
(:data:`MEAN_CSV_COLUMNS`). Distribution answers: one row per histogram bin
(:data:`DISTRIBUTION_CSV_COLUMNS`; quantiles are in the JSON form). The range-wide fields
(campaign, window range, reports, mechanism, epsilon, level) repeat on every row so that each
row stands alone.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

#: The range-wide columns every CSV starts with (repeated on every row).
_COMMON = ("campaign", "from", "to", "n", "mechanism", "epsilon", "level")

#: Columns of a categorical answer's CSV (one row per domain value), in order.
CSV_COLUMNS = (
    *_COMMON,
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
#: Columns of a mean answer's CSV (one row).
MEAN_CSV_COLUMNS = (*_COMMON, "mean", "std_error", "ci_low", "ci_high")
#: Columns of a distribution answer's CSV (one row per bin).
DISTRIBUTION_CSV_COLUMNS = (
    *_COMMON,
    "bin_low",
    "bin_high",
    "frequency",
    "ci_low",
    "ci_high",
)


def _rows(result: Mapping[str, Any]) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """The columns of ``result``'s kind and its rows, without the range-wide columns."""
    kind = result.get("kind", "frequency")
    if kind == "mean":
        ci = result["ci"]
        row = {"mean": result["mean"], "std_error": result["std_error"]}
        row |= {"ci_low": ci["low"], "ci_high": ci["high"]}
        return MEAN_CSV_COLUMNS, [{k: float(v) for k, v in row.items()}]
    if kind == "distribution":
        keys = {"bin_low": "low", "bin_high": "high", "frequency": "frequency"}
        keys |= {"ci_low": "ci_low", "ci_high": "ci_high"}
        return DISTRIBUTION_CSV_COLUMNS, [
            {column: float(b[key]) for column, key in keys.items()} for b in result["bins"]
        ]
    method = result["postprocess"]["method"]
    return CSV_COLUMNS, [{"postprocess": method, **row} for row in result["values"]]


def to_csv(result: Mapping[str, Any]) -> str:
    """CSV text of an estimate answer in its JSON form (see the module docstring)."""
    columns, rows = _rows(result)
    common = {
        "campaign": result.get("campaign") or "",
        "from": result.get("from") or "",
        "to": result.get("to") or "",
        "n": result["n"],
        "mechanism": result["mechanism"],
        "epsilon": float(result["epsilon"]),
        "level": float(result["level"]),
    }
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        merged = {**common, **row}
        writer.writerow([_cell(merged[c]) for c in columns])
    return out.getvalue()


def _cell(value: object) -> object:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # shortest text that parses back to the same float
    return value
