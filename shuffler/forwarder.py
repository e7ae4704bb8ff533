"""Forwarding: wait for B messages, permute them with OS randomness, POST, then forget them.

Each request to the collector stays within ``max_request`` messages and ``max_request_bytes``
bytes of body. The collector's answer decides what happens to the request's messages:

* 200 with the counts: forgotten (the collector stored, deduplicated or rejected each one);
* 413, 400 or 410 (a refusal of what the request holds): the request is halved and each half
  sent on its own, down to one message; a lone message the collector still refuses that way is
  dropped (WARNING log, :attr:`Forwarder.dropped_total`), as the collector would never take it,
  but only once the collector has answered an empty batch from this shuffler with its counts in
  the same round, so a proxy, a wrong URL or a collector refusing everything drops nothing;
* anything else (no answer, 5xx, 429, 401, 404, a 200 without the counts): the round stops and
  the request's messages, and all not yet sent, stay staged for the next round.
"""

from __future__ import annotations

import json
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
#: The collector's default ``LDP_MAX_BODY_BYTES`` (4 MiB): a request body never exceeds it.
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
DEFAULT_RETRY_SECONDS = 2.0
#: Answers that refuse what a request holds (not the shuffler, the token or the moment): the
#: request is halved, and a lone message refused this way is dropped.
REFUSING_STATUSES = frozenset((400, 410, 413))
_RANDOM = secrets.SystemRandom()
_Staged = list[tuple[int, str]]


@dataclass(frozen=True)
class ForwardResult:
    """What one forwarding round did: messages sent, the collector's counts, and messages
    dropped because the collector refused each of them alone (400, 410 or 413)."""

    forwarded: int = 0
    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0
    dropped: int = 0


def request_bytes(messages: list[str]) -> int:
    """The exact size in bytes of the body ``{"messages": messages}`` as the forwarder sends it
    (``requests``' ``json=``: ``json.dumps`` with its default separators, ASCII only)."""
    if not messages:
        return len('{"messages": []}')
    return (
        len('{"messages": []}')
        + sum(len(json.dumps(m)) for m in messages)
        + 2 * (len(messages) - 1)
    )


class _Round:
    """The running totals of one forwarding round, and whether the collector took a probe."""

    def __init__(self) -> None:
        self.forwarded = self.accepted = self.duplicate = self.rejected = self.dropped = 0
        self.probed: bool = False

    def result(self) -> ForwardResult:
        return ForwardResult(
            self.forwarded, self.accepted, self.duplicate, self.rejected, self.dropped
        )


class Forwarder:
    """Moves staged messages to the collector in permuted batches of at least ``batch_size``.

    ``rejected_total`` and ``dropped_total`` count, since this object was made, the messages
    the collector rejected in a 200 and those dropped after it refused them alone.
    """

    def __init__(
        self,
        staging: Staging,
        collector_url: str,
        token: str,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_request: int = DEFAULT_MAX_REQUEST,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        timeout: float = 30.0,
    ) -> None:
        if batch_size < 1 or max_request < 1 or max_request_bytes < 1:
            raise ValueError("batch_size, max_request and max_request_bytes must be >= 1")
        self.staging = staging
        self.url = collector_url.rstrip("/") + "/v1/sealed"
        self.batch_size = batch_size
        self.max_request = max_request
        self.max_request_bytes = max_request_bytes
        self.timeout = timeout
        self.rejected_total = 0
        self.dropped_total = 0
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {token}"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def forward_once(self) -> ForwardResult:
        """Forward the oldest whole multiple of ``batch_size`` staged messages, if any (first
        what is left of a batch released before).

        They are permuted together first (``secrets.SystemRandom``), then sent in requests of
        at most ``max_request`` messages and ``max_request_bytes`` bytes of body (a message
        larger than that goes alone); each request's messages are forgotten after the
        collector's 200 with its counts. A request refused with 400, 410 or 413 is halved down
        to one message, and a lone message refused so is dropped (see the module's docstring).
        On any other failure the rest stay staged for the next round (raises ``RuntimeError``).
        The round's counts are logged, at WARNING when the collector rejected or the forwarder
        dropped any message (counts only, never a message), also when the round fails midway.
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
        round_ = _Round()
        try:
            for chunk in self._requests(staged):
                self._send(chunk, round_)
        finally:
            self._log(round_)
        return round_.result()

    def _requests(self, staged: _Staged) -> list[_Staged]:
        """``staged`` cut, in order, into requests within both limits (at least one message
        each)."""
        chunks: list[_Staged] = []
        chunk: _Staged = []
        size = request_bytes([])
        for item in staged:
            grows = len(json.dumps(item[1])) + (2 if chunk else 0)
            if chunk and (len(chunk) >= self.max_request or size + grows > self.max_request_bytes):
                chunks.append(chunk)
                chunk, size = [], request_bytes([])
                grows = len(json.dumps(item[1]))
            chunk.append(item)
            size += grows
        if chunk:
            chunks.append(chunk)
        return chunks

    def _post(self, messages: list[str]) -> requests.Response:
        try:  # at most MAX_ANSWER_BYTES within MAX_ANSWER_SECONDS: the collector is untrusted
            return request_capped(
                self._session,
                "POST",
                self.url,
                json={"messages": messages},
                timeout=self.timeout,
            )
        except RetryableError as exc:
            raise RuntimeError(str(exc)) from None

    def _send(self, chunk: _Staged, round_: _Round) -> None:
        """One request; halves it on a refusal of its content (recursively)."""
        resp = self._post([m for _, m in chunk])
        if resp.status_code == 200:
            counts = _counts(resp)
            self.staging.remove([k for k, _ in chunk])
            round_.forwarded += len(chunk)
            round_.accepted += counts["accepted"]
            round_.duplicate += counts["duplicate"]
            round_.rejected += counts["rejected"]
            self.rejected_total += counts["rejected"]
            return
        if resp.status_code not in REFUSING_STATUSES:
            raise RuntimeError(f"collector answered {resp.status_code}: {resp.text[:200]}")
        if len(chunk) > 1:  # the collector's limits may be below ours, or one message is bad
            half = len(chunk) // 2
            self._send(chunk[:half], round_)
            self._send(chunk[half:], round_)
            return
        code = _error_code(resp)
        if not self._probe(round_):
            raise RuntimeError(
                f"collector answered {resp.status_code} ({code}) to a request of one message "
                "and did not answer an empty batch with its counts: the message stays staged"
            )
        self.staging.remove([k for k, _ in chunk])
        round_.dropped += 1
        self.dropped_total += 1
        log.warning(
            "dropped a message the collector refuses on its own (HTTP %d, %s): it would never "
            "take it; %d dropped since start",
            resp.status_code,
            code,
            self.dropped_total,
        )

    def _probe(self, round_: _Round) -> bool:
        """Whether the collector answers an empty batch with its counts (once per round): then
        it takes this shuffler's requests, and a refusal of one message is about that message.
        """
        if not round_.probed:
            try:
                resp = self._post([])
                if resp.status_code == 200:
                    _counts(resp)  # raises unless the collector's counts
                    round_.probed = True
            except RuntimeError:
                pass
        return round_.probed

    @staticmethod
    def _log(round_: _Round) -> None:
        if round_.rejected or round_.dropped:
            log.warning(
                "forwarded %d messages: %d accepted, %d duplicate, %d rejected by the "
                "collector; %d dropped as refused alone. Rejected and dropped reports are lost "
                "(e.g. older than the campaign's horizon_days, an unknown or archived campaign, "
                "a stale digest, not sealed to the collector's key; docs/SHUFFLE.md)",
                round_.forwarded,
                round_.accepted,
                round_.duplicate,
                round_.rejected,
                round_.dropped,
            )
        elif round_.forwarded:
            log.info(
                "forwarded %d messages: %d accepted, %d duplicate, %d rejected",
                round_.forwarded,
                round_.accepted,
                round_.duplicate,
                round_.rejected,
            )

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
                self.forward_once()  # logs its own counts
            except (requests.RequestException, RuntimeError) as exc:
                log.warning("forwarding failed, the batch stays staged: %s", exc)
                continue
            except Exception:
                # Whatever else fails (the staging file, a bug), the thread must outlive it: a
                # shuffler that still answers 202 but never forwards would hold reports forever.
                log.exception("forwarding failed unexpectedly, the batch stays staged")
                continue


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


def _error_code(resp: requests.Response) -> str:
    """The ``code`` of the collector's error envelope, or ``"no error envelope"`` (only the
    code is logged: the shuffler logs nothing a message could have put in an answer)."""
    try:
        answer = json_of(resp)
    except ValueError:
        answer = None
    error = answer.get("error") if isinstance(answer, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, str) and code.isascii() and code.replace("_", "").isalnum():
        return code[:40]
    return "no error envelope"
