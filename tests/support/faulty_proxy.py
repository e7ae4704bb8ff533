"""A fault-injecting HTTP proxy on loopback, for reliability tests of HTTP clients.

    with FaultyProxy(upstream=collector.url) as proxy:
        proxy.plan(Fault.status(503, retry_after=0), DROP, LOST_RESPONSE, path="/reports")
        client = TelemetryClient(proxy.url, ...)

Each request the proxy receives takes the next planned fault whose ``path`` filter is a
substring of the request path (or passes untouched when none is planned). ``default`` is the
fault for unplanned requests (``PASS``; ``DROP`` simulates a collector that is down), and
``upstream = None`` refuses every request. Every request is recorded (method, path, headers and
the body, gunzipped) in ``proxy.requests``.

Faults:

* ``PASS``: forward and relay the answer;
* ``DROP``: close the connection without an answer, before forwarding;
* ``HALF``: forward half of the request bytes, then close both sides (a half-sent request);
* ``LOST_RESPONSE``: forward the request, read the collector's answer, then close the client's
  connection without it (the collector stored the reports but the client does not know);
* ``TIMEOUT``: keep the connection open without an answer until the client gives up;
* ``Fault.status(code, retry_after=None, error=...)``: answer ``code`` with the API's error
  envelope (``error`` is its ``code``, e.g. ``stale_config``);
* ``Fault.delay(seconds, after=False)``: wait, then forward; with ``after`` forward at once
  and wait before relaying the answer (the collector has stored the reports meanwhile).

One request per connection (the proxy answers ``Connection: close``); loopback only.
"""

from __future__ import annotations

import gzip
import json
import socket
import socketserver
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_MAX_HEADER = 64 * 1024


@dataclass(frozen=True)
class Fault:
    kind: str
    code: int | None = None
    retry_after: float | None = None
    seconds: float = 0.0
    error: str = "injected_fault"
    after: bool = False

    @classmethod
    def status(
        cls, code: int, retry_after: float | None = None, *, error: str = "injected_fault"
    ) -> Fault:
        """Answer ``code`` (with ``Retry-After`` if given; ``error`` the envelope's code)."""
        return cls("status", code=code, retry_after=retry_after, error=error)

    @classmethod
    def delay(cls, seconds: float, *, after: bool = False) -> Fault:
        """Wait ``seconds`` before forwarding, or (``after``) before relaying the answer."""
        return cls("delay", seconds=seconds, after=after)


PASS = Fault("pass")
DROP = Fault("drop")
HALF = Fault("half")
LOST_RESPONSE = Fault("lost_response")
TIMEOUT = Fault("timeout")


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    fault: Fault = field(default=PASS)
    #: Status the collector answered (None when no answer came back from it).
    status: int | None = None

    def json(self) -> object:
        return json.loads(self.body)


def _read_request(sock: socket.socket) -> tuple[bytes, bytes] | None:
    """(head, body) of one HTTP request, or None if the client closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
        if len(data) > _MAX_HEADER:
            return None
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        body += chunk
    return head, body


def _with_connection_close(head: bytes) -> bytes:
    lines = [
        line
        for line in head.split(b"\r\n")
        if line.split(b":", 1)[0].strip().lower() not in (b"connection", b"keep-alive")
    ]
    lines.insert(1, b"Connection: close")
    return b"\r\n".join(lines)


class FaultyProxy:
    """The proxy server; a context manager that stops it on exit."""

    def __init__(self, upstream: str | None = None, *, default: Fault = PASS) -> None:
        self.upstream = upstream
        self.default = default
        self.requests: list[RecordedRequest] = []
        self._plan: deque[tuple[Fault, str | None]] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def plan(self, *faults: Fault, path: str | None = None) -> None:
        """Queue faults for the next requests whose path contains ``path`` (any if None)."""
        with self._lock:
            self._plan.extend((f, path) for f in faults)

    def planned(self) -> int:
        """Faults not yet used."""
        with self._lock:
            return len(self._plan)

    def requests_to(self, path_part: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if path_part in r.path]

    def _next_fault(self, path: str) -> Fault:
        with self._lock:
            for i, (fault, where) in enumerate(self._plan):
                if where is None or where in path:
                    del self._plan[i]
                    return fault
            return self.default

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> FaultyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one connection -----------------------------------------------------------------------

    def _handle(self, client: socket.socket) -> None:
        client.settimeout(30)
        try:
            got = _read_request(client)
        except (OSError, ValueError):
            return
        if got is None:
            return
        head, body = got
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, path = request_line.split(" ")[:2]
        headers = {}
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        upstream = self.upstream
        fault = self._next_fault(path) if upstream is not None else DROP
        decoded = body
        if headers.get("content-encoding") == "gzip":
            try:
                decoded = gzip.decompress(body)
            except (OSError, EOFError, zlib.error):
                decoded = body
        recorded = RecordedRequest(method, path, headers, decoded, fault)
        with self._lock:
            self.requests.append(recorded)
        if fault.kind == "drop":
            return
        if fault.kind == "timeout":
            self._hold(client)
            return
        if fault.kind == "status":
            self._answer(client, fault)
            return
        if fault.kind == "delay" and not fault.after:
            if self._closing.wait(fault.seconds):
                return
        if upstream is None:
            return
        raw = _with_connection_close(head) + b"\r\n\r\n" + body
        target = urlsplit(upstream)
        try:
            with socket.create_connection((target.hostname, target.port), timeout=30) as up:
                if fault.kind == "half":
                    up.sendall(raw[: max(1, len(raw) // 2)])
                    return
                up.sendall(raw)
                response = b""
                while chunk := up.recv(65536):
                    response += chunk
        except OSError:
            return
        try:
            recorded.status = int(response.split(b" ", 2)[1])
        except (IndexError, ValueError):
            recorded.status = None
        if fault.kind == "lost_response" or not response:
            return
        if fault.kind == "delay" and fault.after and self._closing.wait(fault.seconds):
            return
        resp_head, _, resp_body = response.partition(b"\r\n\r\n")
        try:
            client.sendall(_with_connection_close(resp_head) + b"\r\n\r\n" + resp_body)
        except OSError:
            pass

    def _hold(self, client: socket.socket) -> None:
        client.settimeout(0.05)
        deadline = time.monotonic() + 60
        while not self._closing.is_set() and time.monotonic() < deadline:
            try:
                if not client.recv(1024):
                    return
            except TimeoutError:
                continue
            except OSError:
                return

    @staticmethod
    def _answer(client: socket.socket, fault: Fault) -> None:
        code = fault.code or 500
        body = json.dumps(
            {"error": {"code": fault.error, "message": "fault injected", "status": code}}
        ).encode()
        lines = [
            f"HTTP/1.1 {code} Injected",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            "Connection: close",
        ]
        if fault.retry_after is not None:
            lines.append(f"Retry-After: {fault.retry_after:g}")
        try:
            client.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        except OSError:
            pass
