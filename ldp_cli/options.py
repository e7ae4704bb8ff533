"""Click options that several commands share, written once."""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from collector.settings import DEFAULT_DATABASE


class EnvOption(click.Option):
    """An option that may also be set by the environment variable ``envvar`` (one name).

    The name is written once, here: its help ends with ``[env NAME]`` (before a final full
    stop, as ``ldp serve`` shows its own), and an error names it as ``ldp serve`` does: a bad
    value that came from it is ``Invalid value for environment variable NAME (for '--opt'):
    ...``, a missing required option ``Missing option '--opt' (or environment variable
    NAME)``. Click named the option alone, although no option was on the command line.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        envvar = kwargs.get("envvar")
        if not isinstance(envvar, str) or not envvar:
            raise TypeError("EnvOption needs envvar: the name of one environment variable")
        text = str(kwargs.get("help") or "")
        stop = "." if text.endswith(".") else ""
        kwargs["help"] = f"{text.removesuffix('.')} [env {envvar}]{stop}".lstrip()
        super().__init__(*args, **kwargs)

    def get_error_hint(self, ctx: click.Context | None) -> str:
        hint = super().get_error_hint(ctx)
        source = ctx.get_parameter_source(self.name) if ctx is not None and self.name else None
        if source is ParameterSource.ENVIRONMENT:
            return f"environment variable {self.envvar} (for {hint})"
        if source in (None, ParameterSource.DEFAULT):  # nothing given: missing
            return f"{hint} (or environment variable {self.envvar})"
        return hint


#: The collector's store, for commands that read or sweep it directly (not ``ldp serve``).
DATABASE_OPTION = click.option(
    "--database",
    "--db",
    "-d",
    cls=EnvOption,
    envvar="LDP_DATABASE",
    default=DEFAULT_DATABASE,
    show_default=True,
    help="The collector's database: SQLite file or postgresql:// URL.",
)

#: A seed for NumPy's generator: a non-negative integer (a negative one was NumPy's ValueError
#: traceback after the command had started).
SEED = click.IntRange(min=0)
