"""Forwarding: wait for B messages, permute them with OS randomness, POST, then forget them."""

from __future__ import annotations

import logging
import secrets
import threading
from dataclasses import dataclass

import requests

from client_sdk.transport import RetryableError, json_of, request_capped
from shuffler.staging import Staging

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 100
DEFAULT_MAX_REQUEST = 500
DEFAULT_RETRY_SECONDS = 2.0
_RANDOM = secrets.SystemRandom()


@dataclass(frozen=True)
class ForwardResult:
    """What one forwarding round did: messages sent, and the collector's counts."""

    forwarded: int = 0
    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0


class Forwarder:
    """Moves staged messages to the collector in permuted batches of at least ``batch_size``."""

    def __init__(
        self,
        staging: Staging,
        collector_url: str,
        token: str,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_request: int = DEFAULT_MAX_REQUEST,
        timeout: float = 30.0,
    ) -> None:
        if batch_size < 1 or max_request < 1:
            raise ValueError("batch_size and max_request must be >= 1")
        self.staging = staging
        self.url = collector_url.rstrip("/") + "/v1/sealed"
        self.batch_size = batch_size
        self.max_request = max_request
        self.timeout = timeout
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {token}"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def forward_once(self) -> ForwardResult:
        """Forward the oldest whole multiple of ``batch_size`` staged messages, if any (first
        what is left of a batch released before).

        They are permuted together first (``secrets.SystemRandom``), then sent in requests of
        at most ``max_request``; each request's messages are forgotten after its 2xx. On an error
        the rest stay staged for the next round (raises ``RuntimeError``).
        """
        # A batch released earlier and cut short (a refused request, a crash of either side)
        # leaves first, whatever its size now: it was whole when released.
        staged = self.staging.all(released=True)
        if not staged:
            waiting = self.staging.all(released=False)  # in arrival order
            whole = len(waiting) - len(waiting) % self.batch_size
            if whole == 0:
                return ForwardResult()
            # The oldest whole batches leave (no message waits behind newer ones).
            staged = waiting[:whole]
            self.staging.release([k for k, _ in staged])
        _RANDOM.shuffle(staged)  # a fresh order on every attempt
        totals = {"accepted": 0, "duplicate": 0, "rejected": 0}
        sent = 0
        for start in range(0, len(staged), self.max_request):
            chunk = staged[start : start + self.max_request]
            try:  # at most MAX_ANSWER_BYTES within MAX_ANSWER_SECONDS: the collector is untrusted
                resp = request_capped(
                    self._session,
                    "POST",
                    self.url,
                    json={"messages": [m for _, m in chunk]},
                    timeout=self.timeout,
                )
            except RetryableError as exc:
                raise RuntimeError(str(exc)) from None
            if resp.status_code != 200:
                raise RuntimeError(f"collector answered {resp.status_code}: {resp.text[:200]}")
            for key, count in _counts(resp).items():
                totals[key] += count
            self.staging.remove([k for k, _ in chunk])
            sent += len(chunk)
        return ForwardResult(forwarded=sent, **totals)

    # -- background thread ----------------------------------------------------------------

    def notify(self, pending: int) -> None:
        """Called after each staged message; wakes the thread once a batch is complete."""
        if pending >= self.batch_size:
            self._wake.set()

    def start(self, *, retry_seconds: float = DEFAULT_RETRY_SECONDS) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(retry_seconds,), name="ldp-shuffle-forwarder", daemon=True
        )
        self._thread.start()
        self._wake.set()  # a restart may find a full batch staged

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self, retry_seconds: float) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=retry_seconds)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                result = self.forward_once()
            except (requests.RequestException, RuntimeError) as exc:
                log.warning("forwarding failed, the batch stays staged: %s", exc)
                continue
            except Exception:
                # Whatever else fails (the staging file, a bug), the thread must outlive it: a
                # shuffler that still answers 202 but never forwards would hold reports forever.
                log.exception("forwarding failed unexpectedly, the batch stays staged")
                continue
            if result.forwarded:
                log.info(
                    "forwarded %d messages: %d accepted, %d duplicate, %d rejected",
                    result.forwarded,
                    result.accepted,
                    result.duplicate,
                    result.rejected,
                )


def _counts(resp: requests.Response) -> dict[str, int]:
    """The collector's ``{"accepted", "duplicate", "rejected"}`` counts of one 200 answer.

    Raises ``RuntimeError`` when the body is not that object of non-negative integers (a proxy's
    page, another service, a broken collector): the request's messages then stay staged and are
    resent, which the collector counts as duplicates if it did store them.
    """
    try:
        answer = json_of(resp)
    except ValueError:  # not JSON, or nested past the parser's stack
        answer = None
    counts: dict[str, int] = {}
    for key in ("accepted", "duplicate", "rejected"):
        value = answer.get(key) if isinstance(answer, dict) else None
        if type(value) is not int or value < 0:
            raise RuntimeError(
                f"collector answered 200 without the counts {{accepted, duplicate, rejected}} "
                f"of POST /v1/sealed ({key!r} is {value!r}): {resp.text[:200]}"
            )
        counts[key] = value
    return counts
