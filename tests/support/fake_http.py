"""A small fake HTTP server for answers the real collector never sends (hostile or broken
collectors, seen from the device). Tests subclass :class:`JsonHandler` and serve it with
:func:`serving` on a free loopback port."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from client_sdk.config_cache import campaign_digest


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler that answers JSON and logs nothing."""

    def _answer(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        """Answer ``status`` with ``body`` as JSON (and ``headers``)."""
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _planned_error(self, status: int) -> None:
        """Answer ``status`` with the error envelope of a planned failure."""
        error = {"code": f"status_{status}", "message": "planned", "status": status}
        self._answer(status, {"error": error})

    def _campaign(self) -> str:
        """The campaign id of ``GET /v1/campaigns/{id}`` or ``POST .../{id}/reports``."""
        parts = self.path.rstrip("/").split("/")
        return parts[-2] if parts[-1] == "reports" else parts[-1]

    def _upload(self) -> tuple[str, dict[str, Any]]:
        """The campaign and the body (``digest``, ``reports``) of the SDK's gzip JSON upload."""
        data = gzip.decompress(self.rfile.read(int(self.headers["Content-Length"])))
        return self._campaign(), dict(json.loads(data))

    def log_message(self, *args: Any) -> None:
        pass


def campaign_config(
    campaign: str,
    mechanism: Mapping[str, Any],
    *,
    digest: str | None = None,
    window: str = "day",
    horizon_days: int = 30,
) -> dict[str, Any]:
    """A campaign config as the collector serves it: its digest is the config's own
    (``campaign_digest``, as the collector computes it and the device checks it) unless
    ``digest`` is given (a hostile collector's)."""
    own = campaign_digest(campaign, dict(mechanism), window, horizon_days)
    return {
        "id": campaign,
        "digest": own if digest is None else digest,
        "window": window,
        "horizon_days": horizon_days,
        "mechanism": dict(mechanism),
    }


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on a free loopback port for the block; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
