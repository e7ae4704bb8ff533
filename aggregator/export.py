"""CSV form of an estimate answer (``Accept: text/csv``, ``ldp estimate --format csv``).

Categorical answers: one row per domain value (:data:`CSV_COLUMNS`). Mean answers: one row
(:data:`MEAN_CSV_COLUMNS`). Distribution answers: one row per histogram bin
(:data:`DISTRIBUTION_CSV_COLUMNS`; quantiles are in the JSON form). Multi-attribute answers:
one row per attribute value or numeric attribute and per joint-table cell
(:data:`MULTI_CSV_COLUMNS`). The range-wide fields
(campaign, window range, reports, mechanism, epsilon, level) repeat on every row so that each
row stands alone.
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


#: Columns of a mean answer's CSV (one row).
MEAN_CSV_COLUMNS = (
    "campaign",
    "from",
    "to",
    "n",
    "mechanism",
    "epsilon",
    "level",
    "mean",
    "std_error",
    "ci_low",
    "ci_high",
)
#: Columns of a distribution answer's CSV (one row per bin).
DISTRIBUTION_CSV_COLUMNS = (
    "campaign",
    "from",
    "to",
    "n",
    "mechanism",
    "epsilon",
    "level",
    "bin_low",
    "bin_high",
    "frequency",
    "ci_low",
    "ci_high",
)


def _numeric_csv(result: Mapping[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    common = {
        "campaign": result.get("campaign") or "",
        "from": result.get("from") or "",
        "to": result.get("to") or "",
        "n": result["n"],
        "mechanism": result["mechanism"],
        "epsilon": float(result["epsilon"]),
        "level": float(result["level"]),
    }
    if result["kind"] == "mean":
        writer.writerow(MEAN_CSV_COLUMNS)
        row = {
            **common,
            "mean": float(result["mean"]),
            "std_error": float(result["std_error"]),
            "ci_low": float(result["ci"]["low"]),
            "ci_high": float(result["ci"]["high"]),
        }
        writer.writerow([_cell(row[c]) for c in MEAN_CSV_COLUMNS])
        return out.getvalue()
    writer.writerow(DISTRIBUTION_CSV_COLUMNS)
    for b in result["bins"]:
        row = {
            **common,
            "bin_low": float(b["low"]),
            "bin_high": float(b["high"]),
            "frequency": float(b["frequency"]),
            "ci_low": float(b["ci_low"]),
            "ci_high": float(b["ci_high"]),
        }
        writer.writerow([_cell(row[c]) for c in DISTRIBUTION_CSV_COLUMNS])
    return out.getvalue()


#: Columns of a multi-attribute answer's CSV: one row per attribute value, one per numeric
#: attribute (``mean``), one per cell of each joint table (``table`` ``a|b``, ``column``) and
#: one per label of each mixed pair (``column`` ``mean <numeric attribute>``).
MULTI_CSV_COLUMNS = (
    "campaign",
    "from",
    "to",
    "n",
    "mechanism",
    "epsilon",
    "level",
    "table",
    "value",
    "column",
    "count",
    "raw_count",
    "std_error",
    "ci_low",
    "ci_high",
    "mean",
)


def _multi_csv(result: Mapping[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(MULTI_CSV_COLUMNS)
    common = {
        "campaign": result.get("campaign") or "",
        "from": result.get("from") or "",
        "to": result.get("to") or "",
        "n": result["n"],
        "mechanism": result["mechanism"],
        "epsilon": float(result["epsilon"]),
        "level": float(result["level"]),
    }
    empty = dict.fromkeys(MULTI_CSV_COLUMNS, "")
    for attr in result["attributes"]:
        if attr["kind"] == "mean":
            row = {
                **empty,
                **common,
                "table": attr["name"],
                "std_error": float(attr["std_error"]),
                "ci_low": float(attr["ci"]["low"]),
                "ci_high": float(attr["ci"]["high"]),
                "mean": float(attr["mean"]),
            }
            writer.writerow([_cell(row[c]) for c in MULTI_CSV_COLUMNS])
            continue
        for v in attr["values"]:
            row = {**empty, **common, "table": attr["name"]}
            row.update({k: v[k] for k in ("value", "count", "raw_count", "std_error")})
            row.update({"ci_low": v["ci_low"], "ci_high": v["ci_high"]})
            writer.writerow([_cell(row[c]) for c in MULTI_CSV_COLUMNS])
    for joint in result["joints"]:
        for i, label in enumerate(joint["rows"]):
            for j, column in enumerate(joint["columns"]):
                row = {
                    **empty,
                    **common,
                    "table": "|".join(joint["pair"]),
                    "value": label,
                    "column": column,
                    "count": float(joint["counts"][i][j]),
                    "raw_count": float(joint["raw_counts"][i][j]),
                    "std_error": float(joint["std_errors"][i][j]),
                    "ci_low": float(joint["ci_low"][i][j]),
                    "ci_high": float(joint["ci_high"][i][j]),
                }
                writer.writerow([_cell(row[c]) for c in MULTI_CSV_COLUMNS])
    for means in result.get("label_means", []):
        for r in means["rows"]:
            row = {
                **empty,
                **common,
                "table": "|".join(means["pair"]),
                "value": r["label"],
                "column": f"mean {means['numeric_attribute']}",
                "count": float(r["count"]),
            }
            if r["mean"] is not None:
                row.update(
                    {
                        "mean": float(r["mean"]),
                        "std_error": float(r["std_error"]),
                        "ci_low": float(r["ci_low"]),
                        "ci_high": float(r["ci_high"]),
                    }
                )
            writer.writerow([_cell(row[c]) for c in MULTI_CSV_COLUMNS])
    return out.getvalue()


def to_csv(result: Mapping[str, Any]) -> str:
    """CSV text of an estimate answer in its JSON form (see the module docstring)."""
    if result.get("kind") == "multi":
        return _multi_csv(result)
    if result.get("kind", "frequency") != "frequency":
        return _numeric_csv(result)
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
