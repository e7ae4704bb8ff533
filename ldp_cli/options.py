"""Click options that several commands share, written once."""

from __future__ import annotations

import click

from collector.settings import DEFAULT_DATABASE

#: The collector's store, for commands that read or sweep it directly (not ``ldp serve``).
DATABASE_OPTION = click.option(
    "--database",
    "--db",
    "-d",
    envvar="LDP_DATABASE",
    default=DEFAULT_DATABASE,
    show_default=True,
    help="The collector's database: SQLite file or postgresql:// URL [env LDP_DATABASE].",
)

#: A seed for NumPy's generator: a non-negative integer (a negative one was NumPy's ValueError
#: traceback after the command had started).
SEED = click.IntRange(min=0)
