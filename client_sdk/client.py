"""``TelemetryClient``: what an app embeds to send private reports.

    from client_sdk import TelemetryClient
    with TelemetryClient("https://telemetry.example.com", ingest_token=TOKEN,
                         state_dir=app_data_dir, campaigns=["occupation"]) as client:
        client.report("occupation", "Sales")   # perturbs now; stores only the report

Guarantees:

* The true value exists only inside :meth:`TelemetryClient.report`, until the campaign's
  mechanism has perturbed it. It is never written to disk, logged or sent.
* ``report`` never touches the network: a campaign not on the device yet is fetched in the
  background and ``report`` returns :class:`NotSent` (``not_ready``) without storing anything.
* A report is durable once ``report`` returns (SQLite outbox in ``state_dir``); it leaves the
  outbox only when the collector acknowledged it, or for a counted reason (see ``outbox``).
* The privacy budget (``ledger``) is charged in the same transaction that stores the report;
  a report that would exceed it is not stored (``NotSent``, ``budget_spent``).
* Errors: programming errors raise; operational outcomes are returned and counted
  (``errors``). Thread-safe; :meth:`close` flushes with a short deadline and never hangs.
"""

from __future__ import annotations

import atexit
import datetime as dt
import logging
import numbers
import os
import re
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from client_sdk.config_cache import CampaignConfig, ConfigCache, check_campaign_id, check_pins
from client_sdk.errors import (
    InvalidParameter,
    OutboxFull,
    PrivacyBudgetExceeded,
    StorageFailed,
    UnknownCampaign,
    ValueNotInDomain,
)
from client_sdk.ledger import (
    DEFAULT_REPORTS_PER_WINDOW,
    BudgetSpent,
    DeviceSpent,
    Ledger,
    PrivacyBudget,
    Release,
    window_of,
)
from client_sdk.mechanisms.base import Mechanism
from client_sdk.mechanisms.longitudinal import RapporUnary
from client_sdk.mechanisms.numeric.alpha_point import AlphaPointMean
from client_sdk.mechanisms.numeric.base import NumericMechanism
from client_sdk.mechanisms.openended.base import OpenDomainMechanism
from client_sdk.mechanisms.openended.strings import ValueTooLong
from client_sdk.memo import delete_secret, load_or_create_secret
from client_sdk.outbox import DEFAULT_KEEP_SENT, DEFAULT_MAX_PENDING, NotSent, Outbox, Report
from client_sdk.sealed import SealedTransport, check_sealed_key, sealing_available, shuffler_of
from client_sdk.state import ClientClosed, StateDB
from client_sdk.transport import DEFAULT_TIMEOUT
from client_sdk.uploader import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_BACKOFF_CAP,
    DEFAULT_BATCH_SIZE,
    DEFAULT_FLUSH_INTERVAL,
    Uploader,
)

if TYPE_CHECKING:
    import numpy as np

    from client_sdk.mechanisms.base import Payload
    from client_sdk.mechanisms.randomness import RandomSource

log = logging.getLogger(__name__)

#: Seconds ``close`` spends flushing before it gives up (the reports stay in the outbox).
DEFAULT_CLOSE_TIMEOUT = 2.0
#: Seconds ``flush`` waits by default.
DEFAULT_FLUSH_TIMEOUT = 10.0
#: Seconds ``report_many`` waits for uploads to make room in a full outbox.
DEFAULT_ROOM_TIMEOUT = 60.0
#: Environment variables read when the matching argument is not given.
ENV_ENDPOINT = "LDP_ENDPOINT"
ENV_INGEST_TOKEN = "LDP_INGEST_TOKEN"
ENV_STATE_DIR = "LDP_STATE_DIR"
ENV_CAMPAIGNS = "LDP_CAMPAIGNS"
_UPLOAD_ENABLED = "upload_enabled"
#: Label sets whose digests are kept in memory (one per memoised config in use, normally).
_LABEL_DIGESTS_KEPT = 64
#: The collector's reason for a report whose day is outside its window (docs/HTTP_API.md).
_DAY_REFUSED = re.compile(r"\bday \d{4}-\d{2}-\d{2} is (in the future|older than)")


class _ConsentWithdrawn(Exception):
    """Raised inside ``report``'s transaction when uploads were turned off meanwhile."""


def _seconds(name: str, value: object) -> float:
    """``value`` as a number of seconds (infinity allowed: "no limit"), else
    :class:`InvalidParameter`: a bool, a non-number, NaN or a negative number."""
    number = _plain_number(value)
    if number is None or number != number or number < 0:
        raise InvalidParameter(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(number)


def _campaign_or_none(campaign: object) -> str | None:
    """None (every campaign) or a campaign id checked by :func:`check_campaign_id`."""
    return None if campaign is None else check_campaign_id(campaign)


def _plain_number(value: object) -> int | float | None:
    """``value`` as a Python int or float, or None if it is not a number: integers of other
    types (NumPy's ``int64`` from a data frame) become ``int`` exactly, other real numbers
    (``float32``, ``Fraction``) ``float``. bool is no number; neither is Decimal (not a
    ``numbers.Real``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def _utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def new_report_id() -> str:
    """32 random hex characters from ``secrets``: unlinkable, idempotent on retries."""
    return secrets.token_hex(16)


def _from_env(value: Any, name: str, what: str) -> Any:
    if value is not None:
        if isinstance(value, str) and not value.strip():
            # An empty state_dir put the state file in the working directory.
            raise InvalidParameter(f"{what.rstrip('=')} must not be empty")
        return value
    env = os.environ.get(name)
    if not env:
        raise InvalidParameter(f"pass {what} or set the environment variable {name}")
    return env


def _check_text_setting(value: object, what: str, *, secret: bool = False) -> None:
    """Refuse a URL or token with whitespace around it or a control character inside (a line
    break read from a file or an environment variable): such a value cannot go into a request
    line or header, and before it passed the constructor, after which every fetch and upload
    failed in the background as "collector unreachable" (``InvalidURL``, ``InvalidHeader``) and
    ``report`` returned ``not_ready`` for ever. A token is never quoted in the message."""
    if not isinstance(value, str):
        return  # the transport says what type it needs
    bad = value != value.strip() or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value)
    if not secret:  # a URL never holds a raw space (RFC 3986); a token might, in its middle
        bad = bad or any(ch.isspace() for ch in value)
    if bad:
        shown = "" if secret else f" ({value!r})"
        raise InvalidParameter(
            f"{what}{shown} holds whitespace or a control character, e.g. the line break at "
            "the end of a file or environment variable it was read from; strip it"
        )


def _close_at_exit(ref: weakref.ReferenceType[TelemetryClient]) -> None:
    client = ref()
    if client is not None:
        client.close()


#: The clients open in this process, for :func:`_abandon_after_fork` (weak references).
_OPEN_CLIENTS: weakref.WeakSet[TelemetryClient] = weakref.WeakSet()


def _abandon_after_fork() -> None:
    """In the child of ``os.fork()``: every client inherited from the parent is closed for the
    child, without touching the state file, its lock or the connections it shares with the
    parent (the child has no upload thread either). Before, the child's reports went through
    the parent's SQLite connection, and its ``close()`` at exit unlocked the parent's
    ``state_dir``, so a second client could open it while the parent's still ran."""
    for client in list(_OPEN_CLIENTS):
        client._abandon_in_child()
    _OPEN_CLIENTS.clear()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_abandon_after_fork)


def _finite_numbers(campaign: str, values: Any) -> Any:
    """``values`` as a float array, refused (naming the first) where one is not finite, as
    :meth:`TelemetryClient.report` refuses it: the mechanism alone clips an infinity to a
    bound, which hides an app's bug behind a plausible report."""
    import numpy as np

    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidParameter(f"values must be numbers: {exc}") from None
    bad = np.flatnonzero(~np.isfinite(arr.ravel()))
    if bad.size:
        raise InvalidParameter(
            f"campaign {campaign!r} is numeric: value #{int(bad[0])} is not a finite number"
        )
    return arr


def _finite_attributes(campaign: str, mech: Any, values: Any) -> Any:
    """A multi-attribute batch (columns or records) with every numeric attribute's values
    checked as :func:`_finite_numbers` checks a numeric campaign's: a value that is not a
    finite number (NaN, an infinity, an int beyond the float range, not a number) is refused
    naming the attribute and the row, as :meth:`TelemetryClient.report` refuses it. Before,
    an infinity was clipped to a bound (a plausible report hiding the app's bug) and an int
    beyond the float range raised a bare ``OverflowError``. Returns ``values`` (records from
    an iterator as a list, so they are read once)."""
    import numpy as np

    numeric = [a.name for a in mech.attributes if not a.categorical]
    if isinstance(values, Mapping):
        columns = {name: values[name] for name in numeric if name in values}
    elif isinstance(values, (str, bytes)):
        return values  # the mechanism says what a batch is
    else:
        try:
            rows = iter(values)
        except TypeError:
            return values  # not a batch: the mechanism says what one is
        # Outside the try: a TypeError raised partway through the iteration is the app's,
        # not a sign of "no batch" (that returned the half-read iterator, the rest lost).
        values = list(rows)
        columns = {
            name: [r[name] if isinstance(r, Mapping) and name in r else 0.0 for r in values]
            for name in numeric
        }
    for name, column in columns.items():
        if isinstance(column, (str, bytes)):
            continue  # not a column: the mechanism refuses it
        try:
            arr = np.asarray(column, dtype=float)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidParameter(
                f"campaign {campaign!r}: attribute {name!r} is numeric: its values must be "
                f"numbers ({exc})"
            ) from None
        bad = np.flatnonzero(~np.isfinite(arr.ravel()))
        if bad.size:
            raise InvalidParameter(
                f"campaign {campaign!r}: attribute {name!r} is numeric: value #{int(bad[0])} "
                "is not a finite number"
            )
    return values


class TelemetryClient:
    """The on-device client: validates, perturbs, budgets, stores and uploads reports.

    Arguments (each falls back to an environment variable): ``url`` of the collector
    (``LDP_ENDPOINT``); ``ingest_token`` (``LDP_INGEST_TOKEN``); ``state_dir``, a private
    directory for the state file and the device secret (``LDP_STATE_DIR``). Options
    (keyword-only):

    * ``campaigns``: campaign ids the app will report to (``LDP_CAMPAIGNS``, comma-separated);
      fetched in the background at start so the first ``report`` finds them ready;
    * ``budget``: a :class:`PrivacyBudget` (the app's ceiling; default ``PrivacyBudget()``);
    * ``reports_per_window``: int, None (no limit) or a mapping campaign -> int/None (default
      1 for campaigns not in the mapping); a rate limit on top of the budget;
    * ``catch_all``: a label (or mapping campaign -> label) that stands in for values outside a
      campaign's domain, e.g. ``"Other"``; without it such a value raises ``ValueNotInDomain``;
    * ``batch_size``, ``flush_interval`` (seconds), ``backoff_base``, ``backoff_cap``
      (seconds), ``timeout`` (connect, read seconds): upload behaviour;
    * ``max_pending``: outbox cap (oldest dropped first, counted); ``keep_sent``: sent-log size;
    * ``close_timeout``: seconds :meth:`close` (and the interpreter's exit) may spend flushing;
    * ``durability``: ``"normal"`` (survives app crashes) or ``"full"`` (fsync every report);
    * ``clock``: returns today's UTC date (tests);
    * ``pins``: a mapping campaign id -> the digest (or a collection of digests) the app
      accepts for it, 64 lowercase hex digits each as ``ldp campaign show`` prints them; a
      pinned campaign whose served config has another digest is not used (``report`` returns
      ``NotSent("not_ready")`` saying so, and after a 409 the old config is no longer used
      for new reports), so the collector cannot vary its config per
      device at all. Campaigns not pinned take any config whose digest is its own. A pin may
      also be ``{"digest": digest(s), "shuffler": url}`` (``None``: sent straight to the
      collector): the served config must name exactly that shuffler, which the digest does
      not cover, so the collector cannot route one device's reports elsewhere;
    * ``sealed_key``: the collector's sealed-box public key (base64, ``GET /v1/sealed/key``'s
      ``public_key``) shipped with the app: shuffled campaigns are sealed to it and the
      collector is never asked for one (a key per device would tell it which device each
      message came from).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        ingest_token: str | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        campaigns: Sequence[str] | None = None,
        budget: PrivacyBudget | None = None,
        reports_per_window: int | None | Mapping[str, int | None] = DEFAULT_REPORTS_PER_WINDOW,
        catch_all: str | Mapping[str, str] | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        backoff_base: float = DEFAULT_BACKOFF_BASE,
        backoff_cap: float = DEFAULT_BACKOFF_CAP,
        timeout: float | tuple[float, float] = DEFAULT_TIMEOUT,
        max_pending: int = DEFAULT_MAX_PENDING,
        keep_sent: int = DEFAULT_KEEP_SENT,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
        durability: str = "normal",
        clock: Callable[[], dt.date] = _utc_today,
        pins: Mapping[str, str | Collection[str] | Mapping[str, Any]] | None = None,
        sealed_key: str | None = None,
    ) -> None:
        url = _from_env(url, ENV_ENDPOINT, "the collector's url")
        _check_text_setting(url, f"the collector's url (url= or {ENV_ENDPOINT})")
        ingest_token = _from_env(ingest_token, ENV_INGEST_TOKEN, "ingest_token=")
        _check_text_setting(
            ingest_token,
            f"ingest_token (or {ENV_INGEST_TOKEN}; its value is not shown)",
            secret=True,
        )
        state_dir = _from_env(state_dir, ENV_STATE_DIR, "state_dir=")
        if not isinstance(state_dir, (str, os.PathLike)):
            raise InvalidParameter(
                f"state_dir must be a path (str or os.PathLike), got {type(state_dir).__name__}"
            )
        if campaigns is None:
            campaigns = [
                c.strip() for c in os.environ.get(ENV_CAMPAIGNS, "").split(",") if c.strip()
            ]
        if isinstance(campaigns, str):
            raise InvalidParameter("campaigns must be a list of campaign ids, not one string")
        for campaign in campaigns:
            check_campaign_id(campaign)
        self._declared: tuple[str, ...] = tuple(campaigns)
        checked_pins = check_pins(pins)  # before any file or connection is opened
        if sealed_key is not None:
            check_sealed_key(sealed_key)
        if budget is None:
            budget = PrivacyBudget()
        if not isinstance(budget, PrivacyBudget):
            raise InvalidParameter(f"budget must be a PrivacyBudget, got {type(budget).__name__}")
        self.budget = budget
        self._limits = self._check_limits(reports_per_window)
        self._catch_all = catch_all
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidParameter(f"batch_size must be an integer >= 1, got {batch_size!r}")
        flush_interval = _seconds("flush_interval", flush_interval)
        backoff_base = _seconds("backoff_base", backoff_base)
        backoff_cap = _seconds("backoff_cap", backoff_cap)
        self.close_timeout = _seconds("close_timeout", close_timeout)
        self._clock = clock
        # A campaign naming a shuffler is sent through it, sealed (client_sdk/sealed.py).
        self._transport = SealedTransport(url, ingest_token, timeout=timeout, sealed_key=sealed_key)
        try:
            self._db = StateDB(state_dir, durability=durability)
        except BaseException:
            self._transport.close()
            raise
        try:
            self.outbox = Outbox(self._db, max_pending=max_pending, keep_sent=keep_sent)
            self.ledger = Ledger(self._db)
            self.configs = ConfigCache(self._db, self._transport, pins=checked_pins)
            self._transport.configs = self.configs  # it reads the cached shuffler URL
        except BaseException:
            self._db.close()
            raise
        self._secret: bytes | None = None
        self._secret_lock = threading.Lock()
        #: Labels served for a memoised release -> their digests. Keyed by the labels, never
        #: by the collector's config digest: the labels are what the ledger charges for.
        self._label_digests: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._warned: set[str] = set()
        self._closed = False
        self._close_lock = threading.Lock()
        self._uploader = Uploader(
            self.outbox,
            self._transport,
            self.configs,
            batch_size=batch_size,
            flush_interval=float(flush_interval),
            backoff_base=float(backoff_base),
            backoff_cap=float(backoff_cap),
        )
        self._uploader.restamp = self._restamp
        self._uploader.shuffled_day = self._shuffled_day
        self._uploader.enabled = self.upload_enabled
        # A shuffled report waits up to 0.2 s before it leaves: consent withdrawn, or the client
        # closed, meanwhile keeps it on the device.
        uploader = self._uploader
        self._transport.sending = lambda: uploader.sending
        for campaign in campaigns:
            if self.configs.peek(campaign) is None:
                self.configs.want(campaign)
        self._uploader.start()
        if self.outbox.pending:
            self._uploader.notify()
        ref = weakref.ref(self)
        self._atexit = lambda: _close_at_exit(ref)
        atexit.register(self._atexit)
        self._pid = os.getpid()
        _OPEN_CLIENTS.add(self)

    @staticmethod
    def _check_limits(
        limits: int | None | Mapping[str, int | None],
    ) -> Mapping[str, int | None] | int | None:
        values = limits.values() if isinstance(limits, Mapping) else [limits]
        for v in values:
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InvalidParameter(
                    f"reports_per_window must be an integer >= 1 or None (no limit), got {v!r}"
                )
        return limits

    # -- reporting ----------------------------------------------------------------------------

    def limit_for(self, campaign: str) -> int | None:
        """Reports per window allowed for ``campaign`` (None: no limit)."""
        if isinstance(self._limits, Mapping):
            return self._limits.get(campaign, DEFAULT_REPORTS_PER_WINDOW)
        return self._limits

    @staticmethod
    def _open_payload(config: CampaignConfig, mech: OpenDomainMechanism, value: object) -> Any:
        """The report of an open-ended string, perturbed here (OS randomness). A value the
        campaign cannot take raises :class:`InvalidParameter` (:class:`ValueTooLong` when too
        long) whose message never quotes the value: apps log exceptions."""
        if not isinstance(value, str):
            raise InvalidParameter(
                f"campaign {config.id!r} takes open-ended strings: report a str, got "
                f"{type(value).__name__}"
            )
        try:
            return mech.perturb(value)
        except ValueTooLong:
            raise ValueTooLong(
                f"the value reported to campaign {config.id!r} is longer than its max_length="
                f"{mech.max_length} bytes of UTF-8 after NFC normalisation (not repeated here, "
                "so this message is safe to log); shorten it on the device"
            ) from None
        except InvalidParameter as exc:
            # normalise()'s other reasons (empty, NUL, lone surrogate) never quote the value.
            raise InvalidParameter(f"campaign {config.id!r}: {exc}") from None

    @staticmethod
    def _number(config: CampaignConfig, value: object) -> float:
        """``value`` as a finite number clipped into the campaign's bounds (the message never
        quotes the value)."""
        mech = config.mechanism
        assert isinstance(mech, NumericMechanism)
        number = _plain_number(value)
        if number is None:
            raise InvalidParameter(
                f"campaign {config.id!r} is numeric (bounds {mech.bounds}): report an int or "
                f"float, got {type(value).__name__}"
            )
        if number != number or number in (float("inf"), float("-inf")):
            raise InvalidParameter(
                f"campaign {config.id!r} is numeric: the value must be a finite number"
            )
        return mech.clip(number)  # an int beyond the float range clips like infinity

    def _index(self, config: CampaignConfig, value: object) -> int:
        mech = config.mechanism
        assert isinstance(mech, Mechanism)
        try:
            return mech.index_of(value)
        except ValueNotInDomain:
            pass
        label = (
            self._catch_all.get(config.id)
            if isinstance(self._catch_all, Mapping)
            else self._catch_all
        )
        if label is not None:
            try:
                return mech.index_of(label)
            except ValueNotInDomain:
                raise InvalidParameter(
                    f"catch_all label {label!r} is not in campaign {config.id!r}'s domain; "
                    "use one of its labels or no catch_all"
                ) from None
        # The message does not quote the value: apps log exceptions, and the value is the
        # user's. ``mechanism.index_of(value)`` gives the quoting message while debugging.
        raise ValueNotInDomain(
            f"the value reported to campaign {config.id!r} is not one of its {mech.k} values "
            f"(not repeated here, so this message is safe to log); check it against "
            f"client.configs.get({config.id!r}).mechanism.domain, or pass catch_all=<label>"
        ) from None

    @staticmethod
    def _multi_payload(config: CampaignConfig, record: object) -> Any:
        """The one report of a multi-attribute campaign for ``record`` (every attribute;
        numbers clipped into their bounds). Messages name attributes, never values."""
        from client_sdk.mechanisms.multi import MultiMechanism

        mech = config.mechanism
        assert isinstance(mech, MultiMechanism)
        if not isinstance(record, Mapping):
            raise InvalidParameter(
                f"campaign {config.id!r} has several attributes {list(mech.names)}: report a "
                f"mapping attribute -> value, got {type(record).__name__}"
            )
        missing = [a for a in mech.names if a not in record]
        unknown = [str(k)[:40] for k in record if k not in mech.names]
        if missing or unknown:
            raise InvalidParameter(
                f"campaign {config.id!r} takes exactly the attributes {list(mech.names)}; "
                f"missing {missing}, unknown {unknown}"
            )
        clean: dict[str, Any] = {}
        for attr, sub in zip(mech.attributes, mech.mechanisms, strict=False):
            value = record[attr.name]
            if isinstance(sub, Mechanism):
                try:
                    sub.index_of(value)
                except ValueNotInDomain:
                    raise ValueNotInDomain(
                        f"the value of attribute {attr.name!r} reported to campaign "
                        f"{config.id!r} is not one of its {sub.k} labels (not repeated here)"
                    ) from None
                clean[attr.name] = value
                continue
            value = _plain_number(value)
            if value is None or value != value or value in (float("inf"), float("-inf")):
                raise InvalidParameter(
                    f"attribute {attr.name!r} of campaign {config.id!r} is numeric (bounds "
                    f"{attr.bounds}): report a finite int or float"
                )
            clean[attr.name] = sub.clip(value)
        payload = mech.perturb(clean)
        clean.clear()
        return payload

    def _device_secret(self) -> bytes:
        with self._secret_lock:
            if self._secret is None:
                self._secret = load_or_create_secret(self._db.state_dir)
            return self._secret

    def _digests_of(self, labels: tuple[str, ...]) -> tuple[str, ...]:
        """The ledger's digests of exactly ``labels``: every label the config being used
        serves is recorded in the release's domain, so the memoised bound counts them all.

        Before, the digests were cached by the config's digest, a string the collector sends
        and the device cannot check: a collector that served a bigger domain under the digest
        it had used for a smaller one had the device charge the smaller domain's bound (e.g.
        8 instead of 24 for six values reported ten times each at permanent epsilon 4)."""
        digests = self._label_digests.get(labels)
        if digests is None:
            if len(self._label_digests) >= _LABEL_DIGESTS_KEPT:  # configs a collector serves
                self._label_digests.clear()
            digests = self._label_digests[labels] = Release.digests(labels)
        return digests

    def _release(self, mech: RapporUnary, secret: bytes) -> Release:
        return Release(
            mech.release_key(secret), mech.permanent_epsilon, self._digests_of(mech.domain)
        )

    def _rounded_digests(self, mech: AlphaPointMean) -> tuple[str, ...]:
        return self._digests_of(mech.rounded_labels())

    def _above_ceiling(self, config: CampaignConfig) -> str | None:
        mech = config.mechanism
        budget = self.budget
        problem = None
        if config.epsilon > budget.max_report_epsilon:
            problem = (
                f"epsilon {config.epsilon:.4g} per report is above the app's "
                f"max_report_epsilon={budget.max_report_epsilon:g}"
            )
        elif (
            mech.memoized
            and mech.permanent_epsilon is not None
            and mech.permanent_epsilon > budget.max_permanent_epsilon
        ):
            problem = (
                f"permanent epsilon {mech.permanent_epsilon:.4g} is above the app's "
                f"max_permanent_epsilon={budget.max_permanent_epsilon:g}"
            )
        if problem is None:
            return None
        message = (
            f"campaign {config.id!r} as served by the collector asks too much privacy: "
            f"{problem}; nothing was stored (raise the ceiling in PrivacyBudget only if the "
            "campaign's privacy analysis allows it)"
        )
        if config.digest not in self._warned:
            self._warned.add(config.digest)
            log.warning("%s", message)
        return message

    def _not_sent(self, campaign: str, reason: str, message: str) -> NotSent:
        result = NotSent(campaign, reason, message)
        try:
            self.outbox.bump(result.counter)
        except ClientClosed:
            pass
        return result

    def report(self, campaign: str, value: str | float | Mapping[str, Any]) -> Report | NotSent:
        """Perturb ``value`` for ``campaign`` and store only the report; returns that report.

        ``value`` is a label of the campaign's domain, or a number for a numeric campaign
        (clipped into its bounds on the device; the budget is charged the mechanism's
        realised epsilon, and for a memoised mechanism its longitudinal bound). For a
        multi-attribute campaign it is a mapping ``{attribute: label or number}`` holding
        every attribute: one report covers them all and is charged once, the whole report's
        realised epsilon. For an open-domain campaign it is any string of at most the
        campaign's ``max_length`` bytes (UTF-8 after NFC).

        Never waits for the network. Returns the stored :class:`Report` (what will be sent,
        safe to show), or a falsy :class:`NotSent` when nothing was stored for an operational
        reason (``not_ready``: the campaign is being fetched in the background;
        ``budget_spent``; ``above_ceiling``; ``upload_disabled``; ``storage_failed``: the state
        file could not be written, e.g. the disk is full; ``campaign_archived``: the collector
        archived the campaign), counted in :meth:`stats`.
        Raises for programming errors only: :class:`ValueNotInDomain`,
        :class:`InvalidParameter` (not a campaign id), :class:`UnknownCampaign` (the collector
        answered that the campaign does not exist), :class:`ClientClosed`.
        """
        self._check_open()
        check_campaign_id(campaign)
        if not self._uploader.enabled:
            return self._not_sent(
                campaign,
                "upload_disabled",
                "uploads are turned off on this device (set_upload_enabled(False)); "
                "nothing was stored",
            )
        config = self.configs.peek(campaign)
        if config is None:
            if self.configs.is_gone(campaign):
                raise UnknownCampaign(self.configs.gone_message(campaign))
            self.configs.want(campaign)
            self._uploader.wake()
            unusable = self.configs.unusable(campaign)
            if unusable is not None:
                return self._not_sent(
                    campaign,
                    "not_ready",
                    f"the collector serves a config this device cannot use ({unusable}); "
                    "nothing was stored. It is fetched again in the background",
                )
            paused = self._uploader.paused
            if paused is not None:
                return self._not_sent(
                    campaign,
                    "not_ready",
                    f"campaign {campaign!r} is not on this device yet and cannot be fetched: "
                    f"uploads are paused ({paused}); nothing was stored",
                )
            return self._not_sent(
                campaign,
                "not_ready",
                f"campaign {campaign!r} is not on this device yet and is being fetched in the "
                "background; nothing was stored. Declare campaigns=[...] when creating the "
                "client (or call prefetch() at startup) so reports find it ready",
            )
        if config.archived:
            return self._not_sent(
                campaign,
                "campaign_archived",
                f"campaign {campaign!r} was archived on the collector and takes no report any "
                "more; nothing was stored or charged",
            )
        if shuffler_of(config.resource) is not None and not sealing_available():
            return self._not_sent(
                campaign,
                "not_ready",
                f"campaign {campaign!r} is sent through a shuffler, which needs PyNaCl on this "
                "device (pip install 'ldp-telemetry[sealed]'); nothing was stored",
            )
        reason = self._above_ceiling(config)
        if reason is not None:
            return self._not_sent(campaign, "above_ceiling", reason)
        mech = config.mechanism
        release = None
        payload: Payload
        if mech.kind == "multi":
            # Several attributes, one report, charged once (docs/MECHANISMS.md §22).
            payload = self._multi_payload(config, value)
        elif mech.kind == "frequency":
            index = self._index(config, value)
            if mech.memoized:
                assert isinstance(mech, RapporUnary)  # the one memoised frequency oracle
                secret = self._device_secret()
                payload = mech.perturb_memoized(mech.domain[index], secret, campaign=campaign)
                release = self._release(mech, secret)
            else:
                payload = mech.perturb_index(index)
            del index
        elif isinstance(mech, OpenDomainMechanism):
            # An open-ended string (docs/MECHANISMS.md §24): normalised and perturbed here; a
            # non-string or too long value raises (a programming error).
            payload = self._open_payload(config, mech, value)
        else:
            # A numeric campaign: clipped into the bounds and perturbed here, pure Python.
            number = self._number(config, value)
            if mech.memoized:
                # α-point rounding with memoised bits: charged by its longitudinal bound, one
                # permanent_epsilon per distinct rounded value (at most segments + 1).
                assert isinstance(mech, AlphaPointMean)  # the one memoised numeric mechanism
                secret = self._device_secret()
                # Answers keyed by the channel too: configs of the campaign with other
                # thresholds get independent ones, as the ledger charges them.
                scope = mech.release_scope(campaign)
                payload = mech.perturb_memoized(number, secret, campaign=scope)
                release = Release(
                    mech.release_key(secret, campaign=scope),
                    mech.permanent_epsilon,
                    self._rounded_digests(mech),
                )
            else:
                payload = mech.perturb(number)
            del number
        del value  # nothing below may see the true value
        today = self._clock()
        shuffler = shuffler_of(config.resource)
        wire_day = self._wire_day(today, shuffler).isoformat()
        # The shuffler's clock not heard yet: the device's day now, the shuffler's before it
        # leaves (Outbox.with_days).
        device_day = shuffler is not None and self._transport.shuffler_today(shuffler) is None
        report = Report(campaign, new_report_id(), wire_day, payload, config.digest)
        went_back = False
        try:
            with self._db.transaction() as conn:
                # Checked again under the state lock: set_upload_enabled(False) turns the flag
                # off under the same lock before deleting the outbox, so a report that passed
                # the check above while consent was being withdrawn is never stored after the
                # deletion (it would have been uploaded once consent was given again).
                if not self._uploader.enabled:
                    raise _ConsentWithdrawn
                day, went_back = self.ledger.accounting_day(conn, today)
                self.ledger.charge(
                    conn,
                    campaign=campaign,
                    window=window_of(day, config.window),
                    day=day,
                    epsilon=config.epsilon,
                    limit=self.limit_for(campaign),
                    budget=self.budget,
                    release=release,
                )
                self.outbox.add(conn, report, device_day=device_day)
        except PrivacyBudgetExceeded as exc:
            return self._not_sent(campaign, "budget_spent", str(exc))
        except _ConsentWithdrawn:
            return self._not_sent(
                campaign,
                "upload_disabled",
                "uploads were turned off on this device (set_upload_enabled(False)) while this "
                "report was made; nothing was stored",
            )
        except StorageFailed as exc:  # disk full, I/O error: the transaction rolled back whole
            self.outbox.recount()
            return self._not_sent(
                campaign,
                "storage_failed",
                f"{exc}: nothing was stored and nothing charged. Reports are stored again once "
                "the device has space",
            )
        finally:
            if went_back:
                self.outbox.bump("clock_went_back")
        self._uploader.notify()
        return report

    def _wire_day(self, today: dt.date, shuffler: str | None = None) -> dt.date:
        """The day a report carries: the collector's day once its clock is known (a device
        clock days off would have its reports refused), else the device's. A campaign sent
        through a shuffler takes the shuffler's day instead, never the collector's: the day is
        sealed inside the report, so a collector answering each device a ``Date`` shifted by
        its own number of days would tag every report of that device past the shuffler (a
        direct upload shows the collector the device's address anyway). Never used for the
        budget, which the collector must not be able to move. ``shuffler``: the URL the
        campaign's verified config names, if any."""
        if shuffler is not None:
            return self._transport.shuffler_today(shuffler) or today
        return self._transport.server_today() or today

    def _shuffled_day(self, campaign: str, day: str) -> str | None:
        """The shuffler's day for a report of ``campaign`` stored with the device's own
        ``day`` (its shuffler's clock unknown then): ``day`` moved by how far the shuffler's
        day is ahead of the device's now, heard from the shuffler first if need be (the
        upload thread calls this). None while the shuffler's clock is unknown or the config
        names no shuffler (the report keeps its day)."""
        config = self.configs.peek(campaign)
        shuffler = shuffler_of(config.resource) if config is not None else None
        if shuffler is None:
            return None
        there = self._transport.shuffler_today(shuffler)
        if there is None:
            self._transport.hear_clock(shuffler)
            there = self._transport.shuffler_today(shuffler)
        if there is None:
            return None
        try:
            return (dt.date.fromisoformat(day) + (there - self._clock())).isoformat()
        except (ValueError, OverflowError):  # a shuffler's Date near year 1 or 9999
            return None

    def _restamp(self, campaign: str, day: str, reason: str) -> str | None:
        """A report the collector refused for its day alone: the collector's day, else None."""
        if not _DAY_REFUSED.search(reason):
            return None
        server = self._transport.server_today()
        if server is None:
            return None
        try:
            stored = dt.date.fromisoformat(day)
        except ValueError:
            return None
        config = self.configs.peek(campaign)
        # The collector's horizon, at most the calendar behind its day: a config's horizon of a
        # million days made the date arithmetic below raise in the upload thread.
        horizon = min(config.horizon_days if config else 1, (server - dt.date.min).days)
        # Only a device clock that was off explains it: shift by the skew, and only if that
        # lands in the collector's window (a report that is simply too old stays rejected).
        try:
            fixed = stored + (server - self._clock())
        except OverflowError:  # a collector's Date near year 1 or 9999 (not trusted)
            return None
        if fixed == stored or not server - dt.timedelta(days=horizon) <= fixed <= server:
            return None
        return fixed.isoformat()

    def report_many(
        self,
        campaign: str,
        values: Sequence[str] | np.ndarray | Mapping[str, Any] | None = None,
        *,
        payloads: Sequence[Payload] | np.ndarray | None = None,
        simulate_devices: bool = False,
        rng: RandomSource = None,
        day: dt.date | str | None = None,
        timeout: float = DEFAULT_ROOM_TIMEOUT,
    ) -> int:
        """Enqueue one report per *simulated device* through the real outbox; for the simulator.

        Each row is a different device: ``values`` (labels or domain indices; for a
        multi-attribute campaign a mapping attribute -> column) are perturbed with
        ``perturb_many`` (fresh randomness per row, fresh permanent bits for memoised
        campaigns); or ``payloads`` are already perturbed wire payloads, or a batch array from
        ``perturb_many``. The budget ledger is bypassed, which is only right when every row is
        a different device: ``simulate_devices=True`` must be passed to say so. ``day``: a
        date or ``"YYYY-MM-DD"`` (default today). Blocks (fetching the config, and uploading
        when the outbox is full, up to ``timeout`` s per wait): this is the simulator's path.

        Returns the number of reports enqueued, always all of them: nothing pending is dropped
        to make room. If the collector does not take reports fast enough to make room,
        :class:`OutboxFull` says how many were enqueued (``.enqueued``) before it gave up.
        """
        self._check_open()
        timeout = _seconds("timeout", timeout)
        if simulate_devices is not True:
            raise InvalidParameter(
                "report_many enqueues one report per simulated device and bypasses this "
                "device's privacy budget; pass simulate_devices=True (simulation only), or call "
                "report() for this device's own values"
            )
        if (values is None) == (payloads is None):
            raise InvalidParameter("report_many needs exactly one of values= or payloads=")
        if isinstance(day, str):
            try:
                day = dt.date.fromisoformat(day)
            except ValueError:
                raise InvalidParameter(f"day must be a date or 'YYYY-MM-DD', got {day!r}") from None
        elif isinstance(day, dt.datetime):
            day = day.date()
        elif day is not None and not isinstance(day, dt.date):
            raise InvalidParameter(f"day must be a date or 'YYYY-MM-DD', got {day!r}")
        config = self.configs.get(campaign)
        mech = config.mechanism
        if values is not None:
            if isinstance(values, Mapping) and mech.kind != "multi":
                # A dict iterates over its keys: an open-domain campaign reported each key
                # as a device's string, silently.
                raise InvalidParameter(
                    f"campaign {config.id!r} takes one value per device: pass values as a "
                    f"sequence, not a {type(values).__name__} (a mapping attribute -> column "
                    "is for multi-attribute campaigns)"
                )
            if mech.kind in ("open_domain", "multi"):
                try:
                    iter(values)
                except TypeError:  # was a bare TypeError from deep in perturb_many
                    raise InvalidParameter(
                        f"campaign {config.id!r}: values must be a sequence, one value per "
                        f"device, got {type(values).__name__}"
                    ) from None
            if isinstance(mech, NumericMechanism):
                values = _finite_numbers(config.id, values)
            elif mech.kind == "multi":
                values = _finite_attributes(config.id, mech, values)
            wire = mech.encode_many(mech.perturb_many(values, rng=rng))  # type: ignore[arg-type]
        elif isinstance(payloads, (list, tuple)):
            wire = list(payloads)
            mech.decode_many(wire)  # raises InvalidReport naming the first bad payload
        else:
            wire = mech.encode_many(payloads)  # type: ignore[arg-type]
        day_text = (day or self._clock()).isoformat()
        reports = [Report(campaign, new_report_id(), day_text, p, config.digest) for p in wire]
        added = 0
        while added < len(reports):
            if self.outbox.room == 0:
                self._uploader.flush(timeout)
                if self.outbox.room == 0:
                    exc = OutboxFull(
                        f"enqueued {added} of {len(reports)} reports: the outbox holds "
                        f"max_pending={self.outbox.max_pending} reports and the collector did "
                        f"not take them within {timeout:g} s ({self._uploader.last_error}); "
                        "nothing was dropped. Enqueue the rest later, or raise max_pending"
                    )
                    exc.enqueued = added  # type: ignore[attr-defined]
                    raise exc
            added += self.outbox.add_many(
                reports[added : added + self.outbox.room], drop_oldest=False
            )
            self._uploader.notify()
        return added

    # -- uploading ----------------------------------------------------------------------------

    def flush(self, timeout: float = DEFAULT_FLUSH_TIMEOUT) -> bool:
        """Upload every pending report now; True if the outbox is empty within ``timeout`` s."""
        self._check_open()
        return self._uploader.flush(_seconds("timeout", timeout))

    def close(self, timeout: float | None = None) -> None:
        """Flush for at most ``timeout`` seconds (``close_timeout``), stop, release the state.

        Never hangs: reports not acknowledged by the deadline stay in the outbox for the next
        client on the same ``state_dir``. Idempotent. Also runs at interpreter exit.
        """
        budget = self.close_timeout if timeout is None else _seconds("timeout", timeout)
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._atexit)
        _OPEN_CLIENTS.discard(self)
        deadline = time.monotonic() + budget
        try:
            if self.outbox.pending and not self._uploader.paused and self._uploader.enabled:
                self._uploader.flush(budget)
        finally:
            self._uploader.stop(max(0.0, deadline - time.monotonic()))
            self._db.close()
            self._transport.close()

    def __enter__(self) -> TelemetryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed(self._db.closed_message)

    def _abandon_in_child(self) -> None:
        """Close this client in a forked child without touching what the parent still uses
        (see :func:`_abandon_after_fork`); the parent's client goes on as before."""
        self._closed = True
        self._close_lock = threading.Lock()  # a parent's thread may have held it at the fork
        atexit.unregister(self._atexit)
        self._db.abandon(
            f"this telemetry client was created in process {self._pid} and inherited through "
            "os.fork(); a forked child cannot use it (the parent still does). Create a new "
            "client in the child, on a state_dir of its own (the parent holds this one)"
        )

    # -- consent ------------------------------------------------------------------------------

    @property
    def upload_enabled(self) -> bool:
        """Whether the device collects and uploads (persisted; default True)."""
        return self._db.get_setting(_UPLOAD_ENABLED) != "0"

    def set_upload_enabled(self, enabled: bool) -> None:
        """The consent switch, persisted in ``state_dir``.

        ``False``: stop collecting (``report`` returns ``NotSent``, ``upload_disabled``) and
        uploading, delete every pending report (counted ``deleted_consent``), the sent log and
        the device secret (so every memoised answer is gone). ``True``: start fresh, with a new
        secret on the next memoised report. The budget ledger is kept either way: what was
        sent before still counts.
        """
        if not isinstance(enabled, bool):
            raise InvalidParameter(f"enabled must be True or False, got {enabled!r}")
        self._check_open()
        with self._db.transaction() as conn:
            if not enabled:
                # Off before the deletion and under the state lock that report() holds while
                # it stores: no report can be stored after the DELETE below (report() checks
                # the flag again inside its transaction). Kept off even if this write fails:
                # a withdrawal is never undone by a full disk.
                self._uploader.enabled = False
            StateDB.put_setting(conn, _UPLOAD_ENABLED, "1" if enabled else "0")
            if not enabled:
                self.outbox.clear(conn, reason="deleted_consent")
                conn.execute("DELETE FROM sent")
        self._uploader.enabled = enabled
        if not enabled:
            with self._secret_lock:
                self._secret = None
                delete_secret(self._db.state_dir)
        else:
            self._uploader.wake()

    # -- transparency and accounting ----------------------------------------------------------

    def prefetch(self, *campaigns: str) -> None:
        """Fetch and cache campaigns now (blocks up to ``timeout``; call it off the UI thread).

        With no argument, the campaigns declared to the constructor (``campaigns=[...]`` or
        ``LDP_CAMPAIGNS``), which it otherwise fetches in the background; with neither,
        :class:`InvalidParameter` (there is nothing to fetch). A campaign already on the
        device is not fetched again. Raises :class:`UnknownCampaign` (the collector has no
        such campaign), :class:`AuthenticationFailed` (wrong token) or
        :class:`UnknownCampaign` naming the network error.
        """
        self._check_open()  # a closed client fetched and wrote into a state_dir it let go
        if not campaigns and not self._declared:
            raise InvalidParameter(
                "prefetch() needs campaign ids (prefetch('occupation', ...)) or campaigns "
                "declared when creating the client (campaigns=[...] or LDP_CAMPAIGNS)"
            )
        for campaign in campaigns or self._declared:
            self.configs.get(check_campaign_id(campaign))

    def sent_reports(self, campaign: str | None = None) -> list[dict[str, Any]]:
        """Every report that reached the collector (latest ``keep_sent``): exactly what was sent.

        Each entry: campaign, id, day, payload (the perturbed report), outcome.
        """
        return self.outbox.sent_reports(_campaign_or_none(campaign))

    def pending_reports(self, campaign: str | None = None) -> list[dict[str, Any]]:
        """Reports stored on the device and not yet acknowledged, exactly as they will be sent."""
        return self.outbox.pending_reports(_campaign_or_none(campaign))

    def privacy_spent(self, campaign: str, *, delta: float | None = None) -> BudgetSpent:
        """What ``campaign`` cost this device over the budget period: every bound, the one
        charged (``best``, ``bound``), the budget and what remains, and an ``explanation``."""
        return self.ledger.spent(
            check_campaign_id(campaign), today=self._clock(), budget=self.budget, delta=delta
        )

    def privacy_summary(self, *, delta: float | None = None) -> list[BudgetSpent]:
        """:meth:`privacy_spent` for every campaign this device has reported to."""
        return [self.privacy_spent(c, delta=delta) for c in self.ledger.campaigns()]

    def privacy_total(self, *, delta: float | None = None) -> DeviceSpent:
        """All campaigns together over the budget period, against ``budget.device_epsilon``."""
        return self.ledger.device_spent(today=self._clock(), budget=self.budget, delta=delta)

    def privacy_charges(self, campaign: str | None = None) -> list[dict[str, Any]]:
        """Every charge in the ledger, oldest first: campaign, day, epsilon, why."""
        return self.ledger.charges(_campaign_or_none(campaign))

    def budget_left(self, campaign: str) -> int | None:
        """Reports still allowed for ``campaign`` in the current window (None: no limit).

        The per-window rate limit only; the epsilon budget is :meth:`privacy_spent`."""
        self._check_open()
        limit = self.limit_for(check_campaign_id(campaign))
        if limit is None:
            return None
        config = self.configs.peek(campaign)
        day = self.ledger.latest_day(self._clock())
        used = self.ledger.used(
            campaign, window_of(day, config.window if config else "day"), day=day
        )
        return max(0, limit - used)

    def stats(self) -> dict[str, Any]:
        """Pending reports, outcome and refusal counters, upload state (no values, no payloads).

        ``clock_skew_seconds``: how far the collector's clock is ahead of the device's (None
        before the first answer); a direct campaign's reports carry the collector's day.
        ``shuffler_clock_skew_seconds``: the same per shuffler URL; a shuffled campaign's
        reports carry its shuffler's day, never the collector's.
        """
        return {
            "pending": self.outbox.pending,
            **self.outbox.counters(),
            "paused": self._uploader.paused,
            "last_error": self._uploader.last_error,
            "upload_enabled": self._uploader.enabled,
            "clock_skew_seconds": self._transport.server_skew,
            "shuffler_clock_skew_seconds": dict(self._transport.shuffler_skew),
        }
