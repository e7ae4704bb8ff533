"""The collector's store, opened by a command that reads or sweeps it directly (every command
with ``--db``/``--database``; ``ldp serve`` opens its own)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from collector.errors import CollectorError
from collector.storage import Storage, open_storage


@contextmanager
def opened_store(
    database: str, *, migrate: bool = True, url_option: bool = False
) -> Iterator[Storage]:
    """The store at ``database`` (a SQLite file or a ``postgresql://`` URL), closed on exit.

    A missing file is never created, and any failure of the store (not a database, locked,
    unreachable) is a ``click.ClickException`` naming it, not a traceback. ``migrate=True``
    upgrades an older collector schema, but a database holding none (an empty file, another
    application's PostgreSQL database) is refused untouched (:func:`require_collector_schema`):
    only ``ldp serve`` creates the schema. ``migrate=False`` leaves the schema as it is (for
    commands that only read); ``url_option``: the command can reach a running collector
    instead, and the error says so.
    """
    try:
        database = collector_database(database)
    except CollectorError as exc:
        raise click.ClickException(str(exc)) from None
    quiet_pool_log()
    if "://" not in database and not Path(database).is_file():
        raise click.ClickException(
            f"no database file {database!r}; pass the collector's --database (or LDP_DATABASE; "
            "'ldp serve --init' creates one)" + (", or use --url" if url_option else "")
        )
    try:
        storage = open_storage(database, create=False)
        try:
            if migrate:
                require_collector_schema(storage, database)
                storage.migrate()
            yield storage
        finally:
            storage.close()
    except CollectorError as exc:
        raise click.ClickException(store_failure(database, exc)) from None


def collector_database(database: str) -> str:
    """``database`` as the collector serving it resolves it from the same environment.

    The option's own default (no ``--db``, no ``LDP_DATABASE``) gives way to
    ``LDP_DATABASE_FILE``, and a ``postgresql://`` URL gets ``LDP_DATABASE_PASSWORD`` (or its
    ``_FILE``): click reads only ``LDP_DATABASE``, so these commands did not find, or could not
    log in to, a database the collector found with the same environment.
    """
    from collector.settings import DEFAULT_DATABASE, setting_from_environment, with_password

    if (
        database == DEFAULT_DATABASE
        and not os.environ.get("LDP_DATABASE")
        and os.environ.get("LDP_DATABASE_FILE")
    ):
        database = setting_from_environment("database")
    password = setting_from_environment("database_password")
    if password is not None and database.startswith(("postgresql://", "postgres://")):
        database = with_password(database, password)
    return database


def quiet_pool_log() -> None:
    """Keep psycopg's pool from printing its own lines for a PostgreSQL store it cannot reach.

    These commands configure no logging, so Python printed each WARNING of ``psycopg.pool``
    ("error connecting in 'ldp-collector': ...", once per attempt) on stderr above the one-line
    error that already says why (:meth:`PostgresStorage._why_unreachable`). A handler that
    drops them stops that; ``ldp serve`` configures logging and keeps them.
    """
    pool_log = logging.getLogger("psycopg.pool")
    if not any(isinstance(h, logging.NullHandler) for h in pool_log.handlers):
        pool_log.addHandler(logging.NullHandler())


def shown_database(database: str) -> str:
    """``database`` for a message: a file path as given, a URL without its password.

    "no campaign 'x' in postgresql://ldp:secret@db/ldp" printed the password typed in --db
    (or LDP_DATABASE) on the terminal and in CI logs."""
    if database.startswith(("postgresql://", "postgres://")):
        from collector.storage.postgres import redact

        return redact(database)
    return database


def store_failure(database: str, exc: CollectorError) -> str:
    """The error text for a store that failed, naming a file's path; a URL is not repeated
    (it may hold a password)."""
    where = f"{database}: " if "://" not in database else ""
    return f"{where}{exc}"


def require_collector_schema(storage: Storage, database: str) -> None:
    """Refuse (a ``click.ClickException``, exit status 1) a store without the collector's
    schema, before anything is written to it: a mistyped ``--db`` must not grow the collector's
    tables in another application's database or in an empty file."""
    from collector.storage.sqlite import SQLiteStorage

    version = storage.file_schema_version() if isinstance(storage, SQLiteStorage) else None
    if version is None:
        version = storage.schema_version()
    if version == 0:
        where = shown_database(database)
        raise click.ClickException(
            f"{where} holds no collector schema; start the collector with "
            f"'ldp serve --database {where}' first"
        )
