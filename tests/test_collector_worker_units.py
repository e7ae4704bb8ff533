"""The collector's gunicorn worker, its parts in process: the request head the event loop reads,
the socket that hands buffered bytes to the request thread, and the answers the worker gives
itself (parse errors, overload). tests/test_collector_hardening.py runs it under gunicorn."""

from __future__ import annotations

import json
import selectors
import socket
import time
from collections.abc import Iterator

import pytest
from gunicorn.http import errors as http_errors

from collector.worker import (
    _REASONS,
    CLIENT_GONE,
    LINGER_DRAIN,
    LINGER_SECONDS,
    MAX_HEAD_BYTES,
    NEVER_SHED,
    BufferedSocket,
    CollectorWorker,
    RequestHead,
    _envelope,
    _http_answer,
    _parse_error,
)


def test_the_worker_constants() -> None:
    """docs/COLLECTOR.md ("Slow clients and overload"): heads up to 64 KiB, 2 s and 64 KiB of
    lingering, 499 for a client gone, /healthz never shed."""
    assert MAX_HEAD_BYTES == 64 * 1024 == LINGER_DRAIN
    assert LINGER_SECONDS == 2.0
    assert CLIENT_GONE == 499
    assert NEVER_SHED == frozenset({"/healthz"})


# -- the request head ---------------------------------------------------------------------------


def test_an_incomplete_head_says_nothing_yet() -> None:
    head = RequestHead(b"POST /v1/reports HTTP/1.1\r\nContent-Length: 5\r\n")
    assert (head.complete, head.head_bytes, head.method, head.path) == (False, 0, "", "")
    assert head.content_length is None and head.chunked is False


def test_a_complete_head_gives_method_path_and_body_length() -> None:
    raw = b"POST /v1/campaigns/occ/reports?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n"
    head = RequestHead(bytearray(raw + b"{}"))
    assert head.complete and head.head_bytes == len(raw)
    assert (head.method, head.path) == ("POST", "/v1/campaigns/occ/reports")
    assert head.content_length == 12 and head.chunked is False


def test_header_names_are_matched_whatever_their_case_and_spacing() -> None:
    head = RequestHead(b"PUT /a HTTP/1.1\r\ncontent-LENGTH :  7 \r\nX-Other: 3\r\n\r\n")
    assert head.content_length == 7
    chunked = RequestHead(b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert chunked.chunked is True and chunked.content_length is None


def test_a_bad_content_length_is_left_to_the_parser() -> None:
    head = RequestHead(b"POST /a HTTP/1.1\r\nContent-Length: twelve\r\n\r\n")
    assert head.complete and head.content_length is None and not head.chunked


def test_a_request_line_without_a_path_has_none() -> None:
    head = RequestHead(b"GARBAGE\r\nHost: a\r\n\r\n")
    assert head.complete and (head.method, head.path) == ("", "")
    latin = RequestHead(b"GET /caf\xe9 HTTP/1.1\r\n\r\n")
    assert latin.path == "/caf\xe9" and latin.head_bytes == len(b"GET /caf\xe9 HTTP/1.1\r\n\r\n")


# -- the buffered socket ------------------------------------------------------------------------


@pytest.fixture()
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_buffered_bytes_come_first_then_the_socket(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = pair
    buffered = BufferedSocket(ours, io_timeout=5.0)
    buffered.pending += b"abcdef"
    peer.sendall(b"XYZ")
    assert buffered.recv(4) == b"abcd"
    assert buffered.recv(100) == b"ef"  # never mixes the buffer and the socket in one read
    assert buffered.recv(100) == b"XYZ"
    buffered.pending += b"123456"
    into = bytearray(4)
    assert buffered.recv_into(into) == 4 and into == b"1234"  # nbytes 0: the buffer's size
    into = bytearray(10)
    assert buffered.recv_into(into, 1) == 1 and into[:1] == b"5"
    assert buffered.recv_into(into) == 1 and into[:1] == b"6"
    peer.sendall(b"QR")
    assert buffered.recv_into(into, 10) == 2 and into[:2] == b"QR"


def test_the_answer_releases_the_request_once_and_an_interim_answer_does_not(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = pair
    buffered = BufferedSocket(ours, io_timeout=5.0)
    released: list[int] = []
    buffered.on_answer = lambda: released.append(1)
    buffered.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert released == []
    buffered.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert released == [1] and buffered.on_answer is None
    buffered.sendall(b"more of the body")
    assert released == [1]
    buffered.on_answer = lambda: released.append(2)
    assert buffered.send(b"HTTP/1.1 503 Service Unavailable\r\n\r\n") > 0
    assert released == [1, 2]
    peer.settimeout(5)
    assert peer.recv(1000).startswith(b"HTTP/1.1 100 Continue")


def test_blocking_means_blocking_with_the_io_timeout(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, _ = pair
    buffered = BufferedSocket(ours, io_timeout=3.5)
    buffered.setblocking(True)
    assert ours.gettimeout() == 3.5
    buffered.setblocking(False)
    assert ours.gettimeout() == 0.0
    assert buffered.fileno() == ours.fileno()  # everything else is the socket's


def test_client_gone_peeks_without_consuming_or_blocking(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = pair
    ours.settimeout(7.0)
    buffered = BufferedSocket(ours, io_timeout=7.0)
    assert buffered.client_gone() is False  # connected, nothing sent: no wait
    peer.sendall(b"next request")
    assert buffered.client_gone() is False
    assert ours.recv(100) == b"next request"  # the peek consumed nothing
    peer.close()
    assert buffered.client_gone() is True
    assert ours.gettimeout() == 7.0  # the socket's timeout is put back


# -- answers the worker gives itself ------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (http_errors.LimitRequestLine(9000, 4094), 414, "uri_too_long"),
        (http_errors.LimitRequestHeaders("too many"), 431, "headers_too_large"),
        (http_errors.UnsupportedTransferCoding("gzip"), 501, "not_implemented"),
        (http_errors.ExpectationFailed("200-ok"), 417, "expectation_failed"),
        (http_errors.InvalidRequestLine("GARBAGE"), 400, "bad_request"),
        (http_errors.InvalidHeader("X"), 400, "bad_request"),
        (http_errors.InvalidResponseHeader("X"), 500, "internal_error"),
        (http_errors.InvalidResponseHeaderName("X"), 500, "internal_error"),
        (RuntimeError("boom"), 500, "internal_error"),
    ],
)
def test_each_parse_error_has_its_status_and_code(
    exc: BaseException, status: int, code: str
) -> None:
    got_status, got_code, message = _parse_error(exc)
    assert (got_status, got_code) == (status, code)
    assert got_status in _REASONS  # the status line says "400 Bad Request", not "400 Error"
    assert len(message) <= 300
    if status == 500:
        assert message == "the collector failed; the error has been logged"  # no internals
    else:
        assert str(exc) in message


def test_a_parse_error_message_is_cut_at_300_characters() -> None:
    _, _, message = _parse_error(http_errors.InvalidRequestLine("G" * 1000))
    assert len(message) == 300
    assert message.startswith("malformed HTTP request: Invalid HTTP request line")
    _, _, message = _parse_error(http_errors.LimitRequestHeaders("h" * 1000))
    assert len(message) == 300


def test_the_worker_answers_in_the_collectors_error_shape() -> None:
    body = _envelope(503, "overloaded", "at capacity")
    assert json.loads(body) == {
        "error": {"code": "overloaded", "message": "at capacity", "status": 503}
    }
    assert b" " not in body.replace(b"at capacity", b"")  # compact
    answer = _http_answer(503, "Service Unavailable", body, {"Retry-After": "2"})
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert rest == body
    assert head.split(b"\r\n") == [
        b"HTTP/1.1 503 Service Unavailable",
        b"Content-Type: application/json",
        b"Retry-After: 2",
        f"Content-Length: {len(body)}".encode(),
        b"Connection: close",
    ]


# -- lingering connections ----------------------------------------------------------------------


def _worker_state() -> CollectorWorker:
    """A worker's lingering bookkeeping alone (no gunicorn arbiter): the poller, the parked
    sockets and the connection count that gunicorn compares with ``worker_connections``."""
    worker = object.__new__(CollectorWorker)
    worker.poller = selectors.DefaultSelector()
    worker.lingering = {}
    worker.nr_conns = 0
    return worker


def _park(worker: CollectorWorker, sock: socket.socket) -> None:
    worker.poller.register(sock, selectors.EVENT_READ, worker._lingered)
    worker.lingering[sock] = (time.monotonic() + 2.0, 0)
    worker.nr_conns += 1


def test_ending_a_linger_gives_its_connection_back_once(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """A parked socket counts as a connection until it is closed, and only once: a count that
    drifted up would stop the worker accepting at the cap, one that drifted down would let
    parked sockets pile up past it."""
    ours, _ = pair
    worker = _worker_state()
    _park(worker, ours)
    worker.nr_conns += 4  # four other connections
    worker._end_linger(ours)
    assert worker.nr_conns == 4 and worker.lingering == {}
    assert ours.fileno() == -1  # closed
    worker._end_linger(ours)  # again (deadline and EOF at once): nothing more to give back
    assert worker.nr_conns == 4


def test_a_lingering_socket_is_read_until_the_client_closes_or_the_drain_is_reached() -> None:
    worker = _worker_state()
    a, peer_a = socket.socketpair()
    b, peer_b = socket.socketpair()
    try:
        for sock in (a, b):
            sock.setblocking(False)
            _park(worker, sock)
        peer_a.sendall(b"late bytes")
        worker._lingered(a)
        assert worker.lingering[a][1] == len(b"late bytes") and worker.nr_conns == 2
        worker._lingered(a)  # nothing to read (a spurious wake-up): still parked
        assert a in worker.lingering
        peer_a.close()
        worker._lingered(a)  # the client's end: closed
        assert a not in worker.lingering and a.fileno() == -1 and worker.nr_conns == 1
        peer_b.sendall(b"z" * (LINGER_DRAIN + 10))  # a client that keeps sending
        while b in worker.lingering:
            worker._lingered(b)
        assert b.fileno() == -1 and worker.nr_conns == 0
    finally:
        for sock in (a, b, peer_a, peer_b):
            sock.close()
