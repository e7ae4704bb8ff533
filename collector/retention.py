"""Retention: deleting a campaign's aged-out reports (and their ids), keeping its tallies.

A campaign keeps reports ``keep_days(campaign)`` days: its ``retention_days``, capped by the
server-wide ``LDP_MAX_RETENTION_DAYS``, and never fewer than its ``horizon_days``. A window
whose *last* day is more than that many days before today loses its reports; its running
tally stays, so estimates over it keep working (they list it in ``reports_deleted``) and
``ldp tally verify`` reports it as skipped. Because the kept span is at least the acceptance
horizon, every deleted report's day is already refused by ingest (older than the horizon):
forgetting its id can never let a replay be counted twice.

On PostgreSQL, whose reports are partitioned by day, a sweep first drops whole every day
partition that lies before every campaign's mark (no row-by-row delete) and creates the
partitions of the next days; the chunked delete only handles the aged days some other campaign
still keeps (docs/SCALING.md, "Partitioned reports").

``sweep`` is what ``ldp retention run`` and the service's periodic job (:class:`Scheduler`,
once per ``LDP_RETENTION_INTERVAL`` across workers and replicas) do.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from collector import clock
from collector.campaigns import Campaign
from collector.storage import Storage
from collector.storage.base import PURGE_CHUNK

log = logging.getLogger(__name__)

#: Reports deleted per write transaction (the storage interface's default).
DEFAULT_CHUNK = PURGE_CHUNK
#: Lease name of the periodic sweep (``leases`` table).
LEASE = "retention"


def keep_days(campaign: Campaign, max_retention_days: int | None = None) -> int | None:
    """Days the campaign's reports are kept (None: forever)."""
    return kept_days(campaign.retention_days, campaign.horizon_days, max_retention_days)


def kept_days(
    retention_days: int | None, horizon_days: int, max_retention_days: int | None = None
) -> int | None:
    """Days reports are kept for a campaign's own ``retention_days`` (None: created before
    retention) under the server's ceiling, never fewer than the replay horizon (None: forever)."""
    days = retention_days
    if max_retention_days is not None:
        days = max_retention_days if days is None else min(days, max_retention_days)
    if days is None:
        return None
    return max(days, horizon_days)


def purge_mark(
    campaign: Campaign, today: dt.date, max_retention_days: int | None = None
) -> str | None:
    """The window start before which the campaign's windows have aged out (None: none)."""
    days = keep_days(campaign, max_retention_days)
    if days is None:
        return None
    length = 7 if campaign.window == "week" else 1
    # A window [w, w + length - 1] ages out when its last day < today - days.
    span = days + length - 1
    if span > (today - dt.date.min).days:
        # Before 0001-01-01 (a ceiling of up to 2**31 - 1 days on a campaign created before
        # retention): no window can have aged out. It was OverflowError, and since every mark
        # is worked out before any delete, one such campaign stopped every campaign's sweep.
        return None
    return (today - dt.timedelta(days=span)).isoformat()


@dataclass(frozen=True)
class CampaignSweep:
    """One campaign's part of a sweep."""

    campaign: str
    purged_before: str | None
    deleted: int
    chunks: int
    longest_chunk_ms: float
    #: Of ``deleted``, the reports removed by dropping whole day partitions (PostgreSQL).
    dropped: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "campaign": self.campaign,
            "purged_before": self.purged_before,
            "deleted": self.deleted,
            "chunks": self.chunks,
            "longest_chunk_ms": round(self.longest_chunk_ms, 3),
            "dropped_by_partition": self.dropped,
        }


def sweep(
    storage: Storage,
    *,
    today: dt.date | None = None,
    max_retention_days: int | None = None,
    chunk: int = DEFAULT_CHUNK,
) -> list[CampaignSweep] | None:
    """Delete every campaign's aged-out reports, then measure stored reports and bytes.

    Returns None when another sweep holds the PostgreSQL advisory lock (nothing done).
    """
    day = today or clock.today()
    exclusive = getattr(storage, "exclusive", None)
    guard: AbstractContextManager[bool]
    if exclusive is not None:
        from collector.storage.postgres_schema import RETENTION_LOCK

        guard = exclusive(RETENTION_LOCK)
    else:
        guard = nullcontext(True)
    with guard as got:
        if not got:
            return None
        results = []
        storage.prepare_partitions(day)
        marks = [
            (campaign, purge_mark(campaign, day, max_retention_days))
            for campaign, _ in storage.list_campaigns()
        ]
        dropped = storage.drop_aged_partitions(marks)
        for campaign, mark in marks:
            if mark is None:
                results.append(CampaignSweep(campaign.id, None, 0, 0, 0.0))
                continue
            done = storage.purge_reports(campaign, mark, chunk=chunk)
            whole = dropped.deleted.get(campaign.id, 0)
            results.append(
                CampaignSweep(
                    campaign.id,
                    mark,
                    done.deleted + whole,
                    done.chunks,
                    done.longest_chunk * 1000,
                    whole,
                )
            )
        storage.usage(refresh=True)
    return results


def stored_fields(store: Storage) -> dict[str, dict[str, Any]]:
    """Per campaign id: stored reports and bytes (as of the last retention sweep) and the
    window start before which retention deleted its reports (docs/COLLECTOR.md)."""
    return {
        u.campaign: {
            "stored_reports": u.reports,
            "stored_bytes": u.bytes,
            "reports_deleted_before": u.purged_before,
        }
        for u in store.usage()
    }


class Scheduler:
    """The service's periodic sweep: a daemon thread per worker process; each interval, the
    one worker (of any replica) that wins ``storage.claim_run`` sweeps."""

    def __init__(
        self, storage: Storage, interval: float, max_retention_days: int | None = None
    ) -> None:
        self.storage = storage
        self.interval = interval
        self.max_retention_days = max_retention_days
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def ensure_started(self) -> None:
        """Start the thread in this process if not yet (called per request: gunicorn forks)."""
        import os

        if self.interval <= 0 or self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name="ldp-retention", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def tick(self) -> list[CampaignSweep] | None:
        """Sweep if this caller wins the interval's lease; None otherwise."""
        if not self.storage.claim_run(LEASE, self.interval):
            return None
        began = time.perf_counter()
        done = sweep(self.storage, max_retention_days=self.max_retention_days)
        if done is not None:
            log.info(
                "retention sweep: %d reports deleted in %.1f s",
                sum(c.deleted for c in done),
                time.perf_counter() - began,
            )
        return done

    def _run(self) -> None:
        # A short first wait: a fresh worker does not sweep before serving its first requests.
        wait = min(self.interval, 1.0)
        while not self._stop.wait(wait):
            wait = min(self.interval, 5.0)
            try:
                self.tick()
            except Exception as exc:  # the thread must never take the worker down
                log.warning("retention sweep failed (retried next interval): %s", exc)
