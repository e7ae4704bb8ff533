"""Answers no collector should send, read by the device: endless, compressed past any size,
or dribbled a few bytes at a time.

The device read whatever came into memory, for as long as it came (``requests`` without a cap;
its read timeout is per socket read, so a body sent a byte every few seconds never timed out).
A hostile or broken collector could so fill the app's memory, or hold the upload thread for ever.
Now every answer is read through ``transport.request_capped``: at most ``MAX_ANSWER_BYTES`` after
decompression, within ``MAX_ANSWER_SECONDS``; past either it is an unreadable answer, retried
later, and the connection is closed. The collector here is a small fake HTTP server: the real
one cannot be made to misbehave like this.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from client_sdk import transport
from client_sdk.transport import DEFAULT_TIMEOUT, MAX_ANSWER_BYTES, RetryableError, Transport
from tests.support.waiting import eventually

#: The cap docs/SDK.md promises (16 MiB after decompression).
DOCUMENTED_CAP = 16 * 1024 * 1024


class Misbehaving(BaseHTTPRequestHandler):
    """``GET /v1/campaigns/<mode>`` answers 200 in the way ``mode`` names."""

    protocol_version = "HTTP/1.1"
    served: ClassVar[dict[str, int]] = {}

    def _plain(self, status: int, body: bytes, content_type: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _landed(self) -> bool:
        """A request that followed a redirect to ``/landed...``: counted, answered 200."""
        if "/landed" not in self.path:
            return False
        type(self).served["landed"] = type(self).served.get("landed", 0) + 1
        self._plain(200, b'{"id": "landed", "accepted": 1, "duplicate": 0}', "application/json")
        return True

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if not self._landed():  # every other POST is redirected, keeping its method
            self._plain(307, b"", "text/plain", Location="/landed" + self.path)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self._landed():
            return
        mode = self.path.rstrip("/").split("/")[-1]
        if mode == "redirect":
            self._plain(302, b"", "text/plain", Location="/landed")
            return
        if mode in ("exact", "over"):  # a campaign resource of 16 MiB, or one byte more
            size = DOCUMENTED_CAP + (mode == "over")
            head = b'{"id": "' + mode.encode() + b'", "pad": "'
            body = head + b" " * (size - len(head) - 2) + b'"}'
            self._plain(200, body, "application/json")
            return
        if mode == "html503":  # a proxy's error page
            self._plain(503, b"<html><body>Service Unavailable</body></html>", "text/html")
            return
        if mode == "noerror503":  # JSON, but not the error envelope
            self._plain(503, b'{"detail": "overloaded"}', "application/json")
            return
        if mode == "etag":  # a conditional GET of an unchanged resource
            if self.headers.get("If-None-Match") == '"v1"':
                self.send_response(304)
                self.send_header("ETag", '"v1"')
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self._plain(200, b'{"id": "etag"}', "application/json", ETag='"v1"')
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        sent = 0
        try:
            if mode == "endless":  # chunked, never ending: 1 MiB at a time
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b" " * (1 << 20)
                while sent < 4 * MAX_ANSWER_BYTES:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    sent += len(chunk)
            elif mode == "bomb":  # 33 kB of gzip that inflates to twice the cap
                body = gzip.compress(b" " * (2 * MAX_ANSWER_BYTES), compresslevel=9)
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                sent = len(body)
            elif mode == "dribble":  # a valid JSON body, one byte every 0.2 s
                body = b'{"id": "dribble"' + b" " * 200 + b"}"
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for i in range(len(body)):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    sent += 1
                    time.sleep(0.2)
        except OSError:  # the device hung up: what the cap is for
            pass
        type(self).served[mode] = sent

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, type[Misbehaving]]]:
    handler = type("Collector", (Misbehaving,), {"served": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


@pytest.fixture
def client(collector: tuple[str, type[Misbehaving]]) -> Iterator[Transport]:
    """The device's transport to the misbehaving collector."""
    transport = Transport(collector[0], "t" * 20)
    yield transport
    transport.close()


@pytest.mark.parametrize("mode", ["endless", "bomb"])
def test_an_answer_past_the_size_cap_is_not_read(
    collector: tuple[str, type[Misbehaving]], client: Transport, mode: str
) -> None:
    url, handler = collector
    with pytest.raises(RetryableError, match=f"more than {MAX_ANSWER_BYTES} bytes"):
        client.fetch_campaign(mode)
    # The handler records what it sent once its writes end (the device hung up).
    served = eventually(
        lambda: handler.served.get(mode), lambda n: n is not None, what=f"the {mode} answer ended"
    )
    if mode == "endless":  # the device hung up long before the collector was done
        assert served is not None and served < 2 * MAX_ANSWER_BYTES


def test_a_dribbled_answer_is_given_up_at_the_deadline(
    client: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte every 0.2 s never trips the 10 s read timeout; the whole-answer deadline (1 s
    here, 60 s by default) ends it after about 5 of its 217 bytes."""
    monkeypatch.setattr(transport, "MAX_ANSWER_SECONDS", 1.0)
    started = time.monotonic()
    with pytest.raises(RetryableError, match="took more than 1 s"):
        client.fetch_campaign("dribble")
    assert time.monotonic() - started < 20  # the body alone would take 43 s


def test_the_cap_is_the_documented_16_mib_exactly(
    client: Transport,
) -> None:
    fetched = client.fetch_campaign("exact")
    assert fetched.body is not None and fetched.body["id"] == "exact"
    with pytest.raises(RetryableError, match="more than"):
        client.fetch_campaign("over")


@pytest.mark.parametrize("mode", ["endless", "bomb"])
def test_the_cap_holds_without_read1(
    client: Transport,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    """urllib3 before 2.3 has no ``read1``: the fallback reads ``iter_content`` chunks."""
    from urllib3.response import BaseHTTPResponse, HTTPResponse

    monkeypatch.delattr(HTTPResponse, "read1")
    monkeypatch.delattr(BaseHTTPResponse, "read1")
    with pytest.raises(RetryableError, match=f"more than {MAX_ANSWER_BYTES} bytes"):
        client.fetch_campaign(mode)
    assert client.fetch_campaign("exact").body is not None


@pytest.mark.parametrize("mode", ["html503", "noerror503"])
def test_an_error_answer_without_the_envelope_is_still_retried(
    client: Transport, mode: str
) -> None:
    """A proxy's HTML page or JSON without ``error``: a 503 to retry, with no code."""
    with pytest.raises(RetryableError, match="collector answered 503") as raised:
        client.fetch_campaign(mode)
    assert raised.value.status == 503


def test_an_unchanged_resource_is_not_fetched_again(
    client: Transport,
) -> None:
    first = client.fetch_campaign("etag")
    assert first.body == {"id": "etag"} and first.etag == '"v1"'
    again = client.fetch_campaign("etag", etag=first.etag)
    assert again.body is None and again.etag == '"v1"'


def test_the_timeouts_are_the_documented_ones() -> None:
    """docs/SDK.md's table of options states the connect and read timeouts."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "SDK.md").read_text()
    connect, read = DEFAULT_TIMEOUT
    assert f"| `timeout` | ({connect:g}, {read:g}) s |" in doc


def test_redirects_are_not_followed(
    collector: tuple[str, type[Misbehaving]], client: Transport
) -> None:
    """A collector's 3xx would have sent the device's reports, and its address, to any host the
    answer named (requests follows redirects, a 307 with the POST body). The device talks only
    to the host it was configured with: a redirect is an error to retry, naming the target."""
    from client_sdk.sealed import SealedTransport

    url, handler = collector
    with pytest.raises(RetryableError, match="redirect to '/landed'.*does not follow"):
        client.fetch_campaign("redirect")
    with pytest.raises(RetryableError, match="307, a redirect"):
        client.post_reports("c", "d1", [{"id": "0" * 32, "payload": "AA=="}])
    # A shuffler's redirect is not a staged message (it was taken as one: any status
    # below 400 counted as delivered).
    sealed = SealedTransport(url, "t" * 20)
    try:
        with pytest.raises(RetryableError, match="shuffler answered 307"):
            sealed._submit(url, "bWVzc2FnZQ==")
    finally:
        sealed.close()
    assert "landed" not in handler.served


class Miscounting(BaseHTTPRequestHandler):
    """Answers every POST 200 with ``answer``: counts the real collector never sends."""

    protocol_version = "HTTP/1.1"
    answer: ClassVar[bytes] = b"{}"

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = type(self).answer
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _error(index: int) -> dict[str, Any]:
    return {"index": index, "reason": f"report #{index}: bad"}


@pytest.mark.parametrize(
    ("answer", "readable"),
    [
        ({"accepted": 1, "duplicate": 1, "rejected": 1, "errors": [_error(2)]}, True),
        ({"accepted": 0, "duplicate": 0, "rejected": 0, "errors": []}, False),
        ({"accepted": -5, "duplicate": 8, "rejected": 0, "errors": []}, False),
        ({"accepted": 3, "duplicate": 0, "rejected": 0, "errors": [], "x": 1}, True),
        ({"accepted": 1, "duplicate": 0, "rejected": 2, "errors": [_error(1), _error(1)]}, False),
        ({"accepted": 4, "duplicate": 0, "rejected": 0, "errors": []}, False),
    ],
    ids=["exact", "nothing", "negative", "extra-field", "same-index-twice", "too-many"],
)
def test_an_answer_that_does_not_account_for_the_batch_is_unreadable(
    answer: dict[str, Any], readable: bool
) -> None:
    """A 200 whose counts do not add up to the batch removed reports the collector never took
    (and moved the ``accepted`` counter by the collector's numbers, -5 included): it is an
    unreadable answer now, so the batch stays and is retried."""
    import json

    handler = type("Server", (Miscounting,), {"answer": json.dumps(answer).encode()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    t = Transport(f"http://127.0.0.1:{httpd.server_address[1]}", "t" * 20, timeout=DEFAULT_TIMEOUT)
    reports = [{"id": f"{i:032x}", "day": "2026-11-27", "payload": "AA=="} for i in range(3)]
    try:
        if readable:
            result = t.post_reports("c", "d1", reports)
            assert result.accepted + result.duplicate + len(result.rejected) == 3
        else:
            with pytest.raises(RetryableError, match="does not account for the batch"):
                t.post_reports("c", "d1", reports)
    finally:
        t.close()
        httpd.shutdown()
        httpd.server_close()
