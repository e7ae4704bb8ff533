"""Every collector setting, declared as data: name, environment variable, default, help.

Precedence (lowest first): the defaults below < ``LDP_*`` environment variables < the explicit
mapping given to :func:`collector.app.create_app`. Every variable may instead name a file
holding its value, ``LDP_*_FILE`` (Docker and Kubernetes secrets); setting both is an error.
``docs/COLLECTOR.md`` documents each setting; a test checks that none is missing there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from collector.errors import ConfigError

DEFAULT_DATABASE = "ldp.db"
DEFAULT_MAX_BATCH_REPORTS = 5_000
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_BUSY_TIMEOUT_MS = 5_000
DEFAULT_RETRY_AFTER_SECONDS = 1
DEFAULT_SYNCHRONOUS = "FULL"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8750
DEFAULT_WORKERS = 2
DEFAULT_REQUEST_TIMEOUT = 30
DEFAULT_RATE_LIMIT = 1000
DEFAULT_RATE_LIMIT_BURST = 10_000
DEFAULT_CORS_ORIGINS = "*"
DEFAULT_THREADS = 4
DEFAULT_MAX_INFLIGHT = 8
DEFAULT_HEADER_TIMEOUT = 10
DEFAULT_BODY_TIMEOUT = 30
DEFAULT_READY_CACHE_SECONDS = 2
DEFAULT_RETENTION_INTERVAL = 3600
DEFAULT_MIX_BATCH = 1000
DEFAULT_MIX_INTERVAL = 60


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _access_log(value: Any) -> str:
    from collector.accesslog import FORMATS

    text = str(value).strip().lower()
    if text not in FORMATS:
        raise ValueError(f"expected one of {', '.join(FORMATS)}")
    return text


def _str(value: Any) -> str:
    return str(value)


def _opt_str(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)


#: The largest integer setting: what the C library and SQLite take as an int (a timeout, a
#: count); beyond it a setting failed later, far from its name, with OverflowError.
MAX_INT_SETTING = 2**31 - 1


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("expected an integer, got a boolean")
    number = int(value)
    if abs(number) > MAX_INT_SETTING:
        raise ValueError(f"expected an integer of at most {MAX_INT_SETTING}")
    return number


def _path(value: Any) -> str:
    text = str(value)
    if "\x00" in text:
        raise ValueError("a path or URL cannot hold a NUL byte")
    return text


def _opt_path(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return _path(value)


def _opt_dir(value: Any) -> str | None:
    """A directory used for the life of the process, made absolute: prometheus_client and the
    rate limiter open files under it long after start, whatever the working directory is then."""
    path = _opt_path(value)
    return None if path is None else os.path.abspath(path)


def _opt_int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    return _int(value)


def _origins(value: Any) -> str:
    from collector.cors import parse_origins

    return ",".join(parse_origins(value))


def _synchronous(value: Any) -> str:
    text = str(value).upper()
    if text not in ("FULL", "NORMAL", "EXTRA"):
        raise ValueError("expected FULL, EXTRA or NORMAL")
    return text


@dataclass(frozen=True)
class Setting:
    """One setting: its key in the app config, its environment variable, default and help."""

    name: str
    env: str
    default: Any
    help: str
    parse: Callable[[Any], Any] = _str
    minimum: int | None = None
    maximum: int | None = None


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "database",
        "LDP_DATABASE",
        DEFAULT_DATABASE,
        "Storage: a SQLite file (a path, sqlite:///relative.db or sqlite:////abs/path.db) or "
        "a postgresql:// URL; created and migrated on start.",
        _path,
    ),
    Setting(
        "database_password",
        "LDP_DATABASE_PASSWORD",
        None,
        "Password for a postgresql:// LDP_DATABASE that names a user and no password; it is "
        "percent-escaped into the URL, so any character is safe (LDP_DATABASE_PASSWORD_FILE "
        "reads it from a secret file).",
        _opt_str,
    ),
    Setting(
        "sealed_key_file",
        "LDP_SEALED_KEY_FILE",
        None,
        "File holding the collector's private X25519 key (hex) for sealed reports sent through "
        "`ldp shuffle`; created with mode 0600 if missing. Unset: POST /v1/sealed and GET "
        "/v1/sealed/key answer 404. Needs pip install 'ldp-telemetry[shuffle]'.",
        _opt_path,
    ),
    Setting(
        "create_database",
        "LDP_CREATE_DATABASE",
        True,
        "Create a missing SQLite file (never its directory). ldp serve sets this itself: it "
        "creates the file only with --init or --dev and its workers never create one.",
        _bool,
    ),
    Setting(
        "admin_token",
        "LDP_ADMIN_TOKEN",
        None,
        "Bearer token of the admin role (create campaigns; accepted everywhere).",
        _opt_str,
    ),
    Setting(
        "analyst_token",
        "LDP_ANALYST_TOKEN",
        None,
        "Bearer token of the analyst role (list campaigns, estimates).",
        _opt_str,
    ),
    Setting(
        "ingest_token",
        "LDP_INGEST_TOKEN",
        None,
        "Bearer token of the ingest role (campaign config, report upload).",
        _opt_str,
    ),
    Setting(
        "max_batch_reports",
        "LDP_MAX_BATCH_REPORTS",
        DEFAULT_MAX_BATCH_REPORTS,
        "Most reports one upload may hold; larger batches get 413.",
        _int,
        1,
    ),
    Setting(
        "max_body_bytes",
        "LDP_MAX_BODY_BYTES",
        DEFAULT_MAX_BODY_BYTES,
        "Most bytes of a request body, checked before and after gzip decompression; else 413.",
        _int,
        1024,
    ),
    Setting(
        "busy_timeout_ms",
        "LDP_BUSY_TIMEOUT_MS",
        DEFAULT_BUSY_TIMEOUT_MS,
        "How long a request waits for a database lock before answering 503 (SQLite: the write "
        "lock; PostgreSQL: lock_timeout and the wait for a pooled connection).",
        _int,
        0,
    ),
    Setting(
        "synchronous",
        "LDP_SYNCHRONOUS",
        DEFAULT_SYNCHRONOUS,
        "SQLite synchronous mode: FULL (a 2xx survives power loss), EXTRA, or NORMAL (process "
        "crash only).",
        _synchronous,
    ),
    Setting(
        "retry_after",
        "LDP_RETRY_AFTER",
        DEFAULT_RETRY_AFTER_SECONDS,
        "Seconds sent in Retry-After with a 503 when storage is busy or down.",
        _int,
        0,
    ),
    Setting(
        "rate_limit",
        "LDP_RATE_LIMIT",
        DEFAULT_RATE_LIMIT,
        "Requests per second allowed per token (all workers together; 0 turns limits off); "
        "over it: 429 with Retry-After. Requests with a wrong token share one more bucket.",
        _int,
        0,
    ),
    Setting(
        "rate_limit_burst",
        "LDP_RATE_LIMIT_BURST",
        DEFAULT_RATE_LIMIT_BURST,
        "Requests a token may send at once before LDP_RATE_LIMIT applies (bucket size).",
        _int,
        1,
    ),
    Setting(
        "cors_origins",
        "LDP_CORS_ORIGINS",
        DEFAULT_CORS_ORIGINS,
        "Origins a browser SDK may call from: '*', a comma-separated list of origins, or "
        "'none'. Only GET /v1/campaigns/{id} and POST /v1/campaigns/{id}/reports answer CORS.",
        _origins,
    ),
    Setting(
        "metrics_dir",
        "LDP_METRICS_DIR",
        None,
        "Directory where each worker process writes its metrics, merged by GET /metrics "
        "(ldp serve makes a temporary one when unset).",
        _opt_dir,
    ),
    Setting(
        "metrics_public",
        "LDP_METRICS_PUBLIC",
        False,
        "true: GET /metrics answers anyone (campaign ids and counts included); false (default): "
        "it needs a bearer token of any role, e.g. the analyst token in Prometheus' "
        "authorization.credentials.",
        _bool,
    ),
    Setting(
        "ready_cache_seconds",
        "LDP_READY_CACHE_SECONDS",
        DEFAULT_READY_CACHE_SECONDS,
        "GET /readyz repeats its write probe at most once per this many seconds per worker and "
        "answers the cached result in between (0: probe on every call).",
        _int,
        0,
    ),
    Setting(
        "access_log",
        "LDP_ACCESS_LOG",
        "text",
        "ldp serve: one line per request on standard error (method, route template, status, "
        "duration, bytes; never a client address, token or payload): text, json or off.",
        _access_log,
    ),
    Setting(
        "threads",
        "LDP_THREADS",
        DEFAULT_THREADS,
        "ldp serve: request threads per worker process.",
        _int,
        1,
    ),
    Setting(
        "max_inflight",
        "LDP_MAX_INFLIGHT",
        DEFAULT_MAX_INFLIGHT,
        "ldp serve: requests one worker runs or queues at once; one more is answered 503 "
        "'overloaded' with Retry-After at once (GET /healthz is never refused).",
        _int,
        1,
    ),
    Setting(
        "header_timeout",
        "LDP_HEADER_TIMEOUT",
        DEFAULT_HEADER_TIMEOUT,
        "ldp serve: seconds a client has to send its request line and headers; slower ones are "
        "disconnected (they never hold a thread meanwhile).",
        _int,
        1,
    ),
    Setting(
        "body_timeout",
        "LDP_BODY_TIMEOUT",
        DEFAULT_BODY_TIMEOUT,
        "ldp serve: seconds a client has to send its body once the headers are in (and the "
        "longest a thread waits on one socket read or write).",
        _int,
        1,
    ),
    Setting(
        "host",
        "LDP_HOST",
        DEFAULT_HOST,
        "ldp serve: interface to bind; loopback unless the operator chooses otherwise.",
    ),
    Setting(
        "port",
        "LDP_PORT",
        DEFAULT_PORT,
        "ldp serve: TCP port; 0 picks a free one (printed on the listening line).",
        _int,
        0,
        65535,
    ),
    Setting(
        "max_retention_days",
        "LDP_MAX_RETENTION_DAYS",
        None,
        "Server-wide ceiling on every campaign's retention_days (days reports are kept); unset: "
        "no ceiling. Campaigns created before retention existed are kept this long.",
        _opt_int,
        1,
    ),
    Setting(
        "retention_interval",
        "LDP_RETENTION_INTERVAL",
        DEFAULT_RETENTION_INTERVAL,
        "Seconds between the service's automatic retention sweeps (run once across all "
        "workers and replicas); 0 turns them off (ldp retention run still works).",
        _int,
        0,
    ),
    Setting(
        "mix_batch",
        "LDP_MIX_BATCH",
        DEFAULT_MIX_BATCH,
        "Unlinkable storage: uploads are staged and mixed into the report table in random "
        "order once at least this many are staged (or LDP_MIX_INTERVAL passed); 0 turns "
        "staging off (reports stored as they arrive, linkable by their storage order).",
        _int,
        0,
    ),
    Setting(
        "mix_interval",
        "LDP_MIX_INTERVAL",
        DEFAULT_MIX_INTERVAL,
        "Seconds between the service's timed mixes of whatever is staged (run once across "
        "all workers and replicas): the longest a report stays staged, plus up to a second; "
        "0 mixes only at LDP_MIX_BATCH and on ldp mix.",
        _int,
        0,
    ),
    Setting(
        "workers",
        "LDP_WORKERS",
        DEFAULT_WORKERS,
        "ldp serve: number of gunicorn worker processes.",
        _int,
        1,
    ),
    Setting(
        "request_timeout",
        "LDP_REQUEST_TIMEOUT",
        DEFAULT_REQUEST_TIMEOUT,
        "ldp serve: seconds before gunicorn restarts a worker stuck on one request.",
        _int,
        1,
    ),
)

SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def load_settings(
    config: Mapping[str, Any] | None = None, *, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Resolve every setting: defaults < ``LDP_*`` environment < ``config``.

    Unknown keys in ``config`` are an error (a typo must not silently fall back to a default).
    """
    env = os.environ if environ is None else environ
    config = dict(config or {})
    unknown = sorted(set(config) - set(SETTINGS_BY_NAME))
    if unknown:
        raise ConfigError(
            f"unknown collector setting(s) {unknown}; known: {sorted(SETTINGS_BY_NAME)}"
        )
    out: dict[str, Any] = {}
    for s in SETTINGS:
        if s.name in config:
            out[s.name] = _resolve(s, env, config[s.name], f"setting {s.name!r}")
        else:
            out[s.name] = _resolve(s, env)
    out["database"] = with_password(out["database"], out["database_password"])
    return out


def setting_from_environment(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """One setting as the collector reads it from the environment (``X``, or the file named
    by ``X_FILE``; parsed and bounded), for commands that need the serving collector's value
    without its other settings (``ldp campaign create --db``, ``ldp retention run``)."""
    return _resolve(SETTINGS_BY_NAME[name], os.environ if environ is None else environ)


_UNSET = object()


def _resolve(s: Setting, env: Mapping[str, str], raw: Any = _UNSET, origin: str = "") -> Any:
    """Setting ``s``: ``raw`` (from a config mapping) if given, else from ``env``, else its
    default; parsed and checked against its bounds (``ConfigError`` naming the source)."""
    from_file = env.get(s.env + "_FILE")
    if raw is _UNSET:
        if from_file and env.get(s.env):
            raise ConfigError(f"set {s.env} or {s.env}_FILE, not both")
        if env.get(s.env) not in (None, ""):
            raw, origin = env[s.env], f"environment variable {s.env}"
        elif from_file:
            raw, origin = _read_secret(from_file, s.env + "_FILE"), f"file {s.env}_FILE"
        else:
            return s.default
    try:
        value = s.parse(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{origin} is invalid: {exc} (got {raw!r}); {s.help}") from None
    if s.minimum is not None and value is not None and value < s.minimum:
        raise ConfigError(f"{origin} must be >= {s.minimum}, got {value!r}")
    if s.maximum is not None and value is not None and value > s.maximum:
        raise ConfigError(f"{origin} must be <= {s.maximum}, got {value!r}")
    return value


def _read_secret(path: str, variable: str) -> str:
    """The content of a secret file (Docker/Kubernetes secrets), without the final newline."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"{variable}: cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:  # not UTF-8 text; a NUL byte in the path
        raise ConfigError(f"{variable}: cannot read {path!r}: {exc}") from None


def with_password(database: str, password: str | None) -> str:
    """``database`` with ``password`` percent-escaped into its postgresql:// URL.

    Any character is then safe in the password (``@``, ``/``, ``:``, ``%``...), which is not
    true of a password pasted into the URL by hand.
    """
    if password is None:
        return database
    scheme, sep, rest = database.partition("://")
    if not sep or scheme not in ("postgresql", "postgres"):
        raise ConfigError("LDP_DATABASE_PASSWORD is only for a postgresql:// LDP_DATABASE")
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    if not at or ":" in userinfo:
        raise ConfigError(
            "with LDP_DATABASE_PASSWORD, LDP_DATABASE must name a user and no password: "
            "postgresql://user@host:5432/dbname"
        )
    return f"{scheme}://{userinfo}:{quote(password, safe='')}@{host}{slash}{path}"
