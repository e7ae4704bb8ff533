"""The device secret that keys memoised (RAPPOR-style) permanent responses.

The secret is 32 random bytes in ``state_dir/device.key`` (mode 0600), created on first use
and never sent. It should persist: a new secret means fresh permanent responses, whose privacy
composes with the old ones. The budget ledger charges a new secret's answers as a new release
(``RapporUnary.release_key``), so replacing the file never restarts the permanent bound.
Anyone holding both the secret and a device's reports can undo the permanent noise, so the file
is as sensitive as the device's data and stays on the device.
"""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path

from client_sdk.errors import StateUnusable

SECRET_FILE = "device.key"
SECRET_BYTES = 32

_lock = threading.Lock()


def load_or_create_secret(state_dir: str | os.PathLike[str]) -> bytes:
    """The device secret in ``state_dir``, created atomically (O_EXCL, 0600) if missing."""
    path = Path(state_dir) / SECRET_FILE
    with _lock:
        if not path.exists():
            # Write a temporary file, then link it into place: a crash never leaves a partial
            # secret, and of two racing creators exactly one wins.
            tmp = path.with_name(f"{SECRET_FILE}.{secrets.token_hex(8)}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                with os.fdopen(fd, "w") as fh:
                    fh.write(secrets.token_hex(SECRET_BYTES))
                    fh.flush()
                    os.fsync(fh.fileno())
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    pass
            finally:
                tmp.unlink(missing_ok=True)
        try:
            secret = bytes.fromhex(path.read_bytes().decode("ascii"))
        except (OSError, ValueError):  # unreadable, not ASCII (binary garbage), not hex
            secret = b""
    if len(secret) != SECRET_BYTES:
        # State damage, not a programming error: the same class as a damaged state file.
        raise StateUnusable(
            f"{path} does not hold a {SECRET_BYTES}-byte hex device secret; it was corrupted. "
            "Deleting it starts fresh permanent responses; the device's budget ledger charges "
            "them as a new release (their privacy composes with the old)"
        )
    return secret


def delete_secret(state_dir: str | os.PathLike[str]) -> None:
    """Forget the device secret, and with it every memoised answer derived from it."""
    with _lock:
        (Path(state_dir) / SECRET_FILE).unlink(missing_ok=True)
