"""``ldp mix``: move every staged report into the report table now, in random order
(docs/COLLECTOR.md "Unlinkable storage"); the service does it at ``LDP_MIX_BATCH`` staged
reports or every ``LDP_MIX_INTERVAL`` seconds."""

from __future__ import annotations

import click

from ldp_cli.options import DATABASE_OPTION
from ldp_cli.output import FORMAT_OPTION, emit_json


@click.command("mix")
@DATABASE_OPTION
@FORMAT_OPTION
def mix_command(database: str, fmt: str) -> None:
    """Mix the staged reports into the report table now (one transaction).

    Safe while the collector serves: each staged report is moved exactly once. Estimates and
    ``ldp tally verify`` count staged reports already; this only shortens the time a report
    stays staged (linkable to its upload by whoever reads the database).

    Example:

        ldp mix --database /var/lib/ldp/ldp.db
    """
    from ldp_cli.store import opened_store

    with opened_store(database) as storage:
        done = storage.mix()
        left = storage.staged_count()
    if fmt == "json":
        emit_json({"moved": done.moved, "seconds": round(done.seconds, 4), "staged": left})
        return
    click.echo(f"mixed {done.moved} staged reports in {done.seconds:.3f} s; {left} staged now")
