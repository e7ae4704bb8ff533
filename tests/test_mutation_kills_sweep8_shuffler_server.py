"""The shuffler's own server (``shuffler.server.ShufflerServer``), run in process: what the
eighth mutation sweep found unchecked on the lines f293b03 added (docs/MUTATION.md, "eighth
sweep").

* The 503 beyond ``max_connections`` is the collector's error envelope: ``status`` in the body
  is the answer's status (503), and refusing a connection logs no error (the refusal is the
  server working as documented, not a failure an operator must look at).
* An error handling a request is logged with its traceback (what failed), never the client's
  address.
* ``client_timeout`` must be above 0 and ``max_connections`` at least 1: the CLI's smallest
  values (0.1 s, 1) are taken, 0, negative and NaN refused.
* The per-connection deadline, on a fake clock the test moves (``shuffler.server.time``): a
  connection is left alone before its deadline, and shut once the clock is a quarter of the
  timeout past it (the reaper wakes every quarter of the timeout, at most every second). The
  waits for the server's threads are generous bounds on real time; nothing asserts how long
  anything took.
"""

from __future__ import annotations

import json
import logging
import math
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import shuffler.server as server_module
from shuffler.server import ShufflerServer
from tests.support.waiting import eventually

#: Generous bound for the server's threads (not a timing claim).
BOUND = 30.0


#: ``GET /slow`` waits in the app for this (a staging write held up, say).
SLOW = threading.Event()
ENTERED = threading.Event()


def _app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    if environ.get("PATH_INFO") == "/slow":
        ENTERED.set()
        SLOW.wait(BOUND)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


@contextmanager
def running(**options: Any) -> Iterator[ShufflerServer]:
    server = ShufflerServer("127.0.0.1", 0, _app, **options)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(BOUND)


def _connect(server: ShufflerServer) -> socket.socket:
    host, port = server.server_address[:2]
    return socket.create_connection((str(host), int(port)), timeout=BOUND)


def _read_to_end(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def _get(server: ShufflerServer) -> int:
    with _connect(server) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: shuffler\r\nConnection: close\r\n\r\n")
        return _parse(_read_to_end(s))[0]


def _hold_one(server: ShufflerServer) -> socket.socket:
    """An idle connection (half a request) the server has accepted."""
    return _hold_one_more(server, 1)


def _hold_one_more(server: ShufflerServer, open_then: int) -> socket.socket:
    """An idle connection, accepted: the server has ``open_then`` connections open then."""
    s = _connect(server)
    s.sendall(b"POST /v1/submit HTTP/1.1\r\nHost: shuffler\r\n")
    eventually(lambda: server.open_connections, lambda n: n == open_then, what="the accept")
    return s


def test_the_503_beyond_the_cap_is_the_error_envelope_of_a_503() -> None:
    with running(max_connections=1) as server:
        idle = _hold_one(server)
        try:
            with _connect(server) as s:
                status, headers, body = _parse(_read_to_end(s))
        finally:
            idle.close()
        assert status == 503
        assert headers["retry-after"] == "1"
        assert int(headers["content-length"]) == len(body)
        error = json.loads(body)["error"]
        assert error["code"] == "overloaded"
        assert error["status"] == 503  # the envelope's status is the answer's
        eventually(lambda: server.open_connections, lambda n: n == 0, what="the idle close")
        assert _get(server) == 200


def test_refusing_a_connection_beyond_the_cap_logs_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR)
    with running(max_connections=1) as server:
        idle = _hold_one(server)
        try:
            with _connect(server) as s:
                # To the end: the server has finished with this connection once it is closed.
                assert _parse(_read_to_end(s))[0] == 503
        finally:
            idle.close()
        eventually(lambda: server.open_connections, lambda n: n == 0, what="the idle close")
        assert _get(server) == 200
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


def test_a_failed_request_is_logged_with_its_traceback_and_no_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR)
    with running() as server:
        with _connect(server) as s:
            port = s.getsockname()[1]
            s.sendall(b"GET http://[x/healthz HTTP/1.1\r\nHost: shuffler\r\n\r\n")
            _read_to_end(s)
        records = eventually(
            lambda: [r for r in caplog.records if r.name == "shuffler.server"],
            bool,
            what="the error log",
        )
    for r in records:
        text = logging.Formatter().format(r)
        assert "Traceback" in text, text  # what failed, for the operator
        assert "127.0.0.1'" not in text and str(port) not in text


@pytest.mark.parametrize(
    "options",
    [
        {"client_timeout": 0},
        {"client_timeout": -1},
        {"client_timeout": math.nan},
        {"max_connections": 0},
        {"max_connections": -1},
    ],
)
def test_a_timeout_not_above_0_or_a_cap_below_1_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="client_timeout must be > 0"):
        ShufflerServer("127.0.0.1", 0, _app, **options)


def test_the_address_and_app_may_be_named_and_the_limits_must_be() -> None:
    """``ShufflerServer(host, port, app, *, client_timeout, max_connections)``: a positional
    fourth argument is refused rather than taken for the timeout."""
    server = ShufflerServer(host="127.0.0.1", port=0, app=_app)
    server.server_close()
    with pytest.raises(TypeError):
        ShufflerServer("127.0.0.1", 0, _app, 5.0)  # type: ignore[misc]


def test_the_clis_smallest_timeout_and_cap_are_taken() -> None:
    """``ldp shuffle --client-timeout 0.1 --max-connections 1`` (the options' minimums)."""
    for timeout in (0.1, 0.5):
        server = ShufflerServer("127.0.0.1", 0, _app, client_timeout=timeout, max_connections=1)
        server.server_close()
        assert (server.client_timeout, server.max_connections) == (timeout, 1)


class FakeClock:
    """``shuffler.server.time`` for the test: ``monotonic`` reads ``now``, which only the test
    moves; ``sleep(d)`` returns once ``now`` has reached its end. Records each sleep's start and
    end, so the test knows when the reaper has looked at the connections and slept again (only
    those of threads started after the clock: other tests' servers' reapers sleep on it too)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[tuple[float, float]] = []
        self.released = False
        self._cond = threading.Condition()
        self._older = set(threading.enumerate())

    def monotonic(self) -> float:
        with self._cond:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._cond:
            until = self.now + seconds
            if threading.current_thread() not in self._older:
                self.sleeps.append((self.now, until))
            self._cond.notify_all()
            self._cond.wait_for(lambda: self.now >= until or self.released)

    def set(self, now: float) -> None:
        with self._cond:
            self.now = now
            self._cond.notify_all()

    def looked_at(self, now: float) -> bool:
        """Whether the reaper has checked the connections at ``now`` or later (and slept)."""
        with self._cond:
            return any(start >= now for start, _ in self.sleeps)

    def next_wake(self) -> float:
        with self._cond:
            return self.sleeps[-1][1]

    def release(self) -> None:
        with self._cond:
            self.released = True
            self._cond.notify_all()


@contextmanager
def fake_clock() -> Iterator[FakeClock]:
    clock = FakeClock()
    real = server_module.time
    server_module.time = clock  # type: ignore[assignment]
    try:
        yield clock
    finally:
        server_module.time = real
        clock.release()


def _look(clock: FakeClock, wake: float) -> None:
    """Move the clock to ``wake`` and wait until the reaper has looked and slept again."""
    clock.set(wake)
    eventually(lambda: clock.looked_at(wake), bool, what=f"a look at {wake}")


def _shut(sock: socket.socket, wait: float) -> bool:
    """Whether the server has shut ``sock`` (readable: the end of the stream)."""
    readable, _, _ = select.select([sock], [], [], wait)
    if not readable:
        return False
    try:
        return sock.recv(100) == b""
    except OSError:
        return True


@pytest.mark.parametrize(
    ("options", "timeout", "accepted_at"),
    [
        ({"client_timeout": 0.4}, 0.4, 0.001),  # just after the reaper's first look
        ({"client_timeout": 0.5}, 0.5, 0.0),  # at a look: its deadline falls on a look
        ({"client_timeout": 2.0}, 2.0, 0.001),  # looks every half second
        ({}, 30.0, 0.0),
    ],
    ids=["0.4 s after a look", "0.5 s at a look", "2 s after a look", "the default of 30 s"],
)
def test_a_connection_is_left_alone_before_its_deadline_and_shut_after_it(
    options: dict[str, Any], timeout: float, accepted_at: float
) -> None:
    """The default is docs/SHUFFLE.md's (``--client-timeout`` default 30). A connection whose
    deadline falls on one of the reaper's looks is shut at that look (its time is up)."""
    with fake_clock() as clock, running(**options) as server:
        eventually(lambda: clock.sleeps, bool, what="the reaper's first sleep")
        clock.set(accepted_at)
        idle = _hold_one(server)
        try:
            deadline = accepted_at + timeout
            # The reaper looks at every one of its wakes until the deadline: never shut.
            while clock.next_wake() < deadline:
                _look(clock, clock.next_wake())
            assert clock.now > deadline - min(1.0, timeout / 4) - 1e-9  # looked until then
            assert not _shut(idle, 0.3), f"shut by {clock.now}, before its deadline {deadline}"
            # Past it, the connection goes at the reaper's next look: by a quarter of the
            # timeout (at most a second) after the deadline.
            wake = clock.next_wake()
            assert wake <= deadline + min(1.0, timeout / 4) + 1e-9, (wake, clock.sleeps[-5:])
            _look(clock, wake)
            assert _shut(idle, BOUND)
        finally:
            idle.close()


def test_the_default_cap_is_the_documented_256_connections() -> None:
    """docs/SHUFFLE.md: ``--max-connections`` default 256; one more is answered 503."""
    with running() as server:
        held: list[socket.socket] = []
        try:
            for _ in range(256):
                held.append(_connect(server))
            eventually(lambda: server.open_connections, lambda n: n == 256, what="256 accepts")
            assert not any(_shut(s, 0) for s in held)  # all 256 taken, none refused
            with _connect(server) as s:
                assert _parse(_read_to_end(s))[0] == 503
        finally:
            for s in held:
                s.close()


def test_a_connection_in_use_is_not_cut_by_the_reapers_looks() -> None:
    """A request sent in two parts with the reaper's looks in between is answered."""
    with fake_clock() as clock, running(client_timeout=10) as server:
        eventually(lambda: clock.sleeps, bool, what="the reaper's first sleep")
        idle = _hold_one(server)
        try:
            for _ in range(3):  # three looks, all long before the deadline of 10 s
                _look(clock, clock.next_wake())
            assert clock.now < 10
            idle.sendall(b"Connection: close\r\nContent-Length: 0\r\n\r\n")
            assert _parse(_read_to_end(idle))[0] == 200
        finally:
            idle.close()


def test_the_reaper_outlives_a_connection_it_cannot_shut_again() -> None:
    """A connection past its deadline whose request is still in the app (its thread does not
    read the socket, so it stays open on the server) is shut at every look; once its client
    has gone, shutting it again fails (ENOTCONN). The reaper goes on: a later idle connection
    is still shut at its deadline."""
    SLOW.clear()
    ENTERED.clear()
    with fake_clock() as clock, running(client_timeout=0.4) as server:
        try:
            eventually(lambda: clock.sleeps, bool, what="the reaper's first sleep")
            clock.set(0.001)
            stuck = _connect(server)
            stuck.sendall(b"GET /slow HTTP/1.1\r\nHost: shuffler\r\nConnection: close\r\n\r\n")
            assert ENTERED.wait(BOUND)
            while clock.next_wake() < 0.401:
                _look(clock, clock.next_wake())
            _look(clock, clock.next_wake())
            assert _shut(stuck, BOUND)  # shut while its thread is in the app
            stuck.close()
            time.sleep(0.2)  # lets the client's end of the connection reach the server
            assert server.open_connections == 1  # the stuck one, still the server's
            idle = _hold_one_more(server, 2)
            try:
                deadline = clock.now + 0.4
                while clock.next_wake() < deadline:
                    _look(clock, clock.next_wake())
                _look(clock, clock.next_wake())
                assert _shut(idle, BOUND)
            finally:
                idle.close()
        finally:
            SLOW.set()
