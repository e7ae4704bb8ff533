"""The background uploader: drains the outbox in batches, retries with backoff, never blocks.

Triggers: ``batch_size`` reports pending (size), ``flush_interval`` seconds since the first
pending report (time), :meth:`Uploader.flush`, and :meth:`Uploader.stop`. A pass the size
trigger starts sends batches while at least ``batch_size`` reports are pending and leaves the
remainder to the timer or a flush. The same thread
fetches campaign configs that ``report`` asked for (``ConfigCache.want``) at once, with the
same backoff, so the app's threads never wait for the network.

A campaign sent through a shuffler goes one report at a time (each is a sealed message of its
own, settled as soon as the shuffler staged it); a size-triggered pass still sends a full
batch's worth.

What each answer does (see ``transport`` for the classification):

* 200: acknowledged reports (accepted or duplicate) and rejected ones leave the outbox; rejected
  ones are counted, except those rejected only for their day (device clock off), which are
  re-stamped with the collector's day and kept (``restamp``), and sent again in a later pass
  after a backoff;
* network error, 408, 429, 5xx: the batch stays; the uploader sleeps a full-jitter exponential
  backoff ``uniform(0, min(cap, base * 2**failures))``, at least the server's Retry-After;
* 409 ``stale_config``: refetch the config; if the digest changed (campaigns are immutable, so
  the campaign was recreated or the old digest was forged) the old reports can never be accepted
  and are dropped (``dropped_stale``);
* 404: the campaign is gone: its reports are dropped (``dropped_unknown_campaign``);
* 410 ``campaign_archived``: the campaign takes no report any more: its reports are dropped
  (``dropped_archived``) and ``report`` stores nothing more for it;
* 413: halve the batch size and try again; a single report that is too large is dropped
  (``dropped_refused``);
* 401/403: uploads pause for this client (the reports stay for a client with a valid token);
* other 4xx: the batch is dropped (``dropped_refused``), never retried.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from functools import partial

from client_sdk.config_cache import ConfigCache
from client_sdk.errors import LDPError, StorageFailed, TransportError
from client_sdk.outbox import Batch, Outbox
from client_sdk.state import ClientClosed
from client_sdk.transport import (
    AuthError,
    BatchTooLarge,
    CampaignArchived,
    CampaignGone,
    PermanentError,
    RetryableError,
    StaleConfig,
    Transport,
)

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 500
DEFAULT_FLUSH_INTERVAL = 30.0
DEFAULT_BACKOFF_BASE = 0.5
DEFAULT_BACKOFF_CAP = 300.0
#: Longest Retry-After honoured, in seconds (a bigger one is capped, not obeyed blindly).
MAX_RETRY_AFTER = 3600.0


class Uploader:
    """Owns one daemon thread that moves reports from the outbox to the collector."""

    def __init__(
        self,
        outbox: Outbox,
        transport: Transport,
        configs: ConfigCache,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        backoff_base: float = DEFAULT_BACKOFF_BASE,
        backoff_cap: float = DEFAULT_BACKOFF_CAP,
    ) -> None:
        self.outbox = outbox
        self.transport = transport
        self.configs = configs
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self._cond = threading.Condition()
        self._wake = False
        self._stop = False
        self._flushes = 0  # flush requests not yet served by a drain pass
        self._first_pending: float | None = None
        self._retry_at = 0.0
        self._failures = 0
        # A config fetch of this pass failed: an upload that succeeds in the same pass must
        # not reset the backoff (see _drain_pass).
        self._fetch_failed = False
        self._paused: str | None = None
        self._idle = True
        # From the OS like every other draw on the device: a Mersenne Twister's state can be
        # recovered from its outputs, and a collector times the retries it causes.
        self._jitter = random.SystemRandom()
        self._thread = threading.Thread(target=self._run, name="ldp-uploader", daemon=True)
        self.last_error: str | None = None
        #: (campaign, stored day, collector's reason) -> new day, or None to drop (client sets).
        self.restamp: Callable[[str, str, str], str | None] = lambda campaign, day, reason: None
        #: (campaign, the device's day) -> the shuffler's day, or None if not known (client
        #: sets): for shuffled reports stored before the shuffler's clock was heard.
        self.shuffled_day: Callable[[str, str], str | None] = lambda campaign, day: None
        #: False while the app has uploads turned off: no request at all.
        self.enabled = True

    # -- control (any thread) -----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Start a pass now (a config to fetch)."""
        with self._cond:
            self._wake = True
            self._cond.notify_all()

    def notify(self) -> None:
        """A report was enqueued: wake the thread if a batch is full, else start the timer."""
        with self._cond:
            if self._first_pending is None:
                self._first_pending = time.monotonic()
                self._cond.notify_all()
            if self.outbox.pending >= self.batch_size:
                self._wake = True
                self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Upload everything now; True when the outbox is empty before ``timeout`` seconds."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            self._flushes += 1
            self._retry_at = 0.0  # one immediate attempt, then the usual backoff
            self._wake = True
            self._cond.notify_all()
            try:
                while True:
                    if self.outbox.pending == 0 and self._idle and not self._wake:
                        return True
                    # Nothing will upload (uploads paused or turned off, the thread gone):
                    # answer now instead of waiting out the timeout.
                    if (
                        self._paused
                        or self._stop
                        or not self.enabled
                        or not self._thread.is_alive()
                    ):
                        return self.outbox.pending == 0
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(min(left, threading.TIMEOUT_MAX))
            finally:
                self._flushes -= 1

    def stop(self, timeout: float) -> None:
        """Ask the thread to finish and wait at most ``timeout`` seconds for it."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(min(max(0.0, timeout), threading.TIMEOUT_MAX))

    @property
    def sending(self) -> bool:
        """Whether reports may leave now: uploads on, and the client not closing."""
        return self.enabled and not self._stop

    @property
    def paused(self) -> str | None:
        """Why uploads are paused for this client (a refused token), or None."""
        return self._paused

    # -- the thread ---------------------------------------------------------------------------

    def _due(self, now: float) -> float | None:
        """Seconds until the next drain should start (0: now), None: wait for a notification."""
        if self._paused or not self.enabled:
            return None
        if self._wake or self.configs.wanted:
            return max(0.0, self._retry_at - now)
        if self.outbox.pending == 0:
            self._first_pending = None
            return None
        if self._flushes:
            return max(0.0, self._retry_at - now)
        if self._first_pending is None:
            self._first_pending = now
        start = max(self._first_pending + self.flush_interval, self._retry_at)
        return max(0.0, start - now)

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._stop:
                        wait = self._due(time.monotonic())
                        if wait == 0:
                            break
                        # flush_interval may be infinite (the size trigger alone).
                        self._cond.wait(None if wait is None else min(wait, threading.TIMEOUT_MAX))
                    if self._stop:
                        return
                    self._wake = False
                    self._idle = False
                try:
                    self._fetch_wanted()
                    self._revalidate()
                    self._drain()
                    self.outbox.db.checkpoint()
                except (StorageFailed, sqlite3.Error) as exc:  # a refused write, or read
                    self._storage_failed(exc)
                finally:
                    with self._cond:
                        self._idle = True
                        self._first_pending = None if self.outbox.pending == 0 else time.monotonic()
                        self._cond.notify_all()
        except ClientClosed:
            return
        except Exception:  # never let the thread die with a traceback into the app
            log.exception("uploader stopped after an unexpected error")
            with self._cond:
                self._paused = "internal error (see the log)"
                self._cond.notify_all()

    def _fetch_wanted(self) -> None:
        self._fetch_failed = False
        self._refresh_each(self.configs.take_wanted(), self.configs.want, self._fetch_gone)

    @staticmethod
    def _fetch_gone(campaign: str) -> None:
        log.warning("campaign %s does not exist on the collector", campaign)

    def _refresh_each(
        self, campaigns: list[str], again: Callable[[str], None], gone: Callable[[str], None]
    ) -> None:
        """Fetch each campaign's config (``gone``: what a 404 does). A failure that concerns
        one campaign (its config answered 500, say) queues it ``again`` and goes on with the
        others; one of the collector as a whole (unreachable, overloaded, the token refused)
        queues the rest again and stops. Either way the pass backs off once. Before, any
        failure stopped the round: a campaign whose config kept failing starved every one
        after it in the list (their reports stayed ``not_ready``, a cached config was never
        revalidated)."""
        failed: tuple[str, TransportError] | None = None
        for i, campaign in enumerate(campaigns):
            try:
                self.configs.refresh(campaign)
            except CampaignGone:
                gone(campaign)
            except AuthError as exc:
                self._pause_for_auth(exc)
                for rest in campaigns[i:]:
                    again(rest)
                return
            except TransportError as exc:
                failed = (campaign, exc)
                if isinstance(exc, PermanentError) or (
                    isinstance(exc, RetryableError) and _concerns_campaign(exc)
                ):
                    again(campaign)
                    continue
                for rest in campaigns[i:]:
                    again(rest)
                break
            except LDPError as exc:
                log.warning("collector sent an unusable config for %s: %s", campaign, exc)
        if failed is not None:
            self._fetch_failed = True
            self._retry_later(f"fetching campaign {failed[0]}: {failed[1]}")

    def _storage_failed(self, exc: Exception) -> None:
        """The state file refused a write (disk full, I/O error): what was not committed is
        done again on the next round, after a backoff (a collector's acknowledgement that
        could not be recorded is a resend, which the collector counts as a duplicate)."""
        self.outbox.recount()
        text = str(exc) if isinstance(exc, StorageFailed) else f"the state file failed ({exc})"
        delay = self._retry_later(text)
        log.warning("%s; retrying in %.2f s", self.last_error, delay)

    def _retry_later(self, error: str, retry_after: float | None = None) -> float:
        """One more failure: the next round waits a full-jitter backoff, at least
        ``retry_after`` (capped); returns the delay."""
        self._failures += 1
        window = min(self.backoff_cap, self.backoff_base * 2 ** min(self._failures, 30))
        delay = self._jitter.uniform(0, window)
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_RETRY_AFTER))
        self.last_error = error
        with self._cond:
            self._retry_at = time.monotonic() + delay
        return delay

    def _pause_for_auth(self, exc: AuthError) -> None:
        with self._cond:
            self._paused = (
                f"the collector refused the ingest token ({exc.status}); check ingest_token "
                "/ LDP_INGEST_TOKEN"
            )
            self.last_error = self._paused
            self._cond.notify_all()
        log.error("uploads paused: the collector refused the ingest token (%d)", exc.status)

    def _revalidate(self) -> None:
        """Ask the collector once per session about each config loaded from disk, as
        :meth:`_refresh_each` does (before, a failed one ended the round and the campaigns
        after it were never revalidated that session)."""
        self._refresh_each(
            self.configs.take_unrevalidated(), self.configs.mark_unrevalidated, self._drop_gone
        )

    def _drop_gone(self, campaign: str) -> None:
        dropped = self.outbox.drop(campaign, reason="dropped_unknown_campaign")
        log.warning("campaign %s is gone from the collector; %d dropped", campaign, dropped)

    def _whole_outbox_due(self) -> bool:
        """True when a pass must send partial batches too: a flush, or the time trigger."""
        first = self._first_pending
        return bool(self._flushes) or (
            first is not None and time.monotonic() >= first + self.flush_interval
        )

    def _drain(self) -> None:
        """One pass over the outbox. A campaign whose upload fails in a way that concerns it
        alone (an HTTP error answer, a config it cannot use after a 409) is skipped for the
        rest of the pass, so the other campaigns' reports still go out; the pass then backs
        off as a whole. A failure of the collector itself (unreachable, overloaded, a
        redirect) ends the pass at once."""
        failed: RetryableError | None = None
        skip: set[tuple[str, str]] = set()
        try:
            failed = self._drain_pass(skip)
        finally:
            if failed is not None:
                delay = self._retry_later(str(failed), failed.retry_after)
                log.info("upload failed (%s); retrying in %.2f s", failed, delay)

    def _drain_pass(self, skip: set[tuple[str, str]]) -> RetryableError | None:
        """Sends batches (skipping ``skip``); returns the failure to back off from, if any."""
        size = self.batch_size
        failed: RetryableError | None = None
        owed = 0  # reports of a full batch still to go one by one (a shuffled campaign)
        while not self._stop and self.enabled:
            # A pass the size trigger started sends full batches only and leaves the rest
            # for the timer: draining every last report while the app keeps reporting would
            # keep this thread busy with tiny uploads, taking the GIL and the state lock
            # from the app's ``report`` calls for nothing.
            if owed <= 0 and self.outbox.pending < size and not self._whole_outbox_due():
                break
            batch = self.outbox.next_batch(size, skip=skip)
            if batch is None:
                break
            # A shuffled campaign's reports leave one sealed message each (a trickle of up to
            # a minute per 500), so one at a time, each settled once the shuffler staged it.
            # Settled per batch, those staged before a failure, a close() or the app's death
            # were sent again on the next run, later and together: duplicates of ids the
            # collector had seen, which told it they came from one device.
            if self.transport.sends_one_by_one(batch.campaign):
                owed = (owed or size) - 1
                batch = self.outbox.with_days(
                    batch.first(), partial(self.shuffled_day, batch.campaign)
                )
            else:
                owed = 0
            # The batch's charges on disk for good before the reports leave.
            self.outbox.db.make_durable()
            try:
                result = self.transport.post_reports(
                    batch.campaign, batch.digest, [r.wire() for r in batch.reports]
                )
            except RetryableError as exc:
                if self._ends_pass(batch, exc, skip):
                    return exc
                failed = exc
                continue
            except BatchTooLarge:
                if len(batch) > 1:
                    size = max(1, len(batch) // 2)
                    self.batch_size = size
                    log.info("collector refused a batch as too large; batch size now %d", size)
                    continue
                self.outbox.drop_batch(batch, reason="dropped_refused")
                continue
            except StaleConfig:
                try:
                    stale = self._handle_stale(batch)
                except AuthError as exc:
                    self._pause_for_auth(exc)
                    return None
                if stale is None:
                    continue
                if self._ends_pass(batch, stale, skip):
                    return stale
                failed = stale
                continue
            except CampaignArchived:
                # For good, for every device: its pending reports can never be taken, and
                # report() stops storing (and charging) new ones.
                self.configs.mark_archived(batch.campaign)
                dropped = self.outbox.drop(batch.campaign, reason="dropped_archived")
                log.warning(
                    "campaign %s was archived on the collector; %d pending reports dropped",
                    batch.campaign,
                    dropped,
                )
                continue
            except CampaignGone:
                self.configs.forget(batch.campaign)
                dropped = self.outbox.drop(batch.campaign, reason="dropped_unknown_campaign")
                log.warning(
                    "campaign %s is gone; %d pending reports dropped", batch.campaign, dropped
                )
                continue
            except AuthError as exc:
                self._pause_for_auth(exc)
                return None
            except PermanentError as exc:
                log.error(
                    "collector refused a batch of %d reports for %s (%d %s); dropped",
                    len(batch),
                    batch.campaign,
                    exc.status,
                    exc.code,
                )
                self.outbox.drop_batch(batch, reason="dropped_refused")
                continue
            restamp = {}
            for i, reason in result.rejected.items():
                new_day = self.restamp(batch.campaign, batch.reports[i].day, reason)
                if new_day is not None and new_day != batch.reports[i].day:
                    restamp[i] = new_day
            self.outbox.settle(
                batch,
                accepted=result.accepted,
                duplicate=result.duplicate,
                rejected=result.rejected,
                restamp=restamp,
            )
            if failed is None and not self._fetch_failed:
                # Reset only once the batch is settled: a state file that keeps refusing the
                # settling write then backs off exponentially (each round resends the batch,
                # a duplicate for the collector) and ``last_error`` never reads None meanwhile.
                # After another campaign's failure in this pass the backoff keeps growing, so
                # a campaign the collector keeps refusing is not retried every half second;
                # so does a config fetch that failed at the start of the pass (another
                # campaign's uploads going through reset it, and a config the collector
                # answered 500 for was fetched again about once a second, for ever).
                self._failures = 0
                self.last_error = None
            if len(result.rejected) > len(restamp):
                log.warning(
                    "collector rejected %d of %d reports for %s as invalid; dropped",
                    len(result.rejected),
                    len(batch),
                    batch.campaign,
                )
            if restamp:
                # Re-stamped reports go again in a later pass, after a backoff, never in this
                # one: a collector that refused them for their day again and again, moving its
                # Date back and forth, had this loop resend them without a pause (about 360
                # requests a second) while no other campaign's report went out.
                skip.add((batch.campaign, batch.digest))
                failed = failed or RetryableError(
                    f"collector refused {len(restamp)} report(s) for {batch.campaign} for their "
                    "day; re-stamped with the collector's day, sent again after a backoff",
                    status=200,
                )
        return failed

    def _ends_pass(self, batch: Batch, exc: RetryableError, skip: set[tuple[str, str]]) -> bool:
        """Notes the failed attempt; True when the failure ends the pass (the collector as a
        whole), else the batch's campaign is skipped for the rest of the pass."""
        self.outbox.note_attempt(batch)
        if not _concerns_campaign(exc):
            return True
        skip.add((batch.campaign, batch.digest))
        return False

    def _handle_stale(self, batch: Batch) -> RetryableError | None:
        """After a 409: None if the outbox changed so draining may go on, else the failure to
        back off from (the batch stays)."""
        try:
            config = self.configs.refresh(batch.campaign, conditional=False)
        except CampaignGone:
            self.outbox.drop(batch.campaign, reason="dropped_unknown_campaign")
            return None
        except AuthError:
            raise  # pauses uploads, as on the upload itself
        except RetryableError as exc:
            return RetryableError(
                f"refetching the config after a 409: {exc}",
                status=exc.status,
                retry_after=exc.retry_after,
            )
        except TransportError as exc:
            return RetryableError(f"refetching the config after a 409: {exc}", status=409)
        except LDPError as exc:
            # An unusable config: the batch is retried after a backoff, as after a network
            # error (the collector may correct it); the uploader does not stop, and the other
            # campaigns' uploads go on.
            log.warning("collector sent an unusable config for %s: %s", batch.campaign, exc)
            # The collector no longer takes the cached config (the 409), and the device takes
            # none it serves now (one the app did not pin, a digest not its own): new reports
            # must not be made, and charged, under a config nothing will ever accept. Those
            # made already stay (the collector may serve the old config again).
            self.configs.forget(batch.campaign)
            return RetryableError(f"unusable config after a 409: {exc}", status=409)
        if config.digest != batch.digest:
            dropped = self.outbox.drop(batch.campaign, digest=batch.digest, reason="dropped_stale")
            log.warning(
                "campaign %s was recreated (new config digest); %d reports made under the old "
                "config dropped",
                batch.campaign,
                dropped,
            )
            return None
        return RetryableError("409 stale_config although the digest is current", status=409)


def _concerns_campaign(exc: RetryableError) -> bool:
    """Whether a failed upload concerns its campaign alone (an HTTP error answer such as 500,
    a config after a 409, the campaign's shuffler, a library its sealing needs), so the pass
    goes on with the other campaigns; False for the collector as a whole: unreachable or an
    unreadable answer (no status), a redirect, 408, 429 and the gateway and overload answers
    502-504, where every campaign would fail alike."""
    if exc.peer != "collector":
        return True
    status = exc.status
    return status is not None and not (300 <= status < 400) and status not in _WHOLE_COLLECTOR


#: HTTP statuses that say the collector (or its gateway) is busy or unreachable as a whole.
_WHOLE_COLLECTOR = frozenset({408, 429, 502, 503, 504})
