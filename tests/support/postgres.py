"""Throw-away PostgreSQL databases for tests, on the server at 127.0.0.1:5432.

with fresh_database() as url:        # CREATE DATABASE ldp_test_<random>, dropped on exit
    storage = PostgresStorage(url)

``require_postgres()`` skips a test when the server cannot be reached, except under CI (the
environment variable ``CI`` is set), where it fails loudly: CI must never pass by skipping.
``.ci/run`` starts the local cluster when it is down.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

#: The maintenance database the test databases are created from (trust auth on loopback).
ADMIN_URL = os.environ.get(
    "TEST_POSTGRES_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
PREFIX = "ldp_test_"

_reason: list[str | None] = []


def unreachable_reason() -> str | None:
    """None when PostgreSQL answers at ``ADMIN_URL``, else why not (checked once per run)."""
    if not _reason:
        try:
            import psycopg

            psycopg.connect(ADMIN_URL, connect_timeout=3, autocommit=True).close()
            _reason.append(None)
        except ImportError:
            _reason.append("psycopg is not installed: pip install -e '.[dev]'")
        except Exception as exc:  # any failure to connect means: not usable
            _reason.append(f"{type(exc).__name__}: {str(exc).strip()[:200]}")
    return _reason[0]


def require_postgres() -> None:
    """Skip (fail under CI) unless the PostgreSQL test server is reachable."""
    reason = unreachable_reason()
    if reason is None:
        return
    message = (
        f"PostgreSQL is unreachable at {ADMIN_URL} ({reason}); start it with "
        "'pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start'"
    )
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def database_url(name: str) -> str:
    """``ADMIN_URL`` pointed at database ``name``."""
    return urlunsplit(urlsplit(ADMIN_URL)._replace(path="/" + name))


def create_database() -> str:
    """Create an empty database with a random name; returns its URL."""
    import psycopg

    name = PREFIX + secrets.token_hex(6)
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return database_url(name)


def drop_database(url: str) -> None:
    """Drop the database of ``url`` (ending any session still connected to it)."""
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    if not name.startswith(PREFIX):
        raise ValueError(f"refusing to drop {name!r}: only {PREFIX}* test databases are dropped")
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new empty database for the duration of the block (skips/fails per ``require``)."""
    require_postgres()
    url = create_database()
    try:
        yield url
    finally:
        drop_database(url)


# -- one collector database of either backend (the collector suites' parametrised fixture) -----

#: The storage backends every collector test runs against.
BACKENDS = ("sqlite", "postgresql")


@contextmanager
def collector_database(kind: str, directory: Path) -> Iterator[str]:
    """What ``--database`` gets: a SQLite file path in ``directory`` or a fresh PG URL."""
    if kind == "sqlite":
        yield str(Path(directory) / "collector.db")
    elif kind == "postgresql":
        with fresh_database() as url:
            yield url
    else:
        raise ValueError(f"unknown backend {kind!r}; one of {BACKENDS}")


def is_postgres(database: str) -> bool:
    return database.startswith(("postgresql://", "postgres://"))


@contextmanager
def write_lock_held(database: str) -> Iterator[None]:
    """Another session holds the write lock(s) an ingest and ``/readyz`` need, until exit."""
    if is_postgres(database):
        import psycopg

        conn = psycopg.connect(database)
        try:
            conn.execute(
                "LOCK TABLE reports, tally_shards, report_counters, staged_tallies, "
                "staged_counters, schema_version IN ACCESS EXCLUSIVE MODE"
            )
            yield
        finally:
            conn.rollback()
            conn.close()
        return
    conn = sqlite3.connect(database, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def tamper_tallies(database: str) -> None:
    """Add 1 to every stored running tally's n behind the collector's back."""
    if is_postgres(database):
        import psycopg

        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("UPDATE tally_shards SET n = n + 1")
            conn.execute("UPDATE staged_tallies SET n = n + 1")  # tallies not yet mixed
        return
    with sqlite3.connect(database) as conn:
        conn.execute("UPDATE tallies SET n = n + 1")
    conn.close()


def report_columns(database: str) -> list[str]:
    """The columns of the reports table, in order."""
    if is_postgres(database):
        import psycopg

        with psycopg.connect(database) as conn:
            rows = conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'reports' ORDER BY ordinal_position"
            ).fetchall()
        return [r[0] for r in rows]
    with sqlite3.connect(database) as conn:
        cols = [r[1] for r in conn.execute("PRAGMA table_info(reports)")]
    conn.close()
    return cols


def stored_bytes(database: str) -> bytes:
    """Everything the database holds: the SQLite files, or every PG table row as text."""
    if is_postgres(database):
        import psycopg

        out = []
        with psycopg.connect(database) as conn:
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
            for (table,) in tables:
                rows = conn.execute(f'SELECT t::text FROM "{table}" t').fetchall()
                out += [r[0] for r in rows]
        return "\n".join(out).encode()
    path = Path(database)
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def end_sessions(url: str) -> int:
    """End every server session on the database of ``url``, as a server crash would."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
    return len(rows)
