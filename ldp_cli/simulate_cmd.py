"""``ldp simulate``: sweeps over Adult (or a CSV) in-process or over HTTP, with baselines."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import click

from client_sdk.errors import LDPError
from ldp_cli.options import SEED
from ldp_cli.simulate_multi import MULTI_HELP, run_multi_cli
from simulator.errors import SimulatorError
from simulator.sweep import (
    DEFAULT_ATTRIBUTES,
    DEFAULT_EPSILONS,
    DEFAULT_MECHANISMS,
    DEFAULT_REPETITIONS,
    DEFAULT_SEED,
)

#: The book-ch13 scenario's repetitions unless -r says otherwise.
BOOK_REPETITIONS = 200


@click.command("simulate")
@click.option(
    "--attribute",
    "-a",
    "attributes",
    multiple=True,
    help="Attribute to replay (repeatable). Default: 5 Adult attributes.",
)
@click.option(
    "--epsilon",
    "-e",
    "epsilons",
    type=float,
    multiple=True,
    help="Epsilon per report (repeatable). Default: 0.5 1 2 4.",
)
@click.option(
    "--mechanism",
    "-m",
    "mechanisms",
    multiple=True,
    help="Mechanism name, preset, 'auto' or 'all' (repeatable). Default: auto.",
)
@click.option(
    "--repetitions",
    "-r",
    type=int,
    default=None,
    help=f"Replays per setting [default: {DEFAULT_REPETITIONS}; 200 for --scenario book-ch13; "
    "50 for --scenario numeric].",
)
@click.option("--seed", type=SEED, default=DEFAULT_SEED, show_default=True)
@click.option(
    "--mode",
    type=click.Choice(["inprocess", "http"]),
    default="inprocess",
    show_default=True,
    help="inprocess: vectorised; http: SDK -> collector -> API.",
)
@click.option(
    "--url",
    default=None,
    help="Collector for --mode http (tokens from LDP_*_TOKEN); default: embedded.",
)
@click.option(
    "--data",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A CSV with a header instead of Adult (use --column).",
)
@click.option(
    "--column",
    "columns",
    multiple=True,
    help="Column of --data to replay (repeatable; needs --data: Adult's are chosen with -a).",
)
@click.option(
    "--missing",
    type=click.Choice(["drop", "keep"]),
    default="drop",
    show_default=True,
    help="Drop rows with a missing value, or keep '?' as a value.",
)
@click.option(
    "--scenario",
    type=click.Choice(["book-ch13", "numeric", "multi"]),
    default=None,
    help="A named experiment instead of a sweep. numeric: means and distributions of Adult "
    "age, hours-per-week and capital-gain against central DP (-a, -e, -r apply)." + MULTI_HELP,
)
@click.option(
    "--rows",
    type=click.IntRange(min=100),
    default=None,
    help="--scenario multi: replay only Adult train's first ROWS rows.",
)
@click.option(
    "--open-domain",
    type=click.Choice(["zipf", "adult"]),
    default=None,
    help="Open-domain discovery (pem) instead of a sweep: zipf (Zipf(1.1) over 10^5 synthetic "
    "strings) or adult (native-country as unknown strings). F1 of the top 10/50 and count "
    "error against epsilon and n (-e, -r apply; default 1 2 4 8, 3 repetitions).",
)
@click.option(
    "--max-devices",
    type=click.IntRange(min=100),
    default=None,
    help="Largest n of the --open-domain zipf sweep [default: 100000; e.g. 1000000].",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("sim-output"),
    show_default=True,
)
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
def simulate_command(
    attributes: tuple[str, ...],
    epsilons: tuple[float, ...],
    mechanisms: tuple[str, ...],
    repetitions: int | None,
    seed: int,
    mode: str,
    url: str | None,
    data: Path | None,
    columns: tuple[str, ...],
    missing: str,
    scenario: str | None,
    rows: int | None,
    open_domain: str | None,
    max_devices: int | None,
    output: Path,
    no_plots: bool,
) -> None:
    """Replay a data set as devices and measure the error against central DP and theory.

    Writes results.json, report.md and PNG plots to --output.

    Example:

    \b
        ldp simulate -a occupation -e 0.5 -e 1 -e 2 -m all -r 20 -o sim-output
        ldp simulate --mode http -a occupation -e 1 -r 3
        ldp simulate --scenario book-ch13
        ldp simulate --scenario numeric -e 0.5 -e 1 -e 2 -e 4 -o sim-numeric
        ldp simulate --scenario multi -o sim-multi
        ldp simulate --open-domain zipf -o sim-open
    """
    from simulator.adult import load_adult, load_csv
    from simulator.report import write_outputs
    from simulator.sweep import SweepSettings, mse_agreement, run_sweep

    if open_domain is not None and scenario is not None:
        raise click.UsageError("give --scenario or --open-domain, not both")
    _refuse_options_that_do_not_apply(scenario, open_domain, mode)
    if columns and data is None:
        # --column names a column of --data; without it the run would replay Adult's default
        # attributes, silently.
        raise click.UsageError(
            "--column applies to --data (a column of your CSV); choose Adult's attributes with "
            "--attribute/-a"
        )
    try:
        if scenario == "book-ch13":
            from simulator.book import run_book_ch13, write_book_outputs

            reps = BOOK_REPETITIONS if repetitions is None else repetitions
            results = run_book_ch13(load_adult("train"), repetitions=reps, seed=seed)
            paths = write_book_outputs(results, output, plots=not no_plots)
            click.echo(f"book-ch13 written: {', '.join(str(p) for p in paths)}")
            return
        if scenario == "multi":
            run_multi_cli(
                epsilons=epsilons,
                repetitions=repetitions,
                seed=seed,
                rows=rows,
                output=output,
                no_plots=no_plots,
            )
            return
        if rows is not None:
            raise click.UsageError("--rows applies to --scenario multi only")
        if scenario == "numeric":
            _run_numeric(attributes, epsilons, repetitions, seed, output, no_plots)
            return
        if open_domain is not None:
            if mode != "inprocess":
                raise click.UsageError(
                    "--open-domain runs in-process only (open-domain campaigns over HTTP are "
                    "measured by bench/openended_ingest.py)"
                )
            _run_open_domain(
                open_domain, epsilons, repetitions, max_devices, seed, output, no_plots
            )
            return
        if max_devices is not None:
            raise click.UsageError("--max-devices applies to --open-domain zipf only")
        if data is not None:
            if not columns:
                raise click.UsageError("--data needs --column NAME")
            dataset = load_csv(data, columns=list(columns))
            attributes = attributes or columns
        else:
            dataset = load_adult("train")
        settings = SweepSettings(
            attributes=tuple(attributes) or DEFAULT_ATTRIBUTES,
            epsilons=tuple(epsilons) or DEFAULT_EPSILONS,
            mechanisms=tuple(mechanisms) or DEFAULT_MECHANISMS,
            repetitions=DEFAULT_REPETITIONS if repetitions is None else repetitions,
            seed=seed,
            missing=missing,
        )
        from simulator.sweep import count_cells

        total = count_cells(dataset, settings)
        output.mkdir(parents=True, exist_ok=True)  # before the replays, not after them
        with click.progressbar(length=total, label=f"replaying ({mode})", file=sys.stderr) as bar:
            if mode == "inprocess":
                results = run_sweep(dataset, settings, progress=bar.update)
            else:
                from simulator.http_mode import HttpBackend, collector_target

                with (
                    collector_target(
                        url,
                        admin_token=os.environ.get("LDP_ADMIN_TOKEN"),
                        analyst_token=os.environ.get("LDP_ANALYST_TOKEN"),
                        ingest_token=os.environ.get("LDP_INGEST_TOKEN"),
                    ) as target,
                    tempfile.TemporaryDirectory() as state,
                ):
                    with HttpBackend(target, state) as backend:
                        results = run_sweep(dataset, settings, backend=backend, progress=bar.update)
        written = write_outputs(results, output, plots=not no_plots)
    except (LDPError, SimulatorError) as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        if exc.filename is None:  # not a file: not ours to word
            raise
        raise output_error(exc) from None
    agreement = mse_agreement(results)
    click.echo(f"{results['replays']} replays in {results['seconds']:.1f} s ({mode})")
    for name, row in agreement.items():
        click.echo(
            f"  {name:6} empirical MSE / theory {row['pooled']:.3f} over {row['cells']} cells"
        )
    from simulator.shuffled_sweep import shuffle_lines  # the honest comparison (issue 18)

    click.echo("\n".join(shuffle_lines(results)))
    click.echo(f"report: {written['report']}  results: {written['results']}")


#: What each kind of run reads beyond -r, --seed, -o and --no-plots: option -> its flags.
_OPTIONS = {
    "attributes": "--attribute/-a",
    "epsilons": "--epsilon/-e",
    "mechanisms": "--mechanism/-m",
    "mode": "--mode",
    "url": "--url",
    "data": "--data",
    "columns": "--column",
    "missing": "--missing",
}
_APPLIES = {
    None: set(_OPTIONS),
    "book-ch13": set(),
    "numeric": {"attributes", "epsilons"},
    "multi": {"epsilons"},
    "open-domain": {"epsilons", "mode"},  # --mode http is refused with its own reason
}


def _refuse_options_that_do_not_apply(
    scenario: str | None, open_domain: str | None, mode: str
) -> None:
    """A usage error for an option the chosen run would ignore (``--scenario book-ch13 -e 3``
    ran the book's fixed epsilons; ``--url`` without ``--mode http`` ran in-process)."""
    ctx = click.get_current_context()
    kind = "open-domain" if open_domain is not None else scenario
    given = [
        name
        for name in _OPTIONS
        if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
    ]
    for name in given:
        if name == "mode" and mode == "inprocess":
            continue  # every scenario runs in-process
        if name not in _APPLIES[kind]:
            run = f"--open-domain {open_domain}" if open_domain else f"--scenario {scenario}"
            raise click.UsageError(f"{_OPTIONS[name]} does not apply to {run}")
    if kind is None and "url" in given and mode != "http":
        raise click.UsageError("--url applies to --mode http (the collector to replay through)")


def output_error(exc: OSError) -> click.ClickException:
    """An output file or directory that cannot be written, as a one-line error."""
    return click.ClickException(f"cannot write {exc.filename}: {exc.strerror or exc}")


def _run_numeric(
    attributes: tuple[str, ...],
    epsilons: tuple[float, ...],
    repetitions: int | None,
    seed: int,
    output: Path,
    no_plots: bool,
) -> None:
    """``--scenario numeric``: run, write numeric.md / numeric.json / PNGs, print the tables."""
    from simulator.numeric_scenario import (
        DEFAULT_NUMERIC_EPSILONS,
        DEFAULT_NUMERIC_REPETITIONS,
        NUMERIC_BOUNDS,
        NumericSettings,
        run_numeric,
        table_lines,
        write_numeric_outputs,
    )

    reps = DEFAULT_NUMERIC_REPETITIONS if repetitions is None else repetitions
    settings = NumericSettings(
        columns=tuple(attributes) or tuple(NUMERIC_BOUNDS),
        epsilons=tuple(epsilons) or DEFAULT_NUMERIC_EPSILONS,
        repetitions=reps,
        distribution_repetitions=min(reps, 10),
        seed=seed,
    )
    results = run_numeric(settings, progress=lambda msg: click.echo(f"  done: {msg}", err=True))
    paths = write_numeric_outputs(results, output, plots=not no_plots)
    click.echo("\n".join(table_lines(results)))
    click.echo(f"\nnumeric written: {', '.join(str(p) for p in paths)}")


def _run_open_domain(
    data: str,
    epsilons: tuple[float, ...],
    repetitions: int | None,
    max_devices: int | None,
    seed: int,
    output: Path,
    no_plots: bool,
) -> None:
    """``--open-domain``: run, write openended_<data>.md / .json / PNGs, print the tables."""
    from simulator.openended_scenario import (
        DEFAULT_MAX_DEVICES,
        DEFAULT_OPEN_EPSILONS,
        DEFAULT_OPEN_REPETITIONS,
        OpenDomainSettings,
        default_sizes,
        run_open_domain,
        table_lines,
        write_open_domain_outputs,
    )

    if data == "adult" and max_devices is not None:
        raise click.UsageError("--max-devices applies to --open-domain zipf only")
    settings = OpenDomainSettings(
        data=data,
        epsilons=tuple(epsilons) or DEFAULT_OPEN_EPSILONS,
        sizes=default_sizes(data, max_devices or DEFAULT_MAX_DEVICES),
        repetitions=DEFAULT_OPEN_REPETITIONS if repetitions is None else repetitions,
        seed=seed,
    )
    results = run_open_domain(settings, progress=lambda msg: click.echo(f"  done: {msg}", err=True))
    paths = write_open_domain_outputs(results, output, plots=not no_plots)
    click.echo("\n".join(table_lines(results)))
    click.echo(f"\nopen-domain written: {', '.join(str(p) for p in paths)}")
