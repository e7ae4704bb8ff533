"""``ldp audit``: empirical lower bound on a mechanism's epsilon from its own perturb."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import Any

import click
import numpy as np

from aggregator.privacy_audit import DEFAULT_ALPHA, DEFAULT_SAMPLES, PATHS, audit
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import MECHANISMS, PRESETS, create
from client_sdk.mechanisms.registry import kind_of
from collector.settings import MAX_INT_SETTING
from ldp_cli.options import SEED
from ldp_cli.output import FORMAT_OPTION, emit_json, table


@click.command("audit")
@click.argument("mechanism")
@click.option("--epsilon", "-e", type=float, default=None, help="Claimed epsilon per report.")
@click.option("--k", "k", type=int, default=14, show_default=True, help="Domain size.")
@click.option(
    "--samples",
    type=click.IntRange(max=MAX_INT_SETTING),  # past it a run would not end (and NumPy overflows)
    default=DEFAULT_SAMPLES,
    show_default=True,
    help="Reports drawn for each of the two inputs.",
)
@click.option("--alpha", type=float, default=DEFAULT_ALPHA, show_default=True)
@click.option(
    "--path",
    type=click.Choice(PATHS),
    default="device",
    show_default=True,
    help="device: one perturb call per report with OS randomness; vectorised: perturb_many.",
)
@click.option("--seed", type=SEED, default=None, help="Seed instead of OS randomness.")
@FORMAT_OPTION
def audit_command(
    mechanism: str,
    epsilon: float | None,
    k: int,
    samples: int,
    alpha: float,
    path: str,
    seed: int | None,
    fmt: str,
) -> None:
    """Bound a mechanism's privacy loss from below, black-box, and compare with its claim.

    Samples reports for two neighbouring inputs through the SDK's own perturb, picks output
    events fixed in advance, and turns their frequencies into a lower bound on epsilon with
    Clopper-Pearson intervals (confidence 1 - alpha). Exits with status 3 if the bound exceeds
    the claim: the implementation leaks more than it says.

    Example:

        ldp audit oue --epsilon 1 --k 14 --samples 1000000
    """
    try:
        kind = kind_of(mechanism)
        if kind != "frequency":
            # create() would answer in the Python API's words ("give bounds=(low, high)"),
            # which no option of this command can follow.
            raise InvalidParameter(
                f"ldp audit covers the frequency oracles (categorical values), and {mechanism!r} "
                f"is not one (kind: {kind}); audit one of {', '.join([*MECHANISMS, *PRESETS])}"
            )
        if mechanism == "rr" or PRESETS.get(mechanism, ("",))[0] == "rr":
            k = 2
        mech = create(mechanism, epsilon=epsilon, domain=k)
        rng = None if seed is None else np.random.default_rng(seed)
        with ExitStack() as stack:
            # The bar opens with the first reports drawn, once audit() has checked --samples
            # and --alpha: opened before, its label stood above their one-line error.
            bars: list[Any] = []

            def progress(done: int) -> None:
                if not bars:
                    bars.append(
                        stack.enter_context(
                            click.progressbar(
                                length=2 * samples, label=f"auditing {mech.name}", file=sys.stderr
                            )
                        )
                    )
                bars[0].update(done)

            result = audit(
                mech, samples=samples, alpha=alpha, path=path, rng=rng, progress=progress
            )
    except InvalidParameter as exc:
        raise click.ClickException(str(exc)) from None
    if fmt == "json":
        emit_json(result.to_dict())
    else:
        rows = [
            [
                e.event,
                e.hits_first,
                e.hits_second,
                f"{e.epsilon_lower:.4f}" if e.epsilon_lower > -1e300 else "-",
            ]
            for e in result.events
        ]
        click.echo(
            table(["event", "hits (favoured)", "hits (other)", "eps lower"], rows, right={1, 2, 3})
        )
        click.echo(
            f"\n{result.mechanism}: claimed epsilon {result.claimed_epsilon:.6g} "
            f"(realised {result.realised_epsilon:.12g}), empirical lower bound "
            f"{result.epsilon_lower:.4f} ({100 * result.power:.1f}% of the claim) from "
            f"{samples:,} reports per input at confidence {1 - alpha:g}"
        )
    if result.violation:
        click.echo("VIOLATION: the mechanism leaks more than its claimed epsilon", err=True)
        raise SystemExit(3)
