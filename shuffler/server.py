"""Running the shuffler: a threaded WSGI server that logs no request, plus the forwarder."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

from werkzeug.serving import WSGIRequestHandler, make_server

from shuffler.app import create_app
from shuffler.forwarder import DEFAULT_MAX_REQUEST_BYTES, Forwarder
from shuffler.staging import Staging


class _SilentHandler(WSGIRequestHandler):
    """Never logs a request: an access log would keep the addresses the shuffler must drop."""

    def log(self, type: str, message: str, *args: Any) -> None:  # noqa: A002
        return None

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return None


def serve(
    *,
    host: str,
    port: int,
    database: Path,
    collector: str,
    token: str,
    batch_size: int,
    max_request: int,
    retry_seconds: float,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> None:
    """Serve until SIGTERM/SIGINT; prints ``ldp shuffle: listening on URL`` to stderr."""
    staging = Staging(database)
    forwarder = Forwarder(
        staging,
        collector,
        token,
        batch_size=batch_size,
        max_request=max_request,
        max_request_bytes=max_request_bytes,
    )
    app = create_app(staging, forwarder)
    server = make_server(host, port, app, threaded=True, request_handler=_SilentHandler)
    forwarder.start(retry_seconds=retry_seconds)
    stop = threading.Event()

    def shutdown(signum: int, frame: object) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    bound_host, bound_port = str(server.host), int(server.port)
    url = f"http://{bound_host}:{bound_port}"
    print(f"ldp shuffle: listening on {url}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        forwarder.stop()
        staging.close()
