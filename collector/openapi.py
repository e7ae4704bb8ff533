"""The OpenAPI 3 document served at /openapi.json (filled in below)."""

from __future__ import annotations

from typing import Any


def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "ldp-telemetry collector", "version": "1"},
        "paths": {},
    }
