"""Hostile clients of a real ``ldp shuffle`` (no token is needed to reach it).

* Connections that send half a request and then nothing held a thread and a descriptor each
  for ever: with 256 descriptors, 250 of them kept every device's submission from being
  answered for as long as they stayed open.
* A request the server could not parse (``GET http://[x/healthz``) made socketserver print the
  client's address and port on standard error, which the shuffler promises never to keep.
"""

from __future__ import annotations

import base64
import socket
import time
from pathlib import Path

import pytest
import requests

from tests.support.waiting import eventually

pytest.importorskip("nacl")

from tests.support.shuffler import ldp_shuffle  # noqa: E402 - needs the shuffle extra

MESSAGE = base64.b64encode(b"x" * 100).decode()


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _submit(url: str) -> int | str:
    try:
        return requests.post(url + "/v1/submit", json={"message": MESSAGE}, timeout=5).status_code
    except requests.RequestException as exc:
        return type(exc).__name__


def _half_requests(url: str, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(_address(url), timeout=5)
        s.sendall(b"POST /v1/submit HTTP/1.1\r\nHost: shuffler\r\n")  # then nothing
        socks.append(s)
    return socks


def _closed_by_server(s: socket.socket) -> bool:
    s.settimeout(0.2)
    try:
        return s.recv(100) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


@pytest.mark.slow
def test_idle_connections_are_dropped_and_devices_served_again(tmp_path: Path) -> None:
    """250 half-sent requests on a shuffler with 256 descriptors: past --client-timeout the
    shuffler has closed them and a device's submission is staged (202). Before the fix the
    submission timed out as long as they stayed open."""
    with ldp_shuffle(tmp_path, ["--client-timeout", "2"], open_files=256) as (url, _, _):
        assert _submit(url) == 202
        socks = _half_requests(url, 250)
        try:
            time.sleep(4)  # past the deadline of every idle connection accepted at once
            assert _submit(url) == 202
            # Those the kernel queued while descriptors ran out are accepted (and their
            # deadline starts) only as the first ones close: all go within a few deadlines.
            eventually(
                lambda: [s for s in socks if not _closed_by_server(s)],
                lambda left: not left,
                what="idle connections the shuffler has not closed",
                timeout=30,
                interval=0.5,
            )
        finally:
            for s in socks:
                s.close()


@pytest.mark.slow
def test_a_trickling_client_is_cut_at_its_deadline(tmp_path: Path) -> None:
    """One header byte every 0.3 s never lets a per-read timeout fire: the deadline counts from
    the accept."""
    with ldp_shuffle(tmp_path, ["--client-timeout", "1.5"]) as (url, _, _):
        s = socket.create_connection(_address(url), timeout=5)
        s.sendall(b"POST /v1/submit HTTP/1.1\r\n")
        started = time.monotonic()
        cut = False
        try:
            while time.monotonic() - started < 8:
                try:
                    s.sendall(b"X")
                except OSError:
                    cut = True
                    break
                if _closed_by_server(s):
                    cut = True
                    break
                time.sleep(0.1)
        finally:
            s.close()
        assert cut
        assert time.monotonic() - started < 5


@pytest.mark.slow
def test_connections_over_the_cap_get_503_at_once(tmp_path: Path) -> None:
    """With --max-connections 20 and 20 idle connections held, a device is answered 503 with
    Retry-After at once (not left waiting), and 202 once the idle ones are gone."""
    args = ["--max-connections", "20", "--client-timeout", "3"]
    with ldp_shuffle(tmp_path, args) as (url, _, _):
        socks = _half_requests(url, 20)
        try:
            time.sleep(0.3)
            started = time.monotonic()
            resp = requests.post(url + "/v1/submit", json={"message": MESSAGE}, timeout=5)
            assert resp.status_code == 503
            assert resp.headers["Retry-After"] == "1"
            assert resp.json()["error"]["code"] == "overloaded"
            assert time.monotonic() - started < 1
        finally:
            for s in socks:
                s.close()
        deadline = time.monotonic() + 5
        while _submit(url) != 202:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_an_unparsable_request_logs_no_client_address(tmp_path: Path) -> None:
    with ldp_shuffle(tmp_path) as (url, _, stderr):
        s = socket.create_connection(_address(url), timeout=5)
        port = s.getsockname()[1]
        s.sendall(b"GET http://[x/healthz HTTP/1.1\r\nHost: shuffler\r\n\r\n")
        s.settimeout(5)
        try:
            s.recv(100)
        except OSError:
            pass
        s.close()
        assert _submit(url) == 202  # still serving
        time.sleep(0.3)
    text = stderr.read_text()
    assert "127.0.0.1'" not in text and str(port) not in text, text
