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

A request the HTTP server itself refuses, before the Flask app sees it (a malformed or
HTTP/0.9 request line: 400, a request line over 65,536 bytes: 414, more than 100 header
fields: 431, an HTTP version from 2 on: 505), is answered in the collector's JSON error
envelope (``collector.errors.APIError``) with a status line and ``Connection: close``, like the
collector's own answer to such a request. The standard library answered an HTML page, and to a
request line without a version (``GARBAGE``, taken for HTTP/0.9) one without any status line.
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import sys
import threading
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any

from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

from collector.errors import APIError
from collector.http_errors import HTTP_CODES, SERVER_ERRORS
from shuffler.app import create_app
from shuffler.forwarder import DEFAULT_MAX_REQUEST_BYTES, Forwarder
from shuffler.limits import (
    DEFAULT_CLIENT_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    OVERLOADED_RETRY_AFTER,
    descriptor_warning,
)
from shuffler.staging import Staging

log = logging.getLogger(__name__)


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def error_answer(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> bytes:
    """A whole HTTP/1.1 answer (status line, headers, body) carrying the collector's JSON
    error envelope, with ``Connection: close``: what the server sends on its own."""
    body = json.dumps(APIError(status, code, message).body(), separators=(",", ":")).encode()
    lines = [f"HTTP/1.1 {status} {_reason(status)}"]
    lines += ["Content-Type: application/json"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


class _SilentHandler(WSGIRequestHandler):
    """Never logs a request: an access log would keep the addresses the shuffler must drop.

    Errors the server answers itself are the JSON envelope (see the module docstring)."""

    def log(self, type: str, message: str, *args: Any) -> None:  # noqa: A002
        return None

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return None

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":  # "GET /path" alone: answered without a status
            self.send_error(400, f"a request line needs an HTTP version: {self.requestline!r}")
            return False
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        status = int(code)
        error, what = SERVER_ERRORS.get(status) or (HTTP_CODES.get(status, "error"), "")
        text = ": ".join(part for part in (what, message) if part)
        answer = error_answer(status, error, (text or _reason(status))[:300])
        self.close_connection = True
        if self.command == "HEAD":  # the head alone
            answer = answer[: answer.index(b"\r\n\r\n") + 4]
        self.wfile.write(answer)


def _overloaded_answer() -> bytes:
    return error_answer(
        503,
        "overloaded",
        "the shuffler has too many open connections; nothing was staged, "
        f"retry after {OVERLOADED_RETRY_AFTER} s",
        {"Retry-After": str(OVERLOADED_RETRY_AFTER)},
    )


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
        # Built now: an error envelope loads modules on first use, which must not wait for a
        # time when descriptors run out (an import failed then broke every error answer).
        self._overloaded = _overloaded_answer()
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
                request.send(self._overloaded)
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
    warning = descriptor_warning(max_connections)
    if warning:
        log.warning("%s", warning)
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
