"""The Flask application factory of the collector."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from collector import accesslog, cors, dashboard, ratelimit
from collector.auth import check_tokens
from collector.errors import APIError, CampaignArchived, StorageError
from collector.http_errors import error_response, http_error_response
from collector.jsonout import FiniteJSONProvider
from collector.metrics import Metrics
from collector.mixing import Mixer
from collector.retention import Scheduler
from collector.settings import load_settings
from collector.storage import open_storage
from collector.views import BLUEPRINTS, sealed
from collector.views.health import Readiness

log = logging.getLogger(__name__)


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build the collector app; the schema is created or migrated before it returns.

    Settings (see ``collector.settings.SETTINGS``) resolve as defaults < ``LDP_*`` environment
    variables < ``config``. The three role tokens are required (:class:`ConfigError` otherwise;
    ``ldp serve --dev`` generates them). Guarantees: every error answers the JSON envelope
    ``{"error": {"code", "message", "status"}}``; a busy or unreachable database answers 503
    with ``Retry-After``, never a bare 500; no client address, user agent or token is stored.
    """
    settings = load_settings(config)
    tokens = check_tokens(settings)
    app = Flask("collector")
    app.json = FiniteJSONProvider(app)
    app.config["LDP"] = settings
    app.config["MAX_CONTENT_LENGTH"] = settings["max_body_bytes"]
    storage = open_storage(
        settings["database"],
        busy_timeout_ms=settings["busy_timeout_ms"],
        synchronous=settings["synchronous"],
        create=settings["create_database"],
        staging=settings["mix_batch"] > 0,
    )
    storage.migrate()
    if settings["mix_batch"] == 0 and storage.staged_count():
        # Staging turned off: what an earlier run staged is mixed now, so it does not stay
        # linkable in the staging area (direct inserts also skip ids still staged there, which
        # other workers with staging on may keep adding to).
        storage.mix()
    app.extensions["ldp_storage"] = storage
    app.extensions["ldp_tokens"] = tokens
    app.extensions["ldp_metrics"] = Metrics(settings["metrics_dir"])
    app.extensions["ldp_readiness"] = Readiness(settings["ready_cache_seconds"])
    # The periodic retention sweep; ldp serve starts it in each worker (collector/server.py).
    app.extensions["ldp_retention"] = Scheduler(
        storage, settings["retention_interval"], settings["max_retention_days"]
    )
    # Unlinkable storage: the mixer thread; ldp serve starts it in each worker.
    app.extensions["ldp_mixer"] = Mixer(storage, settings["mix_batch"], settings["mix_interval"])
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    app.register_blueprint(dashboard.bp)
    sealed.install(app, settings)  # POST /v1/sealed, GET /v1/sealed/key (ldp shuffle)
    _register_errors(app, retry_after=settings["retry_after"])
    _register_metrics(app)
    ratelimit.install(app, settings)  # per-token limits: 429 with Retry-After
    cors.install(app, settings)  # only the two endpoints a browser SDK calls
    return app


def _register_errors(app: Flask, *, retry_after: int) -> None:
    @app.errorhandler(APIError)
    def api_error(exc: APIError) -> Response:
        return error_response(exc)

    @app.errorhandler(StorageError)
    def storage_error(exc: StorageError) -> Response:
        log.warning("storage unavailable: %s", exc)
        app.extensions["ldp_readiness"].failed(exc)
        return error_response(
            APIError(
                503,
                "storage_unavailable",
                f"storage is busy or unavailable, nothing was stored; retry after "
                f"{retry_after} s ({type(exc).__name__})",
                headers={"Retry-After": str(retry_after)},
            )
        )

    @app.errorhandler(CampaignArchived)
    def archived(exc: CampaignArchived) -> Response:
        return error_response(APIError(410, exc.code, str(exc)))

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        if exc.code == 413:
            return http_error_response(
                exc,
                message=f"the body exceeds the limit of {app.config['MAX_CONTENT_LENGTH']} "
                "bytes (LDP_MAX_BODY_BYTES); split the batch",
            )
        return http_error_response(exc)

    @app.errorhandler(Exception)
    def internal_error(exc: Exception) -> Response:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(
            APIError(500, "internal_error", "the collector failed; the error has been logged")
        )


def _register_metrics(app: Flask) -> None:
    metrics: Metrics = app.extensions["ldp_metrics"]

    @app.before_request
    def start_timer() -> None:
        g.ldp_started = time.perf_counter()

    @app.after_request
    def observe(response: Response) -> Response:
        started = g.get("ldp_started")
        if started is not None:
            rule = request.url_rule.rule if request.url_rule is not None else "unmatched"
            seconds = time.perf_counter() - started
            metrics.observe_request(rule, request.method, response.status_code, seconds)
            accesslog.log_request(
                request.method,
                rule,
                response.status_code,
                seconds,
                response.content_length or 0,
            )
        return response
