"""Unauthenticated operational endpoints: liveness, readiness, metrics, the OpenAPI document."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

from collector.openapi import openapi_document
from collector.views.common import settings, storage

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    """The process answers; says nothing about storage."""
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz() -> Response:
    """Storage reachable and writable (a write, rolled back); 503 otherwise."""
    storage().ping()
    return jsonify({"status": "ready"})


@bp.get("/metrics")
def metrics() -> Response:
    text = current_app.extensions["ldp_metrics"].render(storage())
    return Response(text, mimetype="text/plain", content_type="text/plain; version=0.0.4")


@bp.get("/openapi.json")
def openapi() -> Response:
    return jsonify(openapi_document(settings()["max_batch_reports"]))
