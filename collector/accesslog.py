"""The access log: one line per answered request, never a client address, token or payload.

Each line holds the method, the route *template* (``/v1/campaigns/<campaign_id>/reports``, not
the campaign id a client sent), the status, the duration and the size of the answer body.
``LDP_ACCESS_LOG`` picks the format: ``text`` (``key=value``), ``json`` (one object per line) or
``off``. The lines go to the ``ldp.access`` logger (``ldp serve``: standard error).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

LOGGER = "ldp.access"
FORMATS = ("text", "json", "off")

log = logging.getLogger(LOGGER)
_format = "text"


def configure(fmt: str) -> None:
    """Send access lines to standard error in ``fmt`` (``text``, ``json`` or ``off``)."""
    global _format
    if fmt not in FORMATS:
        raise ValueError(f"expected one of {FORMATS}, got {fmt!r}")
    _format = fmt
    log.propagate = False
    log.setLevel(logging.INFO)
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
    log.disabled = fmt == "off"


def route_template(app: Any, path: str, method: str) -> str:
    """The URL rule ``path`` matches in ``app`` (a Flask app), or ``unmatched``."""
    try:
        rule, _ = app.url_map.bind("collector").match(path, method=method, return_rule=True)
        return str(rule.rule)
    except Exception:  # 404, 405, a redirect: no template to name
        return "unmatched"


def log_request(method: str, template: str, status: int, seconds: float, nbytes: int) -> None:
    """Write one access line (the arguments are the only fields: nothing from the client)."""
    if _format == "off" or not log.isEnabledFor(logging.INFO):
        return
    method = method if method.isalpha() and len(method) <= 16 else "-"
    fields = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "method": method,
        "path": template,
        "status": status,
        "duration_ms": round(seconds * 1000, 2),
        "bytes": nbytes,
    }
    if _format == "json":
        log.info(json.dumps(fields, separators=(",", ":")))
    else:
        log.info("access " + " ".join(f"{k}={v}" for k, v in fields.items()))
