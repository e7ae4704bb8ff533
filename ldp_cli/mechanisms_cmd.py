"""``ldp mechanisms``: compare mechanisms for an epsilon and domain size."""

from __future__ import annotations

import math
from typing import Any

import click

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import compare
from ldp_cli.output import FORMAT_OPTION, emit_json, table


@click.command("mechanisms")
@click.option("--epsilon", "-e", type=float, required=True, help="Privacy parameter per report.")
@click.option("--k", "k", type=int, required=True, help="Domain size (number of values).")
@click.option(
    "--n", "n", type=int, default=None, help="Number of reports; adds the count standard error."
)
@click.option(
    "--max-report-bytes", type=int, default=None, help="Only consider reports up to this size."
)
@FORMAT_OPTION
def mechanisms_command(
    epsilon: float, k: int, n: int | None, max_report_bytes: int | None, fmt: str
) -> None:
    """List the mechanisms with report size and estimator variance, and what 'auto' picks.

    Variance is per report, for counts: 'v0' for an item nobody holds, 'beta' the extra per
    device holding it, 'mean' = v0 + beta/k (the average over a uniform domain, which 'auto'
    minimises). Multiply by n for the count variance of n reports.

    Example:

        ldp mechanisms --epsilon 1 --k 14 --n 32561
    """
    if n is not None and n < 1:
        raise click.BadParameter("must be >= 1", param_hint="--n")
    try:
        choice = compare(epsilon, k, max_report_bytes=max_report_bytes)
    except InvalidParameter as exc:
        raise click.ClickException(str(exc)) from None
    rows: list[dict[str, Any]] = []
    for c in choice.candidates:
        m = c.mechanism
        if m is None:
            rows.append({"mechanism": c.name, "excluded": c.excluded})
            continue
        row: dict[str, Any] = {
            "mechanism": c.name,
            "report_bytes": m.report_bytes,
            "params": m.params(),
            "realised_epsilon": m.realised_epsilon,
            "v0": m.v0,
            "beta": m.beta,
            "mean_variance": m.mean_variance(),
            "excluded": c.excluded,
        }
        if n is not None:
            row["count_std_error"] = math.sqrt(n * m.mean_variance())
        rows.append(row)
    chosen = choice.chosen.name
    if fmt == "json":
        emit_json(
            {
                "epsilon": epsilon,
                "k": k,
                "n": n,
                "auto": chosen,
                "reason": choice.reason,
                "mechanisms": rows,
            }
        )
        return
    headers = ["mechanism", "bytes", "params", "v0", "beta", "mean var"]
    if n is not None:
        headers.append(f"count SE @n={n}")
    body = []
    for r in rows:
        if "v0" not in r:
            body.append(
                [r["mechanism"], "-", "", "-", "-", f"excluded: {r['excluded']}"]
                + ([""] if n is not None else [])
            )
            continue
        mark = " *" if r["mechanism"] == chosen else ""
        params = ", ".join(f"{a}={b}" for a, b in r["params"].items())
        line = [
            r["mechanism"] + mark,
            r["report_bytes"],
            params,
            f"{r['v0']:.4f}",
            f"{r['beta'] + 0.0:.4f}",
            f"{r['mean_variance']:.4f}",
        ]
        if r["excluded"]:
            line[-1] += f" (excluded: {r['excluded']})"
        if n is not None:
            line.append(f"{r['count_std_error']:.1f}")
        body.append(line)
    click.echo(f"epsilon = {epsilon:g}, k = {k}" + (f", n = {n}" if n else ""))
    click.echo(table(headers, body, right={1, 3, 4, 5, 6}))
    click.echo(f"\nauto -> {chosen}: {choice.reason}")
