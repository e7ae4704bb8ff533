"""Unauthenticated operational endpoints: liveness, readiness, metrics, the OpenAPI document."""

from __future__ import annotations

import threading
import time

from flask import Blueprint, Response, current_app, jsonify

from collector.auth import require
from collector.errors import StorageError
from collector.openapi import openapi_document
from collector.views.common import settings, storage

bp = Blueprint("health", __name__)


class Readiness:
    """The outcome of the last write probe, reused for ``seconds`` (one probe at a time).

    A storage error met by any request (an upload on a full disk, a deleted file) also counts
    as a failed probe, so readiness turns 503 with the uploads, not a cache period later.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._error: StorageError | None = None

    def failed(self, exc: StorageError) -> None:
        with self._lock:
            if exc is not self._error:  # not the answer of this object's own probe
                self._at, self._error = time.monotonic(), exc

    def check(self) -> None:
        """Raise the storage error of the last probe, probing again once it is stale."""
        with self._lock:
            if time.monotonic() - self._at >= self.seconds:
                try:
                    storage().ping()
                    self._error = None
                except StorageError as exc:
                    self._error = exc
                self._at = time.monotonic()
            error = self._error
        if error is not None:
            raise error


def readiness() -> Readiness:
    return current_app.extensions["ldp_readiness"]


@bp.get("/healthz")
def healthz() -> Response:
    """The process answers; says nothing about storage."""
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz() -> Response:
    """A committed write succeeded within the last LDP_READY_CACHE_SECONDS; 503 otherwise."""
    readiness().check()
    return jsonify({"status": "ready"})


def _metrics() -> Response:
    text = current_app.extensions["ldp_metrics"].render(storage())
    return Response(text, mimetype="text/plain", content_type="text/plain; version=0.0.4")


_protected_metrics = require("analyst", "ingest")(_metrics)


@bp.get("/metrics")
def metrics() -> Response:
    """Prometheus exposition; needs a token of any role unless LDP_METRICS_PUBLIC is true."""
    if settings()["metrics_public"]:
        return _metrics()
    return _protected_metrics()  # type: ignore[no-any-return]


@bp.get("/openapi.json")
def openapi() -> Response:
    return jsonify(openapi_document(settings()["max_batch_reports"]))
