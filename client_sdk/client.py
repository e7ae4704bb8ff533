"""``TelemetryClient``: what an app embeds to send private reports.

    from client_sdk import TelemetryClient
    with TelemetryClient("https://telemetry.example.com", ingest_token=TOKEN,
                         state_dir=app_data_dir) as client:
        client.report("occupation", "Sales")   # perturbs now; stores only the report

Guarantees:

* The true value exists only inside :meth:`TelemetryClient.report`, until the campaign's
  mechanism has perturbed it. It is never written to disk, logged or sent.
* A report is durable once ``report`` returns (SQLite outbox in ``state_dir``); it leaves the
  outbox only when the collector acknowledged it, or for a counted reason (see ``outbox``).
* ``report`` never waits for the network once a campaign's config is cached; uploads happen on a
  background thread and on :meth:`flush` / :meth:`close`.
* At most ``reports_per_window`` reports per campaign per window (default 1): then
  :class:`PrivacyBudgetExceeded`. The budget charge and the enqueued report commit together.
* Thread-safe; :meth:`close` flushes with a short deadline and never hangs.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from client_sdk.config_cache import CampaignConfig, ConfigCache
from client_sdk.errors import InvalidParameter, LDPError, ValueNotInDomain
from client_sdk.ledger import (
    DEFAULT_ADVANCED_DELTA,
    DEFAULT_REPORTS_PER_WINDOW,
    BudgetSpent,
    Ledger,
    window_of,
)
from client_sdk.mechanisms.base import Payload
from client_sdk.mechanisms.longitudinal import RapporUnary
from client_sdk.mechanisms.randomness import RandomSource
from client_sdk.memo import load_or_create_secret
from client_sdk.outbox import DEFAULT_KEEP_SENT, DEFAULT_MAX_PENDING, Outbox, Report
from client_sdk.state import ClientClosed, StateDB
from client_sdk.transport import DEFAULT_TIMEOUT, Transport
from client_sdk.uploader import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_BACKOFF_CAP,
    DEFAULT_BATCH_SIZE,
    DEFAULT_FLUSH_INTERVAL,
    Uploader,
)

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

#: Seconds ``close`` spends flushing before it gives up (the reports stay in the outbox).
DEFAULT_CLOSE_TIMEOUT = 2.0
#: Seconds ``flush`` waits by default.
DEFAULT_FLUSH_TIMEOUT = 10.0


def _utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def new_report_id() -> str:
    """32 random hex characters from ``secrets``: unlinkable, idempotent on retries."""
    return secrets.token_hex(16)


class TelemetryClient:
    """The on-device client: validates, perturbs, budgets, stores and uploads reports.

    Arguments: ``url`` of the collector; ``ingest_token``; ``state_dir``, a private directory
    for the state file and the device secret. Options (keyword-only):

    * ``reports_per_window``: int, None (no limit) or a mapping campaign -> int/None (default
      1 for campaigns not in the mapping);
    * ``catch_all``: a label (or mapping campaign -> label) that stands in for values outside a
      campaign's domain, e.g. ``"Other"``; without it such a value raises ``ValueNotInDomain``;
    * ``batch_size``, ``flush_interval`` (seconds), ``backoff_base``, ``backoff_cap``
      (seconds), ``timeout`` (connect, read seconds): upload behaviour;
    * ``max_pending``: outbox cap (oldest dropped first, counted); ``keep_sent``: sent-log size;
    * ``close_timeout``: seconds :meth:`close` may spend flushing;
    * ``durability``: ``"normal"`` (survives app crashes) or ``"full"`` (fsync every report);
    * ``clock``: returns today's UTC date (tests);
    * ``start``: False keeps the upload thread stopped until :meth:`flush` (benchmarks).
    """

    def __init__(
        self,
        url: str,
        *,
        ingest_token: str,
        state_dir: str | os.PathLike[str],
        reports_per_window: int | None | Mapping[str, int | None] = DEFAULT_REPORTS_PER_WINDOW,
        catch_all: str | Mapping[str, str] | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        backoff_base: float = DEFAULT_BACKOFF_BASE,
        backoff_cap: float = DEFAULT_BACKOFF_CAP,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        max_pending: int = DEFAULT_MAX_PENDING,
        keep_sent: int = DEFAULT_KEEP_SENT,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
        durability: str = "normal",
        clock: Callable[[], dt.date] = _utc_today,
    ) -> None:
        self._limits = self._check_limits(reports_per_window)
        self._catch_all = catch_all
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidParameter(f"batch_size must be an integer >= 1, got {batch_size!r}")
        for name, value in (
            ("flush_interval", flush_interval),
            ("backoff_base", backoff_base),
            ("backoff_cap", backoff_cap),
            ("close_timeout", close_timeout),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InvalidParameter(f"{name} must be a number of seconds >= 0, got {value!r}")
        self.close_timeout = float(close_timeout)
        self._clock = clock
        self._transport = Transport(url, ingest_token, timeout=timeout)
        self._db = StateDB(state_dir, durability=durability)
        self.outbox = Outbox(self._db, max_pending=max_pending, keep_sent=keep_sent)
        self.ledger = Ledger(self._db)
        self.configs = ConfigCache(self._db, self._transport)
        self._secret: bytes | None = None
        self._secret_lock = threading.Lock()
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
        self._uploader.start()
        if self.outbox.pending:
            self._uploader.notify()

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

    def _index(self, config: CampaignConfig, value: object) -> int:
        mech = config.mechanism
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

    def _device_secret(self) -> bytes:
        with self._secret_lock:
            if self._secret is None:
                self._secret = load_or_create_secret(self._db.state_dir)
            return self._secret

    def report(self, campaign: str, value: str) -> Report:
        """Perturb ``value`` for ``campaign`` and store only the report; returns that report.

        The returned :class:`Report` is what will be sent (safe to show). Raises
        :class:`UnknownCampaign` (never fetched while offline, or unknown to the collector),
        :class:`ValueNotInDomain`, :class:`PrivacyBudgetExceeded` (nothing is stored then).
        """
        self._check_open()
        config = self.configs.get(campaign)
        mech = config.mechanism
        index = self._index(config, value)
        permanent_epsilon = None
        payload: Payload
        if isinstance(mech, RapporUnary):
            payload = mech.perturb_memoized(
                mech.domain[index], self._device_secret(), campaign=campaign
            )
            permanent_epsilon = mech.permanent_epsilon
        else:
            payload = mech.perturb_index(index)
        del value, index  # nothing below may see the true value
        today = self._clock()
        report = Report(campaign, new_report_id(), today.isoformat(), payload, config.digest)
        with self._db.transaction() as conn:
            self.ledger.charge(
                conn,
                campaign=campaign,
                window=window_of(today, config.window),
                epsilon=mech.realised_epsilon,
                limit=self.limit_for(campaign),
                permanent_epsilon=permanent_epsilon,
            )
            self.outbox.add(conn, report)
        self._uploader.notify()
        return report

    def report_many(
        self,
        campaign: str,
        values: Sequence[str] | np.ndarray | None = None,
        *,
        payloads: Sequence[Payload] | np.ndarray | None = None,
        simulate_devices: bool = False,
        rng: RandomSource = None,
        day: dt.date | None = None,
    ) -> int:
        """Enqueue one report per *simulated device* through the real outbox; for the simulator.

        Each row is a different device: ``values`` (labels or domain indices) are perturbed with
        ``perturb_many`` (fresh randomness per row, fresh permanent bits for memoised
        campaigns); or ``payloads`` are already perturbed wire payloads, or a batch array from
        ``perturb_many``. The budget ledger is bypassed, which is only right when every row is
        a different device: ``simulate_devices=True`` must be passed to say so. Returns the
        number of reports enqueued; they upload like any other (call :meth:`flush`).
        """
        self._check_open()
        if simulate_devices is not True:
            raise InvalidParameter(
                "report_many enqueues one report per simulated device and bypasses this "
                "device's privacy budget; pass simulate_devices=True (simulation only), or call "
                "report() for this device's own values"
            )
        if (values is None) == (payloads is None):
            raise InvalidParameter("report_many needs exactly one of values= or payloads=")
        import numpy as np  # batch path only: report() never loads NumPy

        config = self.configs.get(campaign)
        mech = config.mechanism
        if values is not None:
            wire = mech.encode_many(mech.perturb_many(values, rng=rng))
        elif isinstance(payloads, np.ndarray):
            wire = mech.encode_many(payloads)
        else:
            wire = list(payloads)  # type: ignore[arg-type]
            mech.decode_many(wire)  # raises InvalidReport naming the first bad payload
        day_text = (day or self._clock()).isoformat()
        reports = [Report(campaign, new_report_id(), day_text, p, config.digest) for p in wire]
        added = self.outbox.add_many(reports)
        self._uploader.notify()
        return added

    # -- uploading ----------------------------------------------------------------------------

    def flush(self, timeout: float = DEFAULT_FLUSH_TIMEOUT) -> bool:
        """Upload every pending report now; True if the outbox is empty within ``timeout`` s."""
        self._check_open()
        return self._uploader.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush for at most ``timeout`` seconds (``close_timeout``), stop, release the state.

        Never hangs: reports not acknowledged by the deadline stay in the outbox for the next
        client on the same ``state_dir``. Idempotent.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        budget = self.close_timeout if timeout is None else max(0.0, float(timeout))
        deadline = time.monotonic() + budget
        try:
            if self.outbox.pending and not self._uploader.paused:
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
            raise ClientClosed("the telemetry client is closed; create a new one")

    # -- transparency and accounting ----------------------------------------------------------

    def prefetch(self, *campaigns: str) -> None:
        """Fetch and cache campaigns now, so the device can report to them offline later."""
        for campaign in campaigns:
            self.configs.get(campaign)

    def sent_reports(self, campaign: str | None = None) -> list[dict[str, Any]]:
        """Every report that reached the collector (latest ``keep_sent``): exactly what was sent.

        Each entry: campaign, id, day, payload (the perturbed report), outcome.
        """
        return self.outbox.sent_reports(campaign)

    def pending_reports(self, campaign: str | None = None) -> list[dict[str, Any]]:
        """Reports stored on the device and not yet acknowledged, exactly as they will be sent."""
        return self.outbox.pending_reports(campaign)

    def privacy_spent(self, campaign: str, *, delta: float = DEFAULT_ADVANCED_DELTA) -> BudgetSpent:
        """Epsilon spent on ``campaign`` by this device: sequential, advanced, memoised bounds."""
        domain_size = None
        try:
            domain_size = self.configs.get(campaign).mechanism.k
        except LDPError:
            pass
        return self.ledger.spent(campaign, domain_size=domain_size, delta=delta)

    def privacy_summary(self, *, delta: float = DEFAULT_ADVANCED_DELTA) -> list[BudgetSpent]:
        """:meth:`privacy_spent` for every campaign this device has reported to."""
        return [self.privacy_spent(c, delta=delta) for c in self.ledger.campaigns()]

    def budget_left(self, campaign: str) -> int | None:
        """Reports still allowed for ``campaign`` in the current window (None: no limit)."""
        limit = self.limit_for(campaign)
        if limit is None:
            return None
        config = self.configs.get(campaign)
        used = self.ledger.used(campaign, window_of(self._clock(), config.window))
        return max(0, limit - used)

    def stats(self) -> dict[str, Any]:
        """Pending reports, outcome counters and upload state (no values, no payloads)."""
        return {
            "pending": self.outbox.pending,
            **self.outbox.counters(),
            "paused": self._uploader.paused,
            "last_error": self._uploader.last_error,
        }
