"""Sealed reports: the collector's keypair and opening what devices sealed to it.

A device seals each report (one per message) to the collector's public key with a libsodium
sealed box (X25519 + XSalsa20-Poly1305, PyNaCl): the shuffler in between can neither read nor
alter it, and the collector learns nothing about the sender from it. The plaintext is the JSON
object ``{"campaign", "digest", "report": {"id", "day", "payload"}}``; the report id travels
inside, so a message forwarded twice is stored once (the ingest path's idempotent ids).

The private key lives in the file ``LDP_SEALED_KEY_FILE`` (32 raw bytes, hex; created with mode
0600 on first use when missing); the public key is served at ``GET /v1/sealed/key``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collector.errors import ConfigError

ALGORITHM = "libsodium-sealed-box-x25519-xsalsa20poly1305"
MAX_MESSAGE_BYTES = 64 * 1024
_PLAIN_KEYS = frozenset(("campaign", "digest", "report"))


class SealedError(ValueError):
    """A message that cannot be opened or does not hold one report (reported per message)."""


def _nacl() -> Any:
    try:
        import nacl.public
    except ImportError:  # pragma: no cover - depends on the installed extras
        raise ConfigError(
            "LDP_SEALED_KEY_FILE is set but PyNaCl is missing: pip install 'ldp-telemetry[shuffle]'"
        ) from None
    return nacl.public


@dataclass(frozen=True)
class SealedReport:
    """One opened message: the campaign and digest it was made for, and the report."""

    campaign: str
    digest: str
    report: dict[str, Any]


class SealedKey:
    """The collector's X25519 keypair for sealed reports."""

    def __init__(self, private_key: bytes) -> None:
        public = _nacl()
        self._private = public.PrivateKey(private_key)
        self._box = public.SealedBox(self._private)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SealedKey:
        """Read the key file, creating it (mode 0600, a fresh random key) if it is missing."""
        file = Path(path)
        if not file.exists():
            cls._create(file)
        try:
            raw = bytes.fromhex(file.read_text().strip())
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"LDP_SEALED_KEY_FILE {str(file)!r} must hold a 32-byte key in hex: {exc}"
            ) from None
        if len(raw) != 32:
            raise ConfigError(
                f"LDP_SEALED_KEY_FILE {str(file)!r} must hold a 32-byte key in hex, "
                f"got {len(raw)} bytes; delete it to have a new one made"
            )
        return cls(raw)

    @staticmethod
    def _create(file: Path) -> None:
        """Write a fresh key to ``file`` unless another process got there first.

        Every worker of ``ldp serve`` (and every replica) loads the key at start: the key is
        written whole to a private temporary file and hard-linked into place, so a concurrent
        reader sees either no file or the complete key, and exactly one key wins.
        """
        key = bytes(_nacl().PrivateKey.generate())
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", dir=file.parent)
        except OSError as exc:  # no such directory, no permission, ...
            raise ConfigError(
                f"LDP_SEALED_KEY_FILE {str(file)!r}: cannot create the key there: {exc.strerror}"
            ) from None
        try:
            with os.fdopen(fd, "w") as out:
                out.write(key.hex() + "\n")
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(tmp, file)
            except FileExistsError:
                pass  # another worker's key won; it is read below
        finally:
            os.unlink(tmp)

    @property
    def public_b64(self) -> str:
        return base64.b64encode(bytes(self._private.public_key)).decode()

    def open(self, message: object) -> SealedReport:
        """Decrypt and parse one base64 message; :class:`SealedError` says why it is refused."""
        if not isinstance(message, str) or len(message) > MAX_MESSAGE_BYTES:
            raise SealedError(f"a message is a base64 string of at most {MAX_MESSAGE_BYTES} bytes")
        try:
            sealed = base64.b64decode(message, validate=True)
        except (binascii.Error, ValueError):
            raise SealedError("a message must be standard base64") from None
        from nacl.exceptions import CryptoError

        try:
            plain = self._box.decrypt(sealed)
        except CryptoError:
            raise SealedError(
                "the message does not open with the collector's key (sealed to another key, "
                "or altered); fetch GET /v1/sealed/key"
            ) from None
        try:
            body = json.loads(plain.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise SealedError("the opened message is not UTF-8 JSON") from None
        if type(body) is not dict or body.keys() != _PLAIN_KEYS:
            raise SealedError("the opened message must be an object with campaign, digest, report")
        campaign, digest, report = body["campaign"], body["digest"], body["report"]
        if type(campaign) is not str or type(digest) is not str or type(report) is not dict:
            raise SealedError("campaign and digest must be strings and report an object")
        return SealedReport(campaign, digest, report)
