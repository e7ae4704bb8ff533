"""Every collector setting, declared as data: name, environment variable, default, help.

Precedence (lowest first): the defaults below < ``LDP_*`` environment variables < the explicit
mapping given to :func:`collector.app.create_app`. ``docs/COLLECTOR.md`` documents each setting;
a test checks that none is missing there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

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


def _str(value: Any) -> str:
    return str(value)


def _opt_str(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("expected an integer, got a boolean")
    return int(value)


def _origins(value: Any) -> str:
    from collector.cors import parse_origins

    return ",".join(parse_origins(value))


def _synchronous(value: Any) -> str:
    text = str(value).upper()
    if text not in ("FULL", "NORMAL", "EXTRA"):
        raise ValueError(f"expected FULL, EXTRA or NORMAL, got {value!r}")
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


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "database",
        "LDP_DATABASE",
        DEFAULT_DATABASE,
        "Storage: a SQLite file (a path, sqlite:///relative.db or sqlite:////abs/path.db) or "
        "a postgresql:// URL; created and migrated on start.",
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
        "SQLite synchronous mode: FULL (a 2xx survives power loss) or NORMAL (process crash only).",
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
        _opt_str,
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
            raw, origin = config[s.name], f"setting {s.name!r}"
        elif env.get(s.env) not in (None, ""):
            raw, origin = env[s.env], f"environment variable {s.env}"
        else:
            out[s.name] = s.default
            continue
        try:
            value = s.parse(raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{origin} is invalid: {exc} (got {raw!r}); {s.help}") from None
        if s.minimum is not None and value is not None and value < s.minimum:
            raise ConfigError(f"{origin} must be >= {s.minimum}, got {value!r}")
        out[s.name] = value
    return out
