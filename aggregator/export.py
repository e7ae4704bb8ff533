"""CSV form of an estimate answer (``Accept: text/csv``, ``ldp estimate --format csv``).

Categorical answers: one row per domain value (:data:`CSV_COLUMNS`). Mean answers: one row
(:data:`MEAN_CSV_COLUMNS`). Distribution answers: one row per histogram bin
(:data:`DISTRIBUTION_CSV_COLUMNS`; quantiles are in the JSON form). Multi-attribute answers:
one row per attribute value or numeric attribute and per joint-table cell
(:data:`MULTI_CSV_COLUMNS`). Open-domain answers: one row per discovered string, then one per
candidate asked about (:data:`OPEN_CSV_COLUMNS`). The range-wide fields
(campaign, window range, reports, mechanism, epsilon, level) repeat on every row so that each
row stands alone.

Text that starts with ``=``, ``+``, ``-``, ``@``, a tab, a carriage return or a line feed is
written with a leading ``'`` (:data:`FORMULA_STARTS`, :func:`_cell`; every CSV this package
writes goes through them): a spreadsheet opening the file would otherwise run it as a formula,
and open-domain strings are chosen by devices (CSV injection, OWASP). The JSON form carries
every value as it is. Lines end with CRLF (RFC 4180); a cell holding a CR or an LF is quoted.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from decimal import Decimal
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

#: Columns of a multi-attribute answer's CSV: one row per attribute value, one per numeric
#: attribute (``mean``), one per cell of each joint table (``table`` ``a|b``, ``column``) and
#: one per label of each mixed pair (``column`` ``mean <numeric attribute>``).
MULTI_CSV_COLUMNS = (
    *_COMMON,
    "table",
    "value",
    "column",
    "count",
    "raw_count",
    "raw_std_error",
    "std_error",
    "ci_low",
    "ci_high",
    "mean",
)


#: Columns of an open-domain answer's CSV: ``list`` is ``discovered`` (ranked, ``rank`` from 1)
#: or ``candidate`` (in the order asked, ``rank`` empty).
OPEN_CSV_COLUMNS = (
    *_COMMON,
    "list",
    "rank",
    "value",
    "count",
    "std_error",
    "ci_low",
    "ci_high",
    "significant",
)


def _open_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for which, items in (("discovered", result["discovered"]), ("candidate", result["candidates"])):
        for i, v in enumerate(items):
            cells = _floats({k: v[k] for k in ("count", "std_error", "ci_low", "ci_high")})
            rank = i + 1 if which == "discovered" else ""
            row = {"list": which, "rank": rank, "value": v["value"], **cells}
            rows.append(row | {"significant": bool(v["significant"])})
    return rows


def _multi_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A multi-attribute answer's rows (cells a row does not have stay empty)."""
    empty = dict.fromkeys(MULTI_CSV_COLUMNS[len(_COMMON) :], "")
    rows: list[dict[str, Any]] = []
    for attr in result["attributes"]:
        if attr["kind"] == "mean":
            ci = attr["ci"]
            cells = {"std_error": attr["std_error"], "ci_low": ci["low"], "ci_high": ci["high"]}
            cells["mean"] = attr["mean"]
            rows.append({**empty, "table": attr["name"], **_floats(cells)})
            continue
        for v in attr["values"]:
            cells = {k: v[k] for k in ("count", "raw_count", "std_error", "ci_low", "ci_high")}
            cells["raw_std_error"] = v.get("raw_std_error", "")  # std error of raw_count
            rows.append({**empty, "table": attr["name"], "value": v["value"], **cells})
    for joint in result["joints"]:
        table = "|".join(joint["pair"])
        for i, label in enumerate(joint["rows"]):
            for j, column in enumerate(joint["columns"]):
                cells = {"count": joint["counts"][i][j], "raw_count": joint["raw_counts"][i][j]}
                # A joint table's std_errors are its raw counts' (the interval uses them too).
                cells |= {"std_error": joint["std_errors"][i][j]}
                cells |= {"raw_std_error": joint["std_errors"][i][j]}
                cells |= {"ci_low": joint["ci_low"][i][j], "ci_high": joint["ci_high"][i][j]}
                row = {**empty, "table": table, "value": label, "column": column}
                rows.append(row | _floats(cells))
    for means in result.get("label_means", []):
        table, column = "|".join(means["pair"]), f"mean {means['numeric_attribute']}"
        for r in means["rows"]:
            row = {**empty, "table": table, "value": r["label"], "column": column}
            row["count"] = float(r["count"])
            if r["mean"] is not None:
                row |= _floats({k: r[k] for k in ("mean", "std_error", "ci_low", "ci_high")})
            rows.append(row)
    return rows


def _floats(cells: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in cells.items()}


def _rows(result: Mapping[str, Any]) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """The columns of ``result``'s kind and its rows, without the range-wide columns."""
    kind = result.get("kind", "frequency")
    if kind == "multi":
        return MULTI_CSV_COLUMNS, _multi_rows(result)
    if kind == "open_domain":
        return OPEN_CSV_COLUMNS, _open_rows(result)
    if kind == "mean":
        ci = result["ci"]
        row = {"mean": result["mean"], "std_error": result["std_error"]}
        row |= {"ci_low": ci["low"], "ci_high": ci["high"]}
        return MEAN_CSV_COLUMNS, [_floats(row)]
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
    # RFC 4180's CRLF: the writer quotes a cell holding any character of its line terminator,
    # so with a bare "\n" a device's "\r" inside a discovered string went out unquoted and
    # broke every reader of the file.
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        merged = {**common, **row}
        writer.writerow([_cell(merged[c]) for c in columns])
    return out.getvalue()


def printable(text: str) -> str:
    """``text`` as a terminal or a page may show it: every unprintable character (C0 and C1
    controls such as ESC or CSI, bidi overrides, zero-width characters, line breaks) as its
    Python escape. Labels, attribute names and discovered strings are not the analyst's: a
    terminal runs what it is sent (``ESC [ 2 J`` clears the screen, OSC 8 makes a link, a
    carriage return overwrites the line) and U+202E reverses the rest of a line or heading,
    the numbers of an interval too. HTML escaping, where it applies, is the page's."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


#: First characters that make a spreadsheet read a cell as a formula (or a DDE command): OWASP's
#: CSV Injection list, and the line feed beside its carriage return. A spreadsheet may drop a
#: leading line break and run what follows; "\n=HYPERLINK(...)", an open-domain string, went
#: out without the quote.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n")


def _cell(value: object) -> object:
    """``value`` as its CSV cell: text that starts with one of :data:`FORMULA_STARTS` behind a
    ``'`` (a spreadsheet shows it as text, never runs it), floats exactly, booleans lower-case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # shortest text that parses back to the same float
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value  # shown as text, never run (see the module docstring)
    return value


def percent(level: float) -> str:
    """``level`` as a percentage (``%g``: 0.95 is ``95%``, 0.999
    ``99.9%``), with more significant digits where six would round it to ``100%`` or ``0%``:
    0.9999999 is ``99.99999%`` (``%g`` printed ``100%``), for any level in (0, 1). The
    CLI's tables and the dashboard's captions write levels with it.

    Decimal arithmetic on the level's shortest repr: ``100 * level`` in floats is 100.0 for the
    float just below 1. (``{:.0%}`` printed ``100%`` above 99.9% intervals, and ``0%`` for
    0.001.)"""
    exact = Decimal(repr(level)) * 100
    digits = 6
    shown = Decimal(f"{exact:.{digits}g}")
    while not 0 < shown < 100 and digits < 40:  # exact itself has at most 17 digits
        digits += 1
        shown = Decimal(f"{exact:.{digits}g}")
    text = f"{shown:f}" if shown.adjusted() >= -4 else f"{shown:e}"
    mantissa, e, exponent = text.partition("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    if exponent:  # as %g writes it: e-05, e+17
        exponent = exponent[0] + exponent[1:].zfill(2)
    return f"{mantissa}{e}{exponent}%"
