"""Mutants of the event loop's liveness-probe parser that the tests let through.

Found by mutation testing of the lines changed since d245125 (``collector/worker.py``:
``RequestHead.plain_probe``), docs/MUTATION.md "Runs of the seventh sweep".
"""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Any

import pytest

from collector.worker import MAX_PROBE_HEAD, PROBE_BODY, CollectorWorker, RequestHead


def _head_of(size: int) -> bytes:
    """A plain probe head of exactly ``size`` bytes (one padding header field)."""
    start, end = b"GET /healthz HTTP/1.1\r\nX-Pad: ", b"\r\n\r\n"
    data = start + b"p" * (size - len(start) - len(end)) + end
    assert len(data) == size
    return data


def test_the_probe_head_cap_is_1024_bytes_inclusive() -> None:
    """Kills ``len(data) >= MAX_PROBE_HEAD`` and ``MAX_PROBE_HEAD = 1023`` / ``1025``: a head
    of exactly 1 KiB is the event loop's, one byte more goes to the parser."""
    assert MAX_PROBE_HEAD == 1024
    assert RequestHead.plain_probe(_head_of(1024))
    assert RequestHead.plain_probe(bytearray(_head_of(1024)))  # what the buffer holds
    assert not RequestHead.plain_probe(_head_of(1025))


@pytest.mark.parametrize("name", [b"Authorization", b"AUTHORIZATION", b"Content-Length"])
def test_a_refused_field_is_found_after_other_fields(name: bytes) -> None:
    """A field that sends the probe to the app is found wherever it is, in any case."""
    data = b"GET /healthz HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n" + name + b": 1\r\n\r\n"
    assert not RequestHead.plain_probe(data)


# -- the event loop's own answers, recorded as sent ---------------------------------------------


class _Conn:
    """What ``_probe``/``_shed`` use of gunicorn's connection: its socket and ``close``."""

    def __init__(self, sock: socket.socket) -> None:
        self.ldp_sock = SimpleNamespace(sock=sock)
        self.closed: list[bool] = []

    def close(self, graceful: bool = False) -> None:
        self.closed.append(graceful)


def _worker(recorded: list[tuple[Any, ...]]) -> CollectorWorker:
    worker = object.__new__(CollectorWorker)
    worker.nr_conns = 3
    worker.retry_after = 2
    worker._template = lambda head: "/healthz"  # type: ignore[method-assign]
    worker._record = lambda *args: recorded.append(args)  # type: ignore[method-assign]
    return worker


def _answer_of(peer: socket.socket) -> tuple[list[bytes], bytes]:
    peer.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        data += peer.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n"), body


def test_a_probe_is_answered_recorded_and_closed_gracefully_once() -> None:
    """Kills, in ``CollectorWorker._probe``: the status passed to the log and metrics 201 or
    199 for 200, ``formatdate(usegmt=False)`` (a ``Date`` of ``-0000``, not HTTP's ``GMT``),
    ``nr_conns -= 2`` or ``-= 0`` (the close parks the socket and counts it again, so the
    connection is given back exactly once) and ``graceful=False`` (a plain close can turn the
    client's late bytes into a reset that cuts the answer)."""
    recorded: list[tuple[Any, ...]] = []
    worker = _worker(recorded)
    ours, peer = socket.socketpair()
    try:
        conn = _Conn(ours)
        head = RequestHead(b"GET /healthz HTTP/1.1\r\n\r\n")
        worker._probe(conn, head)
        lines, body = _answer_of(peer)
    finally:
        ours.close()
        peer.close()
    assert lines[0] == b"HTTP/1.1 200 OK" and body == PROBE_BODY
    date = next(line for line in lines if line.startswith(b"Date: "))
    assert date.endswith(b" GMT")
    assert [(r[0], r[1], r[2], r[4]) for r in recorded] == [
        ("GET", "/healthz", 200, len(PROBE_BODY))
    ]
    assert worker.nr_conns == 2 and conn.closed == [True]


def test_a_shed_request_is_recorded_as_the_503_it_was_sent() -> None:
    """Kills 504 and 502 for 503 in ``_shed``'s call of ``_send_own``: the access log and the
    metrics count what the client got."""
    recorded: list[tuple[Any, ...]] = []
    worker = _worker(recorded)
    closed: list[Any] = []
    worker._close = closed.append  # type: ignore[method-assign,assignment]
    ours, peer = socket.socketpair()
    try:
        conn = _Conn(ours)
        worker._shed(conn, RequestHead(b"POST /v1/reports HTTP/1.1\r\n\r\n"))
        lines, body = _answer_of(peer)
    finally:
        ours.close()
        peer.close()
    assert lines[0] == b"HTTP/1.1 503 Service Unavailable"
    assert [(r[0], r[2], r[4]) for r in recorded] == [("POST", 503, len(body))]
    assert closed == [conn]
