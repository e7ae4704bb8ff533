"""The collector's gunicorn worker: request threads behind an event loop that reads requests.

Why not gunicorn's stock workers:

* ``sync`` gives a whole process to one connection: four clients that send half a request line
  and wait take a two-worker collector down for as long as they like.
* ``gthread`` hands a connection to a thread as soon as its first byte arrives; the thread then
  blocks reading the rest, so a few hundred slow clients pin every thread.
* ``gevent``/``eventlet`` would need monkey-patching, and SQLite's busy wait and the CPU-bound
  ingest block their one event loop anyway.

This worker keeps gunicorn's threaded design (a thread pool for the application, kept-alive
connections parked in a selector) and changes what happens before a request reaches a thread:

* the main loop reads each request — headers and a ``Content-Length`` body up to
  ``LDP_MAX_BODY_BYTES`` — without blocking, under a header deadline (``LDP_HEADER_TIMEOUT``)
  and a body deadline (``LDP_BODY_TIMEOUT``); a client too slow for them is disconnected, and
  until then it costs a buffer, never a thread;
* admission control: a worker runs or queues at most ``LDP_MAX_INFLIGHT`` requests; one more
  is answered at once with 503 ``overloaded`` and ``Retry-After`` from the main loop (only
  ``/healthz`` is never shed), so the queue, and the latency of what is accepted, stay bounded.
  A plain ``GET /healthz`` (no token, no body) is answered by the event loop
  itself, so a liveness probe never waits behind queued uploads.
  A request counts from its admission until its answer starts: the thread releases it just
  before the first byte of the answer is sent, so a client (or another one) that has its
  answer never finds the request still counted. (Releasing it in the main loop, after the
  thread finished, let a burst of answers followed at once by the next requests be shed
  while fewer than ``LDP_MAX_INFLIGHT`` were outstanding.)
* a thread that picks up a queued request first checks the client is still connected and drops
  the request if it has gone (no work for a client that gave up);
* gunicorn's own error answers (414, 431, a malformed request) use the collector's JSON error
  envelope, and are logged without the client address;
* closing a connection after a ``Connection: close`` answer does not wait for the client.
  gunicorn closes it the RFC 9112 way (send FIN, read what the client still sends until it
  closes, then close, so unread bytes cannot turn the close into a reset that truncates the
  answer), but it does so on the event loop's thread, blocking up to 2 s per connection: with
  20 clients that kept their end open after the answer, a ``/healthz`` probe waited 40 s (no
  accepts, no reads, no admissions meanwhile; ``bench/lingering.py``). Here the event loop only
  sends the FIN and parks the socket; it reads and closes it when the client closes, after
  :data:`LINGER_DRAIN` bytes, or after :data:`LINGER_SECONDS`.

Socket reads inside a thread (a chunked body) block for at most ``LDP_BODY_TIMEOUT`` at a time.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable
from email.utils import formatdate
from functools import partial
from typing import Any

from gunicorn import util as gunicorn_util
from gunicorn.http import errors as http_errors
from gunicorn.workers import gthread

from collector import accesslog
from collector.errors import APIError
from collector.http_errors import SERVER_ERRORS
from collector.settings import load_settings

#: The largest request head read by the event loop; bigger ones go to gunicorn's parser,
#: which answers 414 or 431.
MAX_HEAD_BYTES = 64 * 1024
#: The status logged and counted for a request dropped because its client had gone.
CLIENT_GONE = 499
#: Paths never shed by admission control (a liveness probe must see a live process).
NEVER_SHED = frozenset({"/healthz"})
#: The answer of the event loop to a plain liveness probe (``RequestHead.plain_probe``), so a
#: probe never waits behind uploads in the thread pool: the app's ``/healthz`` body.
PROBE_BODY = b'{"status":"ok"}\n'
#: The largest head of a plain probe (an orchestrator's is about 150 bytes, 3-5 header lines),
#: and its most header lines: far below gunicorn's limits on the request line, a header field
#: (4094 and 8190 bytes) and the number of fields (100; 240 lines of ``a:`` fit in 1 KiB).
MAX_PROBE_HEAD = 1024
MAX_PROBE_FIELDS = 32
_PROBE_HEAD = re.compile(
    rb"GET /healthz HTTP/1\.[01]\r\n(?:[!#$%&'*+.^_`|~0-9A-Za-z-]+:[\t\x20-\x7e]*\r\n)*\r\n"
)
_NOT_PLAIN = frozenset({b"authorization", b"content-length", b"transfer-encoding", b"expect"})
#: How long a closing connection waits for the client's end (gunicorn's figure), and how many
#: bytes it reads from the client meanwhile before it closes anyway.
LINGER_SECONDS = 2.0
LINGER_DRAIN = 64 * 1024


class BufferedSocket:
    """A client socket whose first bytes were already read by the event loop.

    ``recv`` returns those bytes first, then reads the socket. Blocking mode means blocking
    with a timeout (``io_timeout``), so no read or write in a thread waits forever.
    """

    def __init__(self, sock: socket.socket, io_timeout: float) -> None:
        self.sock = sock
        self.io_timeout = io_timeout
        self.pending = bytearray()
        #: Called (once) just before the first bytes of the current request's answer go out.
        self.on_answer: Callable[[], None] | None = None

    def _answering(self, data: Any) -> None:
        # An interim answer (``100 Continue``) is not the answer.
        if self.on_answer is not None and not bytes(data[:10]).startswith(b"HTTP/1.1 1"):
            release, self.on_answer = self.on_answer, None
            release()

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._answering(data)
        self.sock.sendall(data, flags)

    def send(self, data: Any, flags: int = 0) -> int:
        self._answering(data)
        return self.sock.send(data, flags)

    def recv(self, size: int, flags: int = 0) -> bytes:
        if self.pending:
            chunk = bytes(self.pending[:size])
            del self.pending[:size]
            return chunk
        return self.sock.recv(size, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        if self.pending:
            n = min(nbytes or len(buffer), len(self.pending))
            buffer[:n] = self.pending[:n]
            del self.pending[:n]
            return n
        return self.sock.recv_into(buffer, nbytes, flags)

    def setblocking(self, flag: bool) -> None:
        if flag:
            self.sock.settimeout(self.io_timeout)
        else:
            self.sock.setblocking(False)

    def client_gone(self) -> bool:
        """True when the peer has closed or reset the connection (checked without blocking)."""
        # A socket with a timeout waits for readability before recv, whatever the flags.
        timeout = self.sock.gettimeout()
        self.sock.setblocking(False)
        try:
            return self.sock.recv(1, socket.MSG_PEEK) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        finally:
            self.sock.settimeout(timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


class RequestHead:
    """What the event loop needs from a buffered request head: is it complete, how much body."""

    def __init__(self, data: bytes | bytearray) -> None:
        end = data.find(b"\r\n\r\n")
        self.complete = end >= 0
        self.head_bytes = end + 4 if self.complete else 0
        self.method = self.path = ""
        self.content_length: int | None = None
        self.chunked = False
        if not self.complete:
            return
        lines = bytes(data[:end]).split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) >= 2:
            self.method = parts[0].decode("latin-1")
            self.path = parts[1].split(b"?", 1)[0].decode("latin-1")
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                try:
                    self.content_length = int(value.strip())
                except ValueError:
                    self.content_length = None  # the parser answers 400
            elif name == b"transfer-encoding":
                self.chunked = True

    @staticmethod
    def plain_probe(data: bytes | bytearray) -> bool:
        """Whether ``data``, every byte read from the connection, is exactly one liveness probe
        the event loop may answer itself: ``GET /healthz`` over HTTP/1.0 or 1.1, small, with
        well-formed header lines and none of ``Authorization`` (rate-limited by the app),
        ``Content-Length``, ``Transfer-Encoding`` or ``Expect``, and nothing pipelined behind
        it. Anything else (what gunicorn's parser would refuse, above all) goes to the parser
        and the app as before."""
        if len(data) > MAX_PROBE_HEAD or not _PROBE_HEAD.fullmatch(data):
            return False
        if data.count(b"\r\n") - 2 > MAX_PROBE_FIELDS:
            return False
        names = {line.partition(b":")[0].lower() for line in bytes(data).split(b"\r\n")[1:]}
        return names.isdisjoint(_NOT_PLAIN)


class CollectorWorker(gthread.ThreadWorker):  # type: ignore[misc]
    """gunicorn's threaded worker with non-blocking request reads and admission control."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = load_settings(getattr(self.app, "app_config", None))
        self.max_inflight: int = settings["max_inflight"]
        self.header_timeout: float = settings["header_timeout"]
        self.body_timeout: float = settings["body_timeout"]
        self.max_body: int = settings["max_body_bytes"]
        self.retry_after: int = settings["retry_after"]
        self.inflight = 0
        self._inflight_lock = threading.Lock()  # request threads release, the main loop admits
        self.reading: dict[Any, float] = {}  # connection -> deadline
        self.lingering: dict[socket.socket, tuple[float, int]] = {}  # -> (deadline, bytes read)

    # -- reading requests in the event loop -------------------------------------------------

    def enqueue_req(self, conn: Any) -> None:
        """Read the next request of ``conn`` in the event loop before it gets a thread."""
        buffered = getattr(conn, "ldp_sock", None)
        if buffered is None:
            buffered = conn.ldp_sock = BufferedSocket(conn.sock, self.body_timeout)
            conn.sock = buffered
            conn.close = partial(self._close_conn, conn, conn.close)
        if conn.parser is not None and conn.parser.unreader.buf.getvalue():
            self._admit(conn, None)  # a pipelined request already read by the parser
            return
        conn.ldp_head = None
        conn.ldp_started = time.monotonic()
        buffered.sock.setblocking(False)
        self.reading[conn] = conn.ldp_started + self.header_timeout
        self.poller.register(
            buffered.sock, gthread.selectors.EVENT_READ, partial(self._readable, conn)
        )
        if buffered.pending:
            self._progress(conn)  # a pipelined request left over from the previous one
        else:
            self._readable(conn, None)  # bytes may be there already

    def _readable(self, conn: Any, _fileobj: Any) -> None:
        buffered: BufferedSocket = conn.ldp_sock
        try:
            data = buffered.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)  # the client closed before sending a whole request
            return
        buffered.pending += data
        self._progress(conn)

    def _progress(self, conn: Any) -> None:
        """Hand the request to a thread once its head and ``Content-Length`` body are in."""
        buffered: BufferedSocket = conn.ldp_sock
        head = conn.ldp_head
        if head is None:
            head = RequestHead(buffered.pending)
            if not head.complete:
                if len(buffered.pending) >= MAX_HEAD_BYTES:
                    self._ready(conn, head)  # gunicorn's parser answers 414/431
                return
            conn.ldp_head = head
            self.reading[conn] = time.monotonic() + self.body_timeout
        wanted = head.content_length
        if (
            head.chunked
            or wanted is None
            or wanted > self.max_body
            or len(buffered.pending) - head.head_bytes >= wanted
        ):
            self._ready(conn, head)

    def _ready(self, conn: Any, head: RequestHead) -> None:
        self.reading.pop(conn, None)
        self._unregister(conn)
        self._admit(conn, head)

    def _admit(self, conn: Any, head: RequestHead | None) -> None:
        if head is not None and RequestHead.plain_probe(conn.ldp_sock.pending):
            self._probe(conn, head)
            return
        path = head.path if head is not None else ""
        if self.inflight >= self.max_inflight and path not in NEVER_SHED:
            self._shed(conn, head)
            return
        with self._inflight_lock:
            self.inflight += 1
        conn.ldp_counted = True
        conn.ldp_sock.on_answer = partial(self._release, conn)
        conn.data_ready = True  # the bytes are buffered: no wait for readability in the thread
        conn.ldp_queued = time.monotonic()
        super().enqueue_req(conn)

    def _shed(self, conn: Any, head: RequestHead | None) -> None:
        body = _envelope(
            503,
            "overloaded",
            f"the collector is at capacity, nothing was stored; retry after {self.retry_after} s",
        )
        answer = _http_answer(
            503, "Service Unavailable", body, {"Retry-After": str(self.retry_after)}
        )
        self._send_own(conn, head, 503, answer, len(body))
        self._close(conn)

    def _probe(self, conn: Any, head: RequestHead) -> None:
        """Answer a plain liveness probe from the event loop: 200, as the app's ``/healthz``.

        A thread would answer it only after the requests queued before it, up to the whole
        queue's wait (8 s measured behind one upload waiting for the write lock), long enough
        for an orchestrator to restart a live, merely busy, collector. The answer is complete
        and small (it fits any socket buffer); the connection is then closed (``Connection:
        close``), so no keep-alive state is kept here. Logged and counted as the app counts
        its own answers."""
        answer = _http_answer(200, "OK", PROBE_BODY, {"Date": formatdate(usegmt=True)})
        self._send_own(conn, head, 200, answer, len(PROBE_BODY))
        # Closed as gunicorn closes after an answer (FIN, then parked until the client closes):
        # bytes the client sends meanwhile cannot turn the close into a reset that cuts it.
        self.nr_conns -= 1
        conn.close(graceful=True)

    def _send_own(
        self, conn: Any, head: RequestHead | None, status: int, answer: bytes, size: int
    ) -> None:
        """Send an answer of the event loop's own (small: it fits any socket buffer, so one
        non-blocking send; a client gone is no error), then log and count it."""
        try:
            conn.ldp_sock.sock.setblocking(False)
            conn.ldp_sock.sock.send(answer)
        except OSError:
            pass
        started = getattr(conn, "ldp_started", time.monotonic())
        self._record(head.method if head else "-", self._template(head), status, started, size)

    def _record(self, method: str, template: str, status: int, started: float, size: int) -> None:
        """Count and log an answer the worker gave itself, as the app does for its own."""
        seconds = time.monotonic() - started
        accesslog.log_request(method, template, status, seconds, size)
        metrics = getattr(self.wsgi, "extensions", {}).get("ldp_metrics")
        if metrics is not None:
            metrics.observe_request(template, method if method.isalpha() else "-", status, seconds)

    def _template(self, head: RequestHead | None) -> str:
        if head is None or not head.path:
            return "unmatched"
        return accesslog.route_template(self.wsgi, head.path, head.method)

    def murder_pending(self) -> None:
        """Also disconnect clients that did not send their request within the deadlines, and
        close lingering connections whose client has not closed in time."""
        super().murder_pending()
        now = time.monotonic()
        for conn, deadline in list(self.reading.items()):
            if deadline <= now:
                self.reading.pop(conn, None)
                self._unregister(conn)
                self._close(conn)
        for sock, (deadline, _) in list(self.lingering.items()):
            if deadline <= now:
                self._end_linger(sock)

    # -- closing without blocking the event loop ----------------------------------------------

    def _close_conn(self, conn: Any, close: Callable[..., None], graceful: bool = False) -> None:
        """``conn.close``: gunicorn's graceful close, but parked in the event loop (see the
        module docstring). A stopping worker, whose loop is about to end, closes as gunicorn
        does."""
        if not graceful or not self.alive:
            close(graceful=graceful)
            return
        sock: socket.socket = conn.ldp_sock.sock
        try:
            sock.shutdown(socket.SHUT_WR)  # the FIN: the client has the whole answer
            sock.setblocking(False)
            self.poller.register(sock, gthread.selectors.EVENT_READ, self._lingered)
        except (OSError, ValueError, KeyError):
            gunicorn_util.close(sock)
            return
        self.lingering[sock] = (time.monotonic() + LINGER_SECONDS, 0)
        # Still a connection: it counts against worker_connections (gunicorn stops accepting at
        # the cap) until it is closed, so lingering sockets cannot pile up past it.
        self.nr_conns += 1

    def _lingered(self, sock: socket.socket) -> None:
        """A lingering connection is readable: read what the client still sends; close at its
        end, at an error, or past :data:`LINGER_DRAIN` bytes."""
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        deadline, drained = self.lingering.get(sock, (0.0, 0))
        drained += len(data)
        if not data or drained >= LINGER_DRAIN:
            self._end_linger(sock)
        else:
            self.lingering[sock] = (deadline, drained)

    def _end_linger(self, sock: socket.socket) -> None:
        if self.lingering.pop(sock, None) is not None:
            self.nr_conns -= 1
        try:
            self.poller.unregister(sock)
        except (KeyError, ValueError, OSError):
            pass
        gunicorn_util.close(sock)

    def _drop(self, conn: Any) -> None:
        self.reading.pop(conn, None)
        self._unregister(conn)
        self._close(conn)

    def _unregister(self, conn: Any) -> None:
        try:
            self.poller.unregister(conn.ldp_sock.sock)
        except (KeyError, ValueError, OSError):
            pass

    def _close(self, conn: Any) -> None:
        self.nr_conns -= 1
        gunicorn_util.close(conn.ldp_sock.sock)

    # -- threads ----------------------------------------------------------------------------

    def _release(self, conn: Any) -> None:
        """The request no longer counts against ``max_inflight`` (once per admission)."""
        with self._inflight_lock:
            if getattr(conn, "ldp_counted", False):
                conn.ldp_counted = False
                self.inflight -= 1

    def finish_request(self, conn: Any, fs: Any) -> None:
        # Released here only if no answer was sent (a client gone, a failure).
        if getattr(conn, "ldp_sock", None) is not None:
            conn.ldp_sock.on_answer = None
        self._release(conn)
        super().finish_request(conn, fs)
        buffered = getattr(conn, "ldp_sock", None)
        if buffered is not None and buffered.pending and conn in self.keepalived_conns:
            # Bytes of the next request are buffered here, not in the socket: the poller would
            # never see them, so read them now.
            self.keepalived_conns.remove(conn)
            self._unregister(conn)
            self.enqueue_req(conn)

    def handle(self, conn: Any) -> Any:
        """Serve one request in a thread, unless its client has already gone."""
        if conn.ldp_sock.client_gone():
            # Logged and counted as 499 (nginx's "client closed request"); nothing ran.
            head = getattr(conn, "ldp_head", None)
            method = head.method if head is not None else "-"
            started = getattr(conn, "ldp_started", time.monotonic())
            self._record(method, self._template(head), CLIENT_GONE, started, 0)
            return False
        return super().handle(conn)

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """gunicorn's answer to a request it could not parse, in the collector's JSON shape.

        Logged without the client address (gunicorn's own handler logs ``ip=``).
        """
        status, code, message = _parse_error(exc)
        if status == 500:
            self.log.exception("error handling request")
        else:
            self.log.warning("invalid request (%s): %s", code, message[:200])
        body = _envelope(status, code, message)
        try:
            client.setblocking(False)
            client.send(_http_answer(status, _REASONS.get(status, "Error"), body, {}))
        except Exception:  # the client may be gone; nothing to answer
            pass
        method = getattr(req, "method", None) or "-"
        self._record(method, "unmatched", status, time.monotonic(), len(body))


_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    413: "Payload Too Large",
    414: "URI Too Long",
    417: "Expectation Failed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


def _parse_error(exc: BaseException) -> tuple[int, str, str]:
    """(status, code, message) for an exception gunicorn's HTTP parser raised."""
    e = http_errors
    if isinstance(exc, (e.InvalidResponseHeader, e.InvalidResponseHeaderName)):
        return 500, "internal_error", "the collector failed; the error has been logged"
    table: list[tuple[type[BaseException] | tuple[type[BaseException], ...], int, str, str]] = [
        (e.LimitRequestLine, 414, *SERVER_ERRORS[414]),
        (e.LimitRequestHeaders, 431, *SERVER_ERRORS[431]),
        (e.UnsupportedTransferCoding, 501, "not_implemented", "unsupported transfer coding"),
        (e.ExpectationFailed, 417, "expectation_failed", "unsupported Expect header"),
    ]
    for kind, status, code, message in table:
        if isinstance(exc, kind):
            return status, code, f"{message}: {exc}"[:300]
    if isinstance(exc, e.ParseException):
        code, what = SERVER_ERRORS[400]
        return 400, code, f"{what}: {exc}"[:300]
    return 500, "internal_error", "the collector failed; the error has been logged"


def _envelope(status: int, code: str, message: str) -> bytes:
    """The collector's JSON error body (``collector.errors.APIError``), encoded."""
    return json.dumps(APIError(status, code, message).body(), separators=(",", ":")).encode()


def _http_answer(status: int, reason: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body
