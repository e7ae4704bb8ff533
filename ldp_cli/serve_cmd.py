"""``ldp serve``: run the collector under gunicorn."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import tempfile
from typing import Any

import click

from collector import accesslog, clock
from collector.auth import ROLES, check_tokens
from collector.errors import CollectorError, StorageError
from collector.metrics import metrics_directory
from collector.sealed import SealedKey
from collector.server import CollectorServer
from collector.settings import load_settings
from collector.storage import open_storage
from ldp_cli.store import store_failure


@click.command("serve")
@click.option("--host", default=None, help="Interface to bind [env LDP_HOST; default 127.0.0.1].")
@click.option(
    "--port", "-p", type=int, default=None, help="TCP port; 0 picks a free one [env LDP_PORT]."
)
@click.option(
    "--workers", "-w", type=int, default=None, help="gunicorn worker processes [env LDP_WORKERS]."
)
@click.option(
    "--database",
    "--db",
    "-d",
    default=None,
    help="SQLite file (path or sqlite:///path) or postgresql://user@host/dbname "
    "[env LDP_DATABASE; ldp.db].",
)
@click.option(
    "--dev",
    is_flag=True,
    help="Local development run: generate and print any role token that is not set.",
)
@click.option(
    "--init",
    is_flag=True,
    help="Create the SQLite database file if it is missing (its directory must exist); "
    "without it (or --dev) ldp serve refuses to start on a missing file.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="gunicorn and collector log level (logs never hold a client address or value).",
)
def serve_command(
    host: str | None,
    port: int | None,
    workers: int | None,
    database: str | None,
    dev: bool,
    init: bool,
    log_level: str,
) -> None:
    """Run the collector service (gunicorn, N workers, SQLite by default).

    Needs LDP_ADMIN_TOKEN, LDP_ANALYST_TOKEN and LDP_INGEST_TOKEN in the environment, unless
    --dev is given, which generates the missing ones and prints them (one LDP_..._TOKEN=...
    line each). A missing SQLite file is an error unless --init (or --dev) creates it.
    Prints 'ldp serve: listening on http://HOST:PORT' once it accepts connections.
    Every other setting is an LDP_* environment variable (see docs/COLLECTOR.md).

    Example:

    \b
        LDP_ADMIN_TOKEN=... LDP_ANALYST_TOKEN=... LDP_INGEST_TOKEN=... ldp serve -p 8750
        ldp serve --init --database /var/lib/ldp/ldp.db -p 8750
        ldp serve --dev -p 0 --database /tmp/ldp.db
        ldp serve --dev -w 4 --db postgresql://ldp@127.0.0.1/ldp
    """
    flags: dict[str, Any] = {
        "host": host,
        "port": port,
        "workers": workers,
        "database": database,
    }
    config = {k: v for k, v in flags.items() if v is not None}
    if dev:
        for role in ROLES:
            env = f"LDP_{role.upper()}_TOKEN"
            if not os.environ.get(env):
                token = secrets.token_urlsafe(24)
                os.environ[env] = token  # workers inherit it
                click.echo(f"{env}={token}")
    tmp_metrics = None
    if not os.environ.get("LDP_METRICS_DIR"):
        tmp_metrics = tempfile.mkdtemp(prefix="ldp-metrics-")
        config["metrics_dir"] = tmp_metrics
    database_setting = None
    try:
        settings = load_settings(config)
        database_setting = settings["database"]
        check_tokens(settings)
        # The test clock is read on every request; a bad one must stop the start, not turn
        # every request into an error.
        clock.today()
        # What each worker makes at start is checked here, before the listening line: a worker
        # failing on it killed the server after that line was printed.
        metrics_directory(settings["metrics_dir"])
        if settings["sealed_key_file"]:
            SealedKey.load(settings["sealed_key_file"])
        # Only the master may create the store, and only when told to: a deleted file or a
        # typo'd path must not silently become an empty database.
        storage = open_storage(
            settings["database"],
            busy_timeout_ms=settings["busy_timeout_ms"],
            synchronous=settings["synchronous"],
            create=init or dev,
        )
        storage.migrate()
        storage.close()
        config["create_database"] = False
    except CollectorError as exc:
        if tmp_metrics:
            shutil.rmtree(tmp_metrics, ignore_errors=True)
        if isinstance(exc, StorageError) and database_setting is not None:
            raise click.ClickException(store_failure(database_setting, exc)) from None
        raise click.ClickException(str(exc)) from None
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    accesslog.configure(settings["access_log"])
    # The workers read their settings again: what the flags gave (and the master checked) goes
    # with them, so an environment value a flag overrides is not read, and refused, there.
    app_config = {
        **config,
        "host": settings["host"],
        "port": settings["port"],
        "workers": settings["workers"],
    }
    master = os.getpid()
    try:
        CollectorServer(
            app_config,
            host=settings["host"],
            port=settings["port"],
            workers=settings["workers"],
            timeout=settings["request_timeout"],
            threads=settings["threads"],
            loglevel=log_level,
        ).run()
    finally:
        # gunicorn workers are forks of this process: only the master may clean up.
        if tmp_metrics and os.getpid() == master:
            shutil.rmtree(tmp_metrics, ignore_errors=True)
