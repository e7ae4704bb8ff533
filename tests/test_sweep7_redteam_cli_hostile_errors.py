"""``ldp ... --url`` against whatever answers at that URL: an error answer's message reaches the
terminal as text, never as its control sequences.

Before, ``ldp campaign list --url`` printed the ``message`` of a 4xx/5xx answer as sent: an OSC
sequence set the terminal's title (or made a link), a carriage return overwrote the line
(``Error: the collector answered 500: ...\\rfake: all good``). Tables and estimates were already
shown through ``printable``; the error path was not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import AbstractContextManager

import pytest

from tests.support.fake_http import JsonHandler, serving

HOSTILE = "\x1b]0;owned\x07\x1b[2J\rfake: all good"


def hostile_server(
    body: bytes, content_type: str, status: int = 500
) -> AbstractContextManager[str]:
    """A server answering every request ``status`` with ``body`` as ``content_type``."""

    class Handler(JsonHandler):
        def _raw(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _raw

    return serving(Handler)


ENVELOPE = json.dumps({"error": {"code": "x", "message": HOSTILE, "status": 500}}).encode()


@pytest.mark.parametrize(
    ("body", "content_type"),
    [(ENVELOPE, "application/json"), (HOSTILE.encode(), "text/plain")],
    ids=["envelope", "plain-text"],
)
@pytest.mark.parametrize(
    "args",
    [
        ["campaign", "list"],
        ["campaign", "show", "occupation"],
        ["campaign", "archive", "occupation"],
        ["estimate", "occupation"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_an_error_message_reaches_the_terminal_as_text(
    args: list[str], body: bytes, content_type: str
) -> None:
    with hostile_server(body, content_type) as url:
        done = subprocess.run(
            [sys.executable, "-m", "ldp_cli", *args, "--url", url, "--token", "t" * 20],
            capture_output=True,
            timeout=60,
        )
    assert done.returncode == 1
    err = done.stderr.decode()
    assert "the collector answered 500" in err
    assert "\x1b" not in err and "\r" not in err and "\x07" not in err, err
    assert "\\x1b]0;owned\\x07" in err and "\\rfake: all good" in err, err


@pytest.mark.parametrize(
    ("args", "status", "item"),
    [
        (
            ["campaign", "create", "occupation", "-e", "1", "--domain", "a,b"],
            201,
            {
                "id": "occupation",
                "mechanism": {"mechanism": "grr", "epsilon": 1.0, "domain": ["a", "b"]},
                "window": "day",
                "digest": HOSTILE,
            },
        ),
        (["campaign", "archive", "occupation"], 200, {"id": "occupation", "archived": HOSTILE}),
    ],
    ids=["create digest", "archive day"],
)
def test_a_successful_answer_reaches_the_terminal_as_text(
    args: list[str], status: int, item: dict[str, object]
) -> None:
    """The digest ``campaign create`` prints and the day ``campaign archive`` prints come from
    the collector's answer too (they were printed raw)."""
    with hostile_server(json.dumps(item).encode(), "application/json", status) as url:
        done = subprocess.run(
            [sys.executable, "-m", "ldp_cli", *args, "--url", url, "--token", "t" * 20],
            capture_output=True,
            timeout=60,
        )
    out = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, out
    assert "fake: all good" in out
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out, out
