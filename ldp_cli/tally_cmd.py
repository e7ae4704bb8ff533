"""``ldp tally verify``: recompute running tallies from stored reports and compare."""

from __future__ import annotations

import click

from collector.tallycheck import verify_tallies
from ldp_cli.options import DATABASE_OPTION
from ldp_cli.output import FORMAT_OPTION, emit_json, table
from ldp_cli.store import opened_store, shown_database


@click.group("tally")
def tally_group() -> None:
    """Inspect the collector's running tallies."""


@tally_group.command("verify")
@DATABASE_OPTION
@click.option("--campaign", "-c", default=None, help="Only this campaign (default: all).")
@FORMAT_OPTION
def verify_command(database: str, campaign: str | None, fmt: str) -> None:
    """Recompute every window's tally from its stored reports and report any difference.

    Exits with status 1 when a stored tally differs from its recomputation. Safe to run
    while the collector serves (it reads a consistent snapshot per query).

    Example:

        ldp tally verify --database /var/lib/ldp/ldp.db --campaign occupation
    """
    # Migrated: the retention table (purge marks) exists from schema 3 on; a database without
    # the collector's schema is refused untouched (ldp_cli.store.require_collector_schema).
    with opened_store(database) as storage:
        try:
            checks = verify_tallies(storage, campaign)
        except KeyError:
            raise click.ClickException(
                f"no campaign {campaign!r} in {shown_database(database)}; run without "
                "--campaign to check all"
            ) from None
    bad = [c for c in checks if not c.ok]
    if fmt == "json":
        emit_json({"ok": not bad, "windows": [c.to_dict() for c in checks]})
    else:
        rows = [
            [
                c.campaign,
                c.window,
                c.stored.n if c.stored else 0,
                "deleted" if c.skipped else (c.recomputed.n if c.recomputed else 0),
                "skipped (reports deleted by retention)"
                if c.skipped
                else ("ok" if c.ok else "DIFFERS"),
            ]
            for c in checks
        ]
        click.echo(table(["campaign", "window", "tally n", "reports", "status"], rows))
        skipped = sum(c.skipped for c in checks)
        click.echo(
            f"{len(checks) - skipped} window(s) checked, {len(bad)} differ"
            + (f", {skipped} skipped (reports deleted by retention)" if skipped else "")
            + ("" if not bad else "; the tallies above disagree with the stored reports")
        )
    if bad:
        raise SystemExit(1)
