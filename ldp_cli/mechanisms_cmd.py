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
@click.option("--k", "k", type=int, default=None, help="Domain size (number of values).")
@click.option(
    "--bounds",
    type=(float, float),
    default=None,
    metavar="LOW HIGH",
    help="Compare the mean mechanisms of a numeric campaign instead (no --k).",
)
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
    "uniform if omitted. With --bounds: MEAN,SD of the values (else the worst case decides).",
)
@FORMAT_OPTION
def mechanisms_command(
    epsilon: float,
    k: int | None,
    bounds: tuple[float, float] | None,
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

    With --bounds instead of --k, the mean mechanisms of a numeric campaign: the per-report
    variance of the estimate (units of x squared) in the worst case over the bounds and, with
    --expected MEAN,SD, averaged over such values; 'auto' takes the smallest of the latter when
    values are declared, else of the former.

    Example:

    \b
        ldp mechanisms --epsilon 1 --k 14 --n 32561
        ldp mechanisms --epsilon 1 --bounds 17 90 --expected 38.6,13.6 --n 32561
    """
    if n is not None and n < 1:
        raise click.BadParameter("must be >= 1", param_hint="--n")
    if (k is None) == (bounds is None):
        raise click.UsageError("give --k (a domain of k values) or --bounds LOW HIGH, one of them")
    if bounds is not None:
        if max_report_bytes is not None:
            raise click.UsageError(
                "--max-report-bytes applies to --k only (numeric reports are one integer)"
            )
        _numeric(epsilon, bounds, n, expected, fmt)
        return
    assert k is not None
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


#: What the numeric table's columns are, in one line each (also in the JSON output).
NUMERIC_CRITERION = (
    "per-report variance of the mean's estimate in units of x squared: 'worst case' over the "
    "bounds, 'expected' averaged over values of the declared mean and sd"
)


def _numeric(
    epsilon: float, bounds: tuple[float, float], n: int | None, expected: str | None, fmt: str
) -> None:
    """``ldp mechanisms --bounds``: the mean mechanisms ``auto`` compares."""
    from client_sdk.mechanisms.numeric import choose_mean

    declared: dict[str, float] | None = None
    if expected is not None:
        try:
            mean, sd = (float(x) for x in expected.split(","))
        except ValueError:
            raise click.BadParameter(
                "with --bounds: MEAN,SD (two numbers)", param_hint="--expected"
            ) from None
        declared = {"mean": mean, "sd": sd}
    try:
        choice = choose_mean(epsilon=epsilon, bounds=bounds, expected=declared)
    except InvalidParameter as exc:
        raise click.ClickException(str(exc)) from None
    rows: list[dict[str, Any]] = []
    for c in choice.candidates:
        row: dict[str, Any] = {
            "mechanism": c.name,
            "worst_case_variance": c.worst_case_variance,
            "expected_variance": c.expected_variance,
        }
        if n is not None:
            used = c.worst_case_variance if c.expected_variance is None else c.expected_variance
            row["mean_std_error"] = math.sqrt(used / n)
        rows.append(row)
    chosen = choice.chosen.name
    if fmt == "json":
        emit_json(
            {
                "epsilon": epsilon,
                "bounds": list(bounds),
                "n": n,
                "expected": declared,
                "auto": chosen,
                "criterion": choice.criterion,
                "columns": NUMERIC_CRITERION,
                "mechanisms": rows,
            }
        )
        return
    headers = ["mechanism", "worst case"]
    if declared is not None:
        headers.append("expected")
    if n is not None:
        headers.append(f"mean SE @n={n}")
    body = []
    for r in rows:
        line = [
            r["mechanism"] + (" *" if r["mechanism"] == chosen else ""),
            f"{r['worst_case_variance']:.6g}",
        ]
        if declared is not None:
            line.append(f"{r['expected_variance']:.6g}")
        if n is not None:
            line.append(f"{r['mean_std_error']:.4g}")
        body.append(line)
    click.echo(
        f"epsilon = {epsilon:g}, bounds = [{bounds[0]:g}, {bounds[1]:g}]"
        + (f", n = {n}" if n else "")
    )
    click.echo(table(headers, body, right=set(range(1, len(headers)))))
    click.echo(f"\ncolumns: {NUMERIC_CRITERION}")
    click.echo(f"auto -> {chosen}: it minimises {choice.criterion}")
