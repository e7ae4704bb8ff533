"""``ldp retention run``: delete every campaign's aged-out reports now (docs/COLLECTOR.md
"Retention"); the service does the same every ``LDP_RETENTION_INTERVAL`` seconds."""

from __future__ import annotations

import click

from collector.retention import DEFAULT_CHUNK
from collector.settings import MAX_INT_SETTING
from ldp_cli.options import DATABASE_OPTION
from ldp_cli.output import FORMAT_OPTION, emit_json, table


@click.group("retention")
def retention_group() -> None:
    """Delete reports older than each campaign's retention (tallies are kept)."""


@retention_group.command("run")
@DATABASE_OPTION
@click.option(
    "--max-retention-days",
    type=click.IntRange(1, MAX_INT_SETTING),
    envvar="LDP_MAX_RETENTION_DAYS",
    default=None,
    help="Server-wide ceiling on retention_days [env LDP_MAX_RETENTION_DAYS or its _FILE].",
)
@click.option(
    "--chunk",
    type=click.IntRange(1, MAX_INT_SETTING),  # a SQLite LIMIT: past 2**63 it was OverflowError
    default=DEFAULT_CHUNK,
    show_default=True,
    help="Reports deleted per write transaction (bounds how long ingest can wait).",
)
@FORMAT_OPTION
def run_command(database: str, max_retention_days: int | None, chunk: int, fmt: str) -> None:
    """Delete every campaign's reports in windows older than its retention, now.

    Safe while the collector serves: deletes run in short chunks, and on PostgreSQL one sweep
    runs at a time (a concurrent one is reported and nothing is done).

    Example:

        ldp retention run --database /var/lib/ldp/ldp.db
    """
    from collector import clock
    from collector.errors import CollectorError, ConfigError
    from collector.retention import sweep
    from collector.settings import setting_from_environment
    from ldp_cli.store import opened_store

    try:
        if max_retention_days is None:
            # The collector also reads LDP_MAX_RETENTION_DAYS_FILE (click knows only the
            # variable): without it a manual sweep kept reports past the service's ceiling.
            max_retention_days = setting_from_environment("max_retention_days")
        # The date first: a bad test clock is the clock's error, not the database's (it was
        # "ldp.db: LDP_TODAY must be ...", after the store had been opened and migrated).
        today = clock.today()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    with opened_store(database) as storage:
        try:
            done = sweep(storage, today=today, max_retention_days=max_retention_days, chunk=chunk)
        except CollectorError as exc:
            # The store's own message ends "nothing was stored, retry": true of the statement
            # that failed, not of the sweep, whose purge marks (and on PostgreSQL dropped
            # partitions) before it stand.
            raise click.ClickException(
                f"the retention sweep stopped before it finished ({exc}). What it did before "
                "it stopped stands: any purge marks it recorded (estimates and 'ldp tally "
                "verify' treat those windows' reports as deleted) and any reports it deleted; "
                "run 'ldp retention run' again to finish (a sweep is idempotent)"
            ) from None
        usage = {u.campaign: u for u in storage.usage()}
    if done is None:
        raise click.ClickException("another retention sweep is running; nothing was done")
    items = [
        {**c.to_dict(), "reports": usage[c.campaign].reports, "bytes": usage[c.campaign].bytes}
        for c in done
    ]
    if fmt == "json":
        emit_json({"campaigns": items})
        return
    rows = [
        [
            i["campaign"],
            i["purged_before"] or "(kept forever)",
            i["deleted"],
            i["longest_chunk_ms"],
            i["reports"],
            i["bytes"],
        ]
        for i in items
    ]
    headers = ["campaign", "deleted before", "deleted", "longest chunk ms", "reports", "bytes"]
    click.echo(table(headers, rows, right={2, 3, 4, 5}))
