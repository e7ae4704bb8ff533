"""``ldp simulate --scenario multi``: several attributes per device (simulator/multi_scenario.py).

:func:`add_multi_scenario` adds ``multi`` to the ``--scenario`` choices of ``ldp simulate`` and
runs it when chosen (``-e``, ``-r``, ``--seed``, ``-o`` and ``--no-plots`` apply); any other
scenario or sweep runs the command unchanged. Kept out of simulate_cmd.py so the command's own
options and body stay one definition.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import click

#: Help appended to ``--scenario``.
MULTI_HELP = (
    " multi: one report per device over Adult's attributes, per-attribute MSE vs epsilon of "
    "auto/smp/spl/rsfd and central Laplace, 2-way joints against two epsilon/2 campaigns and "
    "the raw product domain, mean hours-per-week per education with intervals "
    "(-e, -r apply, default 10 replays; --rows for a quick run)."
)


def add_multi_scenario(command: click.Command) -> click.Command:
    """``command`` (``ldp simulate``) with ``--scenario multi``; returned for rebinding."""
    scenario = next(p for p in command.params if p.name == "scenario")
    assert isinstance(scenario, click.Option) and isinstance(scenario.type, click.Choice)
    if "multi" in scenario.type.choices:
        return command
    scenario.type = click.Choice([*scenario.type.choices, "multi"])
    scenario.help = (scenario.help or "") + MULTI_HELP
    command.params.append(
        click.Option(
            ["--rows"],
            type=click.IntRange(min=100),
            default=None,
            help="--scenario multi: replay only Adult train's first ROWS rows.",
        )
    )
    plain = command.callback
    assert plain is not None

    @functools.wraps(plain)
    def callback(*args: Any, rows: int | None = None, **kwargs: Any) -> Any:
        if kwargs.get("scenario") != "multi":
            if rows is not None:
                raise click.UsageError("--rows applies to --scenario multi only")
            return plain(*args, **kwargs)
        run_multi_cli(
            epsilons=kwargs["epsilons"],
            repetitions=kwargs["repetitions"],
            seed=kwargs["seed"],
            rows=rows,
            output=kwargs["output"],
            no_plots=kwargs["no_plots"],
        )
        return None

    command.callback = callback
    return command


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
