"""``ldp shuffle``: run a shuffler in front of a collector (see the ``shuffler`` package)."""

from __future__ import annotations

import logging
import math
import sqlite3
from pathlib import Path

import click

from ldp_cli.options import EnvOption
from shuffler.forwarder import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_REQUEST,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_RETRY_SECONDS,
)
from shuffler.limits import DEFAULT_CLIENT_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DESCRIPTOR_RESERVE


def _url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise click.BadParameter(f"must start with http:// or https://, got {value!r}")
    return value


def _seconds(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not math.isfinite(value):  # FloatRange lets NaN through (every comparison is False)
        raise click.BadParameter(f"must be a finite number of seconds, got {value!r}")
    return value


@click.command("shuffle")
@click.option(
    "--collector",
    cls=EnvOption,
    envvar="LDP_SHUFFLE_COLLECTOR",
    required=True,
    callback=_url,
    help="Base URL of the collector.",
)
@click.option(
    "--token",
    cls=EnvOption,
    envvar="LDP_INGEST_TOKEN",
    required=True,
    help="The collector's ingest token.",
)
@click.option(
    "--database",
    cls=EnvOption,
    envvar="LDP_SHUFFLE_DATABASE",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("shuffle.db"),
    show_default=True,
    help="SQLite file staging messages durably.",
)
@click.option(
    "--batch-size",
    "-b",
    cls=EnvOption,
    envvar="LDP_SHUFFLE_BATCH_SIZE",
    type=click.IntRange(min=1),
    default=DEFAULT_BATCH_SIZE,
    show_default=True,
    help="Forward only once at least this many messages are staged.",
)
@click.option(
    "--max-request",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_REQUEST,
    show_default=True,
    help="Messages per request to the collector (its LDP_MAX_BATCH_REPORTS or fewer).",
)
@click.option(
    "--max-request-bytes",
    cls=EnvOption,
    envvar="LDP_SHUFFLE_MAX_REQUEST_BYTES",
    type=click.IntRange(min=1024),
    default=DEFAULT_MAX_REQUEST_BYTES,
    show_default=True,
    help="Most bytes of body per request to the collector: its LDP_MAX_BODY_BYTES or fewer; "
    "a request the collector still finds too large is halved.",
)
@click.option(
    "--retry-seconds",
    type=click.FloatRange(min=0.01),
    callback=_seconds,
    default=DEFAULT_RETRY_SECONDS,
    show_default=True,
    help="Seconds between forwarding attempts after a failure.",
)
@click.option(
    "--client-timeout",
    cls=EnvOption,
    envvar="LDP_SHUFFLE_CLIENT_TIMEOUT",
    type=click.FloatRange(min=0.1),
    callback=_seconds,
    default=DEFAULT_CLIENT_TIMEOUT,
    show_default=True,
    help="Seconds a device's connection may last, request and answer; a slower one is "
    "disconnected.",
)
@click.option(
    "--max-connections",
    cls=EnvOption,
    envvar="LDP_SHUFFLE_MAX_CONNECTIONS",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_CONNECTIONS,
    show_default=True,
    help="Device connections open at once; one more is answered 503 with Retry-After. Keep it "
    f"{DESCRIPTOR_RESERVE} or more below the process's open-file limit (ulimit -n): a "
    "WARNING at start says when it is not.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option(
    "--port",
    "-p",
    type=click.IntRange(0, 65535),
    default=8081,
    show_default=True,
    help="0: a free port.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="Log level on stderr: info logs each forwarding round's counts, warning the reports "
    "the collector rejected (counts only; never a message, an address or a request).",
)
def shuffle_command(
    collector: str,
    token: str,
    database: Path,
    batch_size: int,
    max_request: int,
    max_request_bytes: int,
    retry_seconds: float,
    client_timeout: float,
    max_connections: int,
    host: str,
    port: int,
    log_level: str,
) -> None:
    """Run a shuffler: devices POST sealed reports, the collector gets permuted batches.

    The shuffler cannot read a report, keeps no address and logs no request; it forwards only
    once it holds at least --batch-size messages (it waits below that), after permuting them
    with the operating system's randomness. Staging is durable: a crash loses nothing and a
    resent batch is counted once. Requests stay within --max-request and --max-request-bytes;
    reports the collector rejects are logged at WARNING (counts only). See docs/SHUFFLE.md.

    Example:

    \b
        LDP_INGEST_TOKEN=... ldp shuffle --collector http://127.0.0.1:8080 -b 1000 -p 8081
    """
    try:
        from shuffler.server import serve
        from shuffler.staging import ForeignDatabaseError, Staging
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise click.ClickException(
            f"ldp shuffle needs the shuffle extra ({exc}): pip install 'ldp-telemetry[shuffle]'"
        ) from None
    try:  # another program's database, not a database, a missing directory: before serving
        Staging(database).close()
    except (ForeignDatabaseError, sqlite3.Error) as exc:
        ctx = click.get_current_context()
        raise click.BadParameter(  # names LDP_SHUFFLE_DATABASE when it came from there
            f"{database}: cannot be used as the shuffler's staging file ({exc}); "
            "pass a new file or one an earlier ldp shuffle left",
            ctx=ctx,
            param=next(p for p in ctx.command.params if p.name == "database"),
        ) from None
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    serve(
        host=host,
        port=port,
        database=database,
        collector=collector,
        token=token,
        batch_size=batch_size,
        max_request=max_request,
        max_request_bytes=max_request_bytes,
        retry_seconds=retry_seconds,
        client_timeout=client_timeout,
        max_connections=max_connections,
    )
