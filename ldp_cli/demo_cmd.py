"""``ldp demo``: the Adult replay over HTTP, estimates against the truth and central Laplace."""

from __future__ import annotations

from pathlib import Path

import click

from client_sdk.errors import LDPError
from ldp_cli.options import SEED
from ldp_cli.simulate_cmd import output_error
from simulator.demo import DEFAULT_ATTRIBUTES, DEFAULT_EPSILON, DEFAULT_OUTPUT, render_tables
from simulator.errors import SimulatorError


@click.command("demo")
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_OUTPUT,
    show_default=True,
    help="Where results.json and the plots go.",
)
@click.option("--epsilon", "-e", type=float, default=DEFAULT_EPSILON, show_default=True)
@click.option("--seed", type=SEED, default=None, help="Seed the devices (default: OS randomness).")
def demo_command(output: Path, epsilon: float, seed: int | None) -> None:
    """Replay every UCI Adult row as a device through the SDK to an embedded collector.

    Creates campaigns for occupation and education (mechanism auto) and a numeric one for age
    (bounds 17..90, mean mechanism auto), uploads one report per row over loopback HTTP, reads
    the estimates through the analyst API and prints, per value, the true count, the local
    estimate with its 95% CI and a central Laplace release at the same epsilon, with the error
    summary; for age the true mean, the estimate +- its 95% CI and a central Laplace mean.
    Needs no flags and no network beyond loopback.

    Example:

        ldp demo --output ldp-demo-output
    """
    from simulator.demo import run_demo

    try:
        results = run_demo(
            attributes=DEFAULT_ATTRIBUTES,
            epsilon=epsilon,
            output=output,
            seed=seed,
            echo=click.echo,
        )
    except (LDPError, SimulatorError) as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        if exc.filename is None:  # not a file: not ours to word
            raise
        raise output_error(exc) from None
    click.echo(render_tables(results))
    click.echo(f"\nplots: {', '.join(results['plots'])}")
    click.echo(f"results: {output / 'results.json'}  ({results['seconds']:.1f} s)")
