"""Real ``requests.Response`` objects made from bytes, for fakes of a peer's network answer.

The SDK and the shuffler read every answer through ``client_sdk.transport.request_capped``,
which streams the body from ``resp.raw``; a fake session returns one of these so the same code
runs as against a socket.
"""

from __future__ import annotations

import io
import json
from typing import Any

import requests
from urllib3.response import HTTPResponse


def answer(status: int, body: Any = None, *, text: str | None = None) -> requests.Response:
    """A response with ``status`` and ``body`` as JSON (or ``text`` as it is)."""
    data = (text if text is not None else json.dumps(body)).encode()
    resp = requests.Response()
    resp.status_code = status
    resp.raw = HTTPResponse(
        body=io.BytesIO(data),
        headers={"Content-Type": "application/json", "Content-Length": str(len(data))},
        status=status,
        preload_content=False,
    )
    resp.headers = requests.structures.CaseInsensitiveDict(resp.raw.headers)
    resp.encoding = "utf-8"
    return resp
