"""HTTP transport to the collector (docs/HTTP_API.md), classifying every answer.

Exception tree (all are :class:`client_sdk.errors.TransportError`)::

    TransportError
    ├── RetryableError       network error, 408, 429, 5xx, unreadable 200: retry with backoff
    └── PermanentError       any other 4xx: never retried as is; ``status`` and ``code`` say why
        ├── AuthError        401/403: the ingest token is wrong
        ├── CampaignGone     404: the collector has no such campaign
        ├── StaleConfig      409 stale_config: the campaign's digest changed
        └── BatchTooLarge    413: fewer reports per request

Bodies are JSON, gzip-compressed (``mtime=0``, so the body carries no timestamp). The transport
sends only what it is given: report ids, days, payloads and the campaign digest. Every upload
goes on a new connection of its own, which the device closes after the answer (``Connection:
close`` alone left that to the collector, which kept it open and had the next uploads ride on
it), so two uploads are not tied together by a connection (they still share the device's IP
address; see docs/SDK.md). No cookie is stored or sent (:func:`new_session`): one the collector
set on a config answer came back with every later upload, a tag of the device.

The server's ``Date`` header of every answer is kept (:attr:`Transport.server_skew`), so the
client can stamp a direct campaign's reports with the collector's day when the device clock is
off (a shuffled campaign's take the shuffler's: client_sdk/sealed.py).
"""

from __future__ import annotations

import datetime as dt
import email.utils
import gzip
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from client_sdk.errors import AuthenticationFailed, InvalidParameter, TransportError

if TYPE_CHECKING:
    import requests

log = logging.getLogger(__name__)

#: Seconds to connect and to wait for an answer.
DEFAULT_TIMEOUT = (3.0, 10.0)
GZIP_LEVEL = 5
#: Identifies the software, never the device (the collector stores no user agent anyway).
USER_AGENT = "ldp-telemetry-sdk"
#: The largest answer read from the collector or a shuffler (after decompression), and the
#: longest its body may take to arrive: neither is trusted, and an endless or slowly dribbled
#: body would otherwise fill the app's memory or hold the upload thread for ever.
MAX_ANSWER_BYTES = 16 * 1024 * 1024
MAX_ANSWER_SECONDS = 60.0


class RetryableError(TransportError):
    """A transient failure; ``retry_after`` is the server's Retry-After in seconds, if any;
    ``peer`` is who failed: ``"collector"``, a campaign's ``"shuffler"``, or the
    ``"device"`` itself (a library a campaign needs is missing)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        peer: str = "collector",
    ):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.peer = peer


class PermanentError(TransportError):
    """The collector refused the request; sending it again unchanged cannot succeed."""

    def __init__(self, message: str, *, status: int, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


class AuthError(PermanentError, AuthenticationFailed):
    """401/403: the ingest token was refused."""


class CampaignGone(PermanentError):
    """404: the collector has no campaign with this id."""


class CampaignArchived(PermanentError):
    """410 ``campaign_archived``: the campaign takes no report any more, from any device."""


class StaleConfig(PermanentError):
    """409 ``stale_config``: the reports' digest does not match the campaign's."""


class BatchTooLarge(PermanentError):
    """413: the batch exceeds the collector's report or byte limit."""


@dataclass(frozen=True)
class BatchResult:
    """The collector's answer to one upload: counts and, per rejected index, the reason."""

    accepted: int
    duplicate: int
    rejected: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Fetched:
    """A campaign resource (``body`` None when the cached ETag is still current: 304)."""

    body: dict[str, Any] | None
    etag: str | None


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    when = _http_date(value)
    if when is None:
        return None
    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())


def _http_date(value: str) -> dt.datetime | None:
    """An HTTP date header as an aware datetime (UTC when it names no zone), None when it is
    not one. Whatever the header holds: a year of twenty digits raised OverflowError in
    ``email.utils``, which escaped to the upload thread and stopped it for good."""
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when


def skew_of(value: str | None) -> float | None:
    """Seconds the clock that sent the ``Date`` header ``value`` is ahead of this device's
    (None: no header, or not a date this device can place)."""
    when = _http_date(value) if value else None
    if when is None:
        return None
    try:
        return when.timestamp() - time.time()
    except (OverflowError, ValueError, OSError):
        return None


def today_at(skew: float | None) -> dt.date | None:
    """The UTC date now on a clock ``skew`` seconds ahead of this device's (None if unknown)."""
    if skew is None:
        return None
    try:
        return dt.datetime.fromtimestamp(time.time() + skew, dt.UTC).date()
    except (OverflowError, ValueError, OSError):  # a Date header beyond the calendar
        return None


def request_capped(
    session: requests.Session,
    method: str,
    url: str,
    *,
    timeout: float | tuple[float, float],
    peer: str = "collector",
    **kwargs: Any,
) -> requests.Response:
    """``session.request`` whose body is read here, at most :data:`MAX_ANSWER_BYTES` within
    :data:`MAX_ANSWER_SECONDS`; anything else, or a broken connection, is a
    :class:`RetryableError` naming ``peer``. Redirects are not followed (the 3xx is returned).
    The response is closed and its ``content`` set."""
    import requests

    try:
        # Never followed: a device talks only to the host it was configured with (a redirect
        # would hand its reports and address to whatever host the answer names).
        resp = session.request(
            method, url, timeout=timeout, stream=True, allow_redirects=False, **kwargs
        )
    except requests.RequestException as exc:
        raise RetryableError(f"{peer} unreachable: {type(exc).__name__}", peer=peer) from None
    from urllib3.exceptions import HTTPError

    # read1 (urllib3 >= 2.3) returns what one socket read brings, so the deadline is checked
    # however slowly the bytes come; a fixed-size read would wait for all of them. Older
    # urllib3 falls back to the chunks of iter_content (the size cap still holds).
    read1 = getattr(resp.raw, "read1", None)
    chunks_of = (
        iter(lambda: read1(64 * 1024, decode_content=True), b"")
        if read1 is not None
        else resp.iter_content(64 * 1024)
    )
    deadline = time.monotonic() + MAX_ANSWER_SECONDS
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in chunks_of:
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise RetryableError(
                    f"{peer} answered more than {MAX_ANSWER_BYTES} bytes; the answer was not "
                    "read",
                    peer=peer,
                )
            if time.monotonic() > deadline:
                raise RetryableError(
                    f"{peer}'s answer took more than {MAX_ANSWER_SECONDS:g} s to arrive; "
                    "the answer was not read",
                    peer=peer,
                )
            chunks.append(chunk)
        resp._content = b"".join(chunks)
        resp._content_consumed = True  # read to the end: close() keeps the connection alive
    except (requests.RequestException, HTTPError, OSError) as exc:
        raise RetryableError(f"{peer} unreachable: {type(exc).__name__}", peer=peer) from None
    finally:
        resp.close()
    return resp


def new_session(headers: Mapping[str, str] | None = None) -> requests.Session:
    """A ``requests`` session that never stores nor sends a cookie, with ``headers``.

    Whatever a collector (or shuffler) answers with ``Set-Cookie`` is dropped: ``requests``
    keeps every cookie of every answer in its session and sends it back with each later
    request, so one cookie per device set on a config answer came back with every upload of
    that device, across campaigns and days (a tag linking its reports that the separate
    connections, the verified digests and the unlinkable storage are there to prevent)."""
    import http.cookiejar

    import requests

    class _NoCookies(http.cookiejar.DefaultCookiePolicy):
        def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
            return False

        def return_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
            return False

    session = requests.Session()
    session.cookies.set_policy(_NoCookies())
    if headers:
        session.headers.update(headers)
    return session


def json_of(resp: requests.Response) -> Any:
    """The JSON body of a collector's answer; ``ValueError`` for any body that is not JSON.

    The collector is not trusted: a body nested deeper than the parser's stack (``[[[[...``)
    raises RecursionError in ``json``, which is not a ValueError and escaped every handler
    (it stopped the uploader for good).
    """
    try:
        return resp.json()
    except RecursionError:
        raise ValueError("the body nests JSON arrays or objects too deeply") from None


def _error_of(resp: requests.Response) -> tuple[str | None, str]:
    try:
        err = json_of(resp)["error"]
        return err.get("code"), str(err.get("message", ""))[:300]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, resp.reason or ""


def check_timeout(value: object) -> tuple[float, float]:
    """``value`` as (connect, read) seconds: one positive finite number for both, or a pair
    of them; else :class:`InvalidParameter`. Checked when the client is made: a bad value
    handed to ``requests`` raised in ``prefetch`` and stopped the upload thread."""

    def seconds(x: object) -> float | None:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            return None
        x = float(x)
        return x if 0 < x < float("inf") else None

    pair = (value, value) if isinstance(value, (int, float)) else value
    if isinstance(pair, (tuple, list)) and len(pair) == 2:
        connect, read = seconds(pair[0]), seconds(pair[1])
        if connect is not None and read is not None:
            return (connect, read)
    raise InvalidParameter(
        "timeout must be a number of seconds > 0 or a (connect, read) pair of them, "
        f"got {value!r}"
    )


class Transport:
    """Talks to one collector with one token; safe to share between threads."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float | tuple[float, float] = DEFAULT_TIMEOUT,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidParameter(
                f"collector URL must start with http:// or https://, got {base_url!r}"
            )
        if not isinstance(token, str) or not token:
            raise InvalidParameter("ingest_token must be a non-empty string (LDP_INGEST_TOKEN)")
        self.base_url = base_url.rstrip("/")
        self.timeout = check_timeout(timeout)
        #: Sent with every request to the collector (on first use: importing the SDK stays
        #: light, ``requests`` loads here).
        self._headers = {"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT}
        self._session = new_session(self._headers)
        #: Seconds the collector's clock is ahead of this device's (None: no answer yet).
        self.server_skew: float | None = None

    def close(self) -> None:
        self._session.close()

    def _url(self, campaign: str) -> str:
        return f"{self.base_url}/v1/campaigns/{quote(campaign, safe='')}"

    def _send(
        self, method: str, url: str, *, alone: bool = False, **kwargs: Any
    ) -> requests.Response:
        """One request to the collector, its answer classified. ``alone``: on a new
        connection that the device closes after the answer, whatever the collector says
        (an upload: the collector must not be able to tie two uploads to one connection)."""
        if alone:
            session = new_session(self._headers)
            try:
                resp = request_capped(session, method, url, timeout=self.timeout, **kwargs)
            finally:
                session.close()  # closes the connection, even one the collector kept open
        else:
            resp = request_capped(self._session, method, url, timeout=self.timeout, **kwargs)
        self._note_date(resp.headers.get("Date"))
        status = resp.status_code
        if 300 <= status < 400 and status != 304:
            raise RetryableError(
                f"collector answered {status}, a redirect to "
                f"{resp.headers.get('Location', '(no Location)')!r}: the SDK does not follow "
                "redirects; set the collector URL to the address it points to",
                status=status,
            )
        if status in (408, 429) or status >= 500:
            code, message = _error_of(resp)
            raise RetryableError(
                f"collector answered {status} {code or ''}: {message}".rstrip(),
                status=status,
                retry_after=parse_retry_after(resp.headers.get("Retry-After")),
            )
        if status >= 400:
            code, message = _error_of(resp)
            text = f"collector refused the request: {status} {code or ''}: {message}"
            cls: type[PermanentError] = PermanentError
            if status in (401, 403):
                cls = AuthError
            elif status == 404:
                cls = CampaignGone
            elif status == 409 and code == "stale_config":
                cls = StaleConfig
            elif status == 410 and code == "campaign_archived":
                cls = CampaignArchived
            elif status == 413:
                cls = BatchTooLarge
            raise cls(text, status=status, code=code)
        return resp

    def _note_date(self, value: str | None) -> None:
        skew = skew_of(value)
        if skew is not None:
            self.server_skew = skew

    def server_today(self) -> dt.date | None:
        """The collector's UTC date now, from its last ``Date`` header (None if never seen)."""
        return today_at(self.server_skew)

    def sends_one_by_one(self, campaign: str) -> bool:
        """Whether ``campaign``'s reports leave one message per report (through a shuffler),
        so the uploader hands them over one at a time; never for the collector itself."""
        return False

    def fetch_campaign(self, campaign: str, *, etag: str | None = None) -> Fetched:
        """GET the campaign resource, conditionally on ``etag``."""
        headers = {"If-None-Match": etag} if etag else {}
        resp = self._send("GET", self._url(campaign), headers=headers)
        if resp.status_code == 304:
            return Fetched(None, etag)
        try:
            body = json_of(resp)
        except ValueError:
            raise RetryableError("collector sent an unreadable campaign resource") from None
        if not isinstance(body, dict):
            raise RetryableError("collector sent an unreadable campaign resource")
        return Fetched(body, resp.headers.get("ETag"))

    def post_reports(
        self, campaign: str, digest: str, reports: Sequence[Mapping[str, Any]]
    ) -> BatchResult:
        """POST one batch; the answer says which reports were accepted, duplicate or rejected."""
        body = json.dumps(
            {"digest": digest, "reports": list(reports)}, separators=(",", ":")
        ).encode()
        resp = self._send(
            "POST",
            self._url(campaign) + "/reports",
            alone=True,
            data=gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0),
            headers={
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
                "Connection": "close",
            },
        )
        try:
            answer = json_of(resp)
            accepted, duplicate = int(answer["accepted"]), int(answer["duplicate"])
            errors = answer.get("errors") or []
            rejected = {int(e["index"]): str(e.get("reason", "")) for e in errors}
        except (ValueError, KeyError, TypeError, OverflowError):
            # The collector may have stored the batch; resending is safe (idempotent ids).
            raise RetryableError("collector sent an unreadable answer to an upload") from None
        if any(not 0 <= i < len(reports) for i in rejected):
            raise RetryableError("collector's answer names a report index outside the batch")
        # Every report of the batch is accepted, a duplicate or rejected, once: an answer whose
        # counts do not add up would remove reports the collector never took.
        if accepted < 0 or duplicate < 0 or accepted + duplicate + len(rejected) != len(reports):
            raise RetryableError(
                f"collector's answer does not account for the batch of {len(reports)} reports "
                f"(accepted {accepted}, duplicate {duplicate}, {len(rejected)} rejected)"
            )
        return BatchResult(accepted, duplicate, rejected)
