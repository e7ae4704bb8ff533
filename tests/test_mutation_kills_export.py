"""CSV forms that mutation testing found unchecked (``aggregator.export``, issue 21).

The open-domain CSV (one row per discovered string, ranked from 1, then one per candidate with
an empty rank), a multi-attribute answer's label means (a label without a mean leaves its mean
cells empty) and the choice of columns by ``kind``. Answers are given in their JSON form, as the
collector passes them to :func:`aggregator.export.to_csv`.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from aggregator.export import (
    CSV_COLUMNS,
    DISTRIBUTION_CSV_COLUMNS,
    MEAN_CSV_COLUMNS,
    MULTI_CSV_COLUMNS,
    OPEN_CSV_COLUMNS,
    to_csv,
)

COMMON: dict[str, Any] = {
    "campaign": "c",
    "from": "2026-11-01",
    "to": "2026-11-02",
    "n": 900,
    "mechanism": "m",
    "epsilon": 1.0,
    "level": 0.95,
}


def _rows(text: str) -> tuple[list[str], list[dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(text))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


def _item(value: str, count: float, significant: bool) -> dict[str, Any]:
    return {
        "value": value,
        "count": count,
        "std_error": 2.0,
        "ci_low": count - 4.0,
        "ci_high": count + 4.0,
        "significant": significant,
    }


def test_open_domain_rows_rank_the_discoveries_then_list_the_candidates() -> None:
    body = {
        **COMMON,
        "kind": "open_domain",
        "discovered": [_item("apple", 300.0, True), _item("pear", 120.5, True)],
        "candidates": [_item("plum", 3.0, False)],
    }
    columns, rows = _rows(to_csv(body))
    assert columns == list(OPEN_CSV_COLUMNS)
    assert [(r["list"], r["rank"], r["value"]) for r in rows] == [
        ("discovered", "1", "apple"),
        ("discovered", "2", "pear"),
        ("candidate", "", "plum"),
    ]
    assert [float(r["count"]) for r in rows] == [300.0, 120.5, 3.0]
    assert [float(r["ci_high"]) for r in rows] == [304.0, 124.5, 7.0]
    assert [r["significant"] for r in rows] == ["true", "true", "false"]
    assert all(r["campaign"] == "c" and r["n"] == "900" for r in rows)


def test_label_means_rows_leave_a_missing_mean_empty() -> None:
    body = {
        **COMMON,
        "kind": "multi",
        "attributes": [],
        "joints": [],
        "label_means": [
            {
                "pair": ["group", "hours"],
                "numeric_attribute": "hours",
                "rows": [
                    {
                        "label": "a",
                        "count": 40.0,
                        "mean": 31.5,
                        "std_error": 1.5,
                        "ci_low": 28.5,
                        "ci_high": 34.5,
                    },
                    {
                        "label": "b",
                        "count": 0.0,
                        "mean": None,
                        "std_error": None,
                        "ci_low": None,
                        "ci_high": None,
                    },
                ],
            }
        ],
    }
    columns, rows = _rows(to_csv(body))
    assert columns == list(MULTI_CSV_COLUMNS)
    a, b = rows
    assert (a["table"], a["value"], a["column"]) == ("group|hours", "a", "mean hours")
    assert (float(a["mean"]), float(a["ci_low"]), float(a["ci_high"])) == (31.5, 28.5, 34.5)
    assert (b["value"], float(b["count"])) == ("b", 0.0)
    assert b["mean"] == b["std_error"] == b["ci_low"] == b["ci_high"] == ""


def test_each_kind_has_its_own_columns() -> None:
    mean = {**COMMON, "kind": "mean", "mean": 4.0, "std_error": 0.5}
    mean["ci"] = {"level": 0.95, "low": 3.0, "high": 5.0}
    columns, rows = _rows(to_csv(mean))
    assert columns == list(MEAN_CSV_COLUMNS) and float(rows[0]["mean"]) == 4.0
    dist = {**COMMON, "kind": "distribution"}
    dist["bins"] = [{"low": 0.0, "high": 1.0, "frequency": 1.0, "ci_low": 0.9, "ci_high": 1.0}]
    columns, rows = _rows(to_csv(dist))
    assert columns == list(DISTRIBUTION_CSV_COLUMNS) and float(rows[0]["bin_high"]) == 1.0
    frequency = {**COMMON, "postprocess": {"method": "none"}}
    frequency["values"] = [{"value": "x", "count": 2.0, "significant": False}]
    frequency["values"][0] |= dict.fromkeys(
        ("frequency", "raw_count", "raw_frequency", "std_error", "ci_low", "ci_high"), 0.5
    )
    for body in (frequency, {**frequency, "kind": "frequency"}):
        columns, rows = _rows(to_csv(body))
        assert columns == list(CSV_COLUMNS)
        assert (rows[0]["postprocess"], rows[0]["value"], rows[0]["significant"]) == (
            "none",
            "x",
            "false",
        )
    multi = {**COMMON, "kind": "multi", "joints": [], "label_means": []}
    multi["attributes"] = [
        {
            "name": "age",
            "kind": "mean",
            "mean": 40.0,
            "std_error": 1.0,
            "ci": {"level": 0.95, "low": 38.0, "high": 42.0},
        },
        {
            "name": "sex",
            "kind": "frequency",
            "values": [
                {
                    "value": "F",
                    "count": 500.0,
                    "raw_count": 510.0,
                    "std_error": 9.0,
                    "ci_low": 482.0,
                    "ci_high": 518.0,
                }
            ],
        },
    ]
    columns, rows = _rows(to_csv(multi))
    assert columns == list(MULTI_CSV_COLUMNS)
    age, sex = rows
    assert (age["table"], float(age["mean"]), age["value"], age["count"]) == ("age", 40.0, "", "")
    assert (sex["table"], sex["value"], float(sex["count"]), sex["mean"]) == ("sex", "F", 500.0, "")
