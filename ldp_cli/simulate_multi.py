"""``ldp simulate --scenario multi``: several attributes per device (simulator/multi_scenario.py).

:func:`run_multi_cli` runs it for ``ldp simulate`` (``-e``, ``-r``, ``--seed``, ``--rows``, ``-o``
and ``--no-plots`` apply).
"""

from __future__ import annotations

from pathlib import Path

import click

#: Help appended to ``--scenario``.
MULTI_HELP = (
    " multi: one report per device over Adult's attributes, per-attribute MSE vs epsilon of "
    "auto/smp/spl/rsfd and central Laplace, 2-way joints against two epsilon/2 campaigns and "
    "the raw product domain, mean hours-per-week per education with intervals "
    "(-e, -r apply, default 10 replays; --rows for a quick run)."
)


def run_multi_cli(
    *,
    epsilons: tuple[float, ...],
    repetitions: int | None,
    seed: int,
    rows: int | None,
    output: Path,
    no_plots: bool,
) -> None:
    """Run the scenario, write multi.md / multi.json / PNGs to ``output``, print the tables."""
    from client_sdk.errors import LDPError
    from simulator.errors import SimulatorError
    from simulator.multi_scenario import (
        DEFAULT_MULTI_EPSILONS,
        DEFAULT_MULTI_REPETITIONS,
        MultiSettings,
        run_multi,
        table_lines,
        write_multi_outputs,
    )

    try:
        settings = MultiSettings(
            epsilons=tuple(epsilons) or DEFAULT_MULTI_EPSILONS,
            repetitions=DEFAULT_MULTI_REPETITIONS if repetitions is None else repetitions,
            seed=seed,
            rows=rows,
        )
        results = run_multi(settings, progress=lambda msg: click.echo(f"  done: {msg}", err=True))
        paths = write_multi_outputs(results, output, plots=not no_plots)
    except (LDPError, SimulatorError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo("\n".join(table_lines(results)))
    click.echo(f"\nmulti written: {', '.join(str(p) for p in paths)}")
