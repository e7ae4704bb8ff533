"""``ldp mechanisms``: compare mechanisms for an epsilon and domain size."""

from __future__ import annotations

import math
from typing import Any

import click

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import compare
from ldp_cli.output import FORMAT_OPTION, emit_json, table

#: What 'mean var' is, in one line (also in the JSON output).
CRITERION = (
    "mean var = count variance per report averaged over the k values at the expected "
    "frequencies, after the sum constraint"
)


def fixed(x: float, places: int = 4) -> str:
    """``x`` with ``places`` decimals, never ``-0.0000`` (a tiny negative rounds to 0)."""
    return f"{round(x, places) + 0.0:.{places}f}"


@click.command("mechanisms")
@click.option("--epsilon", "-e", type=float, required=True, help="Privacy parameter per report.")
@click.option("--k", "k", type=int, required=True, help="Domain size (number of values).")
@click.option(
    "--n", "n", type=int, default=None, help="Number of reports; adds the count standard error."
)
@click.option(
    "--max-report-bytes", type=int, default=None, help="Only consider reports up to this size."
)
@click.option(
    "--expected",
    default=None,
    metavar="W1,W2,...",
    help="Expected frequencies (k comma-separated weights) to average the variance over; "
    "uniform if omitted.",
)
@FORMAT_OPTION
def mechanisms_command(
    epsilon: float,
    k: int,
    n: int | None,
    max_report_bytes: int | None,
    expected: str | None,
    fmt: str,
) -> None:
    """List the mechanisms with report size and estimator variance, and what 'auto' picks.

    Variance is per report, for counts: 'v0' for an item nobody holds, 'beta' the extra per
    device holding it. 'mean var' is the criterion 'auto' (and the subset size d and OLH's g)
    minimise: the count variance averaged over the k values at the expected frequencies
    (uniform unless --expected), after the sum constraint every default post-processing
    enforces (v0 + beta/k for grr and ss, less for mechanisms whose raw counts do not sum to
    n). Multiply by n for the count variance of n reports.

    Example:

    \b
        ldp mechanisms --epsilon 1 --k 14 --n 32561
    """
    if n is not None and n < 1:
        raise click.BadParameter("must be >= 1", param_hint="--n")
    weights = None
    if expected is not None:
        try:
            weights = [float(x) for x in expected.split(",")]
        except ValueError:
            raise click.BadParameter(
                "must be comma-separated numbers", param_hint="--expected"
            ) from None
    try:
        choice = compare(epsilon, k, max_report_bytes=max_report_bytes, expected=weights)
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
            "mean_variance": c.mean_variance,
            "excluded": c.excluded,
        }
        if n is not None:
            row["count_std_error"] = math.sqrt(n * c.mean_variance)
        rows.append(row)
    chosen = choice.chosen.name
    if fmt == "json":
        emit_json(
            {
                "epsilon": epsilon,
                "k": k,
                "n": n,
                "auto": chosen,
                "criterion": CRITERION,
                "expected": list(choice.expected) if choice.expected is not None else None,
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
            fixed(r["v0"]),
            fixed(r["beta"]),
            fixed(r["mean_variance"]),
        ]
        if r["excluded"]:
            line[-1] += f" (excluded: {r['excluded']})"
        if n is not None:
            line.append(f"{r['count_std_error']:.1f}")
        body.append(line)
    click.echo(f"epsilon = {epsilon:g}, k = {k}" + (f", n = {n}" if n else ""))
    click.echo(table(headers, body, right={1, 3, 4, 5, 6}))
    click.echo(f"\ncriterion: {CRITERION}")
    click.echo(f"auto -> {chosen}: {choice.reason}")
