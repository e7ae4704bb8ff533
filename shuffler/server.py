"""Running the shuffler: a threaded WSGI server that logs no request, plus the forwarder.

Its clients are anyone (``POST /v1/submit`` takes no token), so the server bounds what one can
hold: each connection has ``client_timeout`` seconds from its accept to its end (request read,
answered, closed), after which it is shut down whatever it is doing; at most
``max_connections`` are open at once, and one more is answered 503 ``overloaded`` with
``Retry-After`` at once and closed (the SDK retries later). Without either, a client that
opened connections and sent nothing (or a byte now and then) held a thread and a descriptor
each for ever: 250 of them took a shuffler with 256 descriptors off the air for every device
for as long as they stayed, and left its lazy imports broken for good (every error answer a
500 afterwards).

No failure logs a client address: socketserver's own error handler printed the address and
port of the client whose request failed (a request line such as ``GET http://[x/ HTTP/1.1``,
or any device's request while descriptors ran out).
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

from shuffler.app import create_app
from shuffler.forwarder import DEFAULT_MAX_REQUEST_BYTES, Forwarder
from shuffler.limits import (
    DEFAULT_CLIENT_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    OVERLOADED_RETRY_AFTER,
)
from shuffler.staging import Staging

log = logging.getLogger(__name__)



class _SilentHandler(WSGIRequestHandler):
    """Never logs a request: an access log would keep the addresses the shuffler must drop."""

    def log(self, type: str, message: str, *args: Any) -> None:  # noqa: A002
        return None

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return None


def _overloaded_answer() -> bytes:
    body = json.dumps(
        {
            "error": {
                "code": "overloaded",
                "message": "the shuffler has too many open connections; nothing was staged, "
                f"retry after {OVERLOADED_RETRY_AFTER} s",
                "status": 503,
            }
        },
        separators=(",", ":"),
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Retry-After: {OVERLOADED_RETRY_AFTER}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class ShufflerServer(ThreadedWSGIServer):
    """werkzeug's threaded server with a deadline per connection, a cap on open connections
    and an error handler that never logs a client address (see the module docstring)."""

    daemon_threads = True

    def __init__(
        self,
        host: str,
        port: int,
        app: Any,
        *,
        client_timeout: float = DEFAULT_CLIENT_TIMEOUT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        if not client_timeout > 0 or max_connections < 1:
            raise ValueError("client_timeout must be > 0 and max_connections >= 1")
        super().__init__(host, port, app, handler=_SilentHandler)
        self.client_timeout = float(client_timeout)
        self.max_connections = int(max_connections)
        self._open: dict[socket.socket, float] = {}  # connection -> deadline
        self._open_lock = threading.Lock()
        self._reaper = threading.Thread(
            target=self._reap, name="ldp-shuffle-deadlines", daemon=True
        )
        self._reaper.start()

    @property
    def open_connections(self) -> int:
        with self._open_lock:
            return len(self._open)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            full = len(self._open) >= self.max_connections
            if not full:
                self._open[request] = time.monotonic() + self.client_timeout
        if full:
            try:  # small: fits the socket buffer, so one non-blocking send
                request.setblocking(False)
                request.send(_overloaded_answer())
            except OSError:
                pass
            self._close(request)
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        # Every accepted connection ends here (its thread's end, or a failure to start one).
        with self._open_lock:
            self._open.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver's handler prints the client's address and port: never that.
        log.error("error handling a request", exc_info=True)

    def _reap(self) -> None:
        """Shut down connections past their deadline: the thread blocked on one sees its end."""
        tick = min(1.0, self.client_timeout / 4)
        while True:
            time.sleep(tick)
            now = time.monotonic()
            with self._open_lock:
                late = [sock for sock, deadline in self._open.items() if deadline <= now]
            for sock in late:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    @staticmethod
    def _close(request: Any) -> None:
        try:
            request.close()
        except OSError:
            pass


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
    client_timeout: float = DEFAULT_CLIENT_TIMEOUT,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
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
    server = ShufflerServer(
        host, port, app, client_timeout=client_timeout, max_connections=max_connections
    )
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
