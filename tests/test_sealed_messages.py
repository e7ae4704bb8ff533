"""Opening sealed messages on the collector (collector/sealed.py): what is refused, and why.

Real sealed boxes (PyNaCl) to a real key; every refusal is a :class:`SealedError` naming the
problem, reported per message, never another exception (which would fail the whole request).
"""

from __future__ import annotations

import base64
import json
import os

import pytest
from nacl.public import PrivateKey, SealedBox

from collector.sealed import MAX_MESSAGE_BYTES, SealedError, SealedKey

KEY = bytes(PrivateKey.generate())
BODY = {"campaign": "c", "digest": "d" * 64, "report": {"id": "r" * 16}}


def seal(plain: bytes, key: bytes = KEY) -> str:
    return base64.b64encode(SealedBox(PrivateKey(key).public_key).encrypt(plain)).decode()


def test_a_sealed_report_opens() -> None:
    opened = SealedKey(KEY).open(seal(json.dumps(BODY).encode()))
    assert (opened.campaign, opened.digest, opened.report) == ("c", "d" * 64, {"id": "r" * 16})


def test_a_message_of_64_kib_is_read_and_one_byte_more_is_not() -> None:
    assert MAX_MESSAGE_BYTES == 64 * 1024  # docs/HTTP_API.md: 65,536 characters
    key = SealedKey(KEY)
    # Valid base64 of exactly the limit: refused only because it does not open.
    with pytest.raises(SealedError, match="does not open"):
        key.open("A" * MAX_MESSAGE_BYTES)
    with pytest.raises(SealedError, match="at most 65536 bytes"):
        key.open("A" * (MAX_MESSAGE_BYTES + 1))


@pytest.mark.parametrize("missing", ["campaign", "digest", "report"])
def test_an_opened_message_missing_a_key_is_refused(missing: str) -> None:
    body = {k: v for k, v in BODY.items() if k != missing}
    with pytest.raises(SealedError, match="must be an object with campaign, digest, report"):
        SealedKey(KEY).open(seal(json.dumps(body).encode()))


def test_an_opened_message_with_another_key_is_refused() -> None:
    body = {**BODY, "device": "x"}
    with pytest.raises(SealedError, match="must be an object with campaign, digest, report"):
        SealedKey(KEY).open(seal(json.dumps(body).encode()))


@pytest.mark.parametrize("plain", [b"\xff\xfe", b"{", b"[" * 40_000])
def test_an_opened_message_that_is_not_json_is_refused(plain: bytes) -> None:
    with pytest.raises(SealedError, match="not UTF-8 JSON"):
        SealedKey(KEY).open(seal(plain))


def test_a_message_sealed_to_another_key_is_refused() -> None:
    with pytest.raises(SealedError, match="does not open"):
        SealedKey(KEY).open(seal(json.dumps(BODY).encode(), key=os.urandom(32)))
