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
    """Mix the staged reports into the report table now, in a random order.

    SQLite moves them in slices of 500 reports, one transaction each (an upload waits for one
    slice at most; a crash between slices leaves the rest staged for the next mix). PostgreSQL
    moves them in steps: ingest switches to the other staging slot, the old slot's reports and
    tallies move in one transaction, then the slot is truncated (docs/COLLECTOR.md, "Unlinkable
    storage").

    Safe while the collector serves: each staged report is moved exactly once. Estimates and
    'ldp tally verify' count staged reports already; this only shortens the time a report
    stays staged (linkable to its upload by whoever reads the database).

    Example:

    \b
        ldp mix --database /var/lib/ldp/ldp.db
        ldp mix --db postgresql://ldp@127.0.0.1/ldp --format json
    """
    from ldp_cli.store import opened_store

    with opened_store(database) as storage:
        done = storage.mix()
        left = storage.staged_count()
    if fmt == "json":
        emit_json({"moved": done.moved, "seconds": round(done.seconds, 4), "staged": left})
        return
    click.echo(f"mixed {done.moved} staged reports in {done.seconds:.3f} s; {left} staged now")
