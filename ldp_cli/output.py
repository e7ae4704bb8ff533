"""Aligned tables and JSON for CLI output."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from aggregator.export import printable


def table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, right: set[int] | None = None
) -> str:
    """Render an aligned text table; columns in ``right`` are right-aligned (default: numbers).
    Every cell is shown :func:`printable` (and aligned as shown)."""
    cells = [[printable(str(h)) for h in headers]] + [
        [printable(str(c)) for c in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    if right is None:
        right = {
            i
            for i in range(len(headers))
            if rows and all(isinstance(row[i], (int, float)) for row in rows)
        }
    lines = []
    for j, row in enumerate(cells):
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


FORMAT_OPTION = click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for machines.",
)
