"""Per-token rate limits: one token bucket per role token, shared by all gunicorn workers.

Every request that carries an ``Authorization`` header takes one unit from a bucket: the bucket
of the role whose token it carries (admin, analyst, ingest), or one shared ``invalid`` bucket
when it carries no valid token, so guessing tokens is throttled as well. A bucket holds at most
``rate_limit_burst`` units and refills at ``rate_limit`` units per second. An empty bucket
answers 429 ``rate_limited`` in the error envelope, with ``Retry-After`` (whole seconds until a
unit is back). Requests without ``Authorization`` (``/healthz``, ``/readyz``, ``/metrics``,
``/openapi.json``, CORS preflights) are never limited. ``rate_limit = 0`` turns limiting off.

Shared state: with a metrics directory (``ldp serve`` always has one) the buckets live in a
64-byte file there, read and written under ``flock`` by every worker, so the limit holds for
the whole collector, not per worker. Without one, in process memory. A bucket is keyed by role
name only: no token, token hash or client address is ever stored.

The devices of a fleet share the ingest token, so its limit caps the whole fleet's upload
rate; the SDK treats 429 as retryable and waits at least ``Retry-After``.
"""

from __future__ import annotations

import fcntl
import math
import os
import struct
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Flask, current_app, request

from collector.auth import role_of
from collector.errors import APIError

BUCKETS = ("admin", "analyst", "ingest", "invalid")
STATE_FILE = "ratelimit.state"
_SLOT = struct.Struct("<dd")  # units left, monotonic time of the last update


class TokenBuckets:
    """Token buckets for :data:`BUCKETS`; ``take(name)`` returns 0 or seconds to wait."""

    def __init__(
        self,
        rate: float,
        burst: int,
        directory: str | os.PathLike[str] | None,
        filename: str = STATE_FILE,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"rate must be > 0 and burst >= 1, got {rate!r}, {burst!r}")
        self.rate = float(rate)
        self.burst = int(burst)
        self.path = Path(directory) / filename if directory else None
        self._lock = threading.Lock()
        self._memory = {name: (float(burst), time.monotonic()) for name in BUCKETS}
        self._fd: int | None = None
        self._fd_pid: int | None = None

    def take(self, name: str) -> float:
        """Take one unit from bucket ``name``; 0.0 if allowed, else seconds until one is back."""
        index = BUCKETS.index(name)
        with self._lock:
            if self.path is None:
                units, stamp = self._memory[name]
                units, wait = self._spend(units, stamp)
                self._memory[name] = (units, time.monotonic())
                return wait
            fd = self._file()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                raw = os.pread(fd, _SLOT.size, index * _SLOT.size)
                units, stamp = _SLOT.unpack(raw) if len(raw) == _SLOT.size else (0.0, 0.0)
                units, wait = self._spend(*self._known(units, stamp))
                os.pwrite(fd, _SLOT.pack(units, time.monotonic()), index * _SLOT.size)
                return wait
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _known(self, units: float, stamp: float) -> tuple[float, float]:
        """A slot as stored, or a full bucket where the slot holds no time of this boot.

        A slot never written reads as zeros (the file grows to the highest slot written, and
        a new file is empty); a stamp later than now was written before the machine booted
        (CLOCK_MONOTONIC restarts at boot, and an operator's ``LDP_METRICS_DIR`` outlives it).
        Refilling from either would be wrong: from 0 it grants ``uptime x rate`` units, which
        just after boot is less than the burst; from a later stamp nothing at all.
        """
        if stamp <= 0.0 or stamp > time.monotonic():
            return float(self.burst), time.monotonic()
        return units, stamp

    def _spend(self, units: float, stamp: float) -> tuple[float, float]:
        now = time.monotonic()
        units = min(float(self.burst), units + max(0.0, now - stamp) * self.rate)
        if units >= 1.0:
            return units - 1.0, 0.0
        return units, (1.0 - units) / self.rate

    def _file(self) -> int:
        # One descriptor per process: gunicorn workers are forks and must not share offsets
        # or locks through an inherited descriptor.
        pid = os.getpid()
        if self._fd is None or self._fd_pid != pid:
            assert self.path is not None
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            self._fd_pid = pid
        return self._fd


#: Dashboard sign-in attempts: bursts of LOGIN_BURST, then LOGIN_RATE per second, for the whole
#: collector (no client address is known or kept, so the bucket is shared by everyone).
LOGIN_RATE = 1.0
LOGIN_BURST = 10


def login_wait() -> int:
    """Take one dashboard sign-in attempt; 0 if allowed, else whole seconds to wait."""
    buckets = current_app.extensions.get("ldp_login_buckets")
    if buckets is None:
        buckets = current_app.extensions["ldp_login_buckets"] = TokenBuckets(
            LOGIN_RATE,
            LOGIN_BURST,
            current_app.config["LDP"].get("metrics_dir"),
            filename="login.state",
        )
    wait = buckets.take("invalid")
    return max(1, math.ceil(wait)) if wait > 0 else 0


def install(app: Flask, settings: Mapping[str, Any]) -> None:
    """Limit every request that carries an Authorization header (see the module docstring)."""
    rate = settings["rate_limit"]
    if not rate:
        return
    buckets = TokenBuckets(rate, settings["rate_limit_burst"], settings.get("metrics_dir"))
    app.extensions["ldp_ratelimit"] = buckets

    @app.before_request
    def limit() -> None:
        header = request.headers.get("Authorization")
        if header is None or request.method == "OPTIONS":
            return
        role = role_of(header, current_app.extensions["ldp_tokens"]) or "invalid"
        wait = buckets.take(role)
        if wait > 0:
            seconds = max(1, math.ceil(wait))
            raise APIError(
                429,
                "rate_limited",
                f"too many requests with this token: the limit is {buckets.rate:g} per second "
                f"(bursts of {buckets.burst}, LDP_RATE_LIMIT / LDP_RATE_LIMIT_BURST); "
                f"retry after {seconds} s",
                headers={"Retry-After": str(seconds)},
            )
