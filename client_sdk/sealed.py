"""Sending reports through a shuffler, sealed to the collector's key (docs/SHUFFLE.md).

When a campaign's resource names a ``shuffler`` URL, :class:`SealedTransport` sends each of its
reports as its own message: the JSON ``{"campaign", "digest", "report"}`` sealed to the
collector's X25519 public key (libsodium sealed box via PyNaCl; ``GET /v1/sealed/key``), POSTed
to ``{shuffler}/v1/submit`` after a random pause of up to ``jitter`` seconds, without the ingest
token or any identifier. The report id travels inside the ciphertext, so a message resent after
a lost answer is stored once. Campaigns without a shuffler go to the collector as before.

What this adds to the device's guarantee: nothing is weakened (the report is the same ε-LDP
report). What it buys the analyst: amplification by shuffling (docs/MECHANISMS.md §21), which
holds only if the shuffler is honest about permuting and forgetting addresses; the collector
chose the shuffler URL, so a device trusts it no more than it trusts the collector, unless the
app pins it (``TelemetryClient(pins={"c": {"digest": ..., "shuffler": url}})``). The key is
the collector's as well: one key per device would let it tell each message's device by which
key opens it, so an app can ship the key (``TelemetryClient(sealed_key=...)``), and the device
then never asks for it. The shuffler URL is read from the verified config only
(:class:`client_sdk.config_cache.ConfigCache`), never from a config the device refused.

The day a shuffled report carries is the device's own, or the shuffler's (its ``Date``
header, for a device clock that is off), never the collector's: the day sits inside the
sealed report, and a collector that sent each device a ``Date`` shifted by its own number of
days had it stamp that tag into every report it made, through the shuffler and any pins.

PyNaCl is imported on first use (``pip install 'ldp-telemetry[sealed]'``), so ``import
client_sdk`` stays light.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from client_sdk.errors import InvalidParameter, TransportError
from client_sdk.transport import (
    DEFAULT_TIMEOUT,
    AuthError,
    BatchResult,
    Fetched,
    PermanentError,
    RetryableError,
    Transport,
    json_of,
    new_session,
    request_capped,
    skew_of,
    today_at,
)

if TYPE_CHECKING:
    from client_sdk.config_cache import ConfigCache

#: Largest random pause before each sealed message, in seconds (arrival times do not line up
#: a device's reports).
DEFAULT_JITTER = 0.2


def shuffler_of(resource: Mapping[str, Any]) -> str | None:
    """The shuffler URL a campaign resource names (reports go through it), else None."""
    url = resource.get("shuffler")
    ok = isinstance(url, str) and url.startswith(("http://", "https://"))
    return str(url).rstrip("/") if ok else None


def sealing_available() -> bool:
    """Whether PyNaCl, which sealing needs, can be imported on this device."""
    try:
        import nacl.public  # noqa: F401
    except ImportError:
        return False
    return True


def check_sealed_key(key: object) -> str:
    """``key`` if it is an X25519 public key in base64 (32 bytes, as ``GET /v1/sealed/key``
    serves it); else :class:`InvalidParameter`."""
    try:
        if not isinstance(key, str) or len(base64.b64decode(key, validate=True)) != 32:
            raise ValueError
    except ValueError:
        raise InvalidParameter(
            "sealed_key must be the collector's X25519 public key in base64 (32 bytes, the "
            "'public_key' of GET /v1/sealed/key), got "
            + (repr(key)[:60] if isinstance(key, str) else type(key).__name__)
        ) from None
    return key


def seal(public_key_b64: str, campaign: str, digest: str, report: Mapping[str, Any]) -> str:
    """One report sealed to the collector's key: base64 of a libsodium sealed box."""
    try:
        from nacl.public import PublicKey, SealedBox
    except ImportError:
        raise InvalidParameter(
            "this campaign is sent through a shuffler, which needs PyNaCl: pip install "
            "'ldp-telemetry[sealed]'"
        ) from None
    plain = json.dumps(
        {"campaign": campaign, "digest": digest, "report": dict(report)}, separators=(",", ":")
    ).encode()
    box = SealedBox(PublicKey(base64.b64decode(public_key_b64)))
    return base64.b64encode(box.encrypt(plain)).decode()


class SealedTransport(Transport):
    """A :class:`Transport` that routes campaigns naming a shuffler through it, sealed."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float | tuple[float, float] = DEFAULT_TIMEOUT,
        jitter: float = DEFAULT_JITTER,
        sealed_key: str | None = None,
    ) -> None:
        super().__init__(base_url, token, timeout=timeout)
        self.jitter = jitter
        #: The shuffler each fetched resource named, verified or not: it routes only for a
        #: transport on its own (no ConfigCache), or to tell a refused config names none.
        self._shufflers: dict[str, str | None] = {}
        #: The client's ConfigCache: the verified config names the shuffler (no request when
        #: cached). Without one (a transport on its own) the fetched resource does.
        self.configs: ConfigCache | None = None
        #: The app's pinned key (never fetched), else the collector's, fetched once.
        self._public_key: str | None = None if sealed_key is None else check_sealed_key(sealed_key)
        self._plain: Any = None  # a session without the token, for the shuffler
        #: Per shuffler URL, seconds its clock (its last ``Date`` header) is ahead of ours.
        self.shuffler_skew: dict[str, float] = {}
        #: Whether reports may still leave (uploads on, the client not closing), asked before
        #: each message.
        self.sending: Callable[[], bool] = lambda: True
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._plain is not None:
            self._plain.close()
        super().close()

    def fetch_campaign(self, campaign: str, *, etag: str | None = None) -> Fetched:
        fetched = super().fetch_campaign(campaign, etag=etag)
        if fetched.body is not None:
            self._learn(campaign, fetched.body)
        return fetched

    def _learn(self, campaign: str, resource: Mapping[str, Any]) -> None:
        with self._lock:
            self._shufflers[campaign] = shuffler_of(resource)

    def post_reports(
        self, campaign: str, digest: str, reports: Sequence[Mapping[str, Any]]
    ) -> BatchResult:
        """Through the shuffler if the campaign names one: each report its own message."""
        shuffler = self._shuffler_of(campaign)
        if shuffler is None:
            return super().post_reports(campaign, digest, reports)
        key = self._collector_key()
        for report in reports:
            if self.jitter > 0:
                time.sleep(random.SystemRandom().uniform(0.0, self.jitter))
            if not self.sending():
                # Consent withdrawn (what is left was deleted) or the client closing (what
                # left now could no longer be settled, and went again on the next run).
                raise RetryableError(
                    "uploads were turned off or the client is closing; nothing more is sent",
                    peer="device",
                )
            try:
                message = seal(key, campaign, digest, report)
            except InvalidParameter as exc:  # PyNaCl missing: kept until it is installed
                raise RetryableError(str(exc), peer="device") from None
            self._submit(shuffler, message)
        # The shuffler staged them durably; the collector's verdict is not seen by the device.
        return BatchResult(accepted=len(reports), duplicate=0)

    def sends_one_by_one(self, campaign: str) -> bool:
        """True when the campaign's verified config (cached: no request) names a shuffler."""
        if self.configs is None:
            return self._shufflers.get(campaign) is not None
        config = self.configs.peek(campaign)
        return config is not None and shuffler_of(config.resource) is not None

    def _shuffler_of(self, campaign: str) -> str | None:
        """The shuffler the campaign's config names: the verified config of the client's
        :class:`ConfigCache` (cached, or fetched and checked once), so a config the device
        refused (a digest not its own, one the app did not pin) never routes a report to a
        shuffler. Reports stored before the refusal still go straight to the collector when
        the refused config names no shuffler either and the app pinned none (the route
        every direct campaign takes); otherwise they wait (this campaign's trouble, retried
        later, nothing dropped)."""
        if self.configs is None:
            if campaign not in self._shufflers:
                self.fetch_campaign(campaign)  # never fetched: ask once
            return self._shufflers.get(campaign)
        config = self.configs.peek(campaign)
        if config is None:
            try:
                config = self.configs.refresh(campaign)
            except InvalidParameter as exc:
                pin = self.configs.pins.get(campaign)
                if self._shufflers.get(campaign) is None and (pin is None or not pin.shuffler):
                    return None
                raise RetryableError(
                    f"campaign {campaign!r}: its config is refused, so nothing is sent through "
                    f"a shuffler it names ({exc})",
                    peer="device",
                ) from None
        return shuffler_of(config.resource)

    def hear_clock(self, shuffler: str) -> None:
        """Learn ``shuffler``'s clock from the ``Date`` of its ``/healthz`` answer (nothing
        about the device is sent); a failure leaves it unknown (the submission that follows
        reports the trouble)."""
        if self._plain is None:
            self._plain = new_session()
        try:
            resp = request_capped(
                self._plain, "GET", shuffler + "/healthz", timeout=self.timeout, peer="shuffler"
            )
        except TransportError:
            return
        skew = skew_of(resp.headers.get("Date"))
        if skew is not None:
            self.shuffler_skew[shuffler] = skew

    def shuffler_today(self, shuffler: str) -> dt.date | None:
        """The UTC date now on ``shuffler``'s clock, from its last ``Date`` header (None before
        its first answer). Never the collector's: see the module docstring."""
        return today_at(self.shuffler_skew.get(shuffler))

    def _collector_key(self) -> str:
        if self._public_key is None:
            try:
                resp = self._send("GET", self.base_url + "/v1/sealed/key")
            except AuthError:
                raise
            except PermanentError as exc:
                # 404 sealed_not_configured: the collector has no key (yet). Not "the campaign
                # is gone": its reports stay and are retried with backoff.
                raise RetryableError(
                    f"the collector serves no sealed key for shuffled campaigns ({exc})",
                    status=exc.status,
                ) from None
            try:
                key = json_of(resp)["public_key"]
                if len(base64.b64decode(key)) != 32:
                    raise ValueError
            except (ValueError, KeyError, TypeError):
                raise RetryableError("collector sent an unreadable sealed key") from None
            self._public_key = str(key)
        return self._public_key

    def _submit(self, shuffler: str, message: str) -> None:
        if self._plain is None:
            self._plain = new_session()  # no cookie: none may tag this device's messages
        resp = request_capped(
            self._plain,
            "POST",
            shuffler + "/v1/submit",
            json={"message": message},
            timeout=self.timeout,
            peer="shuffler",
        )
        skew = skew_of(resp.headers.get("Date"))
        if skew is not None:
            self.shuffler_skew[shuffler] = skew
        if resp.status_code == 429 or resp.status_code >= 500:
            raise RetryableError(
                f"shuffler answered {resp.status_code}", status=resp.status_code, peer="shuffler"
            )
        if resp.status_code >= 400:
            raise PermanentError(
                f"shuffler refused a message: {resp.status_code}", status=resp.status_code
            )
        if not 200 <= resp.status_code < 300:  # a redirect (not followed) or a stray 1xx
            raise RetryableError(
                f"shuffler answered {resp.status_code}, not a 2xx: the message was not staged",
                status=resp.status_code,
                peer="shuffler",
            )
